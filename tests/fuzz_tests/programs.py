"""Hypothesis strategies drawing the fuzzer's programs.

A :class:`Program` names one of the forwards of ``models`` (its
``template``) and the ops it runs: ``pre`` on the arguments, ``body`` in
each iteration of a loop, ``then`` and ``orelse`` in a branch. Ops are
tuples ``(name, operand indexes..., parameters...)`` read by
``models.OPS``. While drawing, each value's shape is followed at two batch
sizes (the same program runs at both where its ops allow), so that every
op drawn fits its operands; NumPy, run on small dummy arrays, says what
each op's shape is.

A program's repr is Python that rebuilds it: the falsifying examples
Hypothesis prints can be pasted into a plain test.
"""

import collections

import chainer
import hypothesis.strategies as st
import numpy

from tests.fuzz_tests import models
from tests.fuzz_tests.builder import ARG_KINDS
from tests.fuzz_tests.builder import Builder
from tests.fuzz_tests.builder import LIST_KINDS
from tests.fuzz_tests.builder import THRESHOLDS
from tests.fuzz_tests.builder import Val


Program = collections.namedtuple('Program', [
    'template',   # a class of models.TEMPLATES
    'args',       # per argument: (shape with 'B' and 'T', kind)
    'params',     # per model array or link: (name, kind, shape)
    'pre',        # ops on the arguments
    'body',       # ops of a loop's iteration, on pre's values + [h, x]
    'carry',      # the body's value carried to the next iteration
    'init',       # pre's value the loop starts from
    'then', 'orelse',  # ops of a branch's two sides, on pre's values
    'tested',     # pre's value a branch tests
    'probe_sum',  # the test reads that value's sum
    'threshold',  # ... compared with this
    'last',       # pre's value assigned to ``self.last`` (Straight)
    'outs',       # the result: see models.build
    'batches',    # the batch sizes the program runs at
    'lengths',    # trip counts (or list lengths) of the calls
    'grad',       # calls backprop (and compare gradients): False, True,
                  # or 'mixed' (every other call)
    'train',      # chainer.config.train of the calls
    'mutate',     # parameters and the model's scale change between calls
    'dtype',      # of the arguments and parameters
    'special',    # special input values: None, 'ties' or 'nonfinite'
    'layouts',    # memory layout of each argument, and on which calls
    'seed',       # of the parameters and the inputs
])


# --- arguments ---------------------------------------------------------------

def concrete(shape, batch, length):
    return tuple(batch if d == 'B' else length if d == 'T' else d
                 for d in shape)


@st.composite
def _shape(draw, max_ndim=3):
    """A shape holding the batch axis ``'B'``, mostly first."""
    ndim = draw(st.integers(1, max_ndim))
    dims = [draw(st.integers(1, 4)) for _ in range(ndim - 1)]
    at = draw(st.sampled_from([0] * 3 + list(range(ndim))))
    dims.insert(at, 'B')
    return tuple(dims)


@st.composite
def _partner_shape(draw, shape):
    """Another argument's shape: the same, broadcasting with it, or its
    own."""
    how = draw(st.sampled_from(['same', 'suffix', 'ones', 'own']))
    if how == 'same':
        return shape
    if how == 'suffix':
        return shape[draw(st.integers(0, len(shape) - 1)):]
    if how == 'ones':
        return tuple(d if draw(st.booleans()) else 1 for d in shape)
    return draw(_shape())


def _batches(draw):
    b0 = draw(st.integers(1, 3))
    return b0, draw(st.sampled_from([b for b in (1, 2, 3, 4) if b != b0]))


def _vals_of(args, batches, length):
    return [Val(tuple(concrete(s, b, length) for b in batches),
                'var' if kind == 'variable' else 'arr')
            for s, kind in args]


@st.composite
def _outs(draw, vals, candidates):
    """A result of a few of ``candidates`` (indexes of ``vals``)."""
    container = draw(st.sampled_from(
        ['one', 'one', 'tuple', 'list', 'dict', 'nested']))
    n = 1 if container == 'one' else draw(st.integers(
        2 if container == 'nested' else 1, 3))
    leaves = []
    for k in range(n):
        i = draw(st.sampled_from(candidates)) if k else candidates[0]
        kinds = ['same'] * 5 + ['array'] * 3
        if vals[i].kind != 'mask':
            kinds.append('scalar')  # a NumPy scalar: runs eagerly
        leaves.append((i, draw(st.sampled_from(kinds))))
    return container, tuple(leaves)


