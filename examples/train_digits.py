"""Trains LeNet on scikit-learn's digits, eagerly and with chainerjit.

The two runs start from the same weights and see the batches in the same
order. For each the script prints the final test accuracy, the training
time per epoch and the inference time over the test set at batch 1 and
64, then checks that both models predict the same.

In the chainerjit run, the classifier's forward is jitted on the VM
(``backend='numpy'``, Chainer's bits): training steps run the compiled
forward (LeNet, the loss and the accuracy) and backward programs behind
one Chainer FunctionNode (the optimizer and the Trainer stay Chainer's),
and the evaluator's passes over the test split run a compiled test-mode
program. The predictor is jitted too, with the default backend, for
inference on its own.

Usage: ``python examples/train_digits.py [--epochs 5] [--batchsize 32]``
"""

import argparse
import copy
import os
import sys
import tempfile
import time

import chainer
from chainer import training
from chainer.training import extensions
import chainer.links as L
import numpy
import sklearn.datasets

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import chainerjit  # noqa: E402
from benchmarks import timing  # noqa: E402
from examples import models  # noqa: E402


SEED = 0
N_TEST = 360


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batchsize', type=int, default=32)
    parser.add_argument('--repeats', type=int, default=5,
                        help='timed passes over the test set per batch '
                        'size (the median is reported)')
    return parser.parse_args(argv)


def load_digits():
    """The 1797 8x8 digits as ``(x, y)``: float32 ``(N, 1, 8, 8)`` in
    [0, 1] and int32 labels, in a fixed shuffled order."""
    digits = sklearn.datasets.load_digits()
    x = (digits.images / 16.0).astype(numpy.float32)[:, None]
    y = digits.target.astype(numpy.int32)
    order = numpy.random.RandomState(SEED).permutation(len(x))
    return x[order], y[order]


def make_model(x):
    """A classifier around an initialized LeNet (the lazily sized Linear
    gets its weights from a test-mode call, which leaves the batch
    normalization statistics untouched)."""
    numpy.random.seed(SEED)
    model = L.Classifier(models.LeNet())
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        model.predictor(x[:1])
    return model


def train(model, train_set, test_set, args):
    """Trains ``model`` with a Trainer; returns seconds per epoch
    (including the evaluation on the test split)."""
    order = chainer.iterators.ShuffleOrderSampler(
        numpy.random.RandomState(SEED))
    train_iter = chainer.iterators.SerialIterator(
        train_set, args.batchsize, order_sampler=order)
    test_iter = chainer.iterators.SerialIterator(
        test_set, 64, repeat=False, shuffle=False)
    optimizer = chainer.optimizers.MomentumSGD(lr=0.05)
    optimizer.setup(model)
    updater = training.updaters.StandardUpdater(train_iter, optimizer)
    with tempfile.TemporaryDirectory() as out:
        trainer = training.Trainer(updater, (args.epochs, 'epoch'), out)
        trainer.extend(extensions.Evaluator(test_iter, model))
        trainer.extend(extensions.LogReport())
        trainer.extend(extensions.PrintReport(
            ['epoch', 'main/loss', 'main/accuracy',
             'validation/main/accuracy', 'elapsed_time']))
        trainer.extend(extensions.ProgressBar(update_interval=10))
        start = time.perf_counter()
        trainer.run()
        return (time.perf_counter() - start) / args.epochs


def predict(predictor, x, batchsize):
    """The logits for all of ``x``, computed ``batchsize`` at a time in
    test mode without backprop."""
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        return numpy.concatenate([
            predictor(x[i:i + batchsize]).array
            for i in range(0, len(x), batchsize)])


def time_inference(eager, jitted, x, repeats):
    """Median seconds per pass over ``x`` at batch 1 and 64, eager and
    jit interleaved: ``{batchsize: (summaries, ratio)}``."""
    results = {}
    for batchsize in (1, 64):
        samples = timing.interleaved(
            {'eager': lambda: predict(eager, x, batchsize),
             'jit': lambda: predict(jitted, x, batchsize)},
            rounds=repeats, inner=1, warmup=1,
            around=timing.system_contexts(['eager']))
        results[batchsize] = timing.compare(samples)
    return results


def report(name, accuracy, epoch_seconds):
    print('%-6s test accuracy %.4f, training %.3f s/epoch'
          % (name, accuracy, epoch_seconds))


def main(argv=None):
    args = parse_args(argv)
    x, y = load_digits()
    x_train, y_train, x_test, y_test = (
        x[N_TEST:], y[N_TEST:], x[:N_TEST], y[:N_TEST])
    train_set = chainer.datasets.TupleDataset(x_train, y_train)
    test_set = chainer.datasets.TupleDataset(x_test, y_test)
    print('digits: %d training and %d test images of 8x8'
          % (len(x_train), len(x_test)))

    eager = make_model(x)
    jitted = copy.deepcopy(eager)
    # The classifier's forward, loss and accuracy included, for training
    # and evaluation, on the VM, whose kernels keep Chainer's bits (the
    # check below): the default backend, 'auto', may run training programs
    # this small in onnxruntime where it measures them faster, equal
    # within rounding at each step, which 225 steps drift apart by up to
    # 1e-4. The predictor's own, with the default, for inference on its
    # own.
    jitted.forward = chainerjit.jit(jitted.forward, backend='numpy')
    jitted.predictor.forward = chainerjit.jit(jitted.predictor.forward)

    results = {}
    for name, model in (('eager', eager), ('jit', jitted)):
        print('\n== training %s (%d epochs, batch %d)'
              % (name, args.epochs, args.batchsize))
        # Eager with Chainer's own methods, which chainerjit's fast paths
        # replace for the jitted model (and would cost eager a little).
        with timing.system_context(name)():
            epoch_seconds = train(model, train_set, test_set, args)
        logits = predict(model.predictor, x_test, 64)
        accuracy = float((logits.argmax(axis=1) == y_test).mean())
        results[name] = (logits, accuracy, epoch_seconds)

    print('\n== results')
    for name in ('eager', 'jit'):
        report(name, *results[name][1:])
    print('training ratio jit/eager: %.2f (compiled forward and backward '
          'of the classifier; optimizer and Trainer are Chainer\'s)'
          % (results['jit'][2] / results['eager'][2]))

    numpy.testing.assert_allclose(results['jit'][0], results['eager'][0],
                                  rtol=1e-4, atol=1e-5)
    print('eager and jit test-set logits agree (assert_allclose, '
          'rtol=1e-4, atol=1e-5)')

    print('\n== inference over the %d test images (compiled for jit; '
          'median of %d passes, IQR)' % (len(x_test), args.repeats))
    timings = time_inference(eager.predictor, jitted.predictor, x_test,
                             args.repeats)
    for batchsize, (summaries, ratio) in timings.items():
        print('batch %2d: eager %s, jit %s, jit/eager %.2f' % (
            batchsize, summaries['eager'].format(1e3, 'ms'),
            summaries['jit'].format(1e3, 'ms'), ratio))

    print('\n== chainerjit cache')
    for forward in (jitted.forward, jitted.predictor.forward):
        print(forward.cache_info())
        print(forward.cache_report())


if __name__ == '__main__':
    main()
