"""The rarer instructions, as host calls: ``activate2``, ``exponential``,
``tensor_scalar_cumulative`` (Scalar/Vector engines, fp32 math) and the GpSimd
``sequence_bounds``, ``nonzero_with_count``, ``topk``.

They run as numpy in Python (see ``collectives.host_call``), calling the same compiled ALU and
transcendental kernels as the rest of the simulator, so they cost no LLVM compile and agree
with ``activation``/``tensor_scalar`` bit for bit. Accumulator registers are the engines'
shared ones at the end of the PSUM arena (lane ``p`` = partition ``p`` of the operands).
"""

from __future__ import annotations

import numpy as np

from nki.ir.ops import Alu, Opcode, ReduceCmd
from nki.sim import transcend as tr
from nki.sim.emit import emitter, imm
from nki.sim.emit.activation import apply_act
from nki.sim.emit.collectives import HostCall, host_call, host_op
from nki.sim.helpers import accumulators as acc_state
from nki.sim.helpers import alu
from nki.sim.layout import SCALAR_ACC_FROM_END, VECTOR_ACC_FROM_END, operand_base

IDLE, RESET, REDUCE, RESET_REDUCE, LOAD_REDUCE = (int(c) for c in ReduceCmd)
_IDENTITY = {int(Alu.add): 0.0, int(Alu.multiply): 1.0, int(Alu.maximum): -np.inf,
             int(Alu.minimum): np.inf, int(Alu.abs_max): 0.0, int(Alu.abs_min): np.inf}


def registers(call: HostCall, scalar_engine: bool, P: int) -> np.ndarray:
    """A (P,) fp32 view of the Scalar (activation) or Vector engine accumulators of this
    call's lanes (:func:`_first_lane`)."""
    f = call.PS.view(np.float32)
    start = f.size - (SCALAR_ACC_FROM_END if scalar_engine else VECTOR_ACC_FROM_END)
    lane0 = _first_lane(call, scalar_engine)
    return f[start + lane0:start + lane0 + P]


def _first_lane(call: HostCall, scalar_engine: bool) -> int:
    """ScalarE lane i is physical partition i of the data operand (operand 1), as in
    ``activation``; VectorE lanes count from the access's first partition, as in
    ``tensor_scalar_reduce`` and ``select_reduce``."""
    if not scalar_engine:
        return 0
    return int(acc_state.first_lane.py_func(call.irow, operand_base(1), call.L))


def _track(call: HostCall, scalar_engine: bool, P: int, reads: bool, writes: bool) -> None:
    """Note this call's use of its accumulator lanes (nki/sim/helpers/accumulators.py): a
    read of never-written lanes is logged before they are used, then written lanes marked."""
    engine = acc_state.SCALAR if scalar_engine else acc_state.VECTOR
    lane0 = _first_lane(call, scalar_engine)
    if reads:
        acc_state.check_lanes.py_func(call.PS, call.frow, engine, lane0, P)
    if writes:
        acc_state.mark_written.py_func(call.PS, engine, lane0, P)


def _col(call: HostCall, k: int, imm: float, P: int) -> np.ndarray:
    """Operand ``k`` as a contiguous (P, 1) fp32 column, or the immediate."""
    if call.present(k):
        return np.ascontiguousarray(call.f32(k).reshape(P, 1))
    return np.full((1, 1), np.float32(imm), np.float32)


def _binary(op: int, a: np.ndarray, b: np.ndarray, reverse: int) -> np.ndarray:
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return alu.binary_f32(op, b, a) if reverse else alu.binary_f32(op, a, b)


def _reduce_rows(op: int, y: np.ndarray) -> np.ndarray:
    if op == int(Alu.abs_max):
        return np.abs(y).max(axis=1)
    if op == int(Alu.abs_min):
        return np.abs(y).min(axis=1)
    fold = {int(Alu.add): np.sum, int(Alu.maximum): np.max, int(Alu.minimum): np.min}[op]
    return fold(y, axis=1).astype(np.float32)


