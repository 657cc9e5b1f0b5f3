"""Lowerings of chainer.functions.pooling."""
