"""Virtual registers are numbered by live range (nki/jit/registers.py): a kernel may
allocate any number; only registers live at once are limited by the register file."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError
from nki.lang.control import MAX_REGISTERS


def stored_registers(x, count, live_at_once):
    """``count`` registers holding 1..count, stored into a tile ``live_at_once`` at a time
    (each stored once its group is allocated), so at most ``live_at_once`` are live."""
    vals = nl.ndarray((1, count), dtype=nl.int32, buffer=nl.sbuf)
    for g in range(0, count, live_at_once):
        regs = [nisa.register_alloc(i + 1) for i in range(g, min(g + live_at_once, count))]
        for k, r in enumerate(regs):
            nisa.register_store(vals[0:1, g + k:g + k + 1], r)
    out = nl.ndarray((1, count), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=vals)
    return out


def test_registers_beyond_the_file_reuse_slots_of_dead_ones(backend):
    count = MAX_REGISTERS + 200
    out = nki.jit(stored_registers, backend=backend)(np.zeros(1, np.int32), count, 100)
    np.testing.assert_array_equal(out[0], np.arange(1, count + 1))


def test_more_live_registers_than_the_file_is_an_error():
    kernel = nki.jit(stored_registers, backend="numpy")
    with pytest.raises(NkiError, match=r"(?s)nki_register_file_exceeded.*"
                       rf"{MAX_REGISTERS + 1} virtual registers would be live at once.*"
                       r"test_register_numbering.py:\d+"):
        kernel(np.zeros(1, np.int32), MAX_REGISTERS + 1, MAX_REGISTERS + 1)


def unwritten_after_reuse(x):
    """r1 reuses r0's slot once r0 is dead; r2 is read before anything writes it, so it
    must still read 0 (a fresh register file), not r0's or r1's value."""
    out = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    vals = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
    r0 = nisa.register_alloc(7)
    nisa.register_store(vals[0:1, 0:1], r0)
    r1 = nisa.register_alloc(9)
    nisa.register_store(vals[0:1, 1:2], r1)
    r2 = nisa.register_alloc()
    nisa.register_store(vals[0:1, 2:3], r2)
    nisa.dma_copy(dst=out, src=vals)
    return out


def test_a_register_read_before_written_still_reads_zero(backend):
    with pytest.warns(nki.errors.NkiUninitializedRegisterWarning):
        out = nki.jit(unwritten_after_reuse, backend=backend)(np.zeros(1, np.int32))
    np.testing.assert_array_equal(out[0], [7, 9, 0])


def loop_keeps_outer_register(x, n):
    """A register set before a runtime loop and read in its body stays live through the
    loop: registers allocated in the body must not take its slot."""
    acc = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0)
    step = nisa.register_alloc(5)

    def body(i):
        tmp = nisa.register_alloc(i)
        cell = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(cell, tmp)
        nisa.register_store(cell, step)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=cell, op=nl.add)

    nl.fori_loop(0, n, body)
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_a_register_read_in_a_runtime_loop_lives_through_it(backend):
    out = nki.jit(loop_keeps_outer_register, backend=backend)(np.zeros(1, np.int32), 4)
    assert out[0, 0] == 4 * 5
