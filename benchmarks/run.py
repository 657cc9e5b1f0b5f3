"""Every system side by side on the same workloads, in one process.

Systems: eager Chainer; ``chainer.static_graph`` (where it works);
chainerjit (its default backend, `auto`: the VM or onnxruntime, the
faster measured per program), chainerjit_vm (`backend='numpy'`, the VM
only) and chainerjit_frozen (`freeze=True`, serving mode: inference
sessions own the weights); PyTorch eager with the same architecture and
weights (if torch is installed), and with ``--torch-compile`` the same
compiled by ``torch.compile``; onnxruntime on the model chainerjit exports
(inference; if onnxruntime is installed); and a hand-written NumPy floor
with preallocated buffers (``benchmarks/competitors.py``). Eager Chainer
and ``static_graph`` run with Chainer's own methods where chainerjit's
fast paths replace them (``chainerjit.testing.fast_paths_off``), so
they pay nothing for chainerjit being imported.

Workloads: MLP 784-100-100-10 inference at batch 1 and 64 and its training
step at batch 64 (with the loss outside the model, and through
``L.Classifier``); LSTM (input 64, hidden 128, batch 16, T = 20) inference
and training step; LeNet-style CNN inference and training step at batch
32 (batch normalization with batch statistics in training); a transformer
encoder block (d_model 64, 4 heads, d_ff 256) on 8 sequences of 32.
Inference runs in test mode with backprop disabled (set once around the
whole workload, as a serving loop would); a training step is clear grads,
forward, softmax cross entropy, backward and an SGD update (chainerjit
jits the forward of the link the step calls: the model, or the
``L.Classifier`` around it).

Before timing, every system's result is checked against eager Chainer's
(inference outputs; the losses of three training steps from the same
weights, which also checks the gradients and updates in between). The
main table runs with one BLAS/OpenMP thread; a second table repeats it
with the default number of threads. Medians with interquartile ranges of
interleaved rounds, ratios to eager Chainer's median, and each system's
first call (chainerjit: recording, passes, codegen, self-check and the
choice of backend, made once its calls have run 0.1 s on the VM).

Usage::

    python benchmarks/run.py [--rounds 15] [--target-ms 20]
        [--only MLP LSTM] [--output docs/benchmarks.md]
        [--chart docs/benchmarks.png] [--torch-compile]
"""

import argparse
import collections
import contextlib
import copy
import functools
import io
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402  (imports no numpy)


SYSTEMS = ('eager', 'static_graph', 'chainerjit', 'chainerjit_vm',
           'chainerjit_frozen', 'torch', 'onnxruntime', 'numpy')

#: The project's target ratios for chainerjit (one thread).
TARGETS = {
    'MLP inference, batch 1': 0.10,
    'MLP inference, batch 64': 0.60,
    'MLP training step, batch 64': 0.40,
    'LSTM inference, T = 20': 0.18,
    'LSTM training step, T = 20': 0.18,
    'CNN inference, batch 32': 0.34,
}

LEARNING_RATE = 0.01


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=20.0,
                        help='length of one timing sample')
    parser.add_argument('--only', nargs='+', default=None,
                        help='run the workloads whose names start so')
    parser.add_argument('--no-default-threads', action='store_true',
                        help='skip the default-threads table')
    parser.add_argument('--output', help='write a Markdown report here')
    parser.add_argument('--chart', help='write a PNG chart here')
    parser.add_argument('--torch-compile', action='store_true',
                        help='add torch.compile\'s column (its first '
                        'calls add minutes)')
    return parser.parse_args(argv)


Workload = collections.namedtuple(
    'Workload', 'name kind model inputs competitor classifier',
    defaults=(False,))


