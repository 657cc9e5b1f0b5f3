"""Values of each item of a joined list, summed over all the items.

A forward over a list of sentences often scores each sentence on its own
and adds the scores up in Python::

    loss = 0
    for y, t in zip(ys, ts):
        loss += F.softmax_cross_entropy(self.out(y), t)

Recorded item by item, that loop bakes the number of items in: each new
batch size compiles again. Where the items are those of joined lists
(``joining``: ``y`` an output sequence of an N-step link over them, ``t``
the item of a list of tags as long as its sentence), each item's score
is a reduction of its rows, which a joined call computes once for all
the items: a vector of one value per item (:func:`reduced_item`). What
the forward gets for an item's score is that vector's element, and what
it gets for a sum of such elements is a :class:`Summed` of them; a sum
of all of them, however the forward adds them up (``loss += v`` in a
loop, ``sum(...)``, ``F.sum(F.stack(vs))``), is the vector's sum, one
op at any number of items (:func:`accumulated`).

The elements and the partial sums are recorded (their values are the
forward's), as nodes that go where nothing but a further step of the sum
reads them; a recording that reads one otherwise (an item's loss
printed, scaled on its own, returned) keeps the number of items in the
key (``joining.take_joins`` says so).
"""

import collections

import chainer
import numpy

from chainerjit import ops
from chainerjit.frontend import _keys
from chainerjit.frontend import joining
from chainerjit.frontend import lengths
from chainerjit.frontend import traced
from chainerjit.ops import array as array_ops


class Summed(collections.namedtuple('Summed', 'vector ks init leaf')):
    """What the forward holds: the elements ``ks`` (a frozenset) of
    ``vector`` (one value per item of a joined list, whose lengths are the
    argument ``leaf``) summed, plus ``init``: ``None`` (nothing), a number
    or a Variable (``loss = 0``, or a loss the forward computed before the
    loop). An item's value is ``Summed(vector, {k}, None, leaf)``."""

    __slots__ = ()

    def n_items(self):
        return self.vector.shape[0]


def _summed_of(x):
    """The :class:`Summed` the Variable (or traced array) ``x`` is, or
    ``None``."""
    recorder = _keys.recording.recorder
    return recorder.item_sums.get(id(lengths.array_of(x)))


def applied(node, inputs):
    """Where the Chainer function ``node`` applied to ``inputs`` reduces
    an item of a joined list to one value (:func:`reduced_item`), or adds
    up such values (:func:`accumulated`): its outputs, as the forward
    gets them; else ``None``."""
    name = type(node).__name__
    if name in _REDUCERS:
        return reduced_item(node, inputs)
    if name in ('Add', 'AddConstant'):
        found = accumulated(node, inputs)
        if found is not None:
            return found
    if name in _ELEMENT_WISE:
        return element_wise(node, inputs)
    return None


def numpy_applied(ufunc, method, inputs, kwargs):
    """NumPy's ``x.sum()`` of an item's array (:func:`numpy_summed`), or
    ``a + b`` of such sums (:func:`_added`: ``correct += (y == t).sum()``
    in a loop over the items), as the forward gets it; else ``None``."""
    if ufunc is not numpy.add:
        return None
    if method == 'reduce' and len(inputs) == 1 and all(
            type(v) is type(_SUM_OF_ALL.get(k)) and v == _SUM_OF_ALL[k]
            for k, v in kwargs.items()):
        return numpy_summed(inputs[0])
    if method == '__call__' and len(inputs) == 2 and not kwargs:
        return _added(*inputs)
    return None


#: The settings of ``x.sum()`` (``numpy.add.reduce`` of all the elements,
#: as NumPy gives them to ``__array_ufunc__``).
_SUM_OF_ALL = {'axis': None, 'dtype': None, 'keepdims': False,
               'where': True}


