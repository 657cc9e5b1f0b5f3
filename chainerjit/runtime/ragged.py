"""Lists of sequences of any lengths: one program for every length of the
items of a list argument.

A list of arrays that differ only in their first axis (a batch of
sentences as ``L.NStepLSTM`` takes it, token ids as ``L.EmbedID`` takes
them) is recorded item by item, each item an input of its own. Their
lengths rarely repeat together, so a key holding each length would
compile on nearly every call. An entry instead serves any lengths
(:class:`Ragged`: its key shows ``L`` for them, its signature ``L0``,
``L1``, ... by leaf) where:

* the forward's Python did not use an item's length (``len(x)``, a
  comparison, an array made with it: ``frontend.lengths``);
* every node that reads an item, or a value whose rows follow an item's
  length, has a kernel that reads that length from its arrays, in its
  forward and its gradient (``Kernel.lengths``: a lookup, a linear layer,
  a join or a cut of the rows, a loss, dropout, the N-step RNN links),
  and names the rows of its outputs (``ops.Rows``);
* the program has no side effects but draws from NumPy's generator;
* the program runs on the VM, without buffers of the arena.

The number of items stays in the key, and so does a length under
:data:`MIN_LENGTH` (a single row broadcasts where several do not).
The first calls at other lengths run the program and eagerly, and
compare (as trip counts are checked, ``api``), until each item has had
another length; on a difference the function keeps lengths in the key.
"""

import collections

from chainerjit import errors
from chainerjit import ops
from chainerjit.ir import regions
from chainerjit.frontend import lengths
from chainerjit.frontend import signature

#: The symbol of the items' lengths in keys and signatures.
SYMBOL = 'L'

#: Items shorter than this keep their length in the key.
MIN_LENGTH = 2

#: The most calls at other lengths checked against eager.
CHECKED_CALLS = 8


def derived_sizes(sizes):
    """``(longest, total)`` of items' lengths ``sizes``: sizes no key holds
    (a block padded to the longest has that width, the items joined that
    many rows), which the forward's Python may read and bake in."""
    return (max(sizes), sum(sizes)) if sizes else ()


class Ragged(collections.namedtuple('Ragged',
                                    'leaves recorded ties reads_shapes',
                                    defaults=((), False))):
    """How an entry that serves any lengths of the items of its list
    arguments reads a call's key: ``leaves`` are the indexes of those
    items, ``recorded`` their lengths when recorded; ``ties``: ``(leaf,
    leaf it is as long as)`` for the items of a list as long as another's,
    item by item (a tagger's labels and its sentences), whose lengths a
    call must give alike too; ``reads_shapes``: the forward's Python read
    the shape of a value computed from the items (``F.pad_sequence(ys)``'s
    width, ``F.concat(xs)``'s words), a size that other lengths may give
    again (the same longest, the same total)."""

    __slots__ = ()

    def to_check(self, key, checked, symbols=()):
        """The call's lengths, if it is to be checked against eager: until
        every item has had another length than its recorded one in a call
        ``checked`` (a cut at a fixed offset that the recorded lengths
        happened to meet shows then), or, where it :attr:`reads_shapes`,
        at each new lengths; at most :data:`CHECKED_CALLS`; and where it
        reads shapes, at new lengths of the longest item or new totals
        (:func:`derived_sizes`, ``lengths.to_check_sizes``: sentences clipped
        to a length may keep them the same over many calls); else
        ``None``."""
        sizes = self.checked_at(key)
        if sizes in checked:
            return None
        if self.reads_shapes and lengths.to_check_sizes(
                derived_sizes(sizes),
                [derived_sizes(c) for c in checked if c]):
            return sizes
        if len(checked) > CHECKED_CALLS or not self.reads_shapes and all(
                any(c[k] != n for c in checked)
                for k, n in enumerate(self.recorded)):
            return None
        return sizes

    def checked_at(self, key):
        """How a call's sizes are noted when checked against eager: the
        items' lengths in ``key`` (the recorded ones for ``None``)."""
        return self.recorded if key is None else self.lengths_of(key)

    def generalize(self, key):
        """``(the key with the items' lengths as 'L', [])``, or ``None``
        where an item is too short, or is not an array."""
        specs = list(key[3])
        for leaf, other in self.ties:
            if max(leaf, other) >= len(specs) or \
                    not signature.is_array_spec(specs[leaf]) or \
                    not signature.is_array_spec(specs[other]) or \
                    specs[leaf][0][:1] != specs[other][0][:1]:
                return None
        for leaf in self.leaves:
            if leaf >= len(specs):
                return None
            spec = specs[leaf]
            if not signature.is_array_spec(spec) or not spec[0] or \
                    type(spec[0][0]) is not int or spec[0][0] < MIN_LENGTH:
                return None
            specs[leaf] = ((SYMBOL,) + tuple(spec[0][1:]),) + \
                tuple(spec[1:])
        return key[:3] + (tuple(specs),) + key[4:], []

    def lengths_of(self, key):
        """The items' lengths in a call's key."""
        return tuple(key[3][leaf][0][0] for leaf in self.leaves)

    def signature_of(self, sig):
        """``sig`` with each item's length shown as ``L`` and its leaf's
        index (``xs[0]: i32[L0]``), as the printed IR names it."""
        tied = dict(self.ties)
        for leaf in self.leaves:
            sig = sig.with_symbols([(leaf, (0,))], symbol=str(
                ops.Rows.of_item(tied.get(leaf, leaf), 0)))
        return sig


