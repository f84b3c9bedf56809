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

import numpy as np

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Engine, OobMode, Opcode
from nki.ir.types import Memory
from nki.lang import dma as _dma
from nki.lang.common import Call, acc
from nki.lang.control import (
    allowed_range,
    oob_mode_of,
    register_terms,
    scalar_register,
)
from nki.lang.hints import records
from nki.lang.operators import as_alu
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation

_DMA_MEMS = (Memory.SBUF, Memory.SHARED_HBM, Memory.PRIVATE_HBM)
MAX_SRCS = 4


def _dim_stride(t: NkiTensor, view: NkiTensor, dim: int, role: str) -> int:
    """Elements (of the view's dtype) between consecutive indices of ``dim`` of ``t``, the
    tensor ``.ap`` is called on: a reshaped view counts in its own dims (nki-library indexes
    ``k_cache.reshape((blocks * r, block_len // r * d)).ap(..., indirect_dim=0)`` by
    sub-block), so this is ``t``'s stride of ``dim``, not its base tensor's."""
    shape = t.shape
    if not 0 <= dim < len(shape):
        raise validation("nki_invalid_view", f"{role}: indirect_dim={dim} is not a dim of "
                         f"{t.name!r} (shape {shape})")
    if t.on_chip and dim == 0:
        raise validation("nki_invalid_view", f"{role}: indirect_dim=0 is the partition dim of "
                         f"on-chip {t.name!r}; a dynamic offset moves free dims only")
    nbytes = t.strides[dim] * t.dtype.itemsize
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
    if isinstance(scalar_offset, (int, np.integer)) and not isinstance(scalar_offset, bool):
        # a trace-time int (e.g. ``ncc.rank_id()``): the same move, known when tracing
        moved = int(scalar_offset) * stride + view._off
        return view._new(view._dims, off=moved)
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


def vector_select(t: NkiTensor, dim: int, vector_offset) -> NkiTensor:
    """``t.vector_select(0, idx)``: row ``i`` of dim 0 is row ``idx[i]`` of ``t`` (HBM)."""
    call = Call(f"{t.name}.vector_select")
    if t.on_chip or dim != 0:
        raise call.error("nki_invalid_view", "vector_select selects rows of dim 0 of an HBM "
                         f"tensor; got dim {dim} of {t.buffer.value} {t.name!r}")
    if not isinstance(t._off, int):
        raise call.error("nki_invalid_view", "vector_select of a view moved by a register")
    idx = call.tile(vector_offset, "vector_offset", (Memory.SBUF,))
    if not idx.dtype.is_int or idx.size != idx.shape[0]:
        raise call.error("nki_shape_mismatch", f"vector_offset must be a [P, 1] integer tile, got "
                         f"{idx.dtype.name} {idx.shape}")
    dims = ((t._dims[0][0], idx.shape[0]),) + t._dims[1:]
    return NkiTensor(t.decl, t.dtype, 0, t._off, dims, ind=idx)


def _is_dynamic(t) -> bool:
    if not isinstance(t, NkiTensor) or isinstance(t._ind, TensorIndirection):
        return False     # a TI view is gathered into a plain tile when accessed
    if t.is_indirect():
        return True
    # an int offset has no register terms: skip building the Access (twice per dma_copy)
    return type(t._off) is not int and bool(register_terms(t.access().offset))


@records("priority", "dge_mode", "engine", "name")
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
    """A DMA moved by registers: the plain DMA rule (equal element counts, shapes may
    differ); under ``oob_mode.skip`` the whole instruction is skipped when a register is out
    of range, so its rows need not match either."""
    if mode is OobMode.error:
        return _dma._dma(call, dst, src)
    return _dma._dma(call, dst, src, (("oob_mode", mode),))


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


@records("name")
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
    from nki.lang.creation import value_result
    from nki.lang.vector import tensor_copy

    call = Call("nl.gather_flattened")
    if axis != 0:
        raise call.error("nki_invalid_argument", f"gather_flattened supports axis=0, got {axis}")
    x = call.tile(data, "data", (Memory.SBUF,))
    i = call.tile(indices, "indices", (Memory.SBUF,))
    out = value_result(i.shape, x.dtype, buffer=Memory.SBUF)
    nc_n_gather(out, x, i)
    if dtype is None or call_dtype(dtype) == x.dtype:
        return out
    cast = value_result(i.shape, dtype, buffer=Memory.SBUF)
    tensor_copy(dst=cast, src=out)
    return cast


