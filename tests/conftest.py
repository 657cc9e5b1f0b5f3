import os

import numpy
import pytest

# The Hypothesis profiles of the fuzzer (tests/fuzz_tests/profiles.py).
from tests.fuzz_tests import profiles  # NOQA

# Verify the IR after every pass.
os.environ['CHAINERJIT_CHECKS'] = '1'
# The suite tests chainerjit's VM and kernels, bit for bit where they are:
# programs run there unless a test asks for another backend
# (runtime_tests/test_backends.py; the fuzzer's onnxruntime run).
os.environ.setdefault('CHAINERJIT_BACKEND', 'numpy')


def _has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason='needs CuPy and a GPU')
    inexact = pytest.mark.skip(reason='bit for bit only on the VM')
    for item in items:
        if 'gpu' in item.keywords and not HAS_GPU:
            item.add_marker(skip)
        if 'bit_exact' in item.keywords and \
                os.environ['CHAINERJIT_BACKEND'] != 'numpy':
            item.add_marker(inexact)


@pytest.fixture
def rng():
    return numpy.random.RandomState(0)


@pytest.fixture
def choose_soon(monkeypatch):
    """``backend='auto'`` chooses at an entry's third call (once its
    second has run), not after a tenth of a second of calls: the tests
    call a few times."""
    from chainerjit.runtime import backends
    monkeypatch.setattr(backends, 'CHOOSE_AFTER_SECONDS', 1e-12)
