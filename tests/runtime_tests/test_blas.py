"""OpenBLAS's kernels moved off a fallback onto those the CPU allows."""

import os

import numpy
import pytest

import chainerjit
from chainerjit.runtime import blas


class _FakeOpenBLAS(object):
    """Stands for a loaded OpenBLAS: chooses its kernels from
    ``OPENBLAS_CORETYPE`` when asked again, as the real one does."""

    def __init__(self, picked, knows=('Prescott', 'Haswell', 'SkylakeX')):
        self._name = '/lib/libopenblas.so'
        self.picked = self.core = picked
        self.knows = knows
        self.reloads = 0

    def gotoblas_corename(self):
        return self.core.encode()

    def gotoblas_dynamic_quit(self):
        self.core = None

    def gotoblas_dynamic_init(self):
        wanted = os.environ.get('OPENBLAS_CORETYPE')
        self.core = wanted if wanted in self.knows else self.picked
        self.reloads += 1


@pytest.fixture
def environment(monkeypatch):
    monkeypatch.delenv('OPENBLAS_CORETYPE', raising=False)
    monkeypatch.delenv(blas.SWITCH, raising=False)
    return monkeypatch


@pytest.mark.parametrize('features, kernels', [
    ({'AVX512_SKX': True, 'AVX2': True, 'FMA3': True}, 'SkylakeX'),
    ({'AVX512_SKX': False, 'AVX2': True, 'FMA3': True}, 'Haswell'),
    ({'AVX2': True, 'FMA3': False}, None),
    ({'SSE3': True}, None),
])
def test_kernels_follow_the_cpus_features(features, kernels):
    assert blas._kernels_allowed(features) == kernels


def test_a_fallback_is_replaced_and_the_environment_kept(environment):
    library = _FakeOpenBLAS('Prescott')
    found = blas._use(library, 'SkylakeX')
    assert found == blas.Kernels('/lib/libopenblas.so', 'Prescott',
                                 'SkylakeX')
    assert library.core == 'SkylakeX'
    assert 'OPENBLAS_CORETYPE' not in os.environ


@pytest.mark.parametrize('picked', ['Haswell', 'SkylakeX', 'Zen'])
def test_kernels_with_avx2_are_kept(environment, picked):
    library = _FakeOpenBLAS(picked)
    assert blas._use(library, 'SkylakeX').running == picked
    assert library.reloads == 0


def test_the_users_choice_is_kept(environment):
    environment.setenv('OPENBLAS_CORETYPE', 'Nehalem')
    library = _FakeOpenBLAS('Nehalem')
    assert blas._use(library, 'SkylakeX').running == 'Nehalem'
    environment.delenv('OPENBLAS_CORETYPE')
    environment.setenv(blas.SWITCH, 'keep')
    assert blas._use(library, 'SkylakeX').running == 'Nehalem'
    assert library.reloads == 0


def test_kernels_that_disagree_are_undone(environment):
    environment.setattr(blas, '_products_agree', lambda: False)
    library = _FakeOpenBLAS('Prescott')
    found = blas._use(library, 'SkylakeX')
    assert found.running == found.picked == 'Prescott'
    assert library.reloads == 2


def test_kernels_openblas_does_not_know_leave_its_pick(environment):
    library = _FakeOpenBLAS('Prescott', knows=('Prescott', 'Haswell'))
    assert blas._use(library, 'SkylakeX').running == 'Prescott'
    assert library.reloads == 2


def test_this_processs_openblas_runs_kernels_the_cpu_allows():
    """On a CPU with AVX2, no OpenBLAS loaded runs kernels without it once
    ``jit`` was used, and NumPy's products still agree with einsum's."""
    chainerjit.jit(lambda x: x)
    wanted = blas._kernels_allowed(blas._cpu_features())
    found = blas.use_cpu_kernels()
    if wanted is None or not found:
        pytest.skip('no OpenBLAS, or a CPU without AVX2')
    for kernels in found:
        if kernels.picked.lower() in blas.PRE_AVX2_CORES:
            assert kernels.running.lower() == wanted.lower(), kernels
    assert blas._products_agree()
    assert 'kernels' in blas.report()
    a = numpy.random.RandomState(1).rand(200, 300).astype('f')
    numpy.testing.assert_allclose(
        a.dot(a.T), numpy.einsum('ij,kj->ik', a, a, optimize=False),
        rtol=1e-4, atol=1e-3)
