"""Dynamic and indirect access rules: ``.ap(scalar_offset=..., vector_offset=...)``,
``vector_select``, indirect ``dma_copy`` gathers/scatters, ``dma_compute`` (scatter-add),
``nc_n_gather`` and ``nl.gather_flattened`` (spec §1.8, §3.1, §4.1).

An indirect view (``vector_offset``) picks the rows of its first dim at run time: row ``i``
of the view starts at ``offset + index[i] * S`` where ``S`` is the element stride of
``indirect_dim`` in the base tensor. Its operand's first dim is recorded as ``(S, P)`` and
the index tile travels as a separate ``index`` operand; the trace-time rule computes which
index values keep a row inside the tensor, and the runtime checks each row against them
(``oob_mode.error`` faults with the instruction's file:line, ``oob_mode.skip`` skips the row).
"""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, OobMode, Opcode
from nki.ir.types import Memory
from nki.lang import dma as _dma
from nki.lang.common import Call, acc
from nki.lang.control import (
    allowed_range,
    oob_mode_of,
    register_terms,
    scalar_register,
)
from nki.lang.operators import as_alu
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation

_DMA_MEMS = (Memory.SBUF, Memory.SHARED_HBM, Memory.PRIVATE_HBM)
MAX_SRCS = 4


def _prod(values) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n


def _dim_stride(t: NkiTensor, view: NkiTensor, dim: int, role: str) -> int:
    """Elements (of the view's dtype) between consecutive indices of ``dim`` of the base
    tensor: ``prod(base.shape[dim+1:])``."""
    shape = t.decl.shape
    if not 0 <= dim < len(shape):
        raise validation("nki_invalid_view", f"{role}: indirect_dim={dim} is not a dim of "
                         f"{t.name!r} (shape {shape})")
    if t.on_chip and dim == 0:
        raise validation("nki_invalid_view", f"{role}: indirect_dim=0 is the partition dim of "
                         f"on-chip {t.name!r}; a dynamic offset moves free dims only")
    nbytes = _prod(shape[dim + 1:]) * t.decl.dtype.itemsize
    if nbytes % view.dtype.itemsize:
        raise validation("nki_invalid_view", f"{role}: the stride of dim {dim} of {t.name!r} "
                         f"is not a whole number of {view.dtype.name} elements")
    return nbytes // view.dtype.itemsize


def _index_tile(call: Call, value, rows: int) -> NkiTensor:
    idx = call.tile(value, "vector_offset", (Memory.SBUF,))
    if not idx.dtype.is_int:
        raise call.error("nki_dtype_mismatch", f"vector_offset must be an integer tile, got "
                         f"{idx.dtype.name}")
    if idx.size != idx.shape[0] or idx.shape[0] != rows:
        raise call.error("nki_shape_mismatch", f"vector_offset must be a [{rows}, 1] tile (one "
                         f"index per row of the access), got shape {idx.shape}")
    return idx


def dynamic_ap(t: NkiTensor, view: NkiTensor, scalar_offset, vector_offset,
               indirect_dim: int) -> NkiTensor:
    """``t.ap(..., scalar_offset=r)`` moves ``view`` by ``r * S`` elements at run time;
    ``vector_offset=idx`` (HBM only) makes row ``i`` start at ``offset + idx[i] * S``."""
    call = Call(f"{t.name}.ap")
    if scalar_offset is not None and vector_offset is not None:
        raise call.error("nki_invalid_argument", ".ap takes scalar_offset or vector_offset, "
                         "not both")
    stride = _dim_stride(t, view, int(indirect_dim), ".ap")
    if scalar_offset is not None:
        reg = scalar_offset
        if not hasattr(reg, "nki_affine"):
            reg = scalar_register(call, scalar_offset)
        return view._new(view._dims, off=reg.nki_affine() * stride + view._off)
    if t.on_chip:
        raise call.error("err_unsupported_memory", "vector_offset (indirect rows) needs the "
                         f".ap-ed tensor in HBM, but {t.name!r} is in {t.buffer.value}")
    idx = _index_tile(call, vector_offset, view.shape[0])
    dims = ((stride, view.shape[0]),) + view._dims[1:]
    return NkiTensor(t.decl, view.dtype, 0, view._off, dims, ind=idx)


def vector_select(t: NkiTensor, dim: int, offsets) -> NkiTensor:
    """``t.vector_select(0, idx)``: row ``i`` of dim 0 is row ``idx[i]`` of ``t`` (HBM)."""
    call = Call(f"{t.name}.vector_select")
    if t.on_chip or dim != 0:
        raise call.error("nki_invalid_view", "vector_select selects rows of dim 0 of an HBM "
                         f"tensor; got dim {dim} of {t.buffer.value} {t.name!r}")
    if not isinstance(t._off, int):
        raise call.error("nki_invalid_view", "vector_select of a view moved by a register")
    idx = call.tile(offsets, "offsets", (Memory.SBUF,))
    if not idx.dtype.is_int or idx.size != idx.shape[0]:
        raise call.error("nki_shape_mismatch", f"offsets must be a [P, 1] integer tile, got "
                         f"{idx.dtype.name} {idx.shape}")
    dims = ((t._dims[0][0], idx.shape[0]),) + t._dims[1:]
    return NkiTensor(t.decl, t.dtype, 0, t._off, dims, ind=idx)


