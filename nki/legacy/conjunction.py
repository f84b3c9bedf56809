"""Python ``and`` between two masks: ``mask=(i_p < n and i_f < m)``.

AWS's examples write that (the SDK's ``nc_match_replace8`` test); NKI 0.1's tracer read the
kernel's syntax tree, where ``and`` is a conjunction. Python instead asks the left mask for
its truth value and, if true, returns the right one alone. So when a mask's truth is asked
by an ``and`` whose right operand is itself a comparison, the left mask answers True and is
remembered; the comparison that ends the ``and`` (the instruction right before its jump
target) then returns the conjunction of both. Any other use of a mask's truth value, and an
``and`` whose right operand is not a comparison (a mask kept in a variable: we would not see
it being made), raises as before, so a mask never silently loses a bound.

Bytecode is read with :mod:`dis`, for CPython 3.11 (``JUMP_IF_FALSE_OR_POP``) and 3.12+
(``COPY 1; [TO_BOOL;] POP_JUMP_IF_FALSE; POP_TOP``).
"""

from __future__ import annotations

import dis
import functools
import sys


@functools.lru_cache(maxsize=256)
def _instructions(code) -> tuple:
    return tuple(dis.get_instructions(code))


def _and_target(frame) -> int | None:
    """The jump target of the ``and`` whose truth test is running in ``frame``, when its
    right operand ends with a comparison; else None."""
    ins = _instructions(frame.f_code)
    at = next((k for k, i in enumerate(ins) if i.offset == frame.f_lasti), None)
    if at is None:
        return None
    op = ins[at]
    if op.opname == "TO_BOOL" and at + 1 < len(ins):
        at, op = at + 1, ins[at + 1]
    if op.opname == "JUMP_IF_FALSE_OR_POP":
        target = op.argval
    elif op.opname.startswith("POP_JUMP") and "IF_FALSE" in op.opname and at + 1 < len(ins) \
            and ins[at + 1].opname == "POP_TOP" and _copied(ins, at):
        target = op.argval
    else:
        return None
    before = [i for i in ins if i.offset < target]
    return target if before and before[-1].opname == "COMPARE_OP" else None


def _copied(ins: tuple, at: int) -> bool:
    """3.12+: the value tested was duplicated first (``COPY 1``), as ``and`` does."""
    k = at - 1
    while k >= 0 and ins[k].opname == "TO_BOOL":
        k -= 1
    return k >= 0 and ins[k].opname == "COPY" and ins[k].arg == 1


def _user_frame(depth: int):
    return sys._getframe(depth + 1)


class _Slot:
    """The left masks of one ``and`` in one frame, waiting for its closing comparison."""

    __slots__ = ("frame", "target", "masks")

    def __init__(self, frame, target):
        self.frame, self.target, self.masks = frame, target, []


_SLOTS: dict[int, _Slot] = {}


def left_of_and(mask, depth: int) -> bool:
    """Called by a mask's ``__bool__`` (``depth`` frames below the user's): True when an
    ``and`` asks and its right operand is a comparison (the mask is remembered)."""
    frame = _user_frame(depth + 1)
    target = _and_target(frame)
    if target is None:
        return False
    slot = _SLOTS.get(id(frame))
    if slot is None or slot.frame is not frame or slot.target != target:
        slot = _SLOTS[id(frame)] = _Slot(frame, target)
    slot.masks.append(mask)
    return True


def right_of_and(mask, depth: int):
    """Called when a comparison makes a mask: the conjunction with the masks waiting for
    it, if this comparison ends their ``and``; else ``mask``."""
    frame = _user_frame(depth + 1)
    slot = _SLOTS.get(id(frame))
    if slot is None or slot.frame is not frame:
        return mask
    ins = [i for i in _instructions(frame.f_code) if i.offset < slot.target]
    if not ins or ins[-1].offset != frame.f_lasti:
        return mask
    del _SLOTS[id(frame)]
    for left in reversed(slot.masks):
        mask = left & mask
    return mask
