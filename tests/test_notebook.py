"""examples/lstm_notebook.ipynb, executed in a real Jupyter kernel.

The notebook defines an LSTM in its cells, so chainerjit reads the
forward's source from IPython's cell cache. The kernel is this
interpreter (``sys.executable``), from a kernel spec written to a temporary
directory: no Jupyter installation or configuration outside the test is
used.
"""

import json
import os
import re
import sys

import pytest

nbformat = pytest.importorskip('nbformat')
nbclient = pytest.importorskip('nbclient')
pytest.importorskip('ipykernel')
kernelspec = pytest.importorskip('jupyter_client.kernelspec')
manager = pytest.importorskip('jupyter_client.manager')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, 'examples', 'lstm_notebook.ipynb')
KERNEL = 'chainerjit-test'
CELL_TIMEOUT = 120


@pytest.fixture(scope='module')
def executed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('jupyter')
    kernels = tmp / 'kernels'
    (kernels / KERNEL).mkdir(parents=True)
    with open(kernels / KERNEL / 'kernel.json', 'w') as f:
        json.dump({'argv': [sys.executable, '-m', 'ipykernel_launcher',
                            '-f', '{connection_file}'],
                   'display_name': 'chainerjit test', 'language': 'python'},
                  f)
    env = {
        # Keep the kernel away from any user's Jupyter and IPython setup.
        'JUPYTER_CONFIG_DIR': str(tmp / 'config'),
        'JUPYTER_DATA_DIR': str(tmp / 'data'),
        'JUPYTER_RUNTIME_DIR': str(tmp / 'runtime'),
        'JUPYTER_PLATFORM_DIRS': '1',
        'IPYTHONDIR': str(tmp / 'ipython'),
        'PYDEVD_DISABLE_FILE_VALIDATION': '1',
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        # Tells which interpreter ran the cells; not part of the example.
        nb.cells.append(nbformat.v4.new_code_cell(
            'import sys\nprint("executable:", sys.executable)'))
        specs = kernelspec.KernelSpecManager(kernel_dirs=[str(kernels)])
        km = manager.KernelManager(kernel_name=KERNEL,
                                   kernel_spec_manager=specs)
        client = nbclient.NotebookClient(
            nb, km=km, timeout=CELL_TIMEOUT, allow_errors=False,
            resources={'metadata': {'path': os.path.dirname(NOTEBOOK)}})
        client.execute()  # raises CellExecutionError on any cell error
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return nb


def _text(cell, name='stdout'):
    return ''.join(out.get('text', '') for out in cell.get('outputs', [])
                   if out.get('output_type') == 'stream'
                   and out.get('name') == name)


def _tagged(nb, tag):
    cells = [c for c in nb.cells if tag in c.metadata.get('tags', [])]
    assert len(cells) == 1, tag
    return cells[0]


def test_runs_in_this_interpreter(executed):
    out = _text(executed.cells[-1])
    assert out.strip() == 'executable: %s' % sys.executable


def test_no_cell_errors(executed):
    for cell in executed.cells:
        for out in cell.get('outputs', []):
            assert out['output_type'] != 'error', out


def test_one_cache_entry_for_three_lengths(executed):
    out = _text(_tagged(executed, 'cache-info'))
    match = re.search(r'hits=(\d+), misses=(\d+), .*currsize=(\d+)', out)
    assert match, out
    assert match.groups() == ('2', '1', '1'), out


def test_graph_is_symbolic_and_rolled(executed):
    out = _text(_tagged(executed, 'graph'))
    assert 'xs: f32[T,' in out.splitlines()[0], out
    assert 'Loop[' in out, out
    assert 'body (' in out, out


def test_no_warnings(executed):
    for cell in executed.cells:
        for name in ('stderr', 'stdout'):
            text = _text(cell, name)
            for warning in ('LoopWarning', 'FallbackWarning',
                            'RecompileWarning'):
                assert warning not in text, (cell.source, text)
