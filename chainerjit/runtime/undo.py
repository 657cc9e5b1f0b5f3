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
    """What a run of a forward on ``model`` may change, as it is now:
    NumPy's global generator, and the attributes and persistent arrays of
    the model's links. A run that must not count (a joined call whose
    recording drew otherwise than eager would: :meth:`drew`) is undone by
    :meth:`restore` before the forward runs again."""

    def __init__(self, model):
        self.draws = numpy.random.get_state()
        links = list(model.links()) if isinstance(model, chainer.Link) \
            else []
        self.attributes = [(link, dict(vars(link))) for link in links]
        self.arrays = [(array, array.copy())
                       for _, held in self.attributes
                       for array in (held.get(name) for name in
                                     held.get('_persistent', ()))
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
        for link, held in self.attributes:
            vars(link).clear()
            vars(link).update(held)
