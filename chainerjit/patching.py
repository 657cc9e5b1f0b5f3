"""Replacing an attribute of a class or module, and putting back what the
owner held itself: the one mechanism behind chainerjit's two tables of
patches (``fastpaths.PATCHES``, installed for good, and
``frontend.recording_patches.RECORDING_PATCHES``, in force while a forward
is recorded), and behind the model attributes a program that only checks
assigned, put back (``runtime.undo``)."""

_ABSENT = object()


def own(owner, name):
    """What the owner's own ``__dict__`` holds for ``name`` (a marker
    where the attribute is only inherited, or missing), for
    :func:`put_back`."""
    return vars(owner).get(name, _ABSENT)


def replace(owner, name, replacement):
    """Sets ``owner.name`` to ``replacement``; returns what the owner held
    itself (:func:`own`), for :func:`put_back`."""
    held = own(owner, name)
    setattr(owner, name, replacement)
    return held


def put_back(owner, name, held):
    """Undoes :func:`replace` (or any setting since :func:`own`): an
    attribute the owner only inherited is deleted again, so that lookups
    find the inherited one, as before."""
    if held is not _ABSENT:
        setattr(owner, name, held)
    elif name in vars(owner):
        delattr(owner, name)
