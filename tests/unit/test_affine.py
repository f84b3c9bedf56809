"""Affine expressions."""

from nki.ir.affine import Affine


def test_arithmetic_and_evaluate():
    e = Affine(3) + Affine.var(0, 2) + Affine.var(1) * 4 - 1
    assert e.const == 2 and e.coef(0) == 2 and e.coef(1) == 4
    assert e.evaluate({0: 5, 1: 2}) == 2 + 10 + 8
    assert str(Affine.var(0, 1) + 5) == "i0 + 5"


def test_cancellation_and_substitute():
    e = Affine.var(0, 3) - Affine.var(0, 3) + 7
    assert e.is_const and e.const == 7
    f = (Affine.var(0, 2) + Affine.var(1)).substitute(1, Affine.var(0) + 1)
    assert f == Affine(1, ((0, 3),))


def test_bounds():
    assert (Affine(10) + Affine.var(0, -2)).bounds({0: 4}) == (4, 10)
