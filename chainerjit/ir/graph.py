"""The intermediate representation: a flat graph of ops over SSA values.

The specification, one bullet per kind of thing in a :class:`Graph`:

* A :class:`Value` is defined once. Its ``kind`` says where it comes from:
  ``'input'`` (an array argument of the call), ``'param'`` (a parameter or
  persistent array of the model, read on every call), ``'const'`` (an array
  created inside the forward that does not depend on any input) or
  ``'temp'`` (the output of a node). Every value has a ``shape`` and
  ``dtype``, as recorded.
* A :class:`Node` applies one op: ``op`` is the name printed (the Chainer
  ``FunctionNode`` label), ``kernel`` the callable the VM will run,
  ``inputs`` and ``outputs`` are values, ``attrs`` a sorted tuple of
  ``(name, value)`` pairs, ``generic`` says the kernel is the node's own
  ``forward`` rather than a lowering, and ``loc`` is the user's source
  line (``file:line``).
* ``Graph.outputs`` lists the values the program returns, in order.

The printed form (``str(graph)``), documented in ``docs/ir.md``::

    graph MLP.forward(x: f32[1,784]; l1.W: f32[100,784], l1.b: f32[100]):
      %0: f32[1,100] = LinearFunction(x, l1.W, l1.b)  # mlp.py:14
      %1: f32[1,100] = ReLU(%0)  # mlp.py:14
      return (%1)
"""

import os

import numpy


_DTYPE_ABBREV = {
    'float16': 'f16', 'float32': 'f32', 'float64': 'f64',
    'int8': 'i8', 'int16': 'i16', 'int32': 'i32', 'int64': 'i64',
    'uint8': 'u8', 'uint16': 'u16', 'uint32': 'u32', 'uint64': 'u64',
    'bool': 'b1',
}


def format_type(shape, dtype):
    """Formats a shape and dtype as ``f32[32,784]``."""
    name = numpy.dtype(dtype).name
    return '%s[%s]' % (_DTYPE_ABBREV.get(name, name),
                       ','.join(str(d) for d in shape))


class Value(object):
    """An SSA value: defined once, by an argument, a constant or a node."""

    __slots__ = ('kind', 'shape', 'dtype', 'name', 'data', 'symbols',
                 'symbol_terms', 'made_with', 'held')

    def __init__(self, kind, shape, dtype, name=None, data=None):
        self.kind = kind
        self.shape = tuple(shape)
        self.dtype = numpy.dtype(dtype)
        self.name = name
        self.data = data  # a constant's array; a param's source
        self.symbols = None  # {axis: 'T'}: dimensions that vary by call
        # {axis: ((term, its recorded size), ...)}: the symbols' terms of a
        # dimension that sums several ('W2+B'), as runtime.ragged names it
        self.symbol_terms = None
        # a constant the forward made with NumPy (numpy.full(s.shape,
        # -1e9)): the (leaf, axis) of the argument sizes it was given
        self.made_with = None
        # a constant whose array something outside the recording holds
        # (a link out of the program's reach, a global), which may change
        # it in place: the VM reads it as it is, a session would copy it
        self.held = False

    @property
    def type_str(self):
        if self.dtype == object:
            return 'list'
        shape = self.shape
        if self.symbols:
            shape = [self.symbols.get(i, d) for i, d in enumerate(shape)]
        return format_type(shape, self.dtype)

    def __repr__(self):
        return '<Value %s %s %s>' % (self.kind, self.name, self.type_str)


