"""Shallow copies of a link keep their own jitted forward.

``model.forward = chainerjit.jit(model.forward)`` stores, in the model's
``__dict__``, a jitted function bound to that model. A shallow copy
(``copy.copy(model)``, and so Chainer's ``model.copy()``, whose default
``mode='share'`` every evaluation-copy idiom uses) copies the dictionary,
so without this the copy's calls would run the original model's forward,
its parameters and its state. Installed, ``Link.__copy__`` copies as
Python's ``copy.copy`` does, then binds each such jitted function anew to
the copy (a function of its own, with its own cache). Deep copies and
pickles rebuild the function for the new model already
(``JitFunction.__reduce__``).
"""

import copy

from chainerjit.runtime import _calls


def copy_link(link):
    """``chainer.Link.__copy__``: ``copy.copy``'s shallow copy, with the
    jitted functions bound to ``link`` bound to the copy instead."""
    new = copy._reconstruct(link, None, *link.__reduce_ex__(4))
    state = vars(new)
    for name, value in list(state.items()):
        if isinstance(value, _calls.CachedCall) and value.bound_to(link):
            state[name] = value.rebound(new)
    return new
