"""Builds chainerjit and its Cython VM, ``chainerjit.backend._vm``.

Use ``bash scripts/install.sh``: Chainer 7.8.1 needs numpy<2 and a
setuptools<70 build without isolation (see requirements/).
"""

from Cython.Build import cythonize
import numpy
import setuptools


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
                              ['chainerjit/runtime/_calls.pyx']),
         setuptools.Extension('chainerjit.fastpaths._native',
                              ['chainerjit/fastpaths/_native.pyx']),
         # No contraction into fused multiply-adds: the loops must round
         # as NumPy's separate ufuncs do.
         setuptools.Extension('chainerjit.ops._elementwise',
                              ['chainerjit/ops/_elementwise.pyx'],
                              include_dirs=[numpy.get_include()],
                              define_macros=[('NPY_NO_DEPRECATED_API',
                                              'NPY_1_7_API_VERSION')],
                              extra_compile_args=['-O3',
                                                  '-ffp-contract=off'])],
        compiler_directives={'language_level': 3}),
    python_requires='>=3.8',
    install_requires=['chainer>=7,<8', 'numpy<2'],
    extras_require={
        'test': ['pytest', 'onnx', 'onnxruntime', 'scikit-learn'],
        'cuda': ['cupy'],
    },
)
