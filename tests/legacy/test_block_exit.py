"""nki/legacy/_private/block_exit.py: ``__exit__`` tells a ``with`` body that ran to its end
from one a ``break``/``continue``/``return`` left (legacy ``do_while`` needs it: both exits see
no exception). Plain Python blocks whose exits are known by construction."""

from __future__ import annotations

import sys

import pytest

from nki.legacy._private.block_exit import ran_to_end


class Probe:
    """Records, per exit without an exception, whether the block ran to its end."""

    log: list[bool] = []

    def __enter__(self):
        frame = sys._getframe(1)
        self.code, self.line = frame.f_code, frame.f_lineno

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            Probe.log.append(ran_to_end(sys._getframe(1), self.code, self.line))
        return False


def plain(c):
    with Probe():
        for j in range(3):
            if j == 1:
                break               # the inner loop's own break: the block goes on
        x = [i for i in range(2)]
    return x


def one_line_if(c):
    for _ in range(1):
        with Probe():
            x = 1
            if c: break             # noqa: E701 - the test and the break share a line
    return x


def through_nested_with(c):
    for _ in range(1):
        with Probe():
            with Probe():
                if c:
                    break


def through_finally(c):
    with Probe():
        try:
            if c:
                return 1
        finally:
            y = 2
    return y


def in_finally(c):
    for _ in range(2):
        with Probe():
            try:
                x = 1
            finally:
                if c:
                    continue        # noqa: B012 - the exit under test
    return x


def return_last(c):
    with Probe():
        if c:
            return 1
        def inner():                # noqa: E306 - a nested def's return is its own
            return 2
        return inner()


def _indented():
    def indented_return(c):          # an indented def: its source is dedented to be parsed
        with Probe():
            if c:
                return 1
            x = 2
        return x

    return indented_return


CASES = [  # fn, c, what the probes record (inner blocks exit first)
    (plain, True, [True]),
    (one_line_if, False, [True]), (one_line_if, True, [False]),
    (through_nested_with, False, [True, True]), (through_nested_with, True, [False, False]),
    (through_finally, False, [True]), (through_finally, True, [False]),
    (in_finally, False, [True, True]), (in_finally, True, [False, False]),
    (return_last, True, [False]), (return_last, False, [False]),
    (_indented(), False, [True]), (_indented(), True, [False]),
]


@pytest.mark.parametrize("fn, c, want", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_ran_to_end_tells_the_normal_end_from_an_early_exit(fn, c, want):
    Probe.log = []
    fn(c)
    assert Probe.log == want
