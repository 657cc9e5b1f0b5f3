"""Golden tests of the printed IR and bytecode."""

import re

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainerjit


class TwoLayer(chainer.Chain):

    def __init__(self):
        super(TwoLayer, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 3)
            self.l2 = L.Linear(3, 2, nobias=True)

    @chainerjit.jit
    def forward(self, x):
        h = F.relu(self.l1(x))
        mask = numpy.ones((5, 3), numpy.float32)
        return self.l2(F.tanh(h * mask)), h


def _entry():
    net = TwoLayer()
    with chainer.no_backprop_mode():
        net.forward(numpy.zeros((5, 4), numpy.float32))
    entry, = net.forward.cache_entries()
    return entry


def _strip_lines(text):
    """Replaces line numbers, which move when this file is edited."""
    text = re.sub(r'test_printing\.py:\d+', 'test_printing.py:N', text)
    return re.sub(r'^(.{3} ) *\d+( +\d+  [A-Z])', r'\1   N\2', text,
                  flags=re.M)


def test_graph_printed_form():
    assert _strip_lines(str(_entry().graph)) == '''\
graph TwoLayer.forward(x: f32[5,4]; l1.W: f32[3,4], l1.b: f32[3], \
l2.W: f32[2,3]):
  c0: f32[5,3] = const
  %0: f32[5,3] = LinearFunction+ReLU(x, l1.W, l1.b)  # test_printing.py:N
  %1: f32[5,3] = Mul(%0, c0)  # test_printing.py:N
  %2: f32[5,3] = Tanh(%1)  # test_printing.py:N
  %3: f32[5,2] = LinearFunction(%2, l2.W)  # test_printing.py:N
  return (%3, %0)'''


def test_program_disassembly():
    assert _strip_lines(_entry().program.dis()) == '''\
program TwoLayer.forward: 4 inputs, 1 consts, 8 registers, 4 kernels
  inputs: %0=x %1=l1.W %2=l1.b %3=l2.W
  consts: %4=f32[5,3]
    line    pc  opcode  args
       N     0  CALL3   k0:LinearFunction+ReLU  %0 %1 %2 -> %5
       N     6  CALL2   k1:Mul  %5 %4 -> %6
            11  CALL1   k2:Tanh (into %6)  %6 -> %7
            15  FREE    %6
            17  CALL2   k3:LinearFunction  %7 %3 -> %6
            22  FREE    %7
            24  RET     %6 %5
'''


def test_vm_error_points_at_the_instruction():
    entry = _entry()
    try:
        entry.program.run([numpy.zeros((5, 7), numpy.float32)] + [
            numpy.zeros(s, numpy.float32) for s in ((3, 4), (3,), (2, 3))])
    except chainerjit.VMError as e:
        text = str(e)
    assert text.startswith('kernel raised ValueError')
    assert '-->    N     0  CALL3' in _strip_lines(text)
