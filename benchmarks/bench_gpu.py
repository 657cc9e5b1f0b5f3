"""Eager Chainer, chainerjit and PyTorch on a CUDA GPU, side by side.

The workloads of ``benchmarks/run.py`` with the model and the inputs on
GPU 0 (CuPy for Chainer and chainerjit, ``'cuda'`` tensors for PyTorch's
twins from ``benchmarks/competitors.py``, with the same weights). Every
timed call ends with a device synchronization, so a call's time is its
host overhead plus its kernels. Before timing, every system's first three
results (outputs, or the losses of three training steps from the same
weights) are checked against eager Chainer's. Medians of interleaved
rounds, ratios to eager Chainer's median.

Needs CuPy and a GPU (PyTorch is optional). Usage::

    python benchmarks/bench_gpu.py [--rounds 15] [--only MLP LSTM]
        [--output docs/benchmarks_gpu.md]
"""

import argparse
import collections
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import run  # noqa: E402
from benchmarks import timing  # noqa: E402

SYSTEMS = ('eager', 'chainerjit', 'torch')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=20.0)
    parser.add_argument('--only', nargs='+', default=None,
                        help='workload name prefixes')
    parser.add_argument('--output', help='write a Markdown report here')
    return parser.parse_args(argv)


def synchronized(call):
    """``call`` followed by a wait for the GPU to finish its work."""
    import cupy

    def synced():
        result = call()
        cupy.cuda.Device().synchronize()
        return result
    return synced


def host(result):
    """A result as a NumPy array or a float."""
    import cupy
    if hasattr(result, 'detach'):  # a torch tensor
        return result.detach().cpu().numpy()
    if isinstance(result, cupy.ndarray):
        return result.get()
    return result


def build(system, model, workload, x, t):
    """``system``'s call on the GPU; ``model``, ``x`` and ``t`` are on the
    host (PyTorch's twin copies the host model's weights)."""
    from benchmarks import competitors
    device = 'cuda' if system == 'torch' else '@cupy:0'
    if system == 'torch':
        competitors.TORCH_DEVICE = 'cuda'
        factory = getattr(competitors, '%s_%s_torch' % (
            workload.competitor, workload.kind), None)
        if factory is None:
            return run.Skipped('no PyTorch twin')
        args = (model, x) if workload.kind == 'inference' else (
            model, x, t, run.LEARNING_RATE)
        call = factory(*args)
        if call is None:
            return run.Skipped('torch is not installed')
    else:
        import chainer
        to_gpu = chainer.get_device(device).send
        prepare = run.jit_forward if system == 'chainerjit' else None
        call = run.chainer_call(copy.deepcopy(model).to_device(device),
                                workload, to_gpu(x), to_gpu(t), prepare)
    return run.timed_first_call(synchronized(call))


def run_workload(workload, args):
    import chainer
    x, t = run.make_inputs(workload)
    model = run.make_model(workload, x)
    inference = workload.kind == 'inference'
    builts = collections.OrderedDict()
    with chainer.using_config('train', not inference), \
            chainer.using_config('enable_backprop', not inference):
        for system in SYSTEMS:
            try:
                with timing.system_context(system)():
                    builts[system] = build(system, model, workload, x, t)
            except Exception as e:
                builts[system] = run.Skipped('fails: %s' % run._short(e))
        run.check(builts, host)
        calls = dict((name, b.call) for name, b in builts.items()
                     if isinstance(b, run.Built))
        samples = run.time_interleaved(calls, args)
    eager = timing.Summary(samples['eager']).median
    cells = collections.OrderedDict()
    for name, b in builts.items():
        if isinstance(b, run.Skipped):
            cells[name] = b
        else:
            summary = timing.Summary(samples[name])
            cells[name] = dict(summary=summary, ratio=summary.median / eager,
                               first_seconds=b.first_seconds)
    return run.Row(workload, None, cells)


def gpu_name():
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props['name']
    return name.decode() if isinstance(name, bytes) else name


def main(argv=None):
    args = parse_args(argv)
    import chainer
    import cupy
    import numpy
    rows = []
    for workload in run.workloads():
        if args.only and not any(workload.name.startswith(p)
                                 for p in args.only):
            continue
        start = time.perf_counter()
        rows.append(run_workload(workload, args))
        print('%s: %.0f s' % (workload.name, time.perf_counter() - start),
              file=sys.stderr)
    table = run.format_table(rows, SYSTEMS, targets=False)
    report = '\n'.join([
        '# chainerjit on a GPU', '',
        'GPU: %s; host CPU: %s, %d cores; CuPy %s, NumPy %s, Chainer %s, '
        'cuDNN in Chainer: %s.'
        % (gpu_name(), timing.cpu_model(), os.cpu_count(), cupy.__version__,
           numpy.__version__, chainer.__version__,
           chainer.backends.cuda.cudnn_enabled),
        'Each call ends with a device synchronization; medians of %d '
        'interleaved rounds (IQR), ratio to eager Chainer.' % args.rounds,
        '', table, ''])
    print(report)
    if args.output:
        with open(args.output, 'w') as f:
            f.write(report)


if __name__ == '__main__':
    main()
