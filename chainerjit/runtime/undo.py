"""Running a program without leaving a trace: NumPy's global generator
and the model arrays that the program's nodes update (batch
normalization's running averages), saved before and put back after, for
the runs that only check or time a program (a new length checked
against eager, a backend measured against another).

Only a program whose side effects these are (``structural.undoable``)
can be undone this way.
"""

import numpy

from chainerjit.ops import structural


class Snapshot(object):
    """The state a run of ``graph``'s program on ``params`` (its
    parameters' arrays, in ``graph.params``' order) may change, as it is
    now; :meth:`restore` puts it back, as often as needed."""

    def __init__(self, graph, params):
        self.draws = numpy.random.get_state()
        self.updated = [(params[i], params[i].copy())
                        for i in structural.state_params(graph)]

    def restore(self):
        numpy.random.set_state(self.draws)
        for array, saved in self.updated:
            array[...] = saved
