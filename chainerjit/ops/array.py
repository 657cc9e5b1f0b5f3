"""Lowerings of chainer.functions.array."""