def numpy_summed(array):
    """Item ``k``'s value of the sums of all the elements of each item's
    array (``(y.array.argmax(axis=1) == t).sum()``), computed for all the
    items at once: a traced 0-d array standing for the NumPy scalar eager
    gives, where the recording follows those (``traced.is_scalar``);
    else ``None``."""
    recorder = _keys.recording.recorder
    found = joining.item_of(array)
    if found is None or not recorder.follows_scalars:
        return None

    def sums():
        rows = lengths.array_of(found.packed)
        if rows.ndim > 1:
            rows = rows.sum(axis=tuple(range(1, rows.ndim)))
        return _sums(rows, found.lengths).array
    vector = _vector(('numpy.sum', id(found.packed)), sums)
    return _noted(Summed(vector, frozenset([found.k]), None, found.leaf))


def element_wise(node, inputs):
    """Item ``k``'s value of an element-wise function of item ``k``'s
    values alone (:func:`reduced_item`, of different vectors:
    ``F.softmax_cross_entropy(y, t) * 0.5``, ``a + b`` of two losses of a
    sentence), that function of their vectors, applied once; else
    ``None``."""
    items = [_summed_of(x) for x in inputs]
    if None in items or any(
            f.init is not None or len(f.ks) != 1 or f.ks != items[0].ks or
            f.leaf != items[0].leaf for f in items) or \
            len(set(id(f.vector) for f in items)) != len(items):
        return None
    whole_inputs = tuple(f.vector for f in items)
    vector = _vector((type(node), joining.settings_of(node)) + tuple(
        id(x) for x in whole_inputs),
        lambda: ops.pristine_copy(node).apply(whole_inputs)[0])
    return (_noted(items[0]._replace(vector=vector)),)


def reduced_item(node, inputs):
    """Item ``k``'s value of the reduction ``node`` of the rows of items
    of joined lists, computed for all the items at once, the first time
    (:data:`_REDUCERS`): ``F.softmax_cross_entropy(y, t)`` of an output
    sequence ``y`` and tags ``t`` as long, ``F.sum(y)``; else ``None``."""
    noted = [joining.item_of(x) for x in inputs]
    reducer = _REDUCERS[type(node).__name__]
    if noted[0] is None or not joining.paired(noted) or \
            not reducer.takes(node, inputs, noted):
        return None
    vector = _vector((type(node).__name__, reducer.settings(node)) + tuple(
        id(n.packed) for n in noted), lambda: reducer.whole(node, noted))
    return (_noted(Summed(vector, frozenset([noted[0].k]), None,
                          noted[0].leaf)),)


def _vector(key, make):
    """The vector of one value per item that ``make()`` computes for all
    the items, made the first time asked for ``key`` (a loop over the
    items asks once per item)."""
    made = _keys.recording.recorder.applied_rows
    found = made.get(('item sums',) + key)
    if found is None:
        found = made[('item sums',) + key] = make()
    return found


def accumulated(node, inputs):
    """``a + b`` (or ``a + c`` of a number ``c``) where ``a`` is an item's
    value (:func:`reduced_item`) or a sum of such values
    (:class:`Summed`), and ``b`` another of the same vector's items,
    or a value of no item (the sum's start): the sum of those items, the
    vector's sum where they are all of them; else ``None``."""
    if type(node).__name__ == 'AddConstant':
        inputs = (inputs[0], node.value)
    found = _added(*inputs)
    return None if found is None else (found,)


def _added(a, b):
    """``a + b`` where one is an item's value or a sum of such values
    (:class:`Summed`) and the other another of the same vector's items,
    or a value of no item (a number, or a Variable or array: the sum's
    start): what the forward gets (:func:`_summed`); else ``None``."""
    found = [_summed_of(x) if not _is_number(x) else None for x in (a, b)]
    if found == [None, None]:
        return None
    if None not in found:
        a, b = found
        if a.vector is not b.vector or a.ks & b.ks or \
                not (_is_number(a.init) or _is_number(b.init)):
            return None
        return _summed(a._replace(ks=a.ks | b.ks, init=_plus(a.init,
                                                             b.init)))
    summed, other = (found[0], b) if found[0] is not None else (found[1], a)
    if _is_number(other):
        return _summed(summed._replace(init=_plus(summed.init, other)))
    if summed.init is not None:
        return None  # (a Variable started it already)
    return _summed(summed._replace(init=other))


