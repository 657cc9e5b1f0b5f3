"""Lowerings of chainer.functions.noise.

None yet: ``F.dropout`` applies nothing in test mode, and in train mode a
recorded ``Dropout`` node holds its mask after ``forward`` whether it drew
it or was given it, so it cannot be lowered safely from the node alone; it
runs on the generic path, which draws a fresh mask as Chainer does.
"""
