"""The forwards the fuzzer runs: a few fixed shapes of Python code (a
straight line, loops over a time axis or a list, branches on array
tests), written as real methods so that chainerjit can read their source,
whose ops come from a program description (``programs.Program``).

``FuzzNet.run`` interprets a tuple of ops on an environment, a list of
values (Variables, arrays, boolean masks, index arrays): each op appends
one value. The op names and their arguments are those of ``OPS``
below; ``programs`` draws them with shapes that fit.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy


def as_array(v):
    return v.array if isinstance(v, chainer.Variable) else v


# --- ops ---------------------------------------------------------------------

UNARY = {
    'relu': F.relu, 'tanh': F.tanh, 'sigmoid': F.sigmoid, 'exp': F.exp,
    'log': F.log, 'absolute': F.absolute, 'square': F.square,
    'softplus': F.softplus, 'leaky_relu': F.leaky_relu, 'sqrt': F.sqrt,
    'sin': F.sin, 'neg': lambda x: -x, 'abs': abs,
    'clip': lambda x: F.clip(x, -1.0, 1.0),
}


def op_unary(model, env, i, name):
    return UNARY[name](env[i])


def op_scalar(model, env, i, op, c):
    x = env[i]
    if op == 'mul':
        return x * c
    if op == 'add':
        return x + c
    if op == 'rsub':
        return c - x
    if op == 'div':
        return x / c
    if op == 'rdiv':
        return c / x
    if op == 'pow2':
        return x ** 2
    raise ValueError(op)


def op_binary(model, env, i, j, op):
    x, y = env[i], env[j]
    if op == 'add':
        return x + y
    if op == 'sub':
        return x - y
    if op == 'mul':
        return x * y
    if op == 'div':
        return x / y
    if op == 'maximum':
        return F.maximum(x, y)
    if op == 'minimum':
        return F.minimum(x, y)
    raise ValueError(op)


def op_bparam(model, env, i, name, op):
    p = getattr(model, name)
    return env[i] + p if op == 'add' else env[i] * p


def op_linear(model, env, i, name):
    return getattr(model, name)(env[i])


def op_flinear(model, env, i, w, b):
    return F.linear(env[i], getattr(model, w),
                    None if b is None else getattr(model, b))


def op_matmul(model, env, i, w, transb):
    return F.matmul(env[i], getattr(model, w), transb=transb)


def op_gram(model, env, i):
    return F.matmul(env[i], env[i], transb=True)


REDUCTIONS = {'sum': F.sum, 'mean': F.mean, 'max': F.max, 'min': F.min}


def op_reduce(model, env, i, name, axis, keepdims):
    return REDUCTIONS[name](env[i], axis=axis, keepdims=keepdims)


def op_reshape(model, env, i, shape, how):
    if how == 'F':
        return F.reshape(env[i], shape)
    return env[i].reshape(shape)


def op_transpose(model, env, i, axes, how):
    if how == 'F':
        return F.transpose(env[i], axes)
    if how == 'T':
        return env[i].T
    return env[i].transpose(axes)


def op_broadcast(model, env, i, axis, k):
    x = env[i]
    if axis is None:
        shape = (k,) + x.shape
    else:
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return F.broadcast_to(x, shape)


def op_expand(model, env, i, axis):
    return F.expand_dims(env[i], axis)


def op_concat(model, env, i, j, axis):
    return F.concat((env[i], env[j]), axis=axis)


def op_stack(model, env, i, j, axis):
    return F.stack((env[i], env[j]), axis=axis)


def op_getitem(model, env, i, index, how):
    if how == 'F':
        return F.get_item(env[i], index)
    return env[i][index]


def op_softmax(model, env, i, axis, log):
    return (F.log_softmax if log else F.softmax)(env[i], axis=axis)


def op_where(model, env, m, i, j):
    return F.where(env[m], env[i], env[j])


def op_attr_scalar(model, env, i, op):
    """Arithmetic with a Python scalar attribute of the model, which the
    fuzzer may change between calls."""
    return op_scalar(model, env, i, op, model.scale)


def op_bn(model, env, i, name, train):
    """Batch normalization: in test mode, or under the call's
    configuration (in training, it updates the running statistics)."""
    if train:
        return getattr(model, name)(env[i])
    with chainer.using_config('train', False):
        return getattr(model, name)(env[i])


def op_dropout(model, env, i, ratio, train):
    if train:
        return F.dropout(env[i], ratio)
    with chainer.using_config('train', False):
        return F.dropout(env[i], ratio)


def op_tile(model, env, i, reps):
    return F.tile(env[i], reps)


def op_repeat(model, env, i, repeats, axis):
    return F.repeat(env[i], repeats, axis)


def op_flip(model, env, i, axis):
    return F.flip(env[i], axis)


def op_cumsum(model, env, i, axis):
    return F.cumsum(env[i], axis)


def op_swapaxes(model, env, i, a, b):
    return F.swapaxes(env[i], a, b)


def op_squeeze(model, env, i, axis):
    return F.squeeze(env[i], axis)


def op_pad(model, env, i, widths):
    return F.pad(env[i], widths, 'constant')


def op_split(model, env, i, sections, axis, k):
    return F.split_axis(env[i], sections, axis)[k]


def op_separate(model, env, i, axis, k):
    return F.separate(env[i], axis)[k]


def op_sum_to(model, env, i, shape):
    return F.sum_to(env[i], shape)


# Integer values: indexes drawn by argmax, read by the functions that take
# labels or ids.

def op_argmax(model, env, i, axis, how):
    if how == 'F':
        return F.argmax(env[i], axis)
    return numpy.argmax(as_array(env[i]), axis)


def op_embed(model, env, t, name):
    return F.embed_id(env[t], getattr(model, name))


def op_select(model, env, i, t):
    return F.select_item(env[i], env[t])


def op_xent(model, env, i, t, reduce):
    return F.softmax_cross_entropy(env[i], env[t], reduce=reduce)


def op_accuracy(model, env, i, t):
    return F.accuracy(env[i], env[t])


# NumPy run on arrays outside Chainer functions.

NP_UNARY = {
    'tanh': numpy.tanh, 'abs': numpy.abs, 'negative': numpy.negative,
    'square': numpy.square, 'exp': numpy.exp, 'log': numpy.log,
    'sqrt': numpy.sqrt, 'maximum0': lambda a: numpy.maximum(a, 0),
    'neg': lambda a: -a, 'abs_builtin': abs,
}


def op_np_unary(model, env, i, name):
    return NP_UNARY[name](as_array(env[i]))


def op_np_scalar(model, env, i, op, c):
    return op_scalar(model, [as_array(env[i])], 0, op, c)


def op_np_binary(model, env, i, j, op):
    a, b = as_array(env[i]), as_array(env[j])
    if op == 'add':
        return a + b
    if op == 'sub':
        return numpy.subtract(a, b)
    if op == 'mul':
        return a * b
    if op == 'maximum':
        return numpy.maximum(a, b)
    if op == 'minimum':
        return numpy.minimum(a, b)
    raise ValueError(op)


NP_REDUCTIONS = {'sum': numpy.sum, 'mean': numpy.mean, 'max': numpy.max,
                 'min': numpy.min}


def op_np_reduce(model, env, i, name, axis, keepdims, method):
    a = as_array(env[i])
    if method:
        return getattr(a, name)(axis=axis, keepdims=keepdims)
    return NP_REDUCTIONS[name](a, axis=axis, keepdims=keepdims)


def op_np_convert(model, env, i, how):
    a = as_array(env[i])
    if how == 'asarray':
        return numpy.asarray(a)
    if how == 'array':
        return numpy.array(a)
    if how == 'copy':
        return numpy.copy(a)
    if how == 'method_copy':
        return a.copy()
    if how == 'astype':
        return a.astype(a.dtype)
    if how == 'astype64':
        return a.astype(numpy.float64).astype(a.dtype)
    if how == 'contiguous':
        return numpy.ascontiguousarray(a)
    if how == 'T':
        return a.T
    raise ValueError(how)


def op_np_inplace(model, env, i, how, c):
    """In-place NumPy on a copy of a value's array."""
    b = as_array(env[i]).copy()
    if how == 'iadd':
        b += c
    elif how == 'setitem':
        b[..., 0] = c
    else:
        numpy.multiply(b, c, out=b)
    return b