class Node(object):
    """One op applied to values, producing values."""

    __slots__ = ('op', 'kernel', 'inputs', 'outputs', 'attrs', 'generic',
                 'pure', 'loc', 'region', 'index', 'counters',
                 'forced_grads', 'input_attrs')

    def __init__(self, op, kernel, inputs, outputs, attrs=(), generic=False,
                 pure=True, loc=None):
        self.op = op
        self.kernel = kernel
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = tuple(sorted(attrs))
        self.generic = generic
        self.pure = pure
        self.loc = loc
        self.region = None  # a Loop node's regions.Region
        self.index = None  # an IndexAt's (index, positions of the counter)
        self.counters = ()  # its ((position, start, step), ...)
        # Positions of inputs whose gradients the backward computes even
        # where no gradient of the program needs them: a communicating
        # node's backward is a collective that every process runs.
        self.forced_grads = ()
        # Attributes of the recorded FunctionNode that it takes as inputs
        # (F.where's condition, running averages): the data flow compares
        # them, not their contents.
        self.input_attrs = ()

    @property
    def label(self):
        """The op name with its attributes, as printed."""
        parts = ['%s=%s' % (k, _format_attr(v)) for k, v in self.attrs]
        if self.generic:
            parts.insert(0, 'generic')
        if not parts:
            return self.op
        return '%s[%s]' % (self.op, ', '.join(parts))


def _format_attr(value):
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, numpy.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, numpy.generic):
        return numpy.dtype(value).name
    return str(value)


