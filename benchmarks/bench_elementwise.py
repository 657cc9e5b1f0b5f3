"""Elementwise fusion on CPU: the options, measured side by side.

Which way to run chains of elementwise ops is fastest on the CPU? For
three chains that chainerjit runs often, at a small and a large
size, this script times:

* ``numpy``: NumPy expressions, a new array per step (eager Chainer);
* ``numpy out=``: the same ufuncs writing into preallocated buffers, in
  place along the chain (what chainerjit's kernels and codegen's memory
  reuse do);
* ``numexpr``: the whole chain as one ``numexpr.evaluate`` (one thread;
  optional, ``scripts/install.sh --bench``);
* ``cython``: the chain as one scalar C loop (``benchmarks/_fused_cell.pyx``,
  compiled on first use with pyximport; optional).

Chains: an LSTM cell (gates to ``c`` and ``h``: three sigmoids, two
tanh, products and a sum), a bias and ReLU after a product, and layer
normalization's scale and shift. Every option is checked against the
``numpy`` result first.

Usage::

    python benchmarks/bench_elementwise.py [--output docs/elementwise.md]
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402

OPTIONS = ('numpy', 'numpy out=', 'numexpr', 'cython')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=10.0)
    parser.add_argument('--output', default=None)
    return parser.parse_args(argv)


def _numexpr():
    try:
        import numexpr
    except ImportError:
        return None
    numexpr.set_num_threads(1)
    return numexpr


def _cython():
    """The compiled loops, or ``None`` (no Cython or no compiler)."""
    try:
        import pyximport
        pyximport.install(language_level=3, inplace=False)
        from benchmarks import _fused_cell
        return _fused_cell
    except Exception:  # no compiler, or Cython missing: not measured
        return None


# --- the chains: each maker returns {option: call}, calls return arrays --

def lstm_cell(rng, batch, units):
    import numpy
    gates = rng.standard_normal((batch, 4 * units)).astype(numpy.float32)
    c_prev = rng.standard_normal((batch, units)).astype(numpy.float32)
    a, i, f, o = (gates[:, k * units:(k + 1) * units] for k in range(4))
    half = numpy.float32(0.5)

    def plain():
        c = numpy.tanh(a) * (numpy.tanh(i * half) * half + half) + \
            (numpy.tanh(f * half) * half + half) * c_prev
        return c, (numpy.tanh(o * half) * half + half) * numpy.tanh(c)

    s = numpy.empty((3, batch, units), numpy.float32)
    c, h = (numpy.empty((batch, units), numpy.float32) for _ in range(2))

    def in_place():  # (ufuncs with out=: augmented assignments would
        for k, g in enumerate((i, f, o)):  # make the buffers local)
            numpy.multiply(g, half, out=s[k])
        numpy.tanh(s, out=s)
        numpy.multiply(s, half, out=s)
        numpy.add(s, half, out=s)
        numpy.tanh(a, out=c)
        numpy.multiply(c, s[0], out=c)
        numpy.multiply(s[1], c_prev, out=h)
        numpy.add(c, h, out=c)
        numpy.tanh(c, out=h)
        numpy.multiply(h, s[2], out=h)
        return c, h

    calls = {'numpy': plain, 'numpy out=': in_place}
    numexpr = _numexpr()
    if numexpr is not None:
        env = dict(a=a, i=i, f=f, o=o, c_prev=c_prev, half=half)
        c_ne, h_ne = (numpy.empty((batch, units), numpy.float32)
                      for _ in range(2))

        def with_numexpr():
            numexpr.evaluate(
                'tanh(a) * (tanh(i * half) * half + half) + '
                '(tanh(f * half) * half + half) * c_prev',
                local_dict=env, out=c_ne)
            numexpr.evaluate('(tanh(o * half) * half + half) * tanh(c)',
                             local_dict=dict(env, c=c_ne), out=h_ne)
            return c_ne, h_ne
        calls['numexpr'] = with_numexpr
    loops = _cython()
    if loops is not None:
        c_cy, h_cy = (numpy.empty((batch, units), numpy.float32)
                      for _ in range(2))

        def with_cython():
            loops.lstm_cell(gates, c_prev, c_cy, h_cy)
            return c_cy, h_cy
        calls['cython'] = with_cython
    return calls


def bias_relu(rng, rows, units):
    import numpy
    x = rng.standard_normal((rows, units)).astype(numpy.float32)
    b = rng.standard_normal(units).astype(numpy.float32)
    zero = numpy.float32(0)
    out = numpy.empty_like(x)

    def in_place():
        numpy.add(x, b, out=out)
        return numpy.maximum(out, zero, out=out)

    calls = {'numpy': lambda: numpy.maximum(x + b, zero),
             'numpy out=': in_place}
    numexpr = _numexpr()
    if numexpr is not None:
        out_ne = numpy.empty_like(x)
        calls['numexpr'] = lambda: numexpr.evaluate(
            'where(x + b > 0, x + b, 0)', local_dict=dict(x=x, b=b),
            out=out_ne)
    loops = _cython()
    if loops is not None:
        out_cy = numpy.empty_like(x)

        def with_cython():
            loops.bias_relu(x, b, out_cy)
            return out_cy
        calls['cython'] = with_cython
    return calls


def scale_shift(rng, rows, units):
    import numpy
    x = rng.standard_normal((rows, units)).astype(numpy.float32)
    mu = x.mean(axis=1, keepdims=True)
    inv_std = (1 / x.std(axis=1, keepdims=True)).astype(numpy.float32)
    gamma, beta = (rng.standard_normal(units).astype(numpy.float32)
                   for _ in range(2))
    out = numpy.empty_like(x)

    def in_place():
        numpy.subtract(x, mu, out=out)
        numpy.multiply(out, inv_std, out=out)
        numpy.multiply(out, gamma, out=out)
        return numpy.add(out, beta, out=out)

    calls = {'numpy': lambda: (x - mu) * inv_std * gamma + beta,
             'numpy out=': in_place}
    numexpr = _numexpr()
    if numexpr is not None:
        out_ne = numpy.empty_like(x)
        calls['numexpr'] = lambda: numexpr.evaluate(
            '(x - mu) * inv_std * gamma + beta', local_dict=dict(
                x=x, mu=mu, inv_std=inv_std, gamma=gamma, beta=beta),
            out=out_ne)
    loops = _cython()
    if loops is not None:
        out_cy = numpy.empty_like(x)

        def with_cython():
            loops.scale_shift(x, mu, inv_std, gamma, beta, out_cy)
            return out_cy
        calls['cython'] = with_cython
    return calls


Case = collections.namedtuple('Case', 'name maker shape')

CASES = [
    Case('LSTM cell, 16 x 128', lstm_cell, (16, 128)),
    Case('LSTM cell, 256 x 512', lstm_cell, (256, 512)),
    Case('bias + ReLU, 64 x 100', bias_relu, (64, 100)),
    Case('bias + ReLU, 6272 x 64', bias_relu, (6272, 64)),
    Case('layer norm scale and shift, 256 x 64', scale_shift, (256, 64)),
    Case('layer norm scale and shift, 4096 x 256', scale_shift,
         (4096, 256)),
]


def check(calls):
    """Every option's result against ``numpy``'s."""
    import numpy
    expected = calls['numpy']()
    expected = expected if isinstance(expected, tuple) else (expected,)
    for name, call in calls.items():
        got = call()
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            numpy.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6,
                                          err_msg=name)


def measure(case, args):
    import numpy
    calls = case.maker(numpy.random.default_rng(0), *case.shape)
    check(calls)
    samples = timing.interleaved(calls, rounds=args.rounds,
                                 target_seconds=args.target_ms / 1e3)
    return dict((name, timing.Summary(samples[name]).median)
                for name in calls)


def format_report(rows):
    lines = [
        '# Elementwise chains on CPU: the options',
        '',
        'Generated by `benchmarks/bench_elementwise.py` (NumPy ufuncs run '
        'on one thread; numexpr is set to one). '
        'Median microseconds per call; in brackets, the ratio to plain '
        'NumPy. Every option was checked against plain NumPy first.',
        '',
        '| chain | ' + ' | '.join(OPTIONS) + ' |',
        '|---|' + '---|' * len(OPTIONS),
    ]
    for case, medians in rows:
        cells = []
        for option in OPTIONS:
            if option not in medians:
                cells.append('not installed')
                continue
            cells.append('%.1f (%.2f)' % (medians[option] * 1e6,
                                          medians[option] /
                                          medians['numpy']))
        lines.append('| %s | %s |' % (case.name, ' | '.join(cells)))
    return '\n'.join(lines) + '\n'


def main(argv=None):
    args = parse_args(argv)
    rows = [(case, measure(case, args)) for case in CASES]
    timing.publish(format_report(rows), args.output)
    return rows


if __name__ == '__main__':
    main()