def stacked(xs):
    """``F.stack(xs)`` where ``xs`` are the values of all the items of one
    vector (:func:`reduced_item`), in order: that vector; else ``None``."""
    found = _all_items(xs)
    if found is None:
        return None
    recorder = _keys.recording.recorder
    recorder.iterated_lines.add(traced.user_location())
    return found.vector


def count_of(xs):
    """The array of the lengths of a joined list's items (an argument,
    whose first axis is their number) where ``xs``, a list the forward
    made, holds the values of all of them (:func:`reduced_item`), in order
    (``losses.append(F.softmax_cross_entropy(...))`` in a loop:
    ``len(losses)`` is the batch size); else ``None``."""
    found = _all_items(xs)
    if found is None:
        return None
    return _keys.recording.recorder.item_lengths[found.leaf]


def _all_items(xs):
    """The :class:`Summed` of the first of ``xs`` where they are the values
    of all the items of one vector, in order; else ``None``."""
    found = [_summed_of(x) for x in xs]
    if not found or None in found:
        return None
    vector = found[0].vector
    if any(f.vector is not vector or f.init is not None or
           f.ks != frozenset([k]) for k, f in enumerate(found)) or \
            len(found) != found[0].n_items():
        return None
    return found[0]


def _is_number(value):
    """Is ``value`` a start of a sum that holds no array: none, or a
    number?"""
    return value is None or isinstance(value, (int, float, numpy.generic))


def _plus(a, b):
    """``a + b`` of two starts of a sum (``None`` for none)."""
    if a is None or b is None:
        return b if a is None else a
    return a + b


def _summed(summed):
    """The value the forward gets for ``summed``: the vector's sum plus its
    start where it holds all the items (kept), else a value noted as
    :class:`Summed` (which goes where a further step alone reads it)."""
    recorder = _keys.recording.recorder
    recorder.iterated_lines.add(traced.user_location())
    if len(summed.ks) < summed.n_items():
        return _noted(summed)
    total = _sum_of(summed.vector, None)
    if summed.init is None or (_is_number(summed.init) and
                               summed.init == 0):
        return total
    return summed.init + total


def _sum_of(vector, order):
    """The sum of the elements ``order`` of ``vector`` (all: ``None``), a
    Variable of a Variable's, else a traced 0-d array standing for the
    NumPy scalar eager gives (``(y == t).sum()``)."""
    if isinstance(vector, chainer.Variable):
        if order is None:
            return chainer.functions.sum(vector)
        return vector[order[0]] if len(order) == 1 else \
            chainer.functions.sum(vector[numpy.array(order)])
    return (vector if order is None else vector[numpy.array(order)]).sum()


def _noted(summed):
    """The Variable of ``summed`` (its elements of its vector summed, plus
    its start), recorded by nodes that go where nothing else reads it,
    and noted as that :class:`Summed`."""
    recorder = _keys.recording.recorder
    first = len(recorder.graph.nodes)
    value = _sum_of(summed.vector, sorted(summed.ks))
    if summed.init is not None:
        value = value + summed.init
    recorder.droppable.extend(recorder.graph.nodes[first:])
    array = lengths.array_of(value)
    recorder.item_sums[id(array)] = summed
    recorder.item_sum_values.append(recorder.values[id(array)])
    recorder.iterated_lines.add(traced.user_location())
    return value


# --- the reductions of an item ---------------------------------------------

class _SoftmaxCrossEntropy(object):
    """``F.softmax_cross_entropy(y, t)`` of an item's scores ``y`` and
    its tags ``t`` (an item of a list as long, item by item), averaged
    over the item's rows (``reduce='mean'``): for all the items, the
    rows' losses summed over each item (``ops.array.ReduceSegments``)
    over the count of its tags not ignored (``normalize``) or its rows,
    at least one, as Chainer's function divides."""

    @staticmethod
    def takes(node, inputs, noted):
        scores, tags = (lengths.array_of(x) for x in inputs)
        return len(noted) == 2 and noted[1] is not None and \
            node.reduce == 'mean' and node.class_weight is None and \
            scores.ndim == 2 and tags.dtype.kind == 'i' and \
            not getattr(node, 'soft_target', False)

    @staticmethod
    def settings(node):
        return bool(node.normalize), node.ignore_label

    @staticmethod
    def whole(node, noted):
        scores, tags = noted[0].packed, lengths.array_of(noted[1].packed)
        losses = chainer.functions.softmax_cross_entropy(
            scores, tags, normalize=node.normalize,
            ignore_label=node.ignore_label, reduce='no')
        item_lengths = noted[0].lengths
        total = _sums(losses, item_lengths)
        dtype = total.dtype
        if node.normalize:
            counted = _sums((tags != node.ignore_label).astype(dtype),
                            item_lengths).array
        else:
            counted = item_lengths.astype(dtype)
        return total / numpy.maximum(counted, dtype.type(1))