def tied_items(sig, lists):
    """``(leaf, leaf it is as long as)`` for the items of each list of
    ``lists`` (``{list name: [leaf, ...]}``, :func:`ragged_items`) as
    long as another's, item by item, in the call ``sig``: the labels of a
    tagger's sentences, tied to the sentences (the list given first)."""
    def lengths(leaves):
        return [sig.items[leaf][1].shape[0] for leaf in leaves]
    ties, anchors = [], []
    for name in sorted(lists, key=lambda name: min(lists[name])):
        leaves = lists[name]
        anchor = next((a for a in anchors if lengths(a) == lengths(leaves)),
                      None)
        if anchor is None:
            anchors.append(leaves)
        else:
            ties.extend(zip(leaves, anchor))
    return tuple(ties)


def ragged_items(sig, n_leaves):
    """The leaves that are items of a list argument whose items are
    arrays alike but for their first axis, of at least two lengths, all
    :data:`MIN_LENGTH` or more: ``{list name: [leaf, ...]}``."""
    found = {}
    for base, leaves in items_by_list(sig, range(n_leaves)).items():
        specs = [sig.items[leaf][1] for leaf in leaves]
        if all(_alike_but_length(specs[0], s) for s in specs) and \
                len(set(s.shape[0] for s in specs)) > 1 and \
                min(s.shape[0] for s in specs) >= MIN_LENGTH:
            found[base] = leaves
    return found


def items_by_list(sig, leaves):
    """``{list name: [leaf, ...]}`` of those ``leaves`` of a signature that
    are arrays in a list argument (named ``xs[3]``)."""
    lists = collections.defaultdict(list)
    for leaf in leaves:
        name, spec = sig.items[leaf]
        base = list_of(name)
        if base is not None and isinstance(spec, signature.ArraySpec):
            lists[base].append(leaf)
    return lists


def list_of(name):
    """``'xs'`` for an item name ``'xs[3]'``, else ``None``."""
    base, bracket, rest = name.rpartition('[')
    if bracket and rest.endswith(']') and rest[:-1].isdigit():
        return base
    return None


def _alike_but_length(a, b):
    return len(a.shape) == len(b.shape) >= 1 and \
        a.shape[1:] == b.shape[1:] and a[1:] == b[1:]


