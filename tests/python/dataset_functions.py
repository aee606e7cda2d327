"""Dataset functions the tests' workers import."""

import numpy


def numbered(split):
    """Split s of a 100-element-per-split dataset: the integers 100*s .. 100*s+99."""
    return range(100 * split, 100 * split + 100)


def arrays(split):
    for i in range(3):
        yield numpy.arange(split * 10 + i, dtype=numpy.float64).reshape(-1, 1) * 0.5


def lines_of(name):
    """An explicit split: a name; its elements are that name's 'lines'."""
    return [f"{name}:{i}".encode() for i in range(4)]
