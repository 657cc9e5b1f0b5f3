"""Replacing an attribute of a class or module, and putting back what the
owner held itself: the one mechanism behind chainerjit's two tables of
patches (``fastpaths.PATCHES``, installed for good, and
``frontend.recording_patches.RECORDING_PATCHES``, in force while a forward
is recorded)."""

_ABSENT = object()


def replace(owner, name, replacement):
    """Sets ``owner.name`` to ``replacement``; returns what the owner's own
    ``__dict__`` held (a marker where the attribute was only inherited, or
    missing), for :func:`put_back`."""
    own = vars(owner).get(name, _ABSENT)
    setattr(owner, name, replacement)
    return own


def put_back(owner, name, own):
    """Undoes :func:`replace`: an attribute the owner only inherited is
    deleted again, so that lookups find the inherited one, as before."""
    if own is _ABSENT:
        delattr(owner, name)
    else:
        setattr(owner, name, own)
