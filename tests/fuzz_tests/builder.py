"""The fuzzer's op catalogue: :class:`Builder` draws ops whose operands
fit, following each value's shape at two batch sizes (:class:`Val`), for
the program strategies of ``programs``."""

import hypothesis.strategies as st
import numpy


#: Arguments' kinds: a NumPy array, a Variable, a list over the first
#: axis of arrays or of Variables (and ``'alias'``: the first argument
#: passed again).
ARG_KINDS = ('array', 'variable')
LIST_KINDS = ('list_array', 'list_variable')

MAX_SIZE = 192  # elements of any value, at the larger batch size
SCALARS = (-2.0, -0.5, 0.5, 1.5, 3.0)
#: Thresholds of branch tests: always false, data dependent, always true.
THRESHOLDS = (1e30, 0.0, -1e30)


class Val(object):
    """A value while drawing: its shape at each batch size (``None`` where
    the program cannot run at that size), its kind (``'var'``, ``'arr'``,
    ``'mask'``, ``'int'`` for indexes, or ``'npscalar'`` for a NumPy
    scalar, which only results read) and whether it is known to be
    positive. Indexes have ``bounds``: at each batch size, the values are
    below it."""

    def __init__(self, shapes, kind, pos=False, bounds=None):
        self.shapes, self.kind, self.pos = shapes, kind, pos
        self.bounds = bounds

    @property
    def shape(self):
        return self.shapes[0]

    @property
    def ndim(self):
        return len(self.shapes[0])

    @property
    def float(self):
        return self.kind in ('var', 'arr')


def _dummy(val, b):
    """A NumPy array standing for ``val`` at the ``b``-th batch size (an
    index array holds its largest value)."""
    if val.kind == 'int':
        return numpy.full(val.shapes[b], val.bounds[b] - 1, numpy.int64)
    return numpy.zeros(val.shapes[b],
                       bool if val.kind == 'mask' else numpy.float32)


def _size(shape):
    return int(numpy.prod(shape, dtype=numpy.int64))


