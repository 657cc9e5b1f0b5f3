"""Lowerings of chainer.functions.normalization."""
