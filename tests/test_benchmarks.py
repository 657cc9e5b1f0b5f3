"""benchmarks/run.py runs end to end on a small workload, checks every
system against eager Chainer, and writes its report (timing itself is not
tested: speed is measured by the benchmark, not by tests)."""

import importlib.util

from benchmarks import run


def test_run_writes_a_report_with_every_system(tmp_path):
    report = tmp_path / 'benchmarks.md'
    argv = ['--only', 'MLP inference, batch 1', 'LSTM training',
            '--rounds', '2', '--target-ms', '1', '--no-default-threads',
            '--output', str(report)]
    if importlib.util.find_spec('matplotlib') is not None:
        argv += ['--chart', str(tmp_path / 'benchmarks.png')]
    rows, default_rows = run.main(argv)
    assert [r.workload.name for r in rows] == [
        'MLP inference, batch 1', 'LSTM training step, T = 20']
    assert default_rows == []
    for row in rows:
        for system in ('eager', 'chainerjit', 'numpy'):
            assert not isinstance(row.cells[system], run.Skipped), (
                system, row.cells[system].reason)
    assert isinstance(rows[1].cells['onnxruntime'], run.Skipped)
    text = report.read_text()
    assert '| MLP inference, batch 1 |' in text
    assert 'differs from eager' not in text
    if '--chart' in argv:
        assert (tmp_path / 'benchmarks.png').stat().st_size > 0


def test_lstm_over_lists_of_steps_compiles_once_per_mode(tmp_path):
    from benchmarks import bench_lstm
    report = tmp_path / 'lstm.md'
    bench_lstm.main(['--lengths', '3', '7', '--rounds', '1', '--target-ms',
                     '1', '--threads', '0', '--as-list', '--output',
                     str(report)])
    text = report.read_text()
    assert 'over a Python list of T arrays' in text
    # T=3 compiles an inference and a training entry; T=7 hits both.
    assert '| 3 |' in text and text.split('| 7 |')[1].split('\n')[0] \
        .rstrip().endswith('| 0 | 2 |')


def test_memory_report_measures_every_system(tmp_path):
    from benchmarks import bench_memory
    report = tmp_path / 'memory.md'
    rows = bench_memory.main(['--only', 'MLP inference, batch 64',
                              '--output', str(report)])
    row, = rows
    assert row.held > 0  # the program has an arena
    assert 0 < row.arena < row.plain  # and allocates less per call
    assert '| MLP inference, batch 64 |' in report.read_text()


def test_elementwise_options_are_checked_and_reported(tmp_path):
    from benchmarks import bench_elementwise
    report = tmp_path / 'elementwise.md'
    rows = bench_elementwise.main(['--rounds', '1', '--target-ms', '1',
                                   '--output', str(report)])
    assert len(rows) == len(bench_elementwise.CASES)
    for case, medians in rows:
        assert {'numpy', 'numpy out='} <= set(medians)
    assert '| LSTM cell, 16 x 128 |' in report.read_text()


def test_eager_chainer_is_timed_with_chainers_own_methods():
    """Eager Chainer and static_graph run with the fast paths chainerjit
    installs on import removed (their samples, warm-up and calibration),
    and every other system with them."""
    import chainer
    from benchmarks import timing
    from chainerjit.runtime import _calls

    seen = {}

    def call(name):
        return lambda: seen.setdefault(name, set()).add(
            chainer.Link.__call__ is _calls.link_call)
    calls = dict((name, call(name))
                 for name in ('eager', 'static_graph', 'chainerjit'))
    samples = timing.interleaved(
        calls, rounds=2, inner=3, warmup=1,
        around=timing.system_contexts(calls))
    assert seen == {'eager': {False}, 'static_graph': {False},
                    'chainerjit': {True}}
    assert all(len(s) == 2 for s in samples.values())
    assert chainer.Link.__call__ is _calls.link_call


def test_programs_benchmark_checks_and_reports(tmp_path):
    from benchmarks import bench_programs
    report = tmp_path / 'programs.md'
    rows = bench_programs.main([
        '--calls', '12', '--rounds', '1', '--target-ms', '1', '--threads',
        '0', '--only', 'tree net, whole traversal jitted',
        'VAE, sampling', 'new value every call', 'new float every call',
        'new index every call', 'new list index every call',
        'LSTM, new length and annealed weight every call',
        'MLP, the training loop counting its steps on the model',
        'MLP, loss read into Python',
        'decoder, reads its output at each step',
        'word tagger, batches of new sizes and lengths', '--output',
        str(report)])
    tree, vae, new_value, new_float, new_index, list_index, annealed, \
        counted, reader, decoder, tagger = rows
    assert decoder['info'].compiled > 0 and decoder['info'].eager == 0
    assert tree['stopped'] and list_index['stopped']
    # around its graph break: the first call eager, then the pieces (before,
    # after, and the branch where a batch takes it) compiled once and every
    # call compiled
    info = reader['info']
    assert info.eager == 1 and 2 <= info.compiles <= 3
    assert not reader['stopped']
    assert info.compiled == info.hits - 1
    assert vae['info'].compiled > 0 and vae['info'].eager == 0
    for number in (new_value, new_float, new_index, annealed):
        assert number['info'].compiles == 2 and not number['stopped']
    assert counted['info'].compiles == 1 and counted['info'].eager == 0
    # (each sentence's scores joined: one program for every count)
    assert tagger['info'].compiles == 1 and not tagger['stopped']
    text = report.read_text()
    assert '| VAE, sampling |' in text and 'machine:' in text


def test_shapes_benchmark_checks_and_reports(tmp_path):
    from benchmarks import bench_shapes
    report = tmp_path / 'shapes.md'
    rows = bench_shapes.main(['--calls', '8', '--threads', '0', '--output',
                              str(report)])
    entries = dict(((name, system), row[-1]) for name, system, *row in rows)
    assert entries['LSTM training, lengths 5 to 40', 'chainerjit'] == 1
    assert entries['encoder sub-chain training, steps averaged, lengths 5 '
                   'to 60, batches 2 to 64', 'chainerjit'] == 1
    assert entries['sequence to sequence training, source and target '
                   'lengths 5 to 60, batches 2 to 64', 'chainerjit'] == 1
    assert entries["bidirectional RNN tagger training, each sentence's "
                   'loss and accuracy added up in a loop, lists of 2 to 64 '
                   'sentences of 1 to 60 words', 'chainerjit'] == 1
    assert entries['causal transformer LM training, inputs and targets cut '
                   'from padded ids, batches of 2 to 64 sentences of 5 to '
                   '60 tokens', 'chainerjit'] == 1
    text = report.read_text()
    assert '| LSTM training, lengths 5 to 40 | default |' in text