class Builder(object):
    """Draws ops onto a list of values."""

    def __init__(self, draw, vals, params):
        self.draw, self.vals, self.params = draw, list(vals), params
        self.ops = []

    # --- helpers ---

    def pick(self, pred=lambda v: v.float):
        """Draws the index of a value satisfying ``pred``, the most recent
        first (so that shrinking chains ops), or ``None``."""
        found = [i for i in reversed(range(len(self.vals)))
                 if pred(self.vals[i])]
        if not found:
            return None
        return self.draw(st.sampled_from(found))

    def param(self, kind, shape):
        name = {'param': 'p', 'linear': 'l', 'bn': 'bn'}[kind] + str(
            len(self.params))
        self.params.append((name, kind, tuple(int(d) for d in shape)))
        return name

    def add(self, op, operands, kind, fn, pos=False, bound=None):
        """Appends ``op`` if ``fn`` (NumPy on dummy operands) gives its
        shape at the first batch size; returns whether it did. ``bound``
        gives an index result's bound from its operands' shapes."""
        shapes, bounds = [], []
        for b in range(len(self.vals[operands[0]].shapes)):
            ins = [self.vals[i].shapes[b] for i in operands]
            shape = None
            if all(s is not None for s in ins):
                try:
                    shape = tuple(numpy.shape(fn(*[
                        _dummy(self.vals[i], b) for i in operands])))
                except (ValueError, IndexError, TypeError):
                    shape = None
                if shape is not None and (_size(shape) > MAX_SIZE or
                                          _size(shape) == 0):
                    shape = None
            if b == 0 and shape is None:
                return False
            shapes.append(shape)
            bounds.append(None if shape is None or bound is None
                          else bound(*ins))
        if kind in ('arr', 'mask', 'int') and shapes[0] == () and \
                op[0] != 'array':
            kind = 'npscalar'  # NumPy gives scalars for 0-d results
        self.ops.append(op)
        self.vals.append(Val(tuple(shapes), kind, pos,
                             None if bound is None else tuple(bounds)))
        return True

    def axis(self, ndim):
        return self.draw(st.integers(-ndim, ndim - 1))

    def axes(self, ndim):
        return self.draw(st.one_of(
            st.none(), st.integers(-ndim, ndim - 1),
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                     unique=True).map(tuple)))

    # --- the ops ---

    def unary(self):
        i = self.pick()
        names = ['relu', 'tanh', 'sigmoid', 'exp', 'absolute', 'square',
                 'softplus', 'leaky_relu', 'sin', 'neg', 'abs', 'clip']
        if self.vals[i].pos:
            names += ['log', 'sqrt']
        name = self.draw(st.sampled_from(names))
        kind = self.vals[i].kind if name in ('neg', 'abs') else 'var'
        return self.add(('unary', i, name), [i], kind, lambda x: x,
                        pos=name in ('exp', 'sigmoid', 'softplus'))

    def scalar(self, numpy_op=False):
        i = self.pick()
        v = self.vals[i]
        ops = ['mul', 'add', 'rsub', 'div', 'pow2']
        if v.pos:
            ops.append('rdiv')
        op = self.draw(st.sampled_from(ops))
        c = self.draw(st.sampled_from(SCALARS))
        pos = v.pos and (op in ('mul', 'div') and c > 0 or
                         op == 'add' and c > 0 or op == 'rdiv' and c > 0)
        kind = 'arr' if numpy_op else v.kind
        return self.add(('np_scalar' if numpy_op else 'scalar', i, op, c),
                        [i], kind, lambda x: x, pos=pos)

    def _partner(self, i, pred=lambda v: v.float):
        """A value broadcasting with value ``i``."""
        shape = self.vals[i].shape

        def fits(v):
            if not pred(v):
                return False
            try:
                numpy.broadcast_shapes(shape, v.shape)
                return True
            except ValueError:
                return False
        return self.pick(fits)

    def binary(self, numpy_op=False):
        i = self.pick()
        ops = ['add', 'sub', 'mul', 'maximum', 'minimum']
        op = self.draw(st.sampled_from(ops + ([] if numpy_op else ['div'])))
        j = self._partner(i, (lambda v: v.float and v.pos) if op == 'div'
                          else (lambda v: v.float))
        if j is None:
            return False
        if numpy_op:
            kind = 'arr'
        elif op in ('maximum', 'minimum') or 'var' in (
                self.vals[i].kind, self.vals[j].kind):
            kind = 'var'
        else:
            kind = 'arr'
        pos = op in ('add', 'mul', 'maximum', 'minimum') and \
            self.vals[i].pos and self.vals[j].pos
        return self.add(('np_binary' if numpy_op else 'binary', i, j, op),
                        [i, j], kind, lambda x, y: x + y, pos=pos)

    def bparam(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        shape = self.vals[i].shape
        n = self.draw(st.integers(1, len(shape)))
        pshape = [d if self.draw(st.booleans()) else 1 for d in shape[-n:]]
        op = self.draw(st.sampled_from(['add', 'mul']))
        name = self.param('param', pshape)
        return self.add(('bparam', i, name, op), [i], 'var',
                        lambda x: x + numpy.zeros(pshape, numpy.float32))

    def linear(self):
        i = self.pick(lambda v: v.float and v.ndim >= 2)
        if i is None:
            return False
        shape = self.vals[i].shape
        n_in, n_out = _size(shape[1:]), self.draw(st.integers(1, 4))
        if self.draw(st.booleans()):
            name = self.param('linear', (n_in, n_out))
            op = ('linear', i, name)
        else:
            w = self.param('param', (n_out, n_in))
            b = self.param('param', (n_out,)) if self.draw(
                st.booleans()) else None
            op = ('flinear', i, w, b)

        def fn(x):
            if _size(x.shape[1:]) != n_in:
                raise ValueError('in size')
            return numpy.zeros((x.shape[0], n_out))
        return self.add(op, [i], 'var', fn)

    def matmul(self):
        i = self.pick(lambda v: v.float and v.ndim >= 2)
        if i is None:
            return False
        n, m = self.vals[i].shape[-1], self.draw(st.integers(1, 4))
        transb = self.draw(st.booleans())
        w = self.param('param', (m, n) if transb else (n, m))
        return self.add(('matmul', i, w, transb), [i], 'var',
                        lambda x: x @ numpy.zeros((n, m)))

    def gram(self):
        i = self.pick(lambda v: v.float and v.ndim == 2)
        if i is None:
            return False
        return self.add(('gram', i), [i], 'var', lambda x: x @ x.T)

    def reduce(self, numpy_op=False):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        name = self.draw(st.sampled_from(['sum', 'mean', 'max', 'min']))
        axis = self.axes(self.vals[i].ndim)
        if numpy_op and axis is None:
            axis = 0
        keepdims = self.draw(st.booleans())
        pos = self.vals[i].pos
        if numpy_op:
            method = self.draw(st.booleans())
            return self.add(('np_reduce', i, name, axis, keepdims, method),
                            [i], 'arr', lambda x: numpy.sum(
                                x, axis=axis, keepdims=keepdims), pos=pos)
        return self.add(('reduce', i, name, axis, keepdims), [i], 'var',
                        lambda x: numpy.sum(x, axis=axis, keepdims=keepdims),
                        pos=pos)

    def reshape(self):
        i = self.pick()
        v = self.vals[i]
        size = _size(v.shape)
        factors = [d for d in range(1, size + 1) if size % d == 0]
        shape, left = [], size
        for _ in range(self.draw(st.integers(0, 2))):
            d = self.draw(st.sampled_from(
                [f for f in factors if left % f == 0]))
            shape.append(d)
            left //= d
        shape.append(left)
        shape = self.draw(st.permutations(shape))
        if self.draw(st.booleans()):
            shape[self.draw(st.integers(0, len(shape) - 1))] = -1
        shape = tuple(shape)
        how = self.draw(st.sampled_from(['F', 'method']))
        kind = 'var' if how == 'F' else v.kind
        return self.add(('reshape', i, shape, how), [i], kind,
                        lambda x: x.reshape(shape), pos=v.pos)

    def transpose(self):
        i = self.pick(lambda v: v.float and v.ndim >= 2)
        if i is None:
            return False
        v = self.vals[i]
        how = self.draw(st.sampled_from(['F', 'T', 'method']))
        axes = None if how == 'T' else tuple(
            self.draw(st.permutations(range(v.ndim))))
        kind = 'var' if how == 'F' else v.kind
        return self.add(('transpose', i, axes, how), [i], kind,
                        lambda x: x.transpose(axes), pos=v.pos)

    def broadcast(self):
        i = self.pick()
        v = self.vals[i]
        ones = [a for a, d in enumerate(v.shape) if d == 1]
        axis = self.draw(st.sampled_from([None] + ones))
        k = self.draw(st.integers(2, 3))

        def fn(x):
            if axis is None:
                return numpy.broadcast_to(x, (k,) + x.shape)
            if x.shape[axis] != 1:
                raise ValueError('not 1')
            return numpy.broadcast_to(
                x, x.shape[:axis] + (k,) + x.shape[axis + 1:])
        return self.add(('broadcast', i, axis, k), [i], 'var', fn,
                        pos=v.pos)

    def expand(self):
        i = self.pick()
        v = self.vals[i]
        axis = self.draw(st.integers(-v.ndim - 1, v.ndim))
        return self.add(('expand', i, axis), [i], 'var',
                        lambda x: numpy.expand_dims(x, axis), pos=v.pos)

    def concat(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        shape = self.vals[i].shape
        axis = self.axis(len(shape))
        a = axis % len(shape)
        j = self.pick(lambda v: v.float and v.ndim == len(shape) and all(
            d == e for k, (d, e) in enumerate(zip(v.shape, shape))
            if k != a))
        return self.add(('concat', i, j, axis), [i, j], 'var',
                        lambda x, y: numpy.concatenate((x, y), axis),
                        pos=self.vals[i].pos and self.vals[j].pos)

    def stack(self):
        i = self.pick()
        shape = self.vals[i].shape
        j = self.pick(lambda v: v.float and v.shape == shape)
        axis = self.draw(st.integers(-len(shape) - 1, len(shape)))
        return self.add(('stack', i, j, axis), [i, j], 'var',
                        lambda x, y: numpy.stack((x, y), axis),
                        pos=self.vals[i].pos and self.vals[j].pos)

    def getitem(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        v = self.vals[i]
        index = []
        for d in v.shape[:self.draw(st.integers(1, v.ndim))]:
            index.append(self.draw(st.one_of(
                st.integers(-d, d - 1),
                st.builds(slice, st.none() | st.integers(-d - 1, d + 1),
                          st.none() | st.integers(-d - 1, d + 1),
                          st.sampled_from([None, 1, 2, -1])),
                st.just(None),
                st.lists(st.integers(-d, d - 1), min_size=1,
                         max_size=3))))
        if sum(isinstance(k, list) for k in index) > 1:
            return False  # one advanced index at most
        if self.draw(st.booleans()) and len(index) < v.ndim:
            index.insert(self.draw(st.integers(0, len(index))), Ellipsis)
        index = index[0] if len(index) == 1 else tuple(index)
        how = self.draw(st.sampled_from(['F', 'operator']))
        kind = 'var' if how == 'F' else v.kind
        return self.add(('getitem', i, index, how), [i], kind,
                        lambda x: x[index], pos=v.pos)

    def softmax(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        axis = self.axis(self.vals[i].ndim)
        log = self.draw(st.booleans())
        return self.add(('softmax', i, axis, log), [i], 'var', lambda x: x,
                        pos=not log)

    def mask(self):
        i = self.pick()
        op = self.draw(st.sampled_from(['>', '<', '>=']))
        if self.draw(st.booleans()):
            c = self.draw(st.sampled_from((0.0,) + SCALARS))
            return self.add(('np_compare', i, op, c), [i], 'mask',
                            lambda x: x > 0)
        j = self._partner(i)
        return self.add(('np_compare', i, op, j), [i, j], 'mask',
                        lambda x, y: x > y)

    def mask_logic(self):
        m = self.pick(lambda v: v.kind == 'mask')
        if m is None:
            return False
        op = self.draw(st.sampled_from(['not', 'and', 'or']))
        if op == 'not':
            return self.add(('np_mask', m, None, op), [m], 'mask',
                            lambda x: ~x)
        n = self._partner(m, lambda v: v.kind == 'mask')
        return self.add(('np_mask', m, n, op), [m, n], 'mask',
                        lambda x, y: x & y)

    def where(self, numpy_op=False):
        m = self.pick(lambda v: v.kind == 'mask')
        if m is None:
            return False
        i = self._partner(m)
        if i is None:
            return False
        shape = numpy.broadcast_shapes(self.vals[m].shape,
                                       self.vals[i].shape)
        j = self.pick(lambda v: v.float and _broadcasts(shape, v.shape))
        if j is None:
            return False
        kind = 'arr' if numpy_op else 'var'
        return self.add(('np_where' if numpy_op else 'where', m, i, j),
                        [m, i, j], kind, lambda c, x, y: numpy.where(c, x, y),
                        pos=self.vals[i].pos and self.vals[j].pos)

    def bn(self):
        i = self.pick(lambda v: v.float and v.ndim >= 2)
        if i is None:
            return False
        size = self.vals[i].shape[1]
        name = self.param('bn', (size,))
        train = self.draw(st.booleans())

        def fn(x):
            if x.shape[1] != size:
                raise ValueError('size')
            return x
        return self.add(('bn', i, name, train), [i], 'var', fn)

    def dropout(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)  # Chainer's needs
        if i is None:
            return False
        ratio = self.draw(st.sampled_from([0.0, 0.25, 0.5]))
        train = self.draw(st.booleans())
        return self.add(('dropout', i, ratio, train), [i], 'var',
                        lambda x: x)

    def np_unary(self):
        i = self.pick()
        names = ['tanh', 'abs', 'negative', 'square', 'exp', 'maximum0',
                 'neg', 'abs_builtin']
        if self.vals[i].pos:
            names += ['log', 'sqrt']
        name = self.draw(st.sampled_from(names))
        return self.add(('np_unary', i, name), [i], 'arr', lambda x: x,
                        pos=name == 'exp')

    def np_convert(self):
        i = self.pick()
        how = self.draw(st.sampled_from([
            'asarray', 'array', 'copy', 'method_copy', 'astype',
            'astype64', 'contiguous', 'T']))
        return self.add(('np_convert', i, how), [i], 'arr',
                        (lambda x: x.T) if how == 'T' else (lambda x: x),
                        pos=self.vals[i].pos)

    def wrap(self):
        i = self.pick()
        return self.add(('wrap', i), [i], 'var', lambda x: x,
                        pos=self.vals[i].pos)

    def to_array(self):
        i = self.pick(lambda v: v.kind == 'var')
        if i is None:
            return False
        return self.add(('array', i), [i], 'arr', lambda x: x,
                        pos=self.vals[i].pos)

    def attr_scalar(self):
        i = self.pick()
        op = self.draw(st.sampled_from(['mul', 'add', 'rsub', 'div']))
        return self.add(('attr_scalar', i, op), [i], self.vals[i].kind,
                        lambda x: x)

    def shape_op(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        v = self.vals[i]
        name = self.draw(st.sampled_from([
            'tile', 'repeat', 'flip', 'cumsum', 'swapaxes', 'squeeze', 'pad',
            'split', 'separate', 'sum_to']))
        axis = self.axis(v.ndim)
        if name == 'tile':
            reps = tuple(self.draw(st.lists(st.integers(1, 2), min_size=1,
                                            max_size=v.ndim + 1)))
            op, fn = (name, i, reps), lambda x: numpy.tile(x, reps)
        elif name == 'repeat':
            repeats = self.draw(st.integers(1, 3))
            op, fn = (name, i, repeats, axis), lambda x: numpy.repeat(
                x, repeats, axis)
        elif name in ('flip', 'cumsum'):
            op, fn = (name, i, axis), lambda x: x
        elif name == 'swapaxes':
            other = self.axis(v.ndim)
            op, fn = (name, i, axis, other), lambda x: numpy.swapaxes(
                x, axis, other)
        elif name == 'squeeze':
            ones = [a for a, d in enumerate(v.shape) if d == 1]
            if not ones:
                return False
            axis = self.draw(st.sampled_from(ones))
            op, fn = (name, i, axis), lambda x: numpy.squeeze(x, axis)
        elif name == 'pad':
            widths = tuple((self.draw(st.integers(0, 2)),
                            self.draw(st.integers(0, 2))) for _ in v.shape)
            op, fn = (name, i, widths), lambda x: numpy.pad(x, widths)
        elif name == 'split':
            d = v.shape[axis]
            sections = self.draw(st.one_of(
                st.sampled_from([k for k in (1, 2, 3) if d % k == 0]),
                st.lists(st.integers(0, d), min_size=1, max_size=2).map(
                    sorted).map(tuple)))
            pieces = numpy.split(numpy.zeros(v.shape), sections, axis)
            k = self.draw(st.integers(0, len(pieces) - 1))

            def fn(x):
                if isinstance(sections, tuple) and \
                        sections[-1] > x.shape[axis]:
                    raise ValueError('Chainer splits within the axis')
                return numpy.split(x, sections, axis)[k]
            op = (name, i, sections, axis, k)
        elif name == 'separate':
            k = self.draw(st.integers(0, v.shape[axis] - 1))
            op, fn = (name, i, axis, k), lambda x: numpy.take(x, k, axis)
        else:
            shape = tuple(d if self.draw(st.booleans()) else 1
                          for d in v.shape[self.draw(st.integers(
                              0, v.ndim)):])

            def fn(x):
                if numpy.broadcast_shapes(shape, x.shape) != x.shape:
                    raise ValueError('sum_to')
                return numpy.zeros(shape)
            op = (name, i, shape)
        return self.add(op, [i], 'var', fn, pos=v.pos and name not in (
            'pad', 'cumsum'))

    def argmax(self):
        i = self.pick(lambda v: v.float and v.ndim >= 2)
        if i is None:
            return False
        axis = self.axis(self.vals[i].ndim)
        how = self.draw(st.sampled_from(['F', 'numpy']))
        return self.add(('argmax', i, axis, how), [i], 'int',
                        lambda x: numpy.argmax(x, axis),
                        bound=lambda shape: shape[axis])

    def labels(self):
        """A function of labels: embedding, select_item, cross entropy,
        accuracy."""
        t = self.pick(lambda v: v.kind == 'int')
        if t is None:
            return False
        name = self.draw(st.sampled_from(
            ['embed', 'select', 'xent', 'accuracy']))
        if name == 'embed':
            size = self.draw(st.integers(1, 3))
            w = self.param('param', (self.vals[t].bounds[0], size))
            n_vocab = self.vals[t].bounds[0]
            return self.add(('embed', t, w), [t], 'var',
                            lambda ids: numpy.zeros((n_vocab, size))[ids])
        if self.vals[t].ndim != 1:
            return False
        n = self.vals[t].shape[0]
        i = self.pick(lambda v: v.float and v.ndim == 2 and v.shape[0] == n
                      and v.shape[1] >= self.vals[t].bounds[0])
        if i is None:
            return False

        def fn(x, labels):
            if len(x) != len(labels):
                raise ValueError('lengths')
            return x[numpy.arange(len(labels)), labels]
        if name == 'select':
            return self.add(('select', i, t), [i, t], 'var', fn)
        if name == 'xent':
            reduce = self.draw(st.sampled_from(['mean', 'no']))
            return self.add(('xent', i, t, reduce), [i, t], 'var',
                            fn if reduce == 'no' else
                            lambda x, labels: fn(x, labels).sum())
        return self.add(('accuracy', i, t), [i, t], 'var',
                        lambda x, labels: fn(x, labels).sum())

    def np_inplace(self):
        i = self.pick(lambda v: v.float and v.ndim >= 1)
        if i is None:
            return False
        how = self.draw(st.sampled_from(['iadd', 'setitem', 'out']))
        c = self.draw(st.sampled_from(SCALARS))
        return self.add(('np_inplace', i, how, c), [i], 'arr', lambda x: x)

    def op(self):
        """Draws one op (retrying a few times where the drawn one does not
        fit). In-place NumPy runs eagerly: it is drawn rarely."""
        for _ in range(5):
            name = self.draw(st.sampled_from(OP_CHOICES * 8 + RARE_OPS))
            if name in NUMPY_TWINS:
                ok = getattr(self, name[3:])(numpy_op=True)
            else:
                ok = getattr(self, name)()
            if ok:
                return True
        return False

    def draw_ops(self, min_size, max_size):
        for _ in range(self.draw(st.integers(min_size, max_size))):
            self.op()
        return tuple(self.ops)


OP_CHOICES = (
    'unary', 'scalar', 'binary', 'bparam', 'linear', 'matmul', 'gram',
    'reduce', 'reshape', 'transpose', 'broadcast', 'expand', 'concat',
    'stack', 'getitem', 'softmax', 'mask', 'mask_logic', 'where', 'bn',
    'dropout', 'np_unary', 'np_scalar', 'np_binary', 'np_reduce',
    'np_convert', 'np_where', 'wrap', 'to_array', 'attr_scalar', 'shape_op',
    'argmax', 'labels', 'labels')
RARE_OPS = ('np_inplace',)
#: Ops drawn by the method of their Chainer twin, with ``numpy_op=True``.
NUMPY_TWINS = ('np_scalar', 'np_binary', 'np_reduce', 'np_where')


def _broadcasts(shape, other):
    try:
        return numpy.broadcast_shapes(shape, other) == tuple(shape)
    except ValueError:
        return False