def op_np_compare(model, env, i, op, c):
    a = as_array(env[i])
    b = c if isinstance(c, float) else as_array(env[c])
    if op == '>':
        return a > b
    if op == '<':
        return a < b
    if op == '>=':
        return numpy.greater_equal(a, b)
    raise ValueError(op)


def op_np_mask(model, env, m, n, op):
    if op == 'not':
        return numpy.logical_not(env[m])
    if op == 'and':
        return env[m] & env[n]
    return env[m] | env[n]


def op_np_where(model, env, m, i, j):
    return numpy.where(env[m], as_array(env[i]), as_array(env[j]))


def op_wrap(model, env, i):
    return chainer.Variable(as_array(env[i]))


def op_array(model, env, i):
    return env[i].array


OPS = {name[len('op_'):]: fn for name, fn in globals().items()
       if name.startswith('op_')}


# --- results -----------------------------------------------------------------

def leaf(v, kind):
    if kind == 'same':
        return v
    if kind == 'array':
        return as_array(v)
    if kind == 'scalar':
        return as_array(v).sum()
    raise ValueError(kind)


def build(outs, env):
    """The result ``outs`` describes: ``(container, leaves)`` with leaves
    ``(index, kind)``; the container is ``'one'``, ``'tuple'``,
    ``'list'``, ``'dict'`` or ``'nested'``."""
    container, leaves = outs
    values = [leaf(env[i], kind) for i, kind in leaves]
    if container == 'one':
        return values[0]
    if container == 'tuple':
        return tuple(values)
    if container == 'list':
        return values
    if container == 'dict':
        return {'out%d' % k: v for k, v in enumerate(values)}
    return values[0], values[1:]


