"""Running a program without leaving a trace: NumPy's global generator,
the model arrays that the program's nodes update (batch normalization's
running averages) and the model attributes its effects assign (an
``L.LSTM``'s state), saved before and put back after, for the runs that
only check or time a program (a new length checked against eager, a
backend measured against another).

Only a program whose side effects these are (``structural.undoable``)
can be undone this way. A forward's eager run is undone by putting back
all its model's link attributes and persistent arrays too
(:class:`CallState`).
"""

import copy

import chainer
import numpy

from chainerjit import patching
from chainerjit.ops import structural


class Snapshot(object):
    """The state a run of ``graph``'s program on ``params`` (its
    parameters' arrays, in ``graph.params``' order) may change, as it is
    now, with the ``attributes`` (``(link, name)``) its effects assign;
    :meth:`restore` puts it back, as often as needed."""

    def __init__(self, graph, params, attributes=()):
        self.draws = numpy.random.get_state()
        self.updated = [(array, array.copy()) for array in [
            params[i] for i in structural.state_params(graph)] +
            structural.own_state(graph)]
        self.assigned = [(link, name, patching.own(link, name))
                         for link, name in attributes]

    def restore(self):
        numpy.random.set_state(self.draws)
        for array, saved in self.updated:
            array[...] = saved
        for link, name, held in reversed(self.assigned):
            patching.put_back(link, name, held)


class CallState(object):
    """What a run of a forward on ``model`` (and the ``links`` it names
    outside it, a global model) may change, as it is now: NumPy's global
    generator, and of every link of theirs its attributes (the lists,
    sets and dicts among them as they hold now), its parameters' arrays
    (``None`` where a lazy link is yet to initialize them) and its
    persistent arrays. A run that must not count (a joined call whose
    recording drew otherwise than eager would: :meth:`drew`) is undone by
    :meth:`restore` before the forward runs again."""

    def __init__(self, model, links=()):
        self.draws = numpy.random.get_state()
        found = {}
        for root in ([model] if isinstance(model, chainer.Link) else []) + \
                list(links):
            found.update((id(link), link) for link in root.links())
        self.attributes = [(link, dict(vars(link)))
                           for link in found.values()]
        held = [value for _, attributes in self.attributes
                for value in attributes.values()]
        self.containers = [(value, copy.copy(value)) for value in held
                           if type(value) in (list, set, dict)]
        self.params = [(value, value.array) for value in held
                       if isinstance(value, chainer.Parameter)]
        self.arrays = [(array, array.copy())
                       for _, attributes in self.attributes
                       for array in (attributes.get(name) for name in
                                     attributes.get('_persistent', ()))
                       if isinstance(array, numpy.ndarray)]

    def drew(self):
        """Has NumPy's global generator drawn since?"""
        now = numpy.random.get_state()
        return now[2:] != self.draws[2:] or \
            not numpy.array_equal(now[1], self.draws[1])

    def restore(self):
        numpy.random.set_state(self.draws)
        for array, saved in self.arrays:
            array[...] = saved
        for link, attributes in self.attributes:
            vars(link).clear()
            vars(link).update(attributes)
        for container, saved in self.containers:
            if type(container) is list:
                container[:] = saved
            else:
                container.clear()
                container.update(saved)
        for param, array in self.params:
            if param.array is not array:
                param.array = array  # (None: initialized again)
