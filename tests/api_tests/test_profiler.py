"""``chainerjit.profile``: every compiled program's kernels timed inside
the block, the programs' own kernels back after it."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from examples import models


def _mlp_and_input(rng):
    model = models.MLP(8, 6, 3)
    model.forward = chainerjit.jit(model.forward)
    return model, rng.standard_normal((4, 8)).astype(numpy.float32)


def test_each_kernel_is_counted_and_timed(rng):
    model, x = _mlp_and_input(rng)
    with chainer.no_backprop_mode():
        expected = model(x).array  # records
        model(x)  # checks its first program run
        with chainerjit.profile() as prof:
            for _ in range(5):
                assert model(x).array.tobytes() == expected.tobytes()
    entry, = model.forward.cache_entries()
    rows = prof.rows()
    assert {row.kernel for row in rows} == set(
        range(len(entry.program.kernels)))
    assert all(row.calls == 5 and row.seconds > 0 for row in rows)
    assert all(row.program is entry.program for row in rows)
    assert rows == sorted(rows, key=lambda row: -row.seconds)
    text = str(prof)
    assert 'MLP.forward' in text and 'LinearFunction+ReLU' in text
    assert 'models.py:' in text and '5 ' in text


def test_the_programs_run_untimed_after_the_block(rng):
    model, x = _mlp_and_input(rng)
    with chainer.no_backprop_mode():
        model(x)
        model(x)
        with chainerjit.profile() as prof:
            model(x)
        model(x)
        with chainerjit.profile() as again:  # one after another is fine
            pass
    assert prof.rows()[0].calls == 1  # not counting the call after it
    assert again.rows() == []
    entry, = model.forward.cache_entries()
    assert 'timed_run' not in repr(entry.program.run)


def test_training_and_programs_compiled_inside_the_block(rng):
    """The training forward and backward, compiled inside the block,
    are timed from their first run; a kernel's error is still the VM's
    error pointing at its instruction."""
    model, x = _mlp_and_input(rng)
    t = numpy.array([0, 1, 2, 0], numpy.int32)
    with chainerjit.profile() as prof:
        for _ in range(3):
            model.cleargrads()
            F.softmax_cross_entropy(model(x), t).backward()
    names = {row.program.name for row in prof.rows()}
    assert names == {'MLP.forward', 'MLP.forward.backward'}
    assert 'MLP.forward.backward' in str(prof)


def test_a_kernels_error_is_still_reported_with_the_program(rng):
    def f(x):
        return F.matmul(x, x)
    jitted = chainerjit.jit(f)
    x = rng.standard_normal((3, 3)).astype(numpy.float32)
    jitted(x)
    jitted(x)
    entry, = jitted.cache_entries()
    with chainerjit.profile():
        with pytest.raises(chainerjit.VMError, match='-->'):
            entry.program.run([numpy.zeros((2, 3), numpy.float32)])


def test_profiles_do_not_nest():
    with chainerjit.profile():
        with pytest.raises(RuntimeError, match='do not nest'):
            with chainerjit.profile():
                pass
    with chainerjit.profile():  # released after the error
        pass
