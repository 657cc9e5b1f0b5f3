"""Lowerings of chainer.functions.loss."""
