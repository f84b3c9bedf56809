"""Race checks (``err_unexpected_output_dependencies``): LNC cores writing the same shared HBM
bytes, and (opt-in) ``affine_range`` iterations writing the same location. Tracing only; no
program is compiled or run."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError
from nki.ir.affine import Affine
from nki.ir.nodes import Placed
from nki.ir.types import FLOAT32, Memory
from nki.jit.races import first_overlap, intersection, operand_intervals, union

X = np.zeros((256, 16), np.float32)
CODE = r"\[err_unexpected_output_dependencies\]"


def _spec(fn, *args, lnc: int = 1, **kw):
    # LNC write overlaps are errors only with check_races=True (a warning otherwise: see
    # tests/ops/test_checks.py); these tests check the strict rule
    if lnc > 1:
        kw.setdefault("check_races", True)
    k = nki.jit(fn, cache=False, **kw)
    return (k[lnc] if lnc > 1 else k).specialize(*args)


def _line(fn, text: str) -> int:
    """The line number of the first line of ``fn`` containing ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if text in s)


# ----- interval helpers ----------------------------------------------------------------------

def test_operand_intervals_fold_contiguous_dims():
    # [4 partitions (row 1000 elems), 3 x 8 contiguous] -> 4 intervals of 96 bytes
    op = Placed(0, Memory.SBUF, FLOAT32, Affine(10), ((1000, 4), (8, 3), (1, 8)))
    s, e = operand_intervals(op)
    base = (1 << 50) + 40
    assert list(s) == [base + 4000 * p for p in range(4)] and set(e - s) == {96}


def test_operand_intervals_strided_and_transposed():
    # a transposed [8, 4] view of a row-major [4, 8] HBM block: dims order does not matter
    op = Placed(0, Memory.SHARED_HBM, FLOAT32, Affine(0), ((1, 8), (8, 4)))
    s, e = operand_intervals(op)
    assert list(s) == [0] and list(e) == [128]
    step = Placed(0, Memory.SHARED_HBM, FLOAT32, Affine(0), ((2, 5),))
    s, e = operand_intervals(step)
    assert list(s) == [0, 8, 16, 24, 32] and set(e - s) == {4}


def test_union_and_first_overlap():
    s, e = union(np.array([10, 0, 5, 40]), np.array([20, 6, 12, 50]))
    assert list(s) == [0, 40] and list(e) == [20, 50]
    a = (np.array([0, 100]), np.array([10, 110]))
    assert first_overlap(a, (np.array([10, 90]), np.array([20, 100]))) is None
    assert first_overlap(a, (np.array([20, 105]), np.array([30, 200]))) == (105, 110)
    s, e = intersection(a, (np.array([5, 95, 108]), np.array([8, 103, 300])))
    assert list(s) == [5, 100, 108] and list(e) == [8, 103, 110]


# ----- LNC cores -----------------------------------------------------------------------------

def _both_cores_write_all(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    nisa.dma_copy(dst=out[0:128, :], src=t)          # both cores: same rows, same values
    nisa.dma_copy(dst=out[128:256, :], src=t)
    return out


def test_lnc_cores_writing_same_rows_race_even_with_identical_values():
    line = _line(_both_cores_write_all, "dst=out[0:128, :]")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm out\[0, 0\]\.\.out\[127, 15\] \(8192 bytes\): core 0 at "
                       rf"test_races.py:{line} \(dma_copy\), core 1 at test_races.py:{line}"
                       r"(.|\n)*rule: the same location(.|\n)*"
                       rf"at test_races.py:{line}: +nisa.dma_copy"):
        _spec(_both_cores_write_all, X, lnc=2)


def _overlapping_halves(x):
    # core 0 writes rows 0..129, core 1 rows 128..255: rows 128-129 are written by both,
    # by different instructions
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out[0:128, :], src=t)
        nisa.dma_copy(dst=out[128:130, :], src=t[0:2, :])
    else:
        nisa.dma_copy(dst=out[128:256, :], src=t)
    return out


def test_lnc_partial_overlap_across_instructions_names_region_and_both_lines():
    l0 = _line(_overlapping_halves, "dst=out[128:130")
    l1 = _line(_overlapping_halves, "dst=out[128:256")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm out\[128, 0\]\.\.out\[129, 15\] \(128 bytes\): core 0 at "
                       rf"test_races.py:{l0} \(dma_copy\), core 1 at test_races.py:{l1}"):
        _spec(_overlapping_halves, X, lnc=2)


