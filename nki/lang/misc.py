"""Rules of the remaining instructions: ``activate2``, ``exponential``,
``tensor_scalar_cumulative``, ``sequence_bounds``, ``nonzero_with_count``, ``topk``, and
``nl.device_print`` / ``nl.no_reorder`` (spec §1.5, §2, §4.1).

They run as host calls (``nki/sim/emit/misc.py``); the rules here are ordinary rules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Opcode, ReduceCmd
from nki.ir.types import Memory
from nki.lang.activation import _ACT_TOKENS
from nki.lang.common import Call, acc
from nki.lang.operators import as_act, as_alu, op_name
from nki.lang.tensor import NkiTensor

_SBUF = (Memory.SBUF,)
# activate2's (op0, op1) pairs: arithmetic ops only (the hardware takes a few fixed combos)
_ARITH = (Alu.add, Alu.subtract, Alu.multiply, Alu.maximum, Alu.minimum, Alu.bypass)
_ACT2_REDUCE = (Alu.add, Alu.maximum, Alu.minimum, Alu.abs_max, Alu.abs_min)


def _alu(call: Call, op, role: str, allowed=None) -> Alu:
    alu = as_alu(op)
    if alu is None or (allowed is not None and alu not in allowed):
        raise call.error("nki_invalid_argument", f"{role}={op_name(op)} is not an accepted "
                         "operator here")
    return alu


def _cmd(call: Call, value) -> ReduceCmd:
    try:
        return ReduceCmd(int(value))
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", f"reduce_cmd={value!r} is not a "
                         "nisa.reduce_cmd value") from None


def _imm(call: Call, value, role: str, parts: int, reads: list, attrs: list) -> None:
    """A scalar (an fp32 immediate) or a [P, 1] tile operand named ``role``."""
    v = call.scalar_vector(value, role, parts)
    if isinstance(v, NkiTensor):
        reads.append((role, acc(v)))
        attrs.append((role, None))
    else:
        attrs.append((role, float(v)))


def _res(call: Call, value, role: str, parts: int, writes: list) -> None:
    if value is not None:
        r = call.tile(value, role)
        if r.shape[0] != parts or r.size != parts:
            raise call.error("nki_shape_mismatch", f"{role!r} must be a [{parts}, 1] tile, got "
                             f"{r.shape}")
        writes.append((role, acc(r)))


def activate2(dst, op, data, imm0=0.0, imm1=None, op0=Alu.multiply, op1=None, relu_param=0.0,
              reverse0=False, reverse1=False, reduce_op=Alu.add, reduce_res=None,
              reduce_cmd=ReduceCmd.idle, name=""):
    """``dst = op((data op0 imm0) op1 imm1)`` on the Scalar engine (fp32), with an optional
    row reduction (add/max/min/abs_max/abs_min) into the shared ScalarE registers.

    ``imm0``/``imm1`` are numbers or [P, 1] tiles; ``op=nl.prelu`` uses ``relu_param`` as the
    negative slope.

    Example:
        >>> nisa.activate2(dst=y, op=nl.exp, data=x, imm0=-1.0, op0=nl.multiply)  # doctest: +SKIP
    """
    call = Call("nisa.activate2")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    act = as_act(op) if isinstance(op, Hashable) else None
    act = _ACT_TOKENS.get(op) if act is None and isinstance(op, Hashable) else act
    if act is None:
        raise call.error("nki_invalid_argument", f"op={op_name(op)} is not an activation")
    P = x.shape[0]
    reads, writes, attrs = [("data", acc(x))], [("dst", acc(d))], []
    _imm(call, imm0, "imm0", P, reads, attrs)
    a1 = None
    if op1 is not None:
        a1 = _alu(call, op1, "op1", _ARITH)
        _imm(call, 0.0 if imm1 is None else imm1, "imm1", P, reads, attrs)
    cmd = _cmd(call, reduce_cmd)
    _res(call, reduce_res, "reduce_res", P, writes)
    attrs += [("act", act), ("op0", _alu(call, op0, "op0", _ARITH)), ("op1", a1),
              ("reverse0", bool(reverse0)), ("reverse1", bool(reverse1)),
              ("relu_param", float(relu_param)),
              ("reduce_op", _alu(call, reduce_op, "reduce_op", _ACT2_REDUCE)),
              ("reduce_cmd", cmd)]
    ins = Instr(Opcode.ACTIVATE2, tuple(writes), tuple(reads), tuple(attrs), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=ReduceCmd.idle,
                reduce_init=0.0, name=""):
    """``dst = exp(src - max_value)`` on the Vector engine; the row sums go to the VectorE
    accumulators per ``reduce_cmd`` (``load_reduce`` starts from ``reduce_init``).

    Example:
        >>> nisa.exponential(dst=p, src=s, max_value=row_max, reduce_res=row_sum,
        ...                  reduce_cmd=nisa.reduce_cmd.reset_reduce)  # doctest: +SKIP
    """
    call = Call("nisa.exponential")
    d, x = call.tile(dst, "dst"), call.tile(src, "src")
    call.same_elements(d, x, "dst", "src")
    P = x.shape[0]
    reads, writes, attrs = [("src", acc(x))], [("dst", acc(d))], []
    _imm(call, max_value, "max_value", P, reads, attrs)
    _imm(call, reduce_init, "reduce_init", P, reads, attrs)
    _res(call, reduce_res, "reduce_res", P, writes)
    attrs.append(("reduce_cmd", _cmd(call, reduce_cmd)))
    ins = Instr(Opcode.EXPONENTIAL, tuple(writes), tuple(reads), tuple(attrs), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None,
                             reduce_cmd=ReduceCmd.reset_reduce, name=""):
    """Running scan per partition: ``reg = op1(src[i] op0 imm0, reg)``; ``dst[i] = reg``.

    ``reset_reduce`` starts ``reg`` at ``op1``'s identity, ``reduce`` continues from the
    VectorE accumulators, ``load_reduce`` starts from ``imm1``. Not for int32 data.

    Example:
        >>> nisa.tensor_scalar_cumulative(dst=c, src=x, op0=nl.multiply, op1=nl.add,
        ...                               imm0=1.0)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_scalar_cumulative")
    d, x = call.tile(dst, "dst"), call.tile(src, "src")
    call.same_elements(d, x, "dst", "src")
    if "int32" in (x.dtype.name, d.dtype.name):
        raise call.error("nki_dtype_mismatch", "tensor_scalar_cumulative does not take int32")
    P = x.shape[0]
    reads, attrs = [("src", acc(x))], []
    _imm(call, imm0, "imm0", P, reads, attrs)
    _imm(call, 0.0 if imm1 is None else imm1, "imm1", P, reads, attrs)
    attrs += [("op0", _alu(call, op0, "op0")),
              ("op1", _alu(call, op1, "op1", (Alu.add, Alu.multiply, Alu.maximum,
                                              Alu.minimum))),
              ("reduce_cmd", _cmd(call, reduce_cmd))]
    ins = Instr(Opcode.TENSOR_SCALAR_CUMULATIVE, (("dst", acc(d)),), tuple(reads),
                tuple(attrs), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def sequence_bounds(dst, segment_ids, name=""):
    """For each element of a (1, N) tile of segment ids, the [start, end) of its run of equal
    ids into dst (1, 2, N); padding (id 0) gets (N, -1). fp32 or int32, GpSimd (SBUF).

    Example:
        >>> nisa.sequence_bounds(dst=bounds, segment_ids=ids)  # doctest: +SKIP
    """
    call = Call("nisa.sequence_bounds")
    d, s = call.tile(dst, "dst", _SBUF), call.tile(segment_ids, "segment_ids", _SBUF)
    for t, role in ((d, "dst"), (s, "segment_ids")):
        if t.dtype.name not in ("float32", "int32"):
            raise call.error("nki_dtype_mismatch", f"{role!r} must be float32 or int32")
    if s.shape[0] != 1 or d.shape[0] != 1 or d.size != 2 * s.size:
        raise call.error("nki_shape_mismatch", f"segment_ids must be (1, N) and dst (1, 2, N); "
                         f"got {s.shape} and {d.shape}")
    ins = Instr(Opcode.SEQUENCE_BOUNDS, (("dst", acc(d)),), (("segment_ids", acc(s)),), (),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=""):
    """On partitions 0, 16, ..., 112 (one per GpSimd core): the indices (+ ``index_offset``)
    of ``src``'s non-zero elements, padded with ``padding_val``, then their count: dst holds
    N + 1 values per partition. Other partitions of dst are left unchanged.

    Example:
        >>> nisa.nonzero_with_count(dst=idx, src=mask)  # doctest: +SKIP
    """
    call = Call("nisa.nonzero_with_count")
    if call.trace.target.nc_version < 3:
        raise call.error("nki_unsupported_on_target", "nonzero_with_count needs NeuronCore-v3")
    d, s = call.tile(dst, "dst", _SBUF), call.tile(src, "src", _SBUF)
    call.same_partitions(d, s, "dst", "src")
    n = s.size // s.shape[0]
    if d.size // d.shape[0] != n + 1 or d.dtype.name not in ("int32", "uint32", "float32"):
        raise call.error("nki_shape_mismatch", f"dst must hold {n + 1} int32/uint32/float32 "
                         f"values per partition (indices then the count), got {d.shape} "
                         f"{d.dtype.name}")
    attrs = (("index_offset", int(index_offset)), ("padding_val", int(padding_val)))
    ins = Instr(Opcode.NONZERO_WITH_COUNT, (("dst", acc(d)),), (("src", acc(s)),), attrs,
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


_TOPK_GROUP = 16                 # partitions per GpSimd core: one top-k problem each
_TOPK_N = (8, 65535)             # spec: 8 <= n < 65536
_TOPK_K_MAX = 32767              # spec: 1 <= K < 32768


def _topk_group_start(t: NkiTensor) -> int:
    """The physical first partition of an SBUF view (``address=`` tiles may start late)."""
    addr = t.decl.address
    return t._part + (int(addr[0]) if addr else 0)


def _topk_views(call: Call, val_dst, idx_dst, src) -> tuple[NkiTensor, NkiTensor, NkiTensor]:
    """SBUF bf16 src/val_dst and uint32 idx_dst over the same whole groups of 16 partitions."""
    v, i, s = (call.tile(t, r, _SBUF) for t, r in ((val_dst, "val_dst"), (idx_dst, "idx_dst"),
                                                    (src, "src")))
    for t, role, want in ((s, "src", "bfloat16"), (v, "val_dst", "bfloat16"),
                          (i, "idx_dst", "uint32")):
        if t.dtype.name != want:
            raise call.error("nki_dtype_mismatch", f"{role} must be {want}, got "
                             f"{t.dtype.name}")
        if t.shape[0] != s.shape[0]:
            raise call.error("err_num_partition_mismatch", f"{role} has {t.shape[0]} "
                             f"partitions but src has {s.shape[0]}")
        # one top-k per GpSimd core, each wired to partitions [16c, 16c + 16)
        if s.shape[0] % _TOPK_GROUP or _topk_group_start(t) % _TOPK_GROUP:
            raise call.error("nki_shape_mismatch", f"{role} must cover whole groups of "
                             f"{_TOPK_GROUP} partitions (start and size multiples of "
                             f"{_TOPK_GROUP}); it starts at partition "
                             f"{_topk_group_start(t)} with {t.shape[0]}")
    return v, i, s


def topk(val_dst, idx_dst, src, n, sorted=False, name=""):  # noqa: A002 - NKI's name
    """Top-K of each group of 16 partitions of ``src`` read as a bf16 *snake* (spec §4;
    AWS docs ≥ 2.33): snake position ``s`` of a group starting at partition ``g`` is
    ``src[g + s % 16, s // 16]`` (free dims flattened), and positions ``0..n-1`` are
    active. K is ``val_dst``'s free size. Result ``j`` of a group goes to the same snake
    place of the outputs: ``val_dst[g + j % 16, j // 16]`` gets the value (bits copied)
    and ``idx_dst[...]`` its snake position; every other output element is left as it was
    (the first ``ceil(K / 16)`` columns hold the results). Results are in ascending value
    order (the order AWS's docs state; hardware may differ and ``sorted=False`` promises
    none); among equal values the lower snake positions are selected, NaN is smallest.

    Args:
        val_dst: bf16 SBUF tile [P, K]. idx_dst: uint32 SBUF tile [P, K].
        src: bf16 SBUF tile with at least ``ceil(n / 16)`` elements per partition.
        n: active snake elements per group, ``8 <= n < 65536``, ``K <= n``.

    Example:
        >>> nisa.topk(val_dst=vals, idx_dst=idx, src=scores, n=512)  # doctest: +SKIP
    """
    call = Call("nisa.topk")
    v, i, s = _topk_views(call, val_dst, idx_dst, src)
    call.same_elements(v, i, "val_dst", "idx_dst")
    k, width = v.size // v.shape[0], s.size // s.shape[0]
    if isinstance(n, bool) or not isinstance(n, int) or not _TOPK_N[0] <= n <= _TOPK_N[1]:
        raise call.error("nki_invalid_argument", f"n={n!r} must be an int in "
                         f"{_TOPK_N[0]}..{_TOPK_N[1]}")
    if -(-n // _TOPK_GROUP) > width:
        raise call.error("nki_shape_mismatch", f"n={n} snake elements need ceil(n / 16) = "
                         f"{-(-n // _TOPK_GROUP)} elements per partition of src, which has "
                         f"{width}")
    if not 1 <= k <= min(n, _TOPK_K_MAX):
        raise call.error("nki_shape_mismatch", f"K = val_dst's {k} elements per partition "
                         f"must be in 1..min(n, {_TOPK_K_MAX}) (n={n})")
    ins = Instr(Opcode.TOPK, (("val_dst", acc(v)), ("idx_dst", acc(i))), (("src", acc(s)),),
                (("n", n), ("sorted", bool(sorted))), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def device_print(prefix, tensor, name=""):
    """Print ``prefix`` and the tensor's values to stdout when the kernel runs (each core
    prints its own, tagged ``[core c]`` in LNC launches). SBUF, PSUM or HBM tensors.

    Example:
        >>> nl.device_print("scores", s)  # doctest: +SKIP
    """
    call = Call("nl.device_print")
    t = call.tensor(tensor, "tensor")
    attrs = (("prefix", str(prefix)), ("shape", tuple(t.shape)[:5]),
             ("is_int", t.dtype.is_int), ("num_cores", call.trace.num_cores))
    ins = Instr(Opcode.DEVICE_PRINT, (), (("tensor", acc(t)),), attrs, call.loc, name)
    return call.trace.emit(ins, api=call.api)


@contextlib.contextmanager
def no_reorder():
    """``with nl.no_reorder():`` keeps the block's instructions in program order. The
    simulator runs every instruction in program order anyway, so the block changes nothing.

    Example:
        >>> with nl.no_reorder():  # doctest: +SKIP
        ...     nisa.dma_copy(dst=a, src=b)
    """
    Call("nl.no_reorder")   # only inside a kernel, like every nl API
    yield


