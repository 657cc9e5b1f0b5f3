"""Counts of the changes made to models' links.

A compiled program assumes things of the links it reads (their tree,
their parameters, their Python scalars); comparing them on every call
would cost more than a small program's run. Instead each link of a
model the cache checked is *watched*: assigning one of its attributes
(``link.W = ...``, a link added, a hook) moves the count of each watched
model holding it, its *epoch*, and a model is compared again only when
its epoch moved. A second count moves for every change but a number
assigned over a number (``model.iteration = i``): where only the first
moved, the links and parameters are where they were, and an entry
compares only the numbers it guards.
"""

import weakref

import chainer
import numpy

#: What a number over a number is (the scalars ``guards.is_scalar`` names
#: but tuples).
NUMBERS = (type(None), bool, int, float, str, numpy.generic)

_ABSENT = object()


#: Each watched model's epoch: counts in a list, ``[every change, every
#: change but a number over a number]`` (the hit path reads them in C),
#: that move when one of the model's links is assigned to. An entry
#: compares its model again only when its model's count moved since the
#: entry checked it; a change to another model (the discriminator of a
#: GAN, the decoder beside an encoder, another copy of the model) leaves
#: it alone.
_epochs = weakref.WeakKeyDictionary()

#: Each link of a model an entry checked (``Entry.fetch_params``), to the
#: epochs of the watched models holding it: only a change to one of them
#: can fail a model check, so only those move a count. (Assignments to
#: other links, such as an ``L.Classifier`` around a jitted predictor
#: setting ``self.y`` on each call, leave the hit path alone.) A link
#: added to a watched model is assigned to one of its links, which moves
#: the count; the model check that follows watches it too.
_watched = weakref.WeakKeyDictionary()

#: The epoch of an entry not checked yet, or of a forward without a
#: model: it never moves.
UNWATCHED = [0, 0]


def model_epoch(instance):
    """The epoch (``[count]``) of ``instance``, its links watched the
    first time; :data:`UNWATCHED` for anything but a link."""
    if not isinstance(instance, chainer.Link):
        return UNWATCHED
    epoch = _epochs.get(instance)
    if epoch is None:
        epoch = _epochs[instance] = [1, 1]
        watch_model(instance)
    return epoch


def watch_model(instance):
    """Watches the links of ``instance`` (see :data:`_watched`), those
    added since it was last watched too; nothing for anything but a
    link."""
    if not isinstance(instance, chainer.Link):
        return
    epoch = model_epoch(instance)
    for link in instance.links():
        epochs = _watched.setdefault(link, [])
        if not any(e is epoch for e in epochs):
            epochs.append(epoch)


def watching(method):
    """``method`` that first counts a change of a watched link (the
    ``watch`` patches of ``chainerjit.fastpaths``)."""
    def watched(self, *args, **kwargs):
        epochs = _watched.get(self)
        if epochs:
            for epoch in epochs:
                epoch[0] += 1
                epoch[1] += 1
        return method(self, *args, **kwargs)
    return _as(watched, method)


def watching_assignments(setattr_):
    """``Link.__setattr__`` that first counts a change of a watched link,
    the second count too unless it assigns a number over a number."""
    def watched(self, name, value):
        epochs = _watched.get(self)
        if epochs:
            # (not through a recording's Link.__getattribute__)
            old = object.__getattribute__(self, '__dict__').get(name, _ABSENT)
            moved = not (isinstance(old, NUMBERS) and
                         isinstance(value, NUMBERS))
            for epoch in epochs:
                epoch[0] += 1
                epoch[1] += moved
        return setattr_(self, name, value)
    return _as(watched, setattr_)


def _as(watched, method):
    watched.__name__ = method.__name__
    watched.__doc__ = method.__doc__
    watched.__wrapped__ = method
    return watched


def model_epoch_if_watched(instance):
    """The epoch of ``instance`` if it is a watched model, else None."""
    return _epochs.get(instance) if isinstance(instance, chainer.Link) \
        else None