def _interleaved(x, overlap):
    # core c writes rows c, c+2, c+4, ... (a stepped view): disjoint unless overlap
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    rows = x.shape[0] // 2
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[c::2, :])
    nisa.dma_copy(dst=out[c::2, :], src=t)
    if overlap and c == 1:
        nisa.dma_copy(dst=out[4:5, 3:4], src=t[0:1, 0:1])
    return out


def test_lnc_interleaved_rows_do_not_race():
    _spec(_interleaved, X, False, lnc=2)


def test_lnc_single_element_overlap_in_strided_writes():
    with pytest.raises(NkiValidationError, match=CODE + r".*out\[4, 3\] \(4 bytes\)"):
        _spec(_interleaved, X, True, lnc=2)


def _private_per_core(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = x.shape[0] // nl.num_programs()
    r0 = nl.program_id(0) * half
    t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[r0:r0 + half, :])
    nisa.dma_copy(dst=out[r0:r0 + half, :], src=t)
    return out


def test_lnc_disjoint_halves_and_single_core_are_fine():
    spec = _spec(_private_per_core, X, lnc=2)
    assert all("lnc_writes" not in dict(c.program.meta) for c in spec.cores)
    _spec(_both_cores_write_all, X)   # one core: writing twice is sequential, not a race


# ----- affine_range iterations ---------------------------------------------------------------

def _same_rows_every_iteration(x, kind):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in kind(2):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=out, src=t)
    return out


def test_affine_iterations_writing_one_location_race_when_checked():
    loop = _line(_same_rows_every_iteration, "for i in kind(2)")
    write = _line(_same_rows_every_iteration, "dst=out, src=t")
    with pytest.raises(NkiValidationError, match=CODE + r" iterations 0 and 1 of the "
                       rf"nl.affine_range loop at test_races.py:{loop} both write "
                       r"out\[0, 0\]\.\.out\[127, 15\] \(8192 bytes\): iteration 0 at "
                       rf"test_races.py:{write} \(dma_copy\), iteration 1 at "
                       rf"test_races.py:{write}(.|\n)*nl.sequential_range(.|\n)*"
                       rf"at test_races.py:{loop}: +for i in kind"):
        _spec(_same_rows_every_iteration, X, nl.affine_range, check_races=True)


def test_affine_race_check_is_opt_in(monkeypatch):
    monkeypatch.delenv("NKI_CHECK_RACES", raising=False)
    _spec(_same_rows_every_iteration, X, nl.affine_range)
    monkeypatch.setenv("NKI_CHECK_RACES", "1")
    with pytest.raises(NkiValidationError, match=CODE):
        _spec(_same_rows_every_iteration, X, nl.affine_range)
    _spec(_same_rows_every_iteration, X, nl.affine_range, check_races=False)  # kwarg wins


@pytest.mark.parametrize("kind", [nl.sequential_range, nl.static_range, range])
def test_other_loop_kinds_never_race(kind):
    _spec(_same_rows_every_iteration, X, kind, check_races=True)


def _accumulate_in_sbuf(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.affine_range(2):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)   # own tile: never a race
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_vector_accumulation_across_affine_iterations_is_a_race():
    write = _line(_accumulate_in_sbuf, "dst=acc, data1=acc")
    with pytest.raises(NkiValidationError, match=CODE + r" iterations 0 and 1 .* both write "
                       rf"acc\[0, 0\]\.\.acc\[127, 15\].*test_races.py:{write} "
                       r"\(tensor_tensor\)"):
        _spec(_accumulate_in_sbuf, X, check_races=True)


def _psum_k_loop(a, b, accumulate_always_false):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        at = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 32), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
        acc = False if accumulate_always_false else k > 0
        nisa.nc_matmul(dst=ps, stationary=at, moving=bt, accumulate=acc)
    res = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_psum_matmul_accumulation_is_exempt_but_repeated_overwrite_races():
    a, b = np.zeros((384, 64), np.float32), np.zeros((384, 32), np.float32)
    _spec(_psum_k_loop, a, b, False, check_races=True)
    with pytest.raises(NkiValidationError, match=CODE + r" iterations 0 and 1 .* ps\[0, 0\]"
                       r"\.\.ps\[63, 31\].*\(nc_matmul\)"):
        _spec(_psum_k_loop, a, b, True, check_races=True)