def workloads():
    """The workloads: a name, ``'inference'`` or ``'training'``, a model
    factory, the input shapes and the name of its competitors in
    ``benchmarks/competitors.py``."""
    from examples import models
    encoder = functools.partial(models.EncoderBlock, d_model=64, n_heads=4,
                                d_ff=256)
    return [
        Workload('MLP inference, batch 1', 'inference', models.MLP,
                 (1, 784), 'mlp'),
        Workload('MLP inference, batch 64', 'inference', models.MLP,
                 (64, 784), 'mlp'),
        Workload('MLP training step, batch 64', 'training', models.MLP,
                 (64, 784), 'mlp'),
        Workload('MLP training step, L.Classifier, batch 64', 'training',
                 models.MLP, (64, 784), 'mlp', classifier=True),
        Workload('LSTM inference, T = 20', 'inference',
                 models.LSTMClassifier, (20, 16, 64), 'lstm'),
        Workload('LSTM training step, T = 20', 'training',
                 models.LSTMClassifier, (20, 16, 64), 'lstm'),
        Workload('CNN inference, batch 32', 'inference', models.LeNet,
                 (32, 1, 28, 28), 'lenet'),
        Workload('CNN training step, batch 32', 'training', models.LeNet,
                 (32, 1, 28, 28), 'lenet'),
        Workload('Transformer encoder block, 8 x 32 x 64', 'inference',
                 encoder, (8, 32, 64), 'encoder'),
    ]


class Built(object):
    """One system on one workload: ``call`` runs a call or a training
    step and returns its result; ``first_seconds`` and ``first_result``
    are its first call's."""

    def __init__(self, call, first_seconds, first_result):
        self.call = call
        self.first_seconds = first_seconds
        self.first_result = first_result


class Skipped(object):
    """A system that cannot run a workload, and why."""

    def __init__(self, reason):
        self.reason = reason


# --- building each system ---------------------------------------------------

def make_inputs(workload):
    import numpy
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-1, 1, workload.inputs).astype(numpy.float32)
    batch = workload.inputs[1 if workload.competitor == 'lstm' else 0]
    t = rng.randint(0, 10, batch).astype(numpy.int32)
    return x, t


def make_model(workload, x):
    import chainer
    import numpy
    numpy.random.seed(0)
    model = workload.model()
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        model(x)  # sizes lazily initialized layers
    return model


def chainer_call(model, workload, x, t, prepare=None):
    """Eager Chainer's call or training step on ``model``. ``prepare``
    (chainerjit: jit its forward) is applied to the link the step calls:
    ``model``, or the ``L.Classifier`` around it for a classifier
    workload. A training step is the usual loop body: clear the grads,
    compute the loss (``softmax_cross_entropy`` on the model's output, or
    the classifier's own, which also computes and reports the accuracy),
    backprop, update."""
    import chainer
    import chainer.functions as F
    import chainer.links as L

    target = L.Classifier(model) if workload.classifier else model
    if prepare is not None:
        prepare(target)
    if workload.kind == 'inference':  # run_workload sets test mode
        return lambda: target(x).array
    optimizer = chainer.optimizers.SGD(lr=LEARNING_RATE)
    optimizer.setup(target)

    def step():
        target.cleargrads()
        if workload.classifier:
            loss = target(x, t)
        else:
            loss = F.softmax_cross_entropy(target(x), t)
        loss.backward()
        optimizer.update()
        return float(loss.array)
    return step


def jit_forward(link, jitted=None, backend='auto', freeze=False):
    """Decorates ``link.forward`` with ``chainerjit.jit(backend=,
    freeze=)``; appends the link to the list ``jitted``, if given."""
    import chainerjit
    link.forward = chainerjit.jit(link.forward, backend=backend,
                                  freeze=freeze)
    if jitted is not None:
        jitted.append(link)


def timed_first_call(call, start=None):
    start = time.perf_counter() if start is None else start
    result = call()
    return Built(call, time.perf_counter() - start, result)


def build_eager(model, workload, x, t):
    return timed_first_call(chainer_call(copy.deepcopy(model), workload,
                                         x, t))


def build_chainerjit(model, workload, x, t, backend='auto', freeze=False):
    """chainerjit's system, its first call timed. With ``backend='auto'``,
    it is then called until its program's backend is chosen (once its
    calls have run ``backends.CHOOSE_AFTER_SECONDS`` on the VM), the model
    put back as it was after the first call, so that the check sees the
    chosen program from the same weights as eager's; the choice's time
    counts in the first call's."""
    if freeze and workload.kind != 'inference':
        return Skipped('serving mode: inference only')
    jitted = []
    model = copy.deepcopy(model)
    built = timed_first_call(chainer_call(
        model, workload, x, t,
        functools.partial(jit_forward, jitted=jitted, backend=backend,
                          freeze=freeze)))
    forward = jitted[0].forward
    entries = forward.cache_entries()
    if any(e.program is None or (workload.kind == 'training' and
                                 e.training is None) for e in entries):
        return Skipped('ran eagerly (a fallback)')
    _until_chosen(built, forward, model, workload.kind == 'training')
    built.first_seconds += sum(e.choice_seconds for e in entries)
    return built


