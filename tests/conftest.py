import os

import numpy
import pytest

# The Hypothesis profiles of the fuzzer (tests/fuzz_tests/profiles.py).
from tests.fuzz_tests import profiles  # NOQA

# Verify the IR after every pass.
os.environ['CHAINERJIT_CHECKS'] = '1'


def _has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason='needs CuPy and a GPU')
    for item in items:
        if 'gpu' in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return numpy.random.RandomState(0)