def _nested(x):
    # outer affine loop over row blocks, inner sequential loop accumulating into a tile
    # created in the outer iteration: every write is private to an outer iteration
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        acc = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for _j in nl.sequential_range(3):
            t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=acc)
    return out


def test_nested_loops_with_per_iteration_state_are_fine():
    _spec(_nested, X, check_races=True)


def _alias_race(x):
    # a and b are one SBUF region under two names: iterations write it through each
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
    b = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
    for i in nl.affine_range(2):
        nisa.dma_copy(dst=a if i == 0 else b, src=x[i * 128:(i + 1) * 128, :])
    nisa.dma_copy(dst=out, src=a)
    return out


def test_race_through_address_alias_is_found():
    with pytest.raises(NkiValidationError, match=CODE + r" iterations 0 and 1 .* b\[0, 0\]"):
        _spec(_alias_race, X, check_races=True)


# ----- LNC ordering points: barriers, collectives, sendrecv ----------------------------------

X128 = np.zeros((128, 16), np.float32)


def _handover(x, barrier: bool):
    # core 0 writes the output, then (after the barrier) core 1 overwrites the same rows
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    me = nl.program_id(0)
    if me == 0:
        nisa.dma_copy(dst=out, src=t)                     # first writer
    if barrier:
        nisa.core_barrier(data=out, cores=(0, 1))
    if me == 1:
        nisa.dma_copy(dst=out, src=t)                     # second writer
    return out


def test_writes_on_opposite_sides_of_a_barrier_do_not_race():
    _spec(_handover, X128, True, lnc=2)


def test_without_the_barrier_the_handover_races_naming_both_lines():
    l0 = _line(_handover, "# first writer")
    l1 = _line(_handover, "# second writer")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm out\[0, 0\]\.\.out\[127, 15\] \(8192 bytes\): core 0 at "
                       rf"test_races.py:{l0} \(dma_copy\), core 1 at test_races.py:{l1} "
                       r"\(dma_copy\), and no nisa.core_barrier"):
        _spec(_handover, X128, False, lnc=2)


def _same_epoch(x):
    # a barrier first, then both cores write the same rows in the same epoch
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    me = nl.program_id(0)
    nisa.dma_copy(dst=out[me * 128:(me + 1) * 128, :], src=t)   # own half: fine
    nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out[0:4, :], src=t[0:4, :])                          # both: race
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


def test_same_bytes_in_the_same_epoch_race():
    line = _line(_same_epoch, "# both: race")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm out\[0, 0\]\.\.out\[3, 15\] \(256 bytes\): core 0 at "
                       rf"test_races.py:{line} \(dma_copy\), core 1 at test_races.py:{line}"
                       rf"(.|\n)*at test_races.py:{line}: +nisa.dma_copy"):
        _spec(_same_epoch, X, lnc=2)


def _after_exchange(x, kind):
    # core 0 writes the output; the cores synchronise; core 1 overwrites it
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    me = nl.program_id(0)
    if me == 0:
        nisa.dma_copy(dst=out, src=t)
    got = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    if kind == "sendrecv":
        nisa.sendrecv(src=t, dst=got, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    elif kind == "all_reduce":
        ncc.all_reduce(srcs=[t], dsts=[got], replica_group=ncc.ReplicaGroup([[0, 1]]),
                       op=nl.add)
    elif kind == "one_way":     # core 0 only sends, core 1 only receives: 0 -> 1 is ordered
        ncc.collective_permute(srcs=[t], dsts=[got], source_target_pairs=[(0, 1)])
    if me == 1:
        nisa.dma_copy(dst=out, src=got)
    return out


@pytest.mark.parametrize("kind", ["sendrecv", "all_reduce", "one_way"])
def test_sendrecv_and_collectives_order_writes(kind):
    _spec(_after_exchange, X, kind, lnc=2)


def _wrong_way(x):
    # core 1 writes, then sends to core 0; core 0 wrote the same rows *before* receiving:
    # the one-way message orders core 1's write before core 0's later writes only
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    got = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=t)                                       # both cores
    ncc.collective_permute(srcs=[t], dsts=[got], source_target_pairs=[(1, 0)])
    return out