def call_dtype(dtype):
    from nki.lang.common import dtype_of

    return dtype_of(dtype)


_GROUP = 16                       # partitions per GpSimd core (and per TI group)
_LG_ELEMS = (1, 2, 4, 8, 16, 32)
_LG_MAX_INDICES = 4096


def _start_partition(t: NkiTensor) -> int:
    """The physical first partition of an SBUF view (``address=`` tiles may start late)."""
    addr = t.decl.address
    return t._part + (int(addr[0]) if addr else 0)


def _groups_of_16(call: Call, views: list[tuple[str, NkiTensor]]) -> int:
    """Every view spans whole 16-partition GpSimd groups; returns the partition count."""
    rows = views[0][1].shape[0]
    for role, t in views:
        if t.shape[0] != rows:
            raise call.error("err_num_partition_mismatch", f"{role!r} has {t.shape[0]} "
                             f"partitions but {views[0][0]!r} has {rows}")
        # each GpSimd core is wired to partitions [16c, 16c+16): a view starting elsewhere
        # would straddle two cores
        if rows % _GROUP or _start_partition(t) % _GROUP:
            raise call.error("nki_shape_mismatch", f"{role!r} must cover whole groups of "
                             f"{_GROUP} partitions (start and size multiples of {_GROUP}); "
                             f"it starts at partition {_start_partition(t)} with {rows}")
    return rows


