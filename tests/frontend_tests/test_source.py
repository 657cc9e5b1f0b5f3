"""Reading a forward's source back: ``source.source_lines`` gives what
``inspect.getsourcelines`` gives for a code object, without inspect's
scan of every module loaded, and sees a file changed on disk."""

import functools
import inspect
import textwrap

import chainer.functions as F
import pytest

from chainerjit.frontend import source


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


class _Model(object):
    @_decorated
    def decorated(self, xs):
        return [F.tanh(x) for x in xs]

    def plain(self, x,
              y=None):
        def inner(z):
            return z * 2
        return inner(x)


_LAMBDA = lambda x: F.relu(x)  # NOQA: E731


def _codes():
    model = _Model()
    plain = model.plain.__code__
    inner = next(c for c in plain.co_consts if hasattr(c, 'co_code'))
    listcomp = next(c for c in _Model.decorated.__wrapped__.__code__.co_consts
                    if hasattr(c, 'co_code'))
    return [plain, inner, _Model.decorated.__wrapped__.__code__, listcomp,
            _LAMBDA.__code__, F.tanh.__code__, inspect.getblock.__code__]


@pytest.mark.parametrize('code', _codes(), ids=lambda c: c.co_name)
def test_source_lines_are_inspects(code):
    assert source.source_lines(code) == inspect.getsourcelines(code)


def test_source_lines_see_a_file_changed(tmp_path):
    path = tmp_path / 'model.py'
    path.write_text('def f(x):\n    return x\n')
    space = {}
    exec(compile(path.read_text(), str(path), 'exec'), space)
    assert source.source_lines(space['f'].__code__) == (
        ['def f(x):\n', '    return x\n'], 1)
    path.write_text(textwrap.dedent('''\
        # a comment first
        def f(x):
            return x * 2
        '''))
    exec(compile(path.read_text(), str(path), 'exec'), space)
    assert source.source_lines(space['f'].__code__) == (
        ['def f(x):\n', '    return x * 2\n'], 2)


def test_code_without_a_file_has_no_source():
    space = {}
    exec('def f(x):\n    return x\n', space)
    with pytest.raises(OSError):
        source.source_lines(space['f'].__code__)
    assert source.parsed_source(space['f'].__code__) is None