def _is_dynamic(t) -> bool:
    return isinstance(t, NkiTensor) and (t.is_indirect() or
                                         bool(register_terms(t.access().offset)))


def dma_copy(dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, name=""):
    """Copy ``src`` to ``dst`` between HBM and SBUF; either side may be an indirect view
    (``.ap(vector_offset=idx)``: a gather or a scatter of rows) or moved by a register.
    ``oob_mode=nisa.oob_mode.skip`` skips out-of-range rows instead of faulting.

    Example:
        >>> nisa.dma_copy(dst=rows, src=table.ap([[D, 128], [1, D]], 0, vector_offset=idx,
        ...               indirect_dim=0))                          # doctest: +SKIP
    """
    if not (_is_dynamic(dst) or _is_dynamic(src)):
        return _dma.dma_copy(dst, src, priority, oob_mode, dge_mode, engine, name)
    call = Call("nisa.dma_copy")
    mode = oob_mode_of(call, oob_mode)
    if not (dst.is_indirect() or src.is_indirect()):
        return _scalar_dma(call, dst, src, mode)
    if dst.is_indirect() and src.is_indirect():
        raise call.error("nki_invalid_argument", "dma_copy: only one side may be indirect")
    return _rows_instr(call, Opcode.DMA_INDIRECT, dst, [src], mode, ())


def _scalar_dma(call: Call, dst, src, mode: OobMode) -> Instr:
    """A DMA moved by registers: the plain DMA rule; under ``oob_mode.skip`` the same checks
    and an instruction that is skipped when a register is out of range."""
    if mode is OobMode.error:
        return _dma._dma(call, dst, src)
    d, s = call.tensor(dst, "dst", _DMA_MEMS), call.tensor(src, "src", _DMA_MEMS)
    _same_rows(call, d, [s])
    ins = Instr(Opcode.DMA_COPY, (("dst", acc(d)),), (("src", acc(s)),),
                (("oob_mode", mode),), call.loc)
    return call.trace.emit(ins, api=call.api)


def _same_rows(call: Call, d: NkiTensor, srcs: list[NkiTensor]) -> int:
    """Every operand has the same first-dim count P and elements per row; returns P."""
    rows = d.shape[0]
    for k, s in enumerate(srcs):
        if s.shape[0] != rows or s.size // s.shape[0] != d.size // rows:
            raise call.error("nki_shape_mismatch", f"src{k} {s.shape} and dst {d.shape} must "
                             "have the same rows (first dim) and elements per row")
    for t, role in [(d, "dst")] + [(s, f"src{k}") for k, s in enumerate(srcs)]:
        if t.on_chip and t.shape[0] > call.trace.target.pmax:
            raise call.error("err_num_partition_exceed_arch_limit", f"partition dimension "
                             f"{t.shape[0]} of {role!r} exceeds {call.trace.target.pmax}")
    return rows


def _index_of(call: Call, views: list[tuple[str, NkiTensor]]):
    """The one index tile shared by the indirect operands, and their roles."""
    ind = [(role, t) for role, t in views if t.is_indirect()]
    index = ind[0][1]._ind if ind else None
    for role, t in ind:
        if t._ind is not index or t.access() != ind[0][1].access():
            raise call.error("nki_invalid_argument", f"{role!r}: all indirect operands of one "
                             "instruction must be the same view with the same vector_offset")
        if register_terms(t.access().offset):
            raise call.error("nki_invalid_view", f"{role!r}: an indirect view cannot also be "
                             "moved by a register")
    return index, tuple(role for role, _ in ind)