def _until_chosen(built, forward, model, training, most_seconds=20.0):
    """Calls ``built`` until no entry of ``forward`` (run by ``model``'s
    link) has its backend for the mode ``training`` still to choose; then
    puts the model's parameters and persistent values back as they were
    before."""
    import chainer

    def pending():
        return any(e.deferred is not None and training in e.deferred.seconds
                   for e in forward.cache_entries())
    if not pending():
        return
    saved = io.BytesIO()
    chainer.serializers.save_npz(saved, model)
    start = time.perf_counter()
    while pending() and time.perf_counter() - start < most_seconds:
        built.call()
    saved.seek(0)
    chainer.serializers.load_npz(saved, model)


def build_static_graph(model, workload, x, t):
    import chainer
    static = copy.deepcopy(model)
    forward = chainer.static_graph(type(static).forward)
    static.forward = functools.partial(forward, static)
    call = chainer_call(static, workload, x, t)
    try:
        # It prints as it builds its schedules.
        with warnings.catch_warnings(), contextlib.redirect_stdout(
                io.StringIO()):
            warnings.simplefilter('ignore')
            return timed_first_call(call)
    except Exception as e:  # static_graph supports few models
        return Skipped('fails: %s' % _short(e))


def _build_competitor(model, workload, x, t, system):
    """``system``'s twin from ``benchmarks/competitors.py``."""
    from benchmarks import competitors
    factory = getattr(competitors, '%s_%s_%s' % (
        workload.competitor, workload.kind, system), None)
    if factory is None:
        return Skipped('no hand-written twin')
    args = (model, x) if workload.kind == 'inference' else (
        model, x, t, LEARNING_RATE)
    run = factory(*args)
    if run is None:  # an optional dependency is missing
        return Skipped('%s is not installed' % system)
    return timed_first_call(run)


def build_torch_compile(model, workload, x, t):
    """The PyTorch twin through ``torch.compile``; its first call
    compiles."""
    from benchmarks import competitors
    with competitors.compiled_torch():
        return _build_competitor(model, workload, x, t, 'torch')


def build_onnxruntime(model, workload, x, t, threads=1):
    if workload.kind != 'inference':
        return Skipped('inference only')
    try:
        import onnxruntime
    except ImportError:
        return Skipped('onnxruntime is not installed')
    import chainerjit
    start = time.perf_counter()
    exported = copy.deepcopy(model)
    proto = chainerjit.export_onnx(exported.forward, (x,))
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), options,
        providers=['CPUExecutionProvider'])
    feeds = {session.get_inputs()[0].name: x}

    def infer():
        return session.run(None, feeds)[0]
    return timed_first_call(infer, start)


BUILDERS = {
    'eager': build_eager,
    'static_graph': build_static_graph,
    'chainerjit': build_chainerjit,
    'chainerjit_vm': functools.partial(build_chainerjit, backend='numpy'),
    'chainerjit_frozen': functools.partial(build_chainerjit, freeze=True),
    'torch': functools.partial(_build_competitor, system='torch'),
    'torch_compile': build_torch_compile,
    'onnxruntime': build_onnxruntime,
    'numpy': functools.partial(_build_competitor, system='numpy'),
}


def _short(error):
    text = str(error).strip().split('\n')[0]
    return '%s%s' % (type(error).__name__,
                     (': ' + text[:80]) if text else '')


# --- checking ---------------------------------------------------------------

def as_numpy(result):
    if hasattr(result, 'detach'):  # a torch tensor
        result = result.detach().numpy()
    return result