def _usable(vals, batches):
    """The batch sizes every value fits."""
    return tuple(b for k, b in enumerate(batches)
                 if all(v.shapes[k] is not None for v in vals))


@st.composite
def programs(draw, templates):
    """Programs of one of ``templates`` (names of models.TEMPLATES)."""
    template = draw(st.sampled_from(templates))
    grad = draw(st.sampled_from([False, True, 'mixed']))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    batches = _batches(draw)
    params = []
    fields = dict(template=template, body=(), carry=0, init=0, then=(),
                  orelse=(), tested=0, probe_sum=False, threshold=0.0,
                  last=0, grad=grad, seed=seed,
                  train=draw(st.sampled_from([True, True, False])),
                  mutate=draw(st.booleans()),
                  dtype=draw(st.sampled_from(['float32'] * 3 + ['float64'])),
                  special=draw(st.sampled_from([None] * 4 + [
                      'ties', 'nonfinite'])))
    kind = st.sampled_from(ARG_KINDS)
    if template in models.LOOPS:
        step = draw(_shape(2))
        step = ('B',) + tuple(d for d in step if d != 'B')
        h_shape = draw(_partner_shape(step))
        if 'B' not in h_shape:
            h_shape = ('B',) + h_shape
        z_shape = draw(_partner_shape(h_shape))
        xs_kind = draw(st.sampled_from(
            ARG_KINDS if template in ('LoopShape', 'LoopExit')
            else ARG_KINDS + LIST_KINDS))
        args = ((('T',) + step, xs_kind), (h_shape, draw(kind)),
                (z_shape, draw(kind)))
        vals = _vals_of(args[1:], batches, 1)
        builder = Builder(draw, vals, params)
        pre = builder.draw_ops(0, 4)
        # The loop starts from an array or a Variable (steps are stacked).
        init = builder.pick(lambda v: v.float and v.kind != 'npscalar')
        h = builder.vals[init]
        x = _vals_of(args[:1], batches, 1)[0]
        x = Val(tuple(s[1:] for s in x.shapes), x.kind)
        body = Builder(draw, builder.vals + [h, x], params)
        body.draw_ops(1, 6)
        first = len(builder.vals) + 2
        # The carried value has h's shape and kind (the body was drawn
        # for that kind).
        carried = [i for i in range(first, len(body.vals))
                   if body.vals[i].shape == h.shape and
                   body.vals[i].kind == h.kind]
        if not carried:
            body.add(('unary' if h.kind == 'var' else 'np_unary',
                      first - 2, 'tanh'), [first - 2], h.kind, lambda x: x)
            carried = [len(body.vals) - 1]
        body_ops = tuple(body.ops)
        carry = carried[-1] if draw(st.booleans()) else draw(
            st.sampled_from(carried))
        if body.vals[carry].shapes[1:] != h.shapes[1:]:
            batches = batches[:1]
        used = body.vals
        n_pre = len(builder.vals)
        outs = draw(_outs(builder.vals + [body.vals[carry]],
                          [n_pre] + list(range(n_pre))))
        lengths = (draw(st.integers(1, 4)),) + tuple(
            draw(st.lists(st.integers(1, 6), min_size=2, max_size=2)))
        if template == 'LoopExit':
            fields.update(probe_sum=draw(st.booleans()),
                          threshold=draw(st.sampled_from(THRESHOLDS)))
        fields.update(pre=pre, body=body_ops, carry=carry, init=init,
                      outs=outs)
    else:
        x_shape = draw(_shape())
        y_shape = draw(_partner_shape(x_shape))
        if template == 'ListStraight':
            args = ((('T',) + x_shape, draw(st.sampled_from(LIST_KINDS))),
                    (y_shape, draw(kind)))
            vals = _vals_of(((x_shape, args[0][1][5:]),) * 2 + args[1:],
                            batches, 1)
        elif draw(st.integers(0, 5)) == 0:
            # the same array or Variable passed twice
            x_kind = draw(kind)
            args = ((x_shape, x_kind), (x_shape, 'alias'))
            vals = _vals_of(((x_shape, x_kind),) * 2, batches, 1)
        else:
            args = ((x_shape, draw(kind)), (y_shape, draw(kind)))
            vals = _vals_of(args, batches, 1)
        builder = Builder(draw, vals, params)
        pre = builder.draw_ops(1, 8)
        used = list(builder.vals)
        n_pre = len(builder.vals)
        fields.update(pre=pre, last=builder.pick(lambda v: True))
        if template.startswith('Branch'):
            fields.update(tested=builder.pick(),
                          probe_sum=draw(st.booleans()),
                          threshold=draw(st.sampled_from(THRESHOLDS)))
            sides = []
            for _ in range(2):
                side = Builder(draw, builder.vals, params)
                sides.append(side.draw_ops(1, 4))
                used = used + side.vals[n_pre:]
                # the result reads the side's last value
                side_last = side.vals[-1]
            fields.update(then=sides[0], orelse=sides[1])
            vals = builder.vals + [side_last]
            outs = draw(_outs(vals, [len(vals) - 1] + list(range(n_pre))))
        else:
            outs = draw(_outs(builder.vals, list(range(n_pre))[::-1]))
        fields.update(outs=outs)
        lengths = (draw(st.integers(1, 4)),) * 3
    batches = _usable(used, batches)
    layouts = (tuple(draw(st.sampled_from(('c',) * 3 + LAYOUTS))
                     for _ in args), draw(st.sampled_from(['odd', 'all'])))
    return Program(args=args, params=tuple(params), batches=batches,
                   lengths=lengths, layouts=layouts, **fields)