def local_gather(dst, src_buffer, index, num_elem_per_idx: int = 1,
                 num_valid_indices: int | None = None, name: str = "") -> Instr:
    """GpSimd gather inside each group of 16 partitions (one GpSimd core per group).

    Each group flattens its 16 partitions of ``index`` partition-first (column-major, free
    dims row-major: ``index[g].reshape(16, -1).flatten(order="F")``) and keeps the first
    ``num_valid_indices`` values (default: all). Index ``j`` (uint16) is an element offset
    into the flattened free dims of ``src_buffer``; every partition ``p`` of the group gets
    ``dst[p, j*E:(j+1)*E] = src[p, idx[j]:idx[j]+E]`` with ``E = num_elem_per_idx``. This is
    the placement of AWS's numpy reference for the instruction (test_nki_isa_local_gather.py,
    which feeds ``index * E`` and compares with ``np.take(src, index, axis=1)``). Bits are
    copied (no cast); an index whose ``E`` elements leave the row faults at run time (the
    hardware leaves it undefined).

    Args:
        dst: SBUF tile, ``src_buffer``'s dtype and partitions, ``nv * E`` elements each.
        src_buffer: SBUF tile to gather from (partitions a multiple of 16).
        index: SBUF uint16 tile with ``src_buffer``'s partition count.
        num_elem_per_idx: contiguous elements per index: 1, 2, 4, 8, 16 or 32.
        num_valid_indices: indices used per group (≤ the group's index count, ≤ 4096).

    Example:
        >>> nisa.local_gather(dst=out, src_buffer=src, index=idx,
        ...                   num_elem_per_idx=2)                       # doctest: +SKIP
    """
    call = Call("nisa.local_gather")
    d = call.tile(dst, "dst", (Memory.SBUF,))
    s = call.tile(src_buffer, "src_buffer", (Memory.SBUF,))
    i = call.tile(index, "index", (Memory.SBUF,))
    rows = _groups_of_16(call, [("src_buffer", s), ("index", i), ("dst", d)])
    if i.dtype.name != "uint16":
        raise call.error("nki_dtype_mismatch", f"index must be uint16, got {i.dtype.name}")
    if d.dtype != s.dtype:
        raise call.error("nki_dtype_mismatch", f"local_gather does not cast: dst is "
                         f"{d.dtype.name} but src_buffer is {s.dtype.name}")
    ne = num_elem_per_idx
    if isinstance(ne, bool) or ne not in _LG_ELEMS:
        raise call.error("nki_invalid_argument", f"num_elem_per_idx={ne!r} must be one of "
                         f"{_LG_ELEMS}")
    nv = _valid_indices(call, i.size // (rows // _GROUP), num_valid_indices)
    if d.size // rows != nv * ne:
        raise call.error("nki_shape_mismatch", f"dst has {d.size // rows} elements per "
                         f"partition; {nv} indices x {ne} elements need {nv * ne}")
    ins = Instr(Opcode.LOCAL_GATHER, (("dst", acc(d)),), (("src", acc(s)), ("index", acc(i))),
                (("num_elem", ne), ("num_valid", nv)), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _valid_indices(call: Call, per_group: int, value) -> int:
    nv = per_group if value is None else value
    if isinstance(nv, bool) or not isinstance(nv, int) or not 1 <= nv <= per_group:
        raise call.error("nki_invalid_argument", f"num_valid_indices={value!r} must be an int "
                         f"in 1..{per_group} (the indices each group of {_GROUP} partitions "
                         "holds)")
    if nv > _LG_MAX_INDICES:
        raise call.error("nki_invalid_argument", f"{nv} indices per GpSimd core exceed the "
                         f"limit of {_LG_MAX_INDICES}")
    return nv


# ----- trn3 tensor indirection (TI): t.indirect(index, num_elem) ----------------------------
_TI_INDEX_DTYPES = ("uint16", "uint32")
TI_GROUP_TENSOR_ENGINE = 32     # spec: G = 32 for the Tensor engine ...
TI_GROUP_OTHER = 16             # ... and 16 for the Vector/Scalar/GpSimd engines (and DMA)


def ti_group(instr: Instr) -> int:
    """The snake group size G of a TI view consumed by ``instr`` (spec, ``NkiTensor.indirect``:
    16 for vector/scalar/gpsimd engines, 32 for the tensor engine). It depends only on the
    engine the consuming instruction runs on: ``nc_matmul``/``nc_matmul_mx`` and a Tensor
    engine ``nc_transpose`` use 32; every other instruction (DMA included, which the spec
    does not name) uses 16.

    Example:
        >>> ti_group(matmul_instr)                                     # doctest: +SKIP
        32
    """
    if instr.opcode in (Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX) or (
            instr.opcode is Opcode.NC_TRANSPOSE and instr.attr("engine") is Engine.tensor):
        return TI_GROUP_TENSOR_ENGINE
    return TI_GROUP_OTHER


class TensorIndirection:
    """What ``t.indirect(index, num_elem)`` attaches to a view: the offsets and their count.

    The consuming instruction sees a hidden tile ``(P, num_elem)`` in the base's memory
    (``materialize``). Through :meth:`Trace.on_first_use`, the first instruction that uses
    it decides the group size (:func:`ti_group`) and gets a gather of the indirect columns
    into the tile before it when it reads the view, and a scatter of the tile back into the
    columns after it when it writes the view, so every rule accepts a TI view unchanged as
    a source or a destination. A later use of the same view gets a fresh tile (data read at
    that point). Offsets outside a partition's flattened free elements fault at run time;
    of repeated offsets in a destination the last column wins. A matmul into a TI
    destination adds to the indirect columns only with ``accumulate=True``
    (``accumulate=None`` sees the hidden tile, never written by a matmul, and overwrites).
    """

    __slots__ = ("base", "index", "num_elem", "loc", "_pending")

    def __init__(self, base: NkiTensor, index: NkiTensor, num_elem: int, loc):
        self.base, self.index, self.num_elem, self.loc = base, index, num_elem, loc
        self._pending = None

    def materialize(self, view: NkiTensor):
        """The Access the consuming instruction sees: the hidden tile bound to this view."""
        from nki.lang.creation import ndarray
        from nki.lang.tracer import current

        if self._pending is None:    # one tile per consuming instruction, however often asked
            base = self.base
            tmp = ndarray((base.shape[0], self.num_elem), base.dtype, buffer=base.buffer,
                          name=f"{base.name}_indirect")
            self._pending = tmp.access()
            current().on_first_use(tmp.decl.id, lambda ins: self._around(ins, tmp))
        return self._pending

    def _around(self, instr: Instr, tmp: NkiTensor):
        """Gather before ``instr`` if it reads the tile; return the scatter if it writes it."""
        self._pending = None
        group = ti_group(instr)
        _check_ti_groups(instr, self, group)
        tid = tmp.decl.id
        writes = any(a.tensor == tid for _, a in instr.writes)
        # a matmul adding into its PSUM dst reads it although dst is not among its reads
        adds = instr.opcode in (Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX) and \
            bool(instr.attr("accumulate"))
        if any(a.tensor == tid for _, a in instr.reads) or (writes and adds):
            _ti_move(instr, self, tmp, group, scatter=False)
        if writes:
            return lambda: _ti_move(instr, self, tmp, group, scatter=True)
        return None


def tensor_indirect(t: NkiTensor, index, num_elem=None) -> NkiTensor:
    """``t.indirect(index, num_elem)``: see :meth:`NkiTensor.indirect`."""
    call = Call(f"{t.name}.indirect")
    if call.trace.target.nc_version < 4:
        raise call.error("nki_unsupported_on_target", "tensor indirection needs NeuronCore-v4 "
                         f"(trn3); the target is {call.trace.target.name}")
    if not t.on_chip:
        # the offsets are per group of partitions (spec); HBM has none: rows of an HBM
        # tensor are picked with a vector_offset access pattern instead
        raise call.error("nki_invalid_view", f"tensor indirection reads free-dim offsets per "
                         f"group of partitions, so it needs an SBUF/PSUM view; {t.name!r} is "
                         f"in {t.buffer.value}: pick HBM rows with "
                         ".ap(..., vector_offset=idx, indirect_dim=0) in nisa.dma_copy")
    if t.is_indirect() or not isinstance(t._off, int):
        raise call.error("nki_invalid_view", f"tensor indirection needs a plain SBUF/PSUM view; "
                         f"{t.name!r} is " + ("already indirect" if t.is_indirect() else
                                             "moved by a register"))
    idx = call.tile(index, "index", (Memory.SBUF,))
    if idx.dtype.name not in _TI_INDEX_DTYPES:
        raise call.error("nki_dtype_mismatch", f"index must be uint16 or uint32 free-dim "
                         f"offsets, got {idx.dtype.name}")
    call.same_partitions(t, idx, t.name, "index")
    n = idx.size if num_elem is None else num_elem
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise call.error("nki_invalid_argument", f"num_elem={num_elem!r} must be a positive int")
    dims = ((t._dims[0][0], t.shape[0]), (1, n))
    return NkiTensor(t.decl, t.dtype, t._part, t._off, dims,
                     ind=TensorIndirection(t, idx, n, call.loc))


def _check_ti_groups(instr: Instr, ti: TensorIndirection, group: int) -> None:
    """The view and its index span whole groups; each group's index holds num_elem offsets."""
    api = instr.opcode.name.lower()
    base, idx = ti.base, ti.index
    rows = base.shape[0]
    for role, t in (("the indirect tensor", base), ("index", idx)):
        if rows % group or _start_partition(t) % group:
            raise validation("nki_shape_mismatch", f"{api}: tensor indirection reads offsets "
                             f"per group of {group} partitions; {role} must start at and span "
                             f"a multiple of {group} partitions (starts at "
                             f"{_start_partition(t)}, {rows} partitions)", instr.loc)
    per_group = group * (idx.size // rows)
    if ti.num_elem > per_group:
        raise validation("nki_shape_mismatch", f"{api}: num_elem={ti.num_elem} offsets, but "
                         f"each group of {group} partitions of index {idx.shape} holds "
                         f"{per_group} (offset i is index[i % {group}, i // {group}])",
                         instr.loc)


def _ti_move(instr: Instr, ti: TensorIndirection, tmp: NkiTensor, group: int,
             scatter: bool) -> None:
    """Emit the gather ``tmp[p, i] = base[p].flatten()[off(g, i)]`` or its scatter (the
    reverse), ``off(g, i) = index[s_g + i % G, i // G]`` for the group of ``p``."""
    from nki.lang.tracer import current

    data, moved = ti.base.access(), tmp.access()
    dst, src = (data, moved) if scatter else (moved, data)
    ins = Instr(Opcode.TENSOR_GATHER, (("dst", dst),),
                (("data", src), ("index", ti.index.access())),
                (("group", group), ("scatter", scatter)), instr.loc)
    current().emit(ins, api=f"{instr.opcode.name.lower()} (tensor indirection)")
