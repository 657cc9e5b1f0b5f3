"""Lowerings of chainer.functions.math."""