def check(builts, host=as_numpy):
    """Every built system against eager: its first three calls (the same
    outputs for inference; for training, the losses of three steps from
    the same weights, which also checks the gradients and updates),
    brought to NumPy by ``host``. A system
    that differs is replaced by a :class:`Skipped` saying so."""
    import numpy

    results = {}
    with contextlib.redirect_stdout(io.StringIO()):  # static_graph prints
        for name, built in builts.items():  # as it builds its schedules
            if isinstance(built, Built):
                results[name] = [built.first_result] + [
                    built.call() for _ in range(2)]
    for name, values in results.items():
        try:
            for actual, expected in zip(values, results['eager']):
                numpy.testing.assert_allclose(
                    numpy.asarray(host(actual), numpy.float64),
                    numpy.asarray(host(expected), numpy.float64),
                    rtol=1e-3, atol=1e-4)
        except AssertionError as e:
            builts[name] = Skipped('differs from eager: %s' % _short(e))


# --- timing -----------------------------------------------------------------

Row = collections.namedtuple('Row', 'workload threads cells')


def run_workload(workload, threads, args):
    """Builds, checks and times every system on ``workload`` with
    ``threads`` BLAS threads (``None``: the default). Returns a
    :class:`Row` whose cells are a dict, system to a timing dict or a
    :class:`Skipped`."""
    import chainer

    x, t = make_inputs(workload)
    model = make_model(workload, x)
    inference = workload.kind == 'inference'
    with chainer.using_config('train', not inference), \
            chainer.using_config('enable_backprop', not inference):
        return _build_check_and_time(workload, threads, args, model, x, t)


def _build_check_and_time(workload, threads, args, model, x, t):
    builts = collections.OrderedDict()
    for system in timed_systems(args):
        builder = BUILDERS[system]
        if system == 'onnxruntime':
            builder = functools.partial(builder, threads=threads)
        try:
            with timing.system_context(system)():
                builts[system] = builder(model, workload, x, t)
        except Exception as e:
            builts[system] = Skipped('fails: %s' % _short(e))
    check(builts)
    calls = dict((name, b.call) for name, b in builts.items()
                 if isinstance(b, Built))
    samples = time_interleaved(calls, args)
    eager = timing.Summary(samples['eager']).median
    cells = collections.OrderedDict()
    for name, built in builts.items():
        if isinstance(built, Skipped):
            cells[name] = built
            continue
        summary = timing.Summary(samples[name])
        cells[name] = dict(summary=summary, ratio=summary.median / eager,
                           first_seconds=built.first_seconds)
    return Row(workload, threads, cells)


def time_interleaved(calls, args):
    """``timing.interleaved`` of the systems' ``calls`` (a dict, system
    to call), each in its ``timing.system_context``."""
    return timing.interleaved(
        calls, rounds=args.rounds, target_seconds=args.target_ms / 1e3,
        around=timing.system_contexts(calls))


def set_threads(threads):
    """Limits BLAS/OpenMP (threadpoolctl) and torch to ``threads``
    (``None``: their defaults). Returns an undo function."""
    import threadpoolctl
    limiter = threadpoolctl.threadpool_limits(limits=threads)
    torch = _torch()
    if torch is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads or os.cpu_count())

    def undo():
        limiter.restore_original_limits()
        if torch is not None:
            torch.set_num_threads(before)
    return undo


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# --- reporting --------------------------------------------------------------

def timed_systems(args):
    """The systems a run times: :data:`SYSTEMS`, and ``torch_compile``
    after ``torch`` with ``--torch-compile``."""
    if not getattr(args, 'torch_compile', False):
        return SYSTEMS
    at = SYSTEMS.index('torch') + 1
    return SYSTEMS[:at] + ('torch_compile',) + SYSTEMS[at:]


def format_table(rows, systems=None, targets=True):
    """A Markdown table: per workload, each system's median in
    microseconds [interquartile range], its ratio to eager and its first
    call; and the project's target for chainerjit, if ``targets``. The
    systems are the rows' own unless given."""
    systems = systems or (list(rows[0].cells) if rows else SYSTEMS)
    columns = ['workload'] + list(systems) + (
        ['chainerjit target'] if targets else [])
    lines = ['| %s |' % ' | '.join(columns), '|---' * len(columns) + '|']
    for row in rows:
        cells = [row.workload.name] + [_format_cell(row.cells[s])
                                       for s in systems]
        if targets:
            target = TARGETS.get(row.workload.name)
            cells.append('%.2f' % target if target and row.threads == 1
                         else '')
        lines.append('| %s |' % ' | '.join(cells))
    return '\n'.join(lines)


