"""Builds chainerjit and its Cython modules: the VM
(``chainerjit.backend._vm``), the call paths' helpers and the C loops over
arrays (``chainerjit.ops._loops_*``).

Use ``bash scripts/install.sh``: Chainer 7.8.1 needs numpy<2 and a
setuptools<70 build without isolation (see requirements/).
"""

import os
import runpy

from Cython.Build import cythonize
import numpy
import setuptools


HERE = os.path.dirname(os.path.abspath(__file__))

#: The modules of C loops, ``chainerjit/ops/_loops_<family>.pyx``.
LOOP_FAMILIES = ('elementwise', 'convolution', 'pooling', 'normalization',
                 'rnn', 'softmax')


def write_opcodes():
    """Writes ``chainerjit/backend/_opcodes.pxi``, the VM's opcode enum,
    from the table in ``opcodes.py``, run by its path (this script does
    not import chainerjit). The file is rewritten only when its text
    changes, so that an unchanged table does not rebuild the VM."""
    backend = os.path.join(HERE, 'chainerjit', 'backend')
    table = runpy.run_path(os.path.join(backend, 'opcodes.py'))
    names = [(code, table['OPNAMES'][code]) for code in
             sorted(table['OPNAMES'])]
    for code, name in names:
        if table.get(name) != code:
            raise ValueError('opcodes.py: OPNAMES[%d] is %r, whose value '
                             'is %r' % (code, name, table.get(name)))
    text = '\n'.join(
        ['# The VM\'s opcodes, written by setup.py from opcodes.py: edit '
         'that table.', '', 'cdef enum:'] +
        ['    %s = %d' % (name, code) for code, name in names] +
        ['', '#: The opcodes as compiled, by name (tests compare them with '
         'opcodes.py).', 'OPCODES = {'] +
        ['    %r: %s,' % (name, name) for code, name in names] + ['}', ''])
    path = os.path.join(backend, '_opcodes.pxi')
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, 'w') as f:
        f.write(text)


def loops(family):
    """The extension of one module of C loops. No contraction into fused
    multiply-adds: the loops must round as NumPy's separate ufuncs do."""
    return setuptools.Extension(
        'chainerjit.ops._loops_' + family,
        ['chainerjit/ops/_loops_%s.pyx' % family],
        include_dirs=[numpy.get_include()],
        define_macros=[('NPY_NO_DEPRECATED_API', 'NPY_1_7_API_VERSION')],
        extra_compile_args=['-O3', '-ffp-contract=off'])


write_opcodes()
setuptools.setup(
    name='chainerjit',
    version='0.1.0',
    description='A just-in-time compiler for Chainer models',
    packages=setuptools.find_packages(include=['chainerjit', 'chainerjit.*']),
    ext_modules=cythonize(
        [setuptools.Extension('chainerjit.backend._vm',
                              ['chainerjit/backend/_vm.pyx']),
         setuptools.Extension('chainerjit.frontend._keys',
                              ['chainerjit/frontend/_keys.pyx']),
         setuptools.Extension('chainerjit.runtime._calls',
                              ['chainerjit/runtime/_calls.pyx'],
                              include_dirs=[numpy.get_include()]),
         setuptools.Extension('chainerjit.fastpaths._native',
                              ['chainerjit/fastpaths/_native.pyx'])] +
        [loops(family) for family in LOOP_FAMILIES],
        compiler_directives={'language_level': 3}),
    python_requires='>=3.8',
    install_requires=['chainer>=7,<8', 'numpy<2'],
    extras_require={
        'test': ['pytest', 'onnx', 'onnxruntime', 'xxhash', 'scikit-learn'],
        'onnxruntime': ['onnx', 'onnxruntime', 'xxhash'],
        'cuda': ['cupy'],
    },
)