class _Sum(object):
    """``F.sum(y)`` of all of an item's elements: for all the items, each
    row's sum summed over each item."""

    @staticmethod
    def takes(node, inputs, noted):
        return len(noted) == 1 and node.axis is None and not node.keepdims

    @staticmethod
    def settings(node):
        return ()

    @staticmethod
    def whole(node, noted):
        rows = noted[0].packed
        shape = lengths.array_of(rows).shape
        if len(shape) > 1:
            rows = chainer.functions.sum(
                rows, axis=tuple(range(1, len(shape))))
        return _sums(rows, noted[0].lengths)


class _Mean(_Sum):
    """``F.mean(y)`` of all of an item's elements: :class:`_Sum`'s over
    the item's rows times the elements of a row."""

    @staticmethod
    def whole(node, noted):
        total = _Sum.whole(node, noted)
        row = int(numpy.prod(lengths.array_of(noted[0].packed).shape[1:]))
        return total / (noted[0].lengths * row).astype(total.dtype)


class _Accuracy(object):
    """``F.accuracy(y, t)`` of an item's scores ``y`` and its tags ``t``:
    for all the items, the rows whose highest score is at their tag,
    counted over each item, over the count of its tags not ignored (``0``
    where none is, as Chainer's function gives)."""

    @staticmethod
    def takes(node, inputs, noted):
        scores, tags = (lengths.array_of(x) for x in inputs)
        return len(noted) == 2 and noted[1] is not None and \
            scores.ndim == 2 and tags.dtype.kind == 'i'

    @staticmethod
    def settings(node):
        return node.ignore_label

    @staticmethod
    def whole(node, noted):
        scores = lengths.array_of(noted[0].packed)
        tags = lengths.array_of(noted[1].packed)
        dtype = scores.dtype
        hits = scores.argmax(axis=1) == tags
        if node.ignore_label is not None:
            valid = tags != node.ignore_label
            hits = hits & valid
        else:
            valid = numpy.ones_like(hits)
        correct, total = (_sums(a.astype(dtype), noted[0].lengths).array
                          for a in (hits, valid))
        return chainer.Variable(numpy.where(
            total > 0, correct / numpy.maximum(total, dtype.type(1)),
            dtype.type(0)).astype(dtype), requires_grad=False)


#: The element-wise functions :func:`element_wise` applies to the vectors
#: of items' values, by the name of their FunctionNode.
_ELEMENT_WISE = frozenset([
    'Add', 'Sub', 'Mul', 'Div', 'Maximum', 'Minimum', 'AddConstant',
    'MulConstant', 'SubFromConstant', 'DivFromConstant', 'PowVarConst',
    'Neg', 'Exp', 'Log', 'Sqrt', 'Square', 'Absolute', 'Tanh',
    'Sigmoid'])


def _sums(rows, item_lengths):
    """The Variable of the sums of each item's ``rows`` (its
    ``item_lengths`` of them, item after item): ``ReduceSegments``."""
    return array_ops.ReduceSegments('sum').apply((rows, item_lengths))[0]


#: The reductions of an item to one value :func:`reduced_item` computes
#: for all the items at once, by the name of their FunctionNode.
_REDUCERS = {'SoftmaxCrossEntropy': _SoftmaxCrossEntropy, 'Sum': _Sum,
             'Mean': _Mean, 'Accuracy': _Accuracy}