# --- the model and its forwards --------------------------------------------

class FuzzNet(chainer.Chain):
    """A model running ``program``: its parameters and links are those
    the program's ops name, initialised from ``program.seed``, so that
    two models of one program are twins."""

    def __init__(self, program):
        super().__init__()
        self.program = program
        self.threshold = program.threshold
        self.scale = 1.5
        rng = numpy.random.RandomState(program.seed)
        with self.init_scope():
            for name, kind, shape in program.params:
                if kind == 'param':
                    setattr(self, name, chainer.Parameter(
                        rng.uniform(-1, 1, shape).astype(numpy.float32)))
                elif kind == 'linear':
                    link = L.Linear(shape[0], shape[1])
                    link.W.array[...] = rng.uniform(
                        -1, 1, link.W.shape) / numpy.sqrt(shape[0])
                    link.b.array[...] = rng.uniform(-0.5, 0.5, shape[1])
                    setattr(self, name, link)
                elif kind == 'bn':
                    link = L.BatchNormalization(shape[0])
                    link.gamma.array[...] = rng.uniform(0.5, 1.5, shape)
                    link.beta.array[...] = rng.uniform(-0.5, 0.5, shape)
                    link.avg_mean[...] = rng.uniform(-0.5, 0.5, shape)
                    link.avg_var[...] = rng.uniform(0.5, 2, shape)
                    setattr(self, name, link)
                else:
                    raise ValueError(kind)
        if program.dtype != 'float32':
            for param in self.params():
                param.array = param.array.astype(program.dtype)
            for link in self.links():
                for name in link._persistent:
                    value = getattr(link, name)
                    if isinstance(value, numpy.ndarray):
                        setattr(link, name, value.astype(program.dtype))

    def run(self, ops, env):
        env = list(env)
        for op in ops:
            env.append(OPS[op[0]](self, env, *op[1:]))
        return env

    def step(self, h, x, env):
        """One iteration of a loop: the body's ops on the values before
        the loop, the carried value and the step's input."""
        return self.run(self.program.body, env + [h, x])[self.program.carry]

    def probe(self, v):
        """The array a branch tests: ``v``'s, or its sum's."""
        if self.program.probe_sum:
            v = F.sum(v)
        return as_array(v)

    def result(self, env):
        return build(self.program.outs, env)


class Straight(FuzzNet):

    def forward(self, x, y):
        env = self.run(self.program.pre, [x, y])
        self.last = env[self.program.last]
        return self.result(env)


class ListStraight(FuzzNet):

    def forward(self, xs, y):
        env = self.run(self.program.pre, [xs[0], xs[-1], y])
        return self.result(env)


class LoopShape(FuzzNet):

    def forward(self, xs, h, z):
        env = self.run(self.program.pre, [h, z])
        h = env[self.program.init]
        ys = []
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t], env)
            ys.append(h)
        self.last = h
        return F.stack(ys)


class LoopLen(FuzzNet):

    def forward(self, xs, h, z):
        env = self.run(self.program.pre, [h, z])
        h = env[self.program.init]
        for t in range(len(xs)):
            h = self.step(h, xs[t], env)
        self.last = h
        return self.result(env + [h])


class LoopIter(FuzzNet):

    def forward(self, xs, h, z):
        env = self.run(self.program.pre, [h, z])
        h = env[self.program.init]
        ys = []
        for x in xs:
            h = self.step(h, x, env)
            ys.append(h)
        return F.stack(ys)


class LoopExit(FuzzNet):

    def forward(self, xs, h, z):
        env = self.run(self.program.pre, [h, z])
        h = env[self.program.init]
        ys = []
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t], env)
            ys.append(h)
            if (self.probe(h) > self.threshold).all():
                break
        return F.stack(ys)


class Branch(FuzzNet):

    def forward(self, x, y):
        env = self.run(self.program.pre, [x, y])
        if (self.probe(env[self.program.tested]) > self.threshold).all():
            env = self.run(self.program.then, env)
        else:
            env = self.run(self.program.orelse, env)
        self.last = env[-1]
        return self.result(env[:len(self.program.pre) + 2] + env[-1:])


class BranchAny(FuzzNet):

    def forward(self, x, y):
        env = self.run(self.program.pre, [x, y])
        if not (self.probe(env[self.program.tested]) > self.threshold).any():
            env = self.run(self.program.then, env)
        else:
            env = self.run(self.program.orelse, env)
        return self.result(env[:len(self.program.pre) + 2] + env[-1:])


TEMPLATES = {cls.__name__: cls for cls in (
    Straight, ListStraight, LoopShape, LoopLen, LoopIter, LoopExit, Branch,
    BranchAny)}

#: The templates whose first argument is a sequence over time.
LOOPS = ('LoopShape', 'LoopLen', 'LoopIter', 'LoopExit')