class Graph(object):
    """A recorded forward: arguments, constants, nodes and outputs.

    ``inputs`` are the array arguments in flattening order, ``params`` the
    model arrays read on every call, ``consts`` the constants; together
    they are the values live on entry.
    """

    def __init__(self, name='f'):
        self.name = name
        self.inputs = []
        self.params = []
        self.symbols = []  # ints that vary by call, such as a trip count
        self.consts = []
        self.nodes = []
        self.outputs = []
        self.templates = {}  # node -> the FunctionNode it recorded (or a
        # description), for passes that compare nodes
        self.for_training = False  # recorded with backprop enabled

    def add_value(self, kind, shape, dtype, name=None, data=None):
        value = Value(kind, shape, dtype, name, data)
        {'input': self.inputs, 'param': self.params, 'sym': self.symbols,
         'const': self.consts}.get(kind, []).append(value)
        return value

    def add_node(self, node):
        self.nodes.append(node)
        return node

    def read_instead(self, replacing):
        """Makes this level's nodes (a loop's body reads values of its own)
        and the outputs read ``replacing[v]`` wherever they read ``v``."""
        for node in self.nodes:
            node.inputs = [replacing.get(v, v) for v in node.inputs]
        self.outputs = [replacing.get(v, v) for v in self.outputs]

    def users(self):
        """``{value: [nodes reading it]}`` at this level (a loop body's
        reads show as the Loop node's); ``None`` stands for the graph's
        outputs."""
        found = {}
        for node in self.nodes:
            for value in node.inputs:
                found.setdefault(value, []).append(node)
        for value in self.outputs:
            found.setdefault(value, []).append(None)
        return found

    def all_consts(self):
        """The constants of this graph and of its loop bodies."""
        found = list(self.consts)
        for node in self.nodes:
            if node.region is not None:
                found += [c for c in node.region.body.all_consts()
                          if c not in found]
        return found

    def value_names(self, temp_format='%%%d'):
        """Names every value for printing: arguments by their own name,
        constants ``c0, c1, ...`` and node outputs ``%0, %1, ...`` (in
        ``temp_format``) in order of definition, loop bodies included."""
        names = {}
        for value in self.inputs + self.params + self.symbols:
            names[value] = value.name
        for i, value in enumerate(self.all_consts()):
            names[value] = 'c%d' % i
        counter = [0]

        def name_nodes(nodes):
            for node in nodes:
                if node.region is not None:
                    body = node.region.body
                    for j, value in enumerate(body.inputs):
                        names[value] = 'i' if j == 0 else temp_format % (
                            counter[0])
                        counter[0] += j > 0
                    name_nodes(body.nodes)
                for value in node.outputs:
                    names[value] = temp_format % counter[0]
                    counter[0] += 1
        name_nodes(self.nodes)
        return names

    def __str__(self):
        names = self.value_names()

        def binders(values):
            return ', '.join('%s: %s' % (names[v], v.type_str)
                             for v in values)
        symbols = '; ' + binders(self.symbols) if self.symbols else ''
        lines = ['graph %s(%s; %s%s):' % (self.name, binders(self.inputs),
                                          binders(self.params), symbols)]
        for value in self.consts:
            lines.append('  %s: %s = const' % (names[value], value.type_str))
        _print_nodes(self.nodes, names, '  ', lines)
        lines.append('  return (%s)' % ', '.join(
            names[v] for v in self.outputs))
        return '\n'.join(lines)

    def verify(self):
        """Checks the graph against the specification above.

        * Definitions: every value is defined once, before it is used; a
          loop body reads only its own inputs and the constants.
        * Types: every value has a ``kind`` of those listed above, a
          ``shape`` that is a tuple of non-negative ints, ``symbols``
          (``None`` or ``{axis: name}`` for axes of that shape) and a
          ``numpy.dtype``.
        * Region arity: a node with a region (a ``Loop``) takes the trip
          count, the initial values of the carried values its body reads,
          then the invariants, one per body input after the counter and
          those carried values; it returns the carried values, the count
          of iterations run if the region ``counts``, then the scan
          lists; its body returns the carried values' next values, then
          the scan values. The trip count and the counter are integer
          scalars.

        Raises:
            AssertionError: naming the first offending node (or value),
                with the whole graph printed.
        """
        entry = self.inputs + self.params + self.symbols + self.all_consts()
        for value in entry:
            self._verify_type(value, _entry_role(self, value))
        defined = set(entry)
        self._verify_nodes(self.nodes, defined, set())
        for value in self.outputs:
            if value not in defined:
                self._fail('the graph returns an undefined value')

    def _verify_nodes(self, nodes, defined, everywhere):
        for node in nodes:
            for value in node.inputs:
                if value not in defined:
                    self._fail('%s uses an undefined value' % _where(node))
            if node.region is not None:
                self._verify_region(node)
                body = node.region.body
                for value in body.inputs:
                    self._verify_type(value, 'an input of the body of %s'
                                      % _where(node))
                inner = set(body.inputs) | set(self.all_consts())
                self._verify_nodes(body.nodes, inner, everywhere)
                for value in body.outputs:
                    if value not in inner:
                        self._fail('the body of %s returns an undefined '
                                   'value' % _where(node))
            for value in node.outputs:
                if value in everywhere:
                    self._fail('%s redefines a value' % _where(node))
                self._verify_type(value, 'an output of %s' % _where(node))
                defined.add(value)
                everywhere.add(value)

    def _verify_type(self, value, role):
        """A value's kind, shape, symbolic axes and dtype."""
        if not isinstance(value, Value):
            self._fail('%s is %r, not a Value' % (role, value))
        if value.kind not in _KINDS:
            self._fail('%s has kind %r, not one of %s' % (
                role, value.kind, ', '.join(_KINDS)))
        shape = value.shape
        if not isinstance(shape, tuple) or not all(
                isinstance(d, (int, numpy.integer)) and
                not isinstance(d, bool) and d >= 0 for d in shape):
            self._fail('%s has shape %r, not a tuple of non-negative ints'
                       % (role, shape))
        if value.symbols is not None and not (
                isinstance(value.symbols, dict) and all(
                    isinstance(axis, int) and 0 <= axis < len(shape) and
                    isinstance(name, str)
                    for axis, name in value.symbols.items())):
            self._fail('%s has symbolic axes %r, not {axis: name} for '
                       'axes of its shape %r' % (role, value.symbols, shape))
        if not isinstance(value.dtype, numpy.dtype):
            self._fail('%s has dtype %r, not a numpy.dtype'
                       % (role, value.dtype))

    def _verify_region(self, node):
        """A Loop node's inputs and outputs against its region's layout
        (``regions.Region``)."""
        region = node.region
        body = region.body
        n_read = sum(1 for read in region.carried_read if read)
        n_invariants = len(body.inputs) - 1 - n_read
        if n_invariants < 0:
            self._fail(
                '%s: its body takes %d inputs, fewer than the counter and '
                'the %d carried values it reads' % (
                    _where(node), len(body.inputs), n_read))
        if len(node.inputs) != len(body.inputs):
            self._fail(
                '%s takes %d inputs, but its region needs %d: the trip '
                'count, %d carried initial values and %d invariants (one '
                'per body input)' % (
                    _where(node), len(node.inputs), len(body.inputs),
                    n_read, n_invariants))
        n_carried, counts = region.n_carried, int(bool(region.counts))
        expected = n_carried + counts + region.n_scans
        if len(node.outputs) != expected:
            self._fail(
                '%s returns %d values, but its region returns %d: %d '
                'carried values, %d counts of iterations and %d scan '
                'lists' % (_where(node), len(node.outputs), expected,
                           n_carried, counts, region.n_scans))
        if len(body.outputs) != n_carried + region.n_scans:
            self._fail(
                'the body of %s returns %d values, but its region needs '
                '%d: %d next carried values and %d scan values' % (
                    _where(node), len(body.outputs),
                    n_carried + region.n_scans, n_carried, region.n_scans))
        for value, what in ((node.inputs[0], 'trip count'),
                            (body.inputs[0], 'counter')):
            if not isinstance(value, Value) or value.shape != () or \
                    not isinstance(value.dtype, numpy.dtype) or \
                    value.dtype.kind not in 'iu':
                self._fail('%s: its %s is %r, not an integer scalar'
                           % (_where(node), what, value))

    def _fail(self, message):
        try:
            text = str(self)
        except Exception as e:  # a value too broken to print
            text = '(the graph cannot be printed: %s: %s)' % (
                type(e).__name__, e)
        raise AssertionError('IR verification failed: %s\n%s'
                             % (message, text))


