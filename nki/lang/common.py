"""Shared rule checks used by every instruction family (spec §1.3, §4, §6)."""

from __future__ import annotations

from nki.errors import SourceLoc
from nki.ir.nodes import Access
from nki.ir.types import DType, Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import Trace, current, user_loc, validation

ON_CHIP = (Memory.SBUF, Memory.PSUM)


class Call:
    """The context of one API call being checked: its name, trace and the user's location."""

    __slots__ = ("api", "trace", "loc")

    def __init__(self, api: str):
        self.api = api
        self.trace: Trace = current(api)
        self.loc: SourceLoc | None = user_loc()

    def error(self, code: str, detail: str):
        return validation(code, f"{self.api}: {detail}", self.loc)

    def tensor(self, value, role: str, memories=None) -> NkiTensor:
        """``value`` must be a tensor handle, in one of ``memories`` if given."""
        if not isinstance(value, NkiTensor):
            raise self.error("nki_invalid_argument",
                             f"operand {role!r} must be a tensor, got {type(value).__name__}")
        if memories is not None and value.buffer not in memories:
            names = "/".join(m.value for m in memories)
            raise self.error("err_unsupported_memory",
                             f"expected operand {role!r} to be in {names}, but got a tensor "
                             f"in {value.buffer.value}")
        return value

    def tile(self, value, role: str, memories=ON_CHIP) -> NkiTensor:
        """An on-chip tile operand: partition dim ≤ pmax."""
        t = self.tensor(value, role, memories)
        pmax = self.trace.target.pmax
        if t.shape[0] > pmax:
            raise self.error("err_num_partition_exceed_arch_limit",
                             f"partition dimension {t.shape[0]} of {role!r} exceeds the "
                             f"architecture limit of {pmax}")
        return t

    def same_partitions(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        if a.shape[0] != b.shape[0]:
            raise self.error("err_num_partition_mismatch",
                             f"{ra!r} has {a.shape[0]} partitions but {rb!r} has {b.shape[0]}")

    def same_elements(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        """Same partitions and the same number of elements per partition."""
        self.same_partitions(a, b, ra, rb)
        fa, fb = a.size // a.shape[0], b.size // b.shape[0]
        if fa != fb:
            raise self.error("nki_shape_mismatch",
                             f"{ra!r} {a.shape} has {fa} elements per partition but {rb!r} "
                             f"{b.shape} has {fb}")

    def not_both_psum(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        if a.buffer is Memory.PSUM and b.buffer is Memory.PSUM:
            raise self.error("err_unsupported_memory",
                             f"{ra!r} and {rb!r} cannot both be in PSUM")

    def scalar_vector(self, value, role: str, parts: int) -> NkiTensor | float:
        """A Python number, or a [P, 1] on-chip tile with ``parts`` partitions."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        t = self.tile(value, role)
        if t.size // t.shape[0] != 1 or t.shape[0] != parts:
            raise self.error("nki_shape_mismatch", f"{role!r} must be a scalar or a "
                             f"[{parts}, 1] tile, got shape {t.shape}")
        return t


def acc(t: NkiTensor) -> Access:
    return t.access()


def dtype_of(value) -> DType:
    from nki.lang.indexing import as_dtype

    return as_dtype(value)