def test_a_one_way_message_does_not_order_the_receivers_earlier_writes():
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm out\[0, 0\]"):
        _spec(_wrong_way, X, lnc=2)


def test_epoch_clocks_match_kth_round_and_fifo_mailboxes():
    from nki.ir.nodes import Instr
    from nki.ir.ops import Opcode
    from nki.jit.races import Sync, epoch_clocks

    ins = Instr(Opcode.CORE_BARRIER, (), ())
    bar = Sync(ins, round=(0, 1))
    send, recv = Sync(ins, sends=((1, "p"),)), Sync(ins, recvs=((0, "p"),))
    c0, c1 = epoch_clocks([[bar, send], [recv, bar]])
    # core 1's receive waits for core 0's send, which follows core 0's barrier, which waits
    # for core 1's barrier, which follows the receive: a deadlock, so nothing is ordered
    assert c0.tolist() == [[0, 0]] * 3 and c1.tolist() == [[0, 0]] * 3
    c0, c1 = epoch_clocks([[bar, send], [bar, recv]])
    assert c0.tolist() == [[0, 0], [1, 1], [2, 1]]
    assert c1.tolist() == [[0, 0], [1, 1], [2, 2]]


def _barrier_in_runtime_loop(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    count = nisa.register_alloc()
    nisa.register_load(count, sb)
    me = nl.program_id(0)
    if me == 0:
        nisa.dma_copy(dst=out, src=t)

    def body(i):
        nisa.core_barrier(data=out, cores=(0, 1))

    nl.fori_loop(0, count, body)
    if me == 1:
        nisa.dma_copy(dst=out, src=t)
    return out


def test_barrier_in_a_runtime_loop_orders_nothing():
    # the loop may run zero times: the barrier is no ordering point the check can rely on
    with pytest.raises(NkiValidationError, match=CODE):
        _spec(_barrier_in_runtime_loop, X128, np.ones((1, 1), np.int32), lnc=2)


# ----- LNC writes at run-time offsets --------------------------------------------------------

IDX = np.arange(128, dtype=np.int32)[:, None]
WHOLE = r" \(dynamic offsets: the whole tensor is assumed written\)"


def _scatter_both(x, idx, own_outputs):
    # each core scatters rows through an index tile (indirect DMA)
    me = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scratch = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(2)]
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    ids = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    dst = scratch[me] if own_outputs else scratch[0]
    rows = dst.ap([[16, 128], [1, 16]], 0, vector_offset=ids, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=t)                                   # scatter
    nisa.dma_copy(dst=out[me * 128:(me + 1) * 128, :], src=t)
    return out


def test_indirect_scatters_by_both_cores_race_conservatively():
    line = _line(_scatter_both, "# scatter")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm scratch\[0, 0\]\.\.scratch\[255, 15\] \(16384 bytes\)" + WHOLE +
                       rf": core 0 at test_races.py:{line} \(dma_indirect\)(.|\n)*"
                       r"rule: the same location"):
        _spec(_scatter_both, X, IDX, False, lnc=2)


def test_indirect_scatter_into_a_tensor_only_one_core_writes_is_fine():
    _spec(_scatter_both, X, IDX, True, lnc=2)


def _register_offset(x, n, overlap):
    # each core writes 128 rows at a register offset (its own scratch unless overlap)
    me = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scratch = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(2)]
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    r = nisa.register_alloc()
    nisa.register_load(r, sb)
    dst = scratch[0] if overlap else scratch[me]
    nisa.dma_copy(dst=dst[nl.ds(r * 128, 128), :], src=t)            # dynamic
    nisa.dma_copy(dst=out[me * 128:(me + 1) * 128, :], src=t)
    return out


def test_register_offset_writes_by_both_cores_race_conservatively():
    line = _line(_register_offset, "# dynamic")
    with pytest.raises(NkiValidationError, match=CODE + r" LNC cores 0 and 1 both write "
                       r"shared_hbm scratch\[0, 0\]\.\.scratch\[255, 15\] \(16384 bytes\)" + WHOLE +
                       rf": core 0 at test_races.py:{line} \(dma_copy\), core 1 at "
                       rf"test_races.py:{line}"):
        _spec(_register_offset, X, np.zeros((1, 1), np.int32), True, lnc=2)


def test_register_offset_write_into_own_tensor_is_fine():
    _spec(_register_offset, X, np.zeros((1, 1), np.int32), False, lnc=2)