def why_fixed(graph, seeds, uses, names, label=str, size='length'):
    """Why the program of ``graph`` cannot run at other numbers of rows of
    the inputs ``seeds`` (``{leaf: ops.Rows of its first axis}``): a line
    naming the use, or the node, and its line; or ``None``. Then the nodes
    run the kernels their rules name for any numbers of rows, and the
    values whose rows follow the inputs show ``label(rows)`` in the
    printed IR. ``uses`` are the recording's ``lengths.Use``; ``names``
    the leaves' names; ``size`` what the rows' number is, in the line."""
    seeded = [use for use in uses if any(
        leaf in seeds and axis == seeds[leaf].axis
        for leaf, axis in use.origins)]
    for use in seeded:
        if use.rows_of is None:
            return use.describe(names)
    rows = {graph.inputs[leaf]: r for leaf, r in seeds.items()}
    variants = {}
    why = _follow(graph.nodes, rows, variants, names, size)
    if why is not None:
        return why
    for use in seeded:
        # A size a reshape infers from its input's rows (``Use.rows_of``)
        # is its kernel's to read, where the rows reached that node.
        if not any(v in rows for v in use.rows_of.outputs):
            return use.describe(names)
    axes = dict((leaf, r.axis) for leaf, r in seeds.items())
    for node, following in variants.items():
        ops.take_following(node, following, graph.inputs, axes)
    for value, r in rows.items():  # (a trip count's kept)
        value.symbols = dict(value.symbols or {})
        for axis in r.axes:
            value.symbols[axis] = _named(value, r.on_axes([axis]), label)
    return None


def _named(value, rows, label):
    """How the printed IR names the axis of ``value`` that has ``rows``:
    ``label(rows)``, or, where another axis's symbols named it already
    (``ys[0]: i32[W2]`` framed by a row for each of ``B`` items), the sum
    of both, ``W2+B``, and what is fixed."""
    if rows.widest or rows.axis >= len(value.shape):  # (a list's rows)
        return label(rows)
    items = ops.Rows(tuple(p for p in rows.parts if p[0] is not None),
                     rows.axis)
    term = (label(items), sum(n for _, n in items.parts))
    terms = dict(value.symbol_terms or {})
    named = tuple(t for t in terms.get(rows.axis, ()) if t[0] != term[0])
    terms[rows.axis] = named + (term,)
    value.symbol_terms = terms
    if not named:
        return label(rows)
    fixed = value.shape[rows.axis] - sum(n for _, n in terms[rows.axis])
    return ops.sum_label([t for t, _ in terms[rows.axis]]) + (
        '%+d' % fixed if fixed else '')


def _follow(nodes, rows, variants, names, size, in_loop=False):
    """Follows ``rows`` (``{value: ops.Rows}``) through ``nodes`` by their
    kernels' rules, and into loops' bodies, noting in ``variants`` the
    kernels to run instead; why a node cannot take other rows, or
    ``None``."""
    for node in nodes:
        found = [rows.get(v) for v in node.inputs]
        if all(r is None for r in found):
            continue
        if node.region is not None:
            why = _follow_loop(node, found, rows, variants, names, size)
            if why is not None:
                return why
            continue
        following = ops.follow(node, found)
        if following is None or (in_loop and following.reads):
            return '%s read by %s%s, which is compiled for its recorded ' \
                '%s' % (_read(found, node, names), node.label,
                        at(node.loc), size)
        for value, r in zip(node.outputs, following.outputs):
            if r is not None:
                rows[value] = r
        if following.kernel is not None:
            variants[node] = following
    return None


def _follow_loop(node, found, rows, variants, names, size):
    """:func:`_follow` through a loop region's body
    (``regions.Region.follow_rows``)."""
    region = node.region
    why = region.follow_rows(node, found, rows, lambda nodes: _follow(
        nodes, rows, variants, names, size, in_loop=True))
    if why == regions.CARRIED_OTHERWISE:
        return 'a value the loop%s carries from step to step gets ' \
            'rows that follow the %s at its first step, or loses them' \
            % (at(region.loc), size)
    if why == regions.ROWS_OF_ITS_OWN:
        return 'a list of the steps of the loop%s has rows of its own ' \
            'and of the %s, in its steps' % (at(region.loc), size)
    return why


def _read(found, node, names):
    """The item a node reads: ``'xs[2]'`` or ``'a value computed from
    xs[2]'``."""
    for value, r in zip(node.inputs, found):
        if r is not None:
            if value.kind == 'input':
                return value.name or names[r.first_leaf]
            return 'a value computed from %s' % names[r.first_leaf]
    return 'an item'


def at(loc):
    """``' at model.py:12'``, or ``''`` for no line."""
    return '' if loc is None else ' at ' + errors.short_location(loc)
