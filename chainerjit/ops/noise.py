"""Lowerings of chainer.functions.noise."""
