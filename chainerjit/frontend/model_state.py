"""The model around a recording: its arrays bound to IR parameters and
viewed as traced while the forward runs, the Python state the forward
could change in place, and what the recording learns of its links'
parameters and attributes."""

import chainer
import numpy

from chainerjit.frontend import guards
from chainerjit.frontend import traced


def _model_arrays(instance):
    """Yields ``(path, owner, link)`` for each array a Link's forward may
    read: initialized parameters (owner: the Parameter), and persistent
    arrays, array attributes and Variable attributes such as ``L.LSTM``'s
    state (owner: the Variable, or the Link holding the array); ``link``
    holds it."""
    if not isinstance(instance, chainer.Link):
        return
    arrays = chainer.get_array_types()
    for link_path, link in instance.namedlinks():
        parts = tuple(p for p in link_path.split('/') if p)
        for name, value in sorted(vars(link).items()):
            if isinstance(value, chainer.Variable):
                if value._data[0] is not None:
                    yield parts + (name,), value, link
            elif isinstance(value, arrays):
                yield parts + (name,), link, link


def swap_model_arrays(instance, recorder, free_links=()):
    """Binds the model's arrays to IR params and views them as traced;
    also those of ``free_links``, ``(label, link)`` the forward names
    outside its model (a global model, a closure's), each read from the
    link holding it on every call (``('attribute', (link, name))``).
    Returns the list of restore actions (see :func:`restore_arrays`)."""
    restore = []
    found = [(path, owner, ('path', path))
             for path, owner, _ in _model_arrays(instance)]
    for label, root in free_links:
        found += [((label,) + path, owner, ('attribute', (link, path[-1])))
                  for path, owner, link in _model_arrays(root)]
    for path, owner, source in found:
        if isinstance(owner, chainer.Variable):
            array = owner._data[0]
        else:
            array = getattr(owner, path[-1])
        if source[0] == 'attribute' and id(array) in recorder.values:
            continue  # (the model's, or a link named twice)
        value = recorder.bind_param(array, '.'.join(path), source, owner)
        if type(array) is numpy.ndarray:
            view = array.view(traced.TracedArray)
            _set_model_array(owner, path[-1], view)
            restore.append((owner, path[-1], array, view))
            recorder.bind(view, value)  # and the original, once restored
            recorder.note_variable(owner, value)  # now holding the view
    return restore


def swap_generators(instance):
    """Puts a :class:`traced.RecordingGenerator` in place of each random
    generator a link holds, so that the forward's draws from it are
    recorded. Returns the restore actions (see :func:`restore_arrays`)."""
    restore = []
    if not isinstance(instance, chainer.Link):
        return restore
    for path, link in instance.namedlinks():
        for name, value in sorted(vars(link).items()):
            if isinstance(value, guards.GENERATORS):
                label = '.'.join(['self'] + [
                    part for part in path.split('/') if part] + [name])
                proxy = traced.RecordingGenerator(value, label)
                object.__setattr__(link, name, proxy)
                restore.append((link, name, value, proxy))
    return restore


def _set_model_array(owner, name, array):
    if isinstance(owner, chainer.Variable):
        owner._data[0] = array
    else:
        object.__setattr__(owner, name, array)


def restore_arrays(restore):
    """Undoes :func:`swap_model_arrays` (and the traced views of Variable
    arguments, ``arguments.traced_leaf``) where the forward did not assign
    a new array itself."""
    for owner, name, array, view in restore:
        if isinstance(owner, chainer.Variable):
            if owner._data[0] is view:
                owner._data[0] = array
        elif getattr(owner, name, None) is view:
            object.__setattr__(owner, name, array)


def python_state(instance):
    """What the forward could change in place without assigning: the
    contents of lists, dicts and sets held by links. (The random
    generators they hold are recorded: :func:`swap_generators`.)"""
    if not isinstance(instance, chainer.Link):
        return {}
    state = {}
    for _, link in instance.namedlinks():
        for name, value in vars(link).items():
            if type(value) in (list, dict, set):
                # (the plain objects in them: guards.plain_objects)
                state[id(link), name] = guards.snapshot(value,
                                                        objects=False)
    return state


def note_changed_python_state(instance, before, recorder):
    """An escape for each list, dict, set or random generator of the model
    that the forward changed in place (assignments are replayed)."""
    after = python_state(instance)
    assigned = set((id(target), name)
                   for kind, target, name, _ in recorder.effects
                   if kind == 'setattr')
    for key, old in before.items():
        if after.get(key) != old and key not in assigned:
            recorder.note_escape('changing the list, dict or set %r of a '
                                 'link in place' % key[1], None)


def adopt_lazy_params(instance, recorder):
    """Parameters initialized during the run (``L.Linear(None, n)``) were
    seen as free Parameter objects; give them their path in the model."""
    if not isinstance(instance, chainer.Link):
        return
    paths = {id(p): tuple(x for x in n.split('/') if x)
             for n, p in instance.namedparams()}
    for value in recorder.graph.params:
        kind, obj = value.data
        if kind == 'object' and id(obj) in paths:
            path = paths[id(obj)]
            value.data = ('path', path)
            value.name = '.'.join(path)


def names_named(recorder, codes_run):
    """The attribute names that code of the user's that ran while
    recording (``codes_run``, and the forward's own, with the lambdas it
    holds) names (``guards.names_read``)."""
    codes = set(codes_run)
    if recorder.top_code is not None:
        codes.add(recorder.top_code)
    return set().union(*[guards.names_read(code) for code in codes])


def unread_numbers(instance, recorder, named):
    """``{(link path, name)}`` of the link attributes holding numbers
    (``guards.is_scalar``: an iteration counter, a weight the training
    loop anneals) that the forward neither read nor assigned while
    recorded, and whose names are not ``named`` (:func:`names_named`:
    a read the recording cannot see, ``object.__getattribute__(self,
    'beta')``, ``copy.copy(self).beta``). A program does not depend on
    them."""
    if not isinstance(instance, chainer.Link):
        return frozenset()
    accessed = recorder.first_access
    return frozenset(
        (path or '/', name) for path, link in instance.namedlinks()
        if (id(link), '__dict__') not in accessed and  # (read through it)
        not guards.looks_up_its_own(link)
        for name, value in vars(link).items()
        if guards.is_scalar(value) and name not in named and
        (id(link), name) not in accessed)


def numbers_read_outside(instance, recorder):
    """Guards on the numbers the forward read off links outside the model
    (the model holding it, whose number a lambda in a
    ``chainer.Sequential`` reads; a link it names outside), whose state
    the model's does not hold."""
    inside = set(id(link) for link in instance.links()) \
        if isinstance(instance, chainer.Link) else set()
    found = []
    for (link_id, name), access in sorted(recorder.first_access.items()):
        link = recorder.links_read.get(link_id)
        if access != 'read' or link_id in inside or link is None:
            continue
        value = vars(link).get(name, guards.ABSENT)
        if guards.is_scalar(value):
            found.append(guards.number_of(link, name, value))
    return found


def written_first(instance, recorder):
    """``{(link path, name)}`` of the link attributes the forward assigned
    before reading them: their value before the call does not matter."""
    if not isinstance(instance, chainer.Link):
        return frozenset()
    paths = dict((id(link), path or '/') for path, link in
                 instance.namedlinks())
    return frozenset((paths[link_id], name) for (link_id, name), access
                     in recorder.first_access.items()
                     if access == 'write' and link_id in paths)
