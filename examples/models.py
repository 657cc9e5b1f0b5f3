"""Reference models shared by the examples, benchmarks and tests.

They are plain :class:`chainer.Chain` classes with an undecorated
``forward``, so a caller chooses whether to wrap it::

    model = LeNet()
    model.forward = chainerjit.jit(model.forward)
"""

import chainer
import chainer.functions as F
import chainer.links as L


class MLP(chainer.Chain):
    """A multi-layer perceptron: Linear-relu-Linear-relu-Linear."""

    def __init__(self, n_in=784, n_hidden=100, n_out=10):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_hidden)
            self.l2 = L.Linear(n_hidden, n_hidden)
            self.l3 = L.Linear(n_hidden, n_out)

    def forward(self, x):
        """Returns the logits for ``x`` of shape ``(N, n_in)``."""
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        return self.l3(h)


class LeNet(chainer.Chain):
    """A LeNet-5 style convolutional network with batch normalization.

    Two blocks of 5x5 convolution (padded, so the size is kept),
    batch normalization, relu and 2x2 max pooling, then three fully
    connected layers. The first Linear infers its input size, so the
    model works on 28x28 (MNIST) and on 8x8 (scikit-learn digits)
    images alike.
    """

    def __init__(self, n_out=10, in_channels=1):
        super(LeNet, self).__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_channels, 6, 5, pad=2)
            self.bn1 = L.BatchNormalization(6)
            self.conv2 = L.Convolution2D(6, 16, 5, pad=2)
            self.bn2 = L.BatchNormalization(16)
            self.fc1 = L.Linear(None, 120)
            self.fc2 = L.Linear(120, 84)
            self.fc3 = L.Linear(84, n_out)

    def forward(self, x):
        """Returns the logits for images ``x`` of shape ``(N, C, H, W)``."""
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pooling_2d(F.relu(self.bn2(self.conv2(h))), 2)
        h = F.relu(self.fc1(h))
        h = F.relu(self.fc2(h))
        return self.fc3(h)