def update_registers(regs, cmd: int, op: int, rows, init=None) -> None:
    """Apply a reduce_cmd to accumulator registers with this call's row results."""
    if cmd == RESET:
        regs[:] = 0.0
    elif cmd == RESET_REDUCE:
        regs[:] = rows
    elif cmd == LOAD_REDUCE:
        regs[:] = _reduce_pair(op, np.asarray(init, np.float32).reshape(-1), rows)
    elif cmd == REDUCE:
        regs[:] = _reduce_pair(op, regs, rows)


def _reduce_pair(op: int, a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if op == int(Alu.abs_max):
        return np.maximum(np.abs(a), np.abs(b))
    if op == int(Alu.abs_min):
        return np.minimum(np.abs(a), np.abs(b))
    return {int(Alu.add): np.add, int(Alu.maximum): np.maximum,
            int(Alu.minimum): np.minimum, int(Alu.multiply): np.multiply}[op](a, b)


@host_op(Opcode.ACTIVATE2)
def _activate2(call: HostCall) -> None:
    """dst = act((data op0 imm0) op1 imm1), optional reduction into the ScalarE registers.
    ints: P, act, op0, op1, reverse0, reverse1, reduce_op, reduce_cmd, has_op1.
    floats: imm0, imm1, relu_param. operands: dst, data, imm0, imm1, reduce_res."""
    P, act, op0, op1, rev0, rev1, rop, cmd, has1 = (int(v) for v in call.irow[2:11])
    x = call.f32(1).reshape(P, -1)
    y = _binary(op0, x, _col(call, 2, call.frow[0], P), rev0)
    if has1:
        y = _binary(op1, y, _col(call, 3, call.frow[1], P), rev1)
    if act == 31:      # prelu: relu_param is the negative slope
        out = np.where(y > 0, y, y * np.float32(call.frow[2])).astype(np.float32)
    else:
        out = apply_act(act, np.ascontiguousarray(y, np.float32))
    call.put_f32(0, out)
    # reduce_res reads the registers out after the update, under idle too (AWS: "an
    # additional instruction is emitted to read the accumulator values")
    if cmd != IDLE or call.present(4):
        _track(call, True, P, cmd == REDUCE or (cmd == IDLE and call.present(4)), cmd != IDLE)
        regs = registers(call, True, P)
        if cmd != IDLE:
            update_registers(regs, cmd, rop, _reduce_rows(rop, out))
        if call.present(4):
            call.put_f32(4, regs.reshape(P, 1))


@host_op(Opcode.EXPONENTIAL)
def _exponential(call: HostCall) -> None:
    """dst = exp(src - max_value); row sums into the VectorE accumulators.
    ints: P, reduce_cmd. floats: max_value, reduce_init.
    operands: dst, src, max_value, reduce_res, reduce_init."""
    P, cmd = int(call.irow[2]), int(call.irow[3])
    x = call.f32(1).reshape(P, -1)
    out = tr.exp(np.ascontiguousarray(x - _col(call, 2, call.frow[0], P), np.float32))
    call.put_f32(0, out)
    if cmd == IDLE:      # AWS: under idle "the accumulator state may still be modified"
        acc_state.mark_undefined.py_func(call.PS, acc_state.VECTOR, 0, P)
    else:
        _track(call, False, P, cmd == REDUCE, True)
        regs = registers(call, False, P)
        init = _col(call, 4, call.frow[1], P).reshape(-1) * np.ones(P, np.float32)
        update_registers(regs, cmd, int(Alu.add), _reduce_rows(int(Alu.add), out), init)
        if call.present(3):
            call.put_f32(3, regs.reshape(P, 1))


@host_op(Opcode.TENSOR_SCALAR_CUMULATIVE)
def _cumulative(call: HostCall) -> None:
    """Per lane along the free dim: reg = op1(op0(x, imm0), reg); dst = reg after each step.
    ints: P, op0, op1, reduce_cmd. floats: imm0, imm1. operands: dst, src, imm0, imm1."""
    P, op0, op1, cmd = (int(v) for v in call.irow[2:6])
    x = call.f32(1).reshape(P, -1)
    t = _binary(op0, x, _col(call, 2, call.frow[0], P), 0)
    _track(call, False, P, cmd == REDUCE, True)
    regs = registers(call, False, P)
    if cmd == LOAD_REDUCE:
        reg = (_col(call, 3, call.frow[1], P) * np.ones((P, 1), np.float32)).astype(np.float32)
    elif cmd == REDUCE:
        reg = regs.reshape(P, 1).copy()
    else:
        reg = np.full((P, 1), _IDENTITY.get(op1, 0.0), np.float32)
    out = np.empty_like(t)
    for j in range(t.shape[1]):
        reg = _binary(op1, t[:, j:j + 1], reg, 0)
        out[:, j] = reg[:, 0]
    regs[:] = reg[:, 0]
    call.put_f32(0, out)


@host_op(Opcode.SEQUENCE_BOUNDS)
def _sequence_bounds(call: HostCall) -> None:
    """dst (1, 2, N): [start, end) of the run of equal segment ids holding each element;
    id 0 (padding) gives (N, -1). operands: dst, segment_ids."""
    ids = call.f32(1).reshape(-1)
    call.put_f32(0, reference_sequence_bounds(ids).reshape(1, -1))


def reference_sequence_bounds(ids) -> np.ndarray:
    """Oracle: (2, N) float32 starts and exclusive ends of runs; padding (0) → (N, -1)."""
    ids = np.asarray(ids, np.float32).reshape(-1)
    n = ids.size
    start = np.full(n, n, np.float32)
    end = np.full(n, -1, np.float32)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and ids[j + 1] == ids[i]:
            j += 1
        if ids[i] != 0:
            start[i:j + 1], end[i:j + 1] = i, j + 1
        i = j + 1
    return np.stack([start, end])


@host_op(Opcode.NONZERO_WITH_COUNT)
def _nonzero_with_count(call: HostCall) -> None:
    """On partitions 0, 16, ..., 112: dst[p, :N] = indices (+offset) of src[p]'s non-zeros,
    padded with padding_val; dst[p, N] = their count. ints: P, offset, padding."""
    P, offset, pad = (int(v) for v in call.irow[2:5])
    bits = call.bits(0)                     # other partitions keep their bits
    src = call.f32(1).reshape(P, -1)
    is_float = int(call.irow[call.base(0) + 1]) == 0
    for p in range(0, P, 16):
        vals = reference_nonzero_with_count(src[p], offset, pad)
        bits[p] = (vals.view(np.uint32).astype(np.int64) if is_float
                   else vals.astype(np.int64) & 0xFFFFFFFF)
    call.put_bits(0, bits)


def reference_nonzero_with_count(row, offset=0, padding_val=-1) -> np.ndarray:
    """Oracle for one partition: N index slots then the count (fp32 values)."""
    row = np.asarray(row, np.float32).reshape(-1)
    idx = np.flatnonzero(row != 0)
    out = np.full(row.size + 1, padding_val, np.float32)
    out[:idx.size] = idx + offset
    out[row.size] = idx.size
    return out


TOPK_GROUP = 16


@host_op(Opcode.TOPK)
def _topk(call: HostCall) -> None:
    """Per group of 16 partitions, the K largest of its bf16 snake (positions 0..n-1),
    written in the same snake layout, ascending (see ``nki.lang.misc.topk``).
    ints: P, n. operands: val_dst, idx_dst, src."""
    P, n = int(call.irow[2]), int(call.irow[3])
    vals, idx = reference_topk(call.bits(2).reshape(P, -1).astype(np.uint16), n,
                               call.bits(0).reshape(P, -1).astype(np.uint16),
                               call.bits(1).reshape(P, -1))
    call.put_bits(0, vals.astype(np.int64))
    call.put_bits(1, idx)


def reference_topk(src_bits: np.ndarray, n: int, val_bits: np.ndarray,
                   idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Oracle of ``nisa.topk`` on bf16 bit patterns: ``val_bits`` / ``idx`` (P, K) with
    each group's results at snake places ``[g + j % 16, j // 16]``, ascending by value
    (selection: largest first, lower snake position first among equals, NaN smallest)."""
    P, k = val_bits.shape
    out_v, out_i = val_bits.copy(), np.asarray(idx, np.int64).copy()
    j = np.arange(k)
    for g in range(0, P, TOPK_GROUP):
        snake = src_bits[g:g + TOPK_GROUP].flatten(order="F")[:n]
        values = (snake.astype(np.uint32) << 16).view(np.float32)
        chosen = np.argsort(-values, kind="stable")[:k][::-1]
        out_v[g + j % TOPK_GROUP, j // TOPK_GROUP] = snake[chosen]
        out_i[g + j % TOPK_GROUP, j // TOPK_GROUP] = chosen
    return out_v, out_i


# ----- encoders ----------------------------------------------------------------------------
def _parts(ins, role: str) -> int:
    return ins.operand(role).dims[0][1]


@emitter(Opcode.ACTIVATE2, host_call)
def encode_activate2(ins, w, ops):
    w.ints(_parts(ins, "dst"), int(ins.attr("act")), int(ins.attr("op0")),
           int(ins.attr("op1") or 0), int(ins.attr("reverse0")), int(ins.attr("reverse1")),
           int(ins.attr("reduce_op")), int(ins.attr("reduce_cmd")),
           int(ins.attr("op1") is not None))
    w.floats(imm(ins.attr("imm0")), imm(ins.attr("imm1")), ins.attr("relu_param"))
    for role in ("dst", "data", "imm0", "imm1", "reduce_res"):
        w.operand(ops.get(role))
    w.site()


@emitter(Opcode.EXPONENTIAL, host_call)
def encode_exponential(ins, w, ops):
    w.ints(_parts(ins, "dst"), int(ins.attr("reduce_cmd")))
    w.floats(imm(ins.attr("max_value")), imm(ins.attr("reduce_init")))
    for role in ("dst", "src", "max_value", "reduce_res", "reduce_init"):
        w.operand(ops.get(role))
    w.site()


@emitter(Opcode.TENSOR_SCALAR_CUMULATIVE, host_call)
def encode_cumulative(ins, w, ops):
    w.ints(_parts(ins, "dst"), int(ins.attr("op0")), int(ins.attr("op1")),
           int(ins.attr("reduce_cmd")))
    w.floats(imm(ins.attr("imm0")), imm(ins.attr("imm1")))
    for role in ("dst", "src", "imm0", "imm1"):
        w.operand(ops.get(role))
    w.site()


@emitter(Opcode.SEQUENCE_BOUNDS, host_call, reference_sequence_bounds)
def encode_sequence_bounds(ins, w, ops):
    w.operand(ops["dst"]).operand(ops["segment_ids"])


@emitter(Opcode.NONZERO_WITH_COUNT, host_call, reference_nonzero_with_count)
def encode_nonzero_with_count(ins, w, ops):
    w.ints(_parts(ins, "dst"), ins.attr("index_offset"), ins.attr("padding_val"))
    w.operand(ops["dst"]).operand(ops["src"])


@emitter(Opcode.TOPK, host_call, reference_topk)
def encode_topk(ins, w, ops):
    w.ints(_parts(ins, "src"), ins.attr("n"))
    w.operand(ops["val_dst"]).operand(ops["idx_dst"]).operand(ops["src"])
