"""``python -m chainerjit export``."""

import subprocess
import sys

import numpy
import pytest

onnxruntime = pytest.importorskip('onnxruntime')


FACTORY = '''
import chainer.links as L
import chainer.functions as F
import chainer
import numpy


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def make_net():
    numpy.random.seed(0)
    return Net()
'''


def test_export_a_model_from_a_factory(tmp_path):
    (tmp_path / 'mymodels.py').write_text(FACTORY)
    out = tmp_path / 'net.onnx'
    done = subprocess.run(
        [sys.executable, '-m', 'chainerjit', 'export', 'mymodels:make_net',
         '--input', '2,6', '--output', str(out), '--dynamic-batch'],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'wrote' in done.stdout and out.exists()
    sys.path.insert(0, str(tmp_path))
    try:
        import mymodels
        import chainer
        net = mymodels.make_net()
    finally:
        sys.path.remove(str(tmp_path))
    session = onnxruntime.InferenceSession(str(out))
    x = numpy.random.RandomState(0).randn(7, 6).astype(numpy.float32)
    y, = session.run(None, {'x': x})
    with chainer.no_backprop_mode():
        numpy.testing.assert_allclose(y, net.forward(x).array, rtol=1e-5,
                                      atol=1e-6)


def test_usage_message():
    done = subprocess.run([sys.executable, '-m', 'chainerjit'],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and 'usage' in done.stderr
