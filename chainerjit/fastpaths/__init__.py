"""Every patch chainerjit makes to Chainer, in one table.

Each :class:`Patch` replaces one attribute of a Chainer class with a fast
path that gives the same results where a jitted forward is involved and
calls Chainer's own code everywhere else. They are installed the first
time :func:`chainerjit.jit` is used (importing a module of chainerjit
patches nothing); :func:`uninstall` puts Chainer's own attributes back.

==============  ==========================  ============================
group           what it replaces            off with
==============  ==========================  ============================
``watch``       ``Link.__setattr__``, ...   (always on: cache guards)
``copies``      ``Link.__copy__``           (always on: copies rebind)
``link_call``   ``Link.__call__``           ``CHAINERJIT_FAST_CALL=0``
``backprop``    ``Variable.backward``       ``CHAINERJIT_FAST_BACKWARD=0``
``losses``      the losses' ``apply``, ...  ``CHAINERJIT_FAST_LOSS=0``
``optimizers``  ``GradientMethod.update``   ``CHAINERJIT_FAST_UPDATE=0``
==============  ==========================  ============================

The recorder's patches, in force only while a forward is recorded, are
the second table: ``frontend.recording_patches.RECORDING_PATCHES``.
"""

import collections
import os

import chainer
from chainer.functions.evaluation import accuracy
from chainer.functions.loss import mean_squared_error
from chainer.functions.loss import softmax_cross_entropy
from chainer import optimizer as optimizer_module

from chainerjit import patching
from chainerjit.fastpaths import backprop
from chainerjit.fastpaths import copies
from chainerjit.fastpaths import link_call
from chainerjit.fastpaths import losses
from chainerjit.fastpaths import optimizers
from chainerjit.frontend import epochs

_SoftmaxCrossEntropy = softmax_cross_entropy.SoftmaxCrossEntropy
_MeanSquaredError = mean_squared_error.MeanSquaredError


class Patch(collections.namedtuple('Patch', 'group owner name make')):
    """``owner.name`` becomes ``make(original)`` while the patch is
    installed (``original`` is ``None`` where the owner has no such
    attribute); ``group`` names the switch that turns it off."""


def _is(replacement):
    return lambda original: replacement


PATCHES = (
    Patch('watch', chainer.Link, '__setattr__',
          epochs.watching_assignments),
    Patch('watch', chainer.Link, '__delattr__', epochs.watching),
    Patch('watch', chainer.Link, 'add_hook', epochs.watching),
    Patch('watch', chainer.Link, 'delete_hook', epochs.watching),
    Patch('watch', chainer.ChainList, 'add_link', epochs.watching),
) + tuple(
    # (they write the links' __dict__ themselves: a checkpoint loaded,
    # a target network's numbers copied, arrays moved to a device)
    Patch('watch', chainer.Link, name, epochs.watching)
    for name in ('serialize', 'copyparams', 'add_persistent',
                 'device_resident_accept')) + tuple(
    # (append, extend, pop and remove go through these)
    Patch('watch', owner, name, epochs.watching)
    for owner in (chainer.ChainList, chainer.Sequential)
    for name in ('__setitem__', '__delitem__', 'insert')) + (
    Patch('copies', chainer.Link, '__copy__', _is(copies.copy_link)),
    Patch('link_call', chainer.Link, '__call__', _is(link_call.call)),
    Patch('backprop', chainer.Variable, 'backward', _is(backprop.backward)),
    Patch('losses', _SoftmaxCrossEntropy, 'apply', _is(losses.apply)),
    Patch('losses', _MeanSquaredError, 'apply', _is(losses.apply)),
    Patch('losses', accuracy.Accuracy, 'apply', _is(losses.apply)),
    Patch('losses', _SoftmaxCrossEntropy, 'forward_cpu',
          _is(losses.forward_cpu)),
    Patch('losses', _SoftmaxCrossEntropy, 'backward', _is(losses.backward)),
    Patch('losses', _MeanSquaredError, 'backward',
          _is(losses.mse_backward)),
    Patch('optimizers', optimizer_module.GradientMethod, 'update',
          _is(optimizers.update)),
)

#: The environment variable that keeps Chainer's own code, by group.
SWITCHES = {
    'link_call': 'CHAINERJIT_FAST_CALL',
    'backprop': 'CHAINERJIT_FAST_BACKWARD',
    'losses': 'CHAINERJIT_FAST_LOSS',
    'optimizers': 'CHAINERJIT_FAST_UPDATE',
}

_saved = {}  # patch -> what the owner's own __dict__ held before


def _switched_on(group):
    switch = SWITCHES.get(group)
    return switch is None or os.environ.get(switch, '1') != '0'


def _selected(groups):
    unknown = set(groups) - set(p.group for p in PATCHES)
    if unknown:
        raise ValueError('no fast path group %s' % ', '.join(sorted(unknown)))
    return [p for p in PATCHES if not groups or p.group in groups]


def install(*groups):
    """Installs the patches of ``groups`` (all by default) whose switch
    is on; those installed already stay as they are."""
    for patch in _selected(groups):
        if patch in _saved or not _switched_on(patch.group):
            continue
        original = getattr(patch.owner, patch.name, None)  # None: absent
        _saved[patch] = patching.replace(patch.owner, patch.name,
                                         patch.make(original))


def uninstall(*groups):
    """Puts back Chainer's own attributes for ``groups`` (all by
    default)."""
    for patch in reversed(_selected(groups)):
        if patch not in _saved:
            continue
        patching.put_back(patch.owner, patch.name, _saved.pop(patch))


def installed(*groups):
    """The installed patches of ``groups`` (all by default)."""
    return [p for p in _selected(groups) if p in _saved]