# --- inputs of a call ------------------------------------------------------

def values(shape, dtype, special, rng):
    """Random values; with ``special``, ``'ties'`` rounds them to halves
    (zeros, equal values), ``'nonfinite'`` also puts NaN and infinities
    in."""
    a = rng.standard_normal(shape)
    if special:
        a = numpy.round(a * 2) / 2
    if special == 'nonfinite':
        pick = rng.uniform(size=shape)
        a[pick < 0.15] = numpy.nan
        a[(pick >= 0.15) & (pick < 0.2)] = numpy.inf
        a[(pick >= 0.2) & (pick < 0.25)] = -numpy.inf
    return a.astype(dtype)


def raw_args(program, batch, length, rng):
    """NumPy arrays (lists of them for list arguments) for one call."""
    args = []
    for shape, kind in program.args:
        shape = concrete(shape, batch, length)
        a = values(shape, program.dtype, program.special, rng)
        args.append(list(a) if kind in LIST_KINDS else a)
    return args


#: Memory layouts of arguments: C order, Fortran order, every other
#: element of a larger array, an array starting past its buffer's start,
#: negative strides.
LAYOUTS = ('c', 'f', 'strided', 'offset', 'reversed')


def relayout(a, layout):
    """A new array of ``a``'s values in ``layout``."""
    if layout == 'f':
        return numpy.asfortranarray(a.copy())
    if layout == 'strided' and a.ndim:
        base = numpy.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        base[..., ::2] = a
        return base[..., ::2]
    if layout == 'offset' and a.ndim:
        base = numpy.zeros((a.shape[0] + 1,) + a.shape[1:], a.dtype)
        base[1:] = a
        return base[1:]
    if layout == 'reversed' and a.ndim:
        return a[::-1].copy()[::-1]
    return a.copy()


def call_args(program, raw, n):
    """The arguments of the ``n``-th call's run, made from ``raw`` (fresh
    arrays and Variables for each run): Variables where the argument's
    kind says so, which require grad, laid out in memory as
    ``program.layouts`` says."""
    layouts, when = program.layouts
    args = []
    for (shape, kind), a, layout in zip(program.args, raw, layouts):
        if when == 'odd' and n % 2 == 0:
            layout = 'c'
        if kind == 'alias':
            args.append(args[0])
        elif kind == 'variable':
            args.append(chainer.Variable(relayout(a, layout)))
        elif kind == 'list_variable':
            args.append([chainer.Variable(relayout(r, layout)) for r in a])
        elif kind == 'list_array':
            args.append([relayout(r, layout) for r in a])
        else:
            args.append(relayout(a, layout))
    return args