def _format_cell(cell):
    if isinstance(cell, Skipped):
        return 'n/a: %s' % cell.reason.replace('|', '/')
    s = cell['summary']
    return '**%.2f**<br>%s [%s-%s] us<br>first %s' % (
        cell['ratio'], _us(s.median), _us(s.q1), _us(s.q3),
        _seconds(cell['first_seconds']))


def _us(seconds):
    return '%.0f' % (seconds * 1e6) if seconds >= 1e-4 else \
        '%.1f' % (seconds * 1e6)


def _seconds(seconds):
    return '%.0f ms' % (seconds * 1e3) if seconds >= 1e-3 else \
        '%.2f ms' % (seconds * 1e3)


def _shown_path(path):
    """``path`` as the command that made the report names it: relative to
    the repository where it is inside it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) \
        else path


def format_report(info, args, main_rows, default_rows, chart):
    lines = [
        '# Benchmarks: every system side by side',
        '',
        'Generated by `python benchmarks/run.py%s --output %s%s`. ' % (
            ' --torch-compile' if args.torch_compile else '',
            _shown_path(args.output), ' --chart %s' % _shown_path(chart)
            if chart else '') +
        ' '.join(__doc__.split('\n\n')[1:4]).replace('\n', ' '),
        '',
        '* date: %(date)s' % info,
        '* machine: %(machine)s' % info,
        '* Python %(python)s, numpy %(numpy)s, chainer %(chainer)s, '
        'torch %(torch)s, onnxruntime %(onnxruntime)s' % info,
        '* BLAS: %(blas)s' % info,
        '* %d interleaved rounds of ~%g ms per system; each cell: **ratio '
        'to eager Chainer**, median [interquartile range] per call, first '
        'call' % (args.rounds, args.target_ms),
        '',
        '## One thread',
        '',
        format_table(main_rows),
    ]
    if chart:
        lines += ['', '![ratios to eager Chainer](%s)' %
                  os.path.basename(chart)]
    if default_rows:
        lines += ['', '## Default threads (%d CPUs)' % os.cpu_count(), '',
                  format_table(default_rows)]
    return '\n'.join(lines) + '\n'


def draw_chart(rows, path):
    """Bars of each system's ratio to eager Chainer, per workload."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    systems = [s for s in rows[0].cells if s != 'eager']
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for k, system in enumerate(systems):
        xs, ys = [], []
        for i, row in enumerate(rows):
            cell = row.cells[system]
            if not isinstance(cell, Skipped):
                xs.append(i + (k - (len(systems) - 1) / 2.0) * width)
                ys.append(cell['ratio'])
        ax.bar(xs, ys, width, label=system)
    ax.axhline(1.0, color='black', linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.workload.name.replace(', ', '\n', 1)
                        for r in rows], fontsize=8)
    ax.set_ylabel('time / eager Chainer (lower is faster)')
    ax.set_title('One thread, median of interleaved rounds')
    ax.legend(fontsize=8, ncol=len(systems))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def versions():
    found = {}
    for name in ('torch', 'onnxruntime'):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            found[name] = 'not installed'
    return found


def main(argv=None):
    args = parse_args(argv)
    chosen = [w for w in workloads() if args.only is None or any(
        w.name.startswith(prefix) for prefix in args.only)]
    timing.same_kernels()
    main_rows, default_rows = [], []
    for threads, rows in ((1, main_rows), (None, default_rows)):
        if threads is None and args.no_default_threads:
            break
        undo = set_threads(threads)
        try:
            for workload in chosen:
                row = run_workload(workload, threads, args)
                rows.append(row)
                print('%-40s %s threads: %s' % (
                    workload.name, threads or 'default', '  '.join(
                        '%s %s' % (s, 'n/a' if isinstance(c, Skipped)
                                   else '%.2f' % c['ratio'])
                        for s, c in row.cells.items())))
                sys.stdout.flush()
        finally:
            undo()
    if args.chart:
        draw_chart(main_rows, args.chart)
    if args.output:
        info = timing.machine_info()
        info.update(versions())
        with open(args.output, 'w') as f:
            f.write(format_report(info, args, main_rows, default_rows,
                                  args.chart))
    return main_rows, default_rows


if __name__ == '__main__':
    main()
