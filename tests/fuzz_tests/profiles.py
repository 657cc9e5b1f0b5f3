"""The fuzzer's Hypothesis profiles, registered by ``tests/conftest.py``
(``--hypothesis-profile`` is read before the tests are collected).

``quick``, the default, runs 80 programs per test, the same ones on every
run (``derandomize``): about 10 s for the three tests on two cores.
``long`` runs 4000 new ones per test (about 10 minutes for the three);
select it with ``--hypothesis-profile=long`` or with ``CHAINERJIT_FUZZ=long``
in the environment (``--hypothesis-show-statistics`` then says how the
programs ran: compiled, eagerly, and why)::

    CHAINERJIT_FUZZ=long .venv/bin/python -m pytest -q tests/fuzz_tests

A failure prints the program (its repr is Python that rebuilds it, for a
plain test calling ``runner.check``) and a ``@reproduce_failure`` blob.
"""

import os

from hypothesis import HealthCheck
from hypothesis import settings

_COMMON = dict(
    deadline=None,
    database=None,  # no examples kept from one run to the next
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)

settings.register_profile('quick', max_examples=80, derandomize=True,
                          **_COMMON)
settings.register_profile('long', max_examples=4000, derandomize=False,
                          print_blob=True, **_COMMON)
settings.load_profile(
    'long' if os.environ.get('CHAINERJIT_FUZZ') == 'long' else 'quick')