_KINDS = ('input', 'param', 'sym', 'const', 'temp')


def _entry_role(graph, value):
    """How a value live on entry is named in a verification error."""
    if value in graph.inputs:
        return 'input %s' % value.name
    if value in graph.params:
        return 'parameter %s' % value.name
    if value in graph.symbols:
        return 'symbol %s' % value.name
    return 'a constant'


def _where(node):
    """A node as a verification error names it: its label and line."""
    if node.loc:
        return '%s (%s)' % (node.label, format_loc(node.loc))
    return node.label


def _print_nodes(nodes, names, indent, lines):
    for node in nodes:
        lhs = ', '.join('%s: %s' % (names[v], v.type_str)
                        for v in node.outputs)
        rhs = '%s(%s)' % (node.label,
                          ', '.join(names[v] for v in node.inputs))
        line = '%s%s%s' % (indent, lhs + ' = ' if lhs else '', rhs)
        if node.loc:
            line += '  # %s' % format_loc(node.loc)
        lines.append(line)
        if node.region is not None:
            _print_region(node.region, names, indent + '    ', lines)


def _print_region(region, names, indent, lines):
    """``body (i; carried; invariants) -> (next values; scans):``"""
    body = region.body
    n_read = sum(region.carried_read)
    ins = [names[v] for v in body.inputs]
    outs = [names[v] for v in body.outputs]
    n_next = region.n_carried
    lines.append('%sbody (i; %s; %s) -> (%s; %s):' % (
        indent, ', '.join(ins[1:1 + n_read]), ', '.join(ins[1 + n_read:]),
        ', '.join(outs[:n_next]), ', '.join(outs[n_next:])))
    _print_nodes(body.nodes, names, indent + '  ', lines)


def format_loc(loc):
    """Formats a ``(filename, lineno)`` pair as ``file.py:12``."""
    filename, lineno = loc
    return '%s:%d' % (os.path.basename(filename), lineno)
