"""``nl.NKIObject``'s generated initializer (AWS language guide, Class Support: every class is
data-class-like, ``@dataclass`` optional, ``__init__(self, x=None, y=False)`` then
``__post_init__``) and the ``nki.language.opcode`` operator module; kernels that use them run
in both backends against numpy."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

# nki-library's import form; importing it imports nki.language, which registers the submodule
from nki.language.opcode import add as op_add
from nki.language.opcode import maximum as op_maximum


@dataclass
class _Plain(nl.NKIObject):
    start = None
    size = 128


@dataclass
class _Annotated(nl.NKIObject):
    x: int
    y: bool = False
    tags: list = field(default_factory=list)

    @property
    def doubled(self) -> int:
        return 2 * self.x

    def toggle(self) -> None:
        self.y = not self.y


class _NoDecorator(nl.NKIObject):
    op = nl.multiply
    scale: float = 2.0

    def __post_init__(self) -> None:
        self.ready = True


class _UserInit(nl.NKIObject):
    w: int = 1

    def __init__(self, w: int):
        self.w = w * 10


def test_plain_class_attributes_are_fields():
    p = _Plain(start=3)
    assert (p.start, p.size) == (3, 128)
    assert (_Plain(1, 2).start, _Plain(1, 2).size) == (1, 2)
    assert _Plain().start is None


def test_annotated_fields_defaults_and_factories():
    a = _Annotated(4)
    assert (a.x, a.y, a.tags, a.doubled) == (4, False, [], 8)
    a.toggle()
    assert a.y is True
    assert _Annotated().x is None            # no default -> None, as AWS's generated __init__
    assert _Annotated(1).tags is not _Annotated(1).tags


def test_undecorated_class_post_init_and_operator_default():
    n = _NoDecorator(scale=0.5)
    assert n.op is nl.multiply and n.scale == 0.5 and n.ready


def test_user_init_is_kept():
    assert _UserInit(3).w == 30


def test_wrong_arguments_name_the_fields():
    with pytest.raises(TypeError, match=r"unexpected keyword.*\['bogus'\].*\['start', 'size'\]"):
        _Plain(bogus=1)
    with pytest.raises(TypeError, match="takes 2 positional"):
        _Plain(1, 2, 3)


def test_opcode_module_holds_the_language_operators():
    import nki.language.opcode as opcode

    assert op_maximum is nl.maximum and op_add is nl.add and opcode.exp is nl.exp
    assert opcode.copy is nl.copy and not hasattr(opcode, "ndarray")


@dataclass
class _Cfg(nl.NKIObject):
    reduce_op = op_maximum
    scale = 1.0


def _scaled_row_max(x, cfg: _Cfg = None):
    cfg = cfg or _Cfg(scale=3.0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale)
    m = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=cfg.reduce_op, data=t, axis=1)
    out = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=m)
    return out


def test_kernel_uses_nkiobject_and_opcode(backend):
    x = np.random.default_rng(3).standard_normal((64, 40)).astype(np.float32)
    out = nki.jit(_scaled_row_max, backend=backend, cache=False)(x)
    np.testing.assert_array_equal(out[:, 0], (x * np.float32(3)).max(axis=1))
