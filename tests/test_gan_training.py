"""A pix2pix-style GAN (a U-net generator with transposed convolutions,
batch normalization, dropout and skip connections; a convolutional
discriminator) trained with Adam (beta1 = 0.5), eagerly and through
``chainerjit.jit``: parameters and losses equal bit for bit, step after
step, so that Adam's amplification of rounding has nothing to amplify."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainerjit


class Block(chainer.Chain):
    """Convolution (or transposed convolution) by 2, batch normalization,
    optional dropout, activation."""

    def __init__(self, c_in, c_out, up=False, act=F.relu, dropout=False):
        super().__init__()
        self.act, self.dropout = act, dropout
        w = chainer.initializers.Normal(0.02)
        conv = L.Deconvolution2D if up else L.Convolution2D
        with self.init_scope():
            self.c = conv(c_in, c_out, 4, 2, 1, initialW=w)
            self.bn = L.BatchNormalization(c_out)

    def forward(self, x):
        h = self.bn(self.c(x))
        if self.dropout:
            h = F.dropout(h)
        return self.act(h)


class UNet(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c0 = L.Convolution2D(3, 8, 3, 1, 1)
            self.e1 = Block(8, 16, act=F.leaky_relu)
            self.e2 = Block(16, 32, act=F.leaky_relu)
            self.d0 = Block(32, 16, up=True, dropout=True)
            self.d1 = Block(32, 8, up=True)
            self.out = L.Convolution2D(16, 3, 3, 1, 1)

    def forward(self, x):
        h0 = F.leaky_relu(self.c0(x))
        h1 = self.e1(h0)
        h = self.d0(self.e2(h1))
        h = self.d1(F.concat([h, h1]))
        return self.out(F.concat([h, h0]))


class Discriminator(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c0 = L.Convolution2D(6, 8, 3, 1, 1)
            self.c1 = Block(8, 16, act=F.leaky_relu)
            self.c2 = L.Convolution2D(16, 1, 3, 1, 1)

    def forward(self, x, y):
        return self.c2(self.c1(F.leaky_relu(self.c0(F.concat([x, y])))))


def _gan(jit):
    numpy.random.seed(0)
    nets = UNet(), Discriminator()
    optimizers = []
    for net in nets:
        if jit:
            net.forward = chainerjit.jit(net.forward)
        opt = chainer.optimizers.Adam(2e-4, beta1=0.5)
        opt.setup(net)
        optimizers.append(opt)
    return nets, optimizers


def _step(nets, optimizers, x, t, seed):
    (gen, dis), (opt_gen, opt_dis) = nets, optimizers
    numpy.random.seed(seed)  # dropout's masks
    fake = gen(x)
    y_fake, y_real = dis(x, fake), dis(x, t)
    loss_gen = F.sum(F.softplus(-y_fake)) / y_fake.size + \
        100 * F.mean_absolute_error(fake, t)
    gen.cleargrads()
    loss_gen.backward()
    opt_gen.update()
    fake.unchain_backward()
    loss_dis = F.sum(F.softplus(-y_real)) / y_real.size + \
        F.sum(F.softplus(y_fake)) / y_fake.size
    dis.cleargrads()
    loss_dis.backward()
    opt_dis.update()
    return loss_gen.array, loss_dis.array


def _bytes(nets):
    return [(name, p.array.tobytes()) for net in nets
            for name, p in sorted(net.namedparams())]


def test_a_unet_gan_trains_bit_for_bit_with_adam(rng):
    eager, jitted = _gan(False), _gan(True)
    assert _bytes(eager[0]) == _bytes(jitted[0])
    for step in range(5):
        x = rng.standard_normal((2, 3, 16, 16)).astype(numpy.float32)
        t = rng.standard_normal((2, 3, 16, 16)).astype(numpy.float32)
        losses = _step(*eager, x, t, step), _step(*jitted, x, t, step)
        assert [a.tobytes() for a in losses[0]] == \
            [a.tobytes() for a in losses[1]], step
        assert _bytes(eager[0]) == _bytes(jitted[0]), step
    for net in jitted[0]:
        info = net.forward.cache_info()
        assert info.compiled > 0 and info.eager == 0, info