def _rows_instr(call: Call, opcode: Opcode, dst, srcs: list, mode: OobMode, attrs) -> Instr:
    d = call.tensor(dst, "dst", _DMA_MEMS)
    ss = [call.tensor(s, f"src{k}", _DMA_MEMS) for k, s in enumerate(srcs)]
    _same_rows(call, d, ss)
    views = [("dst", d)] + [(f"src{k}", s) for k, s in enumerate(ss)]
    index, roles = _index_of(call, views)
    lo, hi = 0, -1
    if index is not None:
        a = dict(views)[roles[0]].access()
        decl = call.trace.tensors[a.tensor]
        size = decl.free_size * decl.dtype.itemsize // a.dtype.itemsize
        lo, hi = allowed_range(a.offset.const, a.dims[1:], a.dims[0][0], size)
    reads = tuple((f"src{k}", acc(s)) for k, s in enumerate(ss))
    if index is not None:
        reads += (("index", acc(index)),)
    attrs = tuple(attrs) + (("oob_mode", mode), ("idx_lo", lo), ("idx_hi", hi),
                            ("indirect", roles))
    ins = Instr(opcode, (("dst", acc(d)),), reads, attrs, call.loc)
    return call.trace.emit(ins, api=call.api)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=None,
                name=""):
    """``dst = srcs[0] + srcs[1] + ...`` on the DMA engines, in fp32. With ``dst`` and
    ``srcs[0]`` the same indirect HBM view this is a scatter-add (read-modify-write of the
    indexed rows; repeated indices accumulate); an indirect source gathers.

    Example:
        >>> rows = out.ap([[D, 128], [1, D]], 0, vector_offset=idx, indirect_dim=0)
        >>> nisa.dma_compute(dst=rows, srcs=[rows, upd], reduce_op=nl.add)  # doctest: +SKIP
    """
    call = Call("nisa.dma_compute")
    if as_alu(reduce_op) is not Alu.add:
        raise call.error("nki_invalid_argument", "dma_compute supports reduce_op=nl.add only")
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    if not 1 <= len(srcs) <= MAX_SRCS:
        raise call.error("nki_invalid_argument", f"dma_compute takes 1 to {MAX_SRCS} srcs, "
                         f"got {len(srcs)}")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise call.error("nki_invalid_argument", "dma_compute scales must all be 1.0")
    return _rows_instr(call, Opcode.DMA_COMPUTE, dst, srcs, oob_mode_of(call, oob_mode), ())


def nc_n_gather(dst, data, indices, name=""):
    """Per partition, ``dst[p, j] = data[p].flatten()[indices[p, j]]`` on GpSimd (all SBUF;
    uint32/int32 indices; an index outside the row faults at run time).

    Example:
        >>> nisa.nc_n_gather(dst=out, data=table_sb, indices=idx)     # doctest: +SKIP
    """
    call = Call("nisa.nc_n_gather")
    d = call.tile(dst, "dst", (Memory.SBUF,))
    x = call.tile(data, "data", (Memory.SBUF,))
    i = call.tile(indices, "indices", (Memory.SBUF,))
    call.same_partitions(d, x, "dst", "data")
    call.same_elements(d, i, "dst", "indices")
    if d.dtype != x.dtype:
        raise call.error("nki_dtype_mismatch", f"dst ({d.dtype.name}) must have data's dtype "
                         f"({x.dtype.name})")
    if i.dtype.name not in ("uint32", "int32"):
        raise call.error("nki_dtype_mismatch", f"indices must be uint32, got {i.dtype.name}")
    ins = Instr(Opcode.NC_N_GATHER, (("dst", acc(d)),),
                (("data", acc(x)), ("indices", acc(i))), (), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def gather_flattened(data, indices, axis: int = 0, dtype=None) -> NkiTensor:
    """A new SBUF tile shaped like ``indices`` with ``data[p].flatten()[indices[p, ...]]``.

    Example:
        >>> g = nl.gather_flattened(table_sb, idx)                    # doctest: +SKIP
    """
    from nki.lang.creation import ndarray
    from nki.lang.vector import tensor_copy

    call = Call("nl.gather_flattened")
    if axis != 0:
        raise call.error("nki_invalid_argument", f"gather_flattened supports axis=0, got {axis}")
    x = call.tile(data, "data", (Memory.SBUF,))
    i = call.tile(indices, "indices", (Memory.SBUF,))
    out = ndarray(i.shape, x.dtype, buffer=Memory.SBUF)
    nc_n_gather(out, x, i)
    if dtype is None or call_dtype(dtype) == x.dtype:
        return out
    cast = ndarray(i.shape, dtype, buffer=Memory.SBUF)
    tensor_copy(dst=cast, src=out)
    return cast


def call_dtype(dtype):
    from nki.lang.common import dtype_of

    return dtype_of(dtype)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=""):
    """GpSimd gather across the 16 partitions of each GpSimd core. Not simulated: the public
    docs do not define where each gathered element lands in ``dst`` (nor the free offset an
    index reads), so any layout we picked would be a guess. Use ``nc_n_gather`` (within a
    partition) or an indirect ``dma_copy`` (rows).

    Example:
        >>> nisa.local_gather(dst=out, src_buffer=src, index=idx)    # doctest: +SKIP
    """
    from nki.errors import NkiUnsupportedError, fail

    call = Call("nisa.local_gather")
    raise fail("nki_not_implemented", "nisa.local_gather: its dst layout is not documented "
               "precisely enough to simulate; use nisa.nc_n_gather or an indirect "
               "nisa.dma_copy", call.loc, NkiUnsupportedError)
