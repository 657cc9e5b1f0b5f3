"""The package's layers import one way only, and importing a module of it
patches nothing in Chainer.

Every import of a chainerjit module, at the top of a file or inside a
function, in Python and Cython sources, is read from the source and must
go to the same layer or one below. Sibling layers (the front end and the
passes) do not import each other.
"""

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'chainerjit')

#: Bottom to top; the layers of one tuple are siblings.
LAYERS = (
    ('errors', 'patching'),
    ('ir',),
    ('ops',),
    ('frontend', 'passes'),
    ('backend',),
    ('runtime',),
    ('fastpaths',),
    ('api', 'profiler'),
    ('onnx_export',),
    ('testing', '__main__', '__init__'),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _sources():
    for folder, _, files in os.walk(ROOT):
        for name in sorted(files):
            if name.endswith(('.py', '.pyx', '.pxd')):
                yield os.path.join(folder, name)


def _module_of(path):
    rel = os.path.relpath(path, ROOT)
    return os.path.splitext(rel)[0].replace(os.sep, '.')


def _layer(module):
    """The layer a module of chainerjit (dotted, without ``chainerjit.``)
    belongs to: its first component."""
    return module.split('.')[0]


_CYTHON_IMPORT = re.compile(
    r'^\s*(?:from\s+chainerjit(\.[\w.]+)?\s+c?import\s+([\w, ]+)|'
    r'c?import\s+chainerjit(\.[\w.]+))', re.M)


def _imports_of_cython(source):
    for match in _CYTHON_IMPORT.finditer(source):
        package, names, plain = match.groups()
        if plain:
            yield plain[1:]
        elif package:
            yield package[1:]
        else:
            for name in names.split(','):
                yield name.strip().split(' ')[0]


def _imports_of_python(source):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split('.')[0] == 'chainerjit' and node.level == 0:
            inner = node.module.split('.')[1:]
            if inner:
                yield '.'.join(inner)
            else:
                for alias in node.names:
                    yield alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split('.')
                if parts[0] == 'chainerjit' and len(parts) > 1:
                    yield '.'.join(parts[1:])


def _imports(path):
    with open(path) as f:
        source = f.read()
    if path.endswith('.py'):
        return set(_imports_of_python(source))
    return set(_imports_of_cython(source))


def _upward_imports():
    found = []
    for path in _sources():
        importer = _layer(_module_of(path))
        for imported in _imports(path):
            target = _layer(imported)
            if RANK[target] > RANK[importer] or (
                    RANK[target] == RANK[importer] and target != importer):
                found.append('%s imports chainerjit.%s' % (
                    _module_of(path), imported))
    return found


def test_every_module_is_in_a_layer():
    unplaced = set(_layer(_module_of(p)) for p in _sources()) - set(RANK)
    assert not unplaced


def test_imports_go_down_only():
    assert _upward_imports() == []


def test_the_check_sees_an_upward_import():
    python = 'def f():\n    from chainerjit.runtime import cache\n'
    cython = 'from chainerjit.runtime._calls cimport _nodes\n'
    assert set(_imports_of_python(python)) == {'runtime'}
    assert set(_imports_of_cython(cython)) == {'runtime._calls'}


_PATCHED = '''
import chainer, numpy
watched = [(chainer.Link, '__call__'), (chainer.Link, '__setattr__'),
           (chainer.Variable, 'backward'), (chainer.FunctionNode, 'apply'),
           (chainer.optimizer.GradientMethod, 'update'),
           (numpy.random, 'randn')]
before = [getattr(owner, name) for owner, name in watched]
import %s
after = [getattr(owner, name) for owner, name in watched]
print(sum(a is not b for a, b in zip(before, after)))
'''


@pytest.mark.parametrize('module', [
    'chainerjit', 'chainerjit.ir', 'chainerjit.frontend.trace',
    'chainerjit.runtime.cache', 'chainerjit.fastpaths', 'chainerjit.api',
    'chainerjit.testing'])
def test_importing_patches_nothing(module):
    out = subprocess.run([sys.executable, '-c', _PATCHED % module],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '0'


def test_jit_installs_the_fast_paths():
    script = ('import chainer, chainerjit\n'
              'before = chainer.Link.__call__\n'
              'chainerjit.jit(lambda x: x)\n'
              'print(chainer.Link.__call__ is not before)\n')
    out = subprocess.run([sys.executable, '-c', script],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == 'True'
