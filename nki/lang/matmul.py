"""TensorE matmul and transpose rules: ``nisa.nc_matmul``, ``nisa.nc_transpose``,
``nisa.dma_transpose`` and the ``nl.matmul`` / ``nl.transpose`` / ``nl.load_transpose2d``
wrappers (spec §1.6, §3.5, §4.1)."""

from __future__ import annotations

import warnings

from nki.errors import NkiUnsupportedError, fail
from nki.ir.nodes import Instr
from nki.ir.ops import DgeMode, Engine, Opcode
from nki.ir.ops import MatmulPerfMode as matmul_perf_mode  # noqa: N813
from nki.ir.types import FLOAT32, Memory
from nki.lang.common import Call, acc, dtype_of
from nki.lang.hints import records
from nki.lang.tensor import NkiTensor

__all__ = ["nc_matmul", "nc_transpose", "dma_transpose", "matmul_perf_mode"]

_SBUF, _PSUM = (Memory.SBUF,), (Memory.PSUM,)
_HBM_SBUF = (Memory.SBUF, Memory.SHARED_HBM, Memory.PRIVATE_HBM)
# TensorE input dtypes on every generation; float8_e4m3fn (OCP) joins on NeuronCore-v4.
_MM_INPUTS = ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32")
_FP32ISH = ("float32", "tfloat32")
_FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")
_TILE_SIZES = {2: (128, 64), 3: (128, 64, 32), 4: (128, 64, 32)}
_DMA_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _free(t: NkiTensor) -> int:
    """Elements per partition (free dims flattened)."""
    return t.size // t.shape[0]


def _name(value) -> str:
    """The lower-case name of an enum member or string option (None → ``"unknown"``)."""
    if value is None:
        return "unknown"
    return str(getattr(value, "name", value)).lower()


# ----- nc_matmul ----------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=None, name=""):
    """``dst[M, N] = stationary[K, M].T @ moving[K, N]`` on the Tensor engine.

    Inputs in SBUF (free dims flattened), ``dst`` in PSUM. Products are exact and accumulate
    in fp32; ``accumulate=None`` overwrites PSUM never written by a matmul and adds to PSUM
    that was (however the dst view overlaps earlier ones), ``True`` always adds (warning
    where hardware is undefined: PSUM nothing wrote, or before NeuronCore-v4 PSUM that a
    non-matmul instruction wrote), ``False`` always overwrites. ``is_transpose=True``
    (trn2+) is the bit-exact transpose mode: ``dst[m, n] = stationary[k, m]`` for the row
    ``k`` where ``moving[k, n]`` is non-zero (an identity ``moving`` gives ``stationary.T``).

    Example:
        >>> nisa.nc_matmul(dst=ps, stationary=a_t, moving=b, accumulate=(k > 0))  # doctest: +SKIP
    """
    call = Call("nisa.nc_matmul")
    d = call.tile(dst, "dst", _PSUM)
    s = call.tile(stationary, "stationary", _SBUF)
    m = call.tile(moving, "moving", _SBUF)
    call.same_partitions(s, m, "stationary", "moving")
    split = _perf_mode(call, perf_mode, s, m)
    transpose = bool(is_transpose) and call.trace.target.nc_version >= 3
    K, M, N = s.shape[0], _free(s) // split, _free(m) // split
    _tiling(call, tile_position, tile_size, K, M, split)
    _matmul_sizes(call, d, M, N)
    if transpose:
        _transpose_mode_dtypes(call, d, s, accumulate)
        add = False
    else:
        _matmul_dtypes(call, d, s, m)
        add = _resolve_accumulate(call, d, accumulate)
    attrs = (("transpose", transpose), ("accumulate", add), ("row_split", split), ("k", K),
             ("m", M), ("n", N))
    mode = () if perf_mode is None else (("perf_mode", matmul_perf_mode(int(split == 2))),)
    ins = Instr(Opcode.NC_MATMUL, (("dst", acc(d)),),
                (("stationary", acc(s)), ("moving", acc(m))), attrs, call.loc, name, mode)
    return call.trace.emit(ins, by_matmul=True, api=call.api, reads_dst=add)


def _perf_mode(call: Call, perf_mode, s: NkiTensor, m: NkiTensor) -> int:
    """Rows folded into one partition: 2 for ``double_row`` (contraction ``[K, 2, F]``)."""
    mode = _name(perf_mode)
    if mode in ("none", "unknown", "0"):
        return 1
    if mode not in ("double_row", "double_row_gen3", "1"):
        raise call.error("nki_invalid_argument", f"perf_mode={perf_mode!r} is not a "
                         "matmul_perf_mode (none or double_row)")
    if call.trace.target.nc_version < 3:
        raise call.error("nki_invalid_argument", "perf_mode=double_row needs NeuronCore-v3 "
                         f"or newer; the target is {call.trace.target.name}")
    for t, role in ((s, "stationary"), (m, "moving")):
        if t.dtype.name not in _FP8:
            raise call.error("nki_dtype_mismatch", f"perf_mode=double_row takes fp8 inputs "
                             f"only, but {role!r} is {t.dtype.name}")
        if t.ndim < 3 or t.shape[1] != 2:
            raise call.error("nki_shape_mismatch", f"perf_mode=double_row splits the "
                             f"contraction as [K, 2, F]: {role!r} {t.shape} needs a first "
                             "free dim of 2")
    return 2


def _tiling(call: Call, position, size, K: int, M: int, split: int) -> None:
    """PE-array tiling: both or neither of tile_position/tile_size; sizes 128, 64 (32 on
    trn2+), starts multiples of the size; the stationary tile must fit. No numeric effect."""
    position, size = tuple(position or ()), tuple(size or ())
    if not position and not size:
        return
    if len(position) != 2 or len(size) != 2:
        raise call.error("nki_invalid_argument", "tile_position and tile_size must both be "
                         f"given as 2-tuples, got {position!r} and {size!r}")
    allowed = _TILE_SIZES[call.trace.target.nc_version]
    for what, start, n in (("row", position[0], size[0]), ("column", position[1], size[1])):
        start, n = int(start), int(n)
        if n not in allowed:
            raise call.error("nki_invalid_argument", f"{what} tile size {n} must be one of "
                             f"{allowed} on {call.trace.target.name}")
        if start % n or not 0 <= start <= 128 - n:
            raise call.error("nki_invalid_argument", f"{what} tile start {start} must be a "
                             f"multiple of the tile size {n} inside the 128x128 PE array")
    if K > int(size[0]):
        raise call.error("err_num_partition_exceed_arch_limit", f"contraction of {K} "
                         f"partitions exceeds the row tile size {int(size[0])}")
    if M > int(size[1]):
        raise call.error("nki_matmul_free_size_exceeded", f"stationary free size {M} "
                         f"exceeds the column tile size {int(size[1])}")
    if split == 2 and int(size[1]) != 128:
        raise call.error("nki_invalid_argument", "perf_mode=double_row cannot be combined "
                         "with column tiling")


def _matmul_sizes(call: Call, d: NkiTensor, M: int, N: int) -> None:
    """Stationary/moving free limits per target, dst [M, N], dst inside its PSUM bank."""
    target = call.trace.target
    if M > target.stationary_fmax:
        raise call.error("nki_matmul_free_size_exceeded", f"stationary free size {M} exceeds "
                         f"the TensorE limit of {target.stationary_fmax}")
    # the moving limit is the PSUM that dst can span: 512 fp32 on trn1/trn2; on trn3 all
    # 8 banks, i.e. 4096 fp32 or 8192 bf16 elements (AWS's nc_matmul doc, by dst dtype)
    limit = target.moving_fmax_16bit if d.dtype.itemsize <= 2 else target.moving_fmax_fp32
    if N > limit:
        raise call.error("nki_matmul_free_size_exceeded", f"moving free size {N} exceeds the "
                         f"TensorE limit of {limit} on {target.name} for a {d.dtype.name} dst")
    if d.shape[0] != M or _free(d) != N:
        raise call.error("nki_shape_mismatch", f"dst {d.shape} must hold [{M}, {N}] "
                         f"(stationary free size x moving free size)")
    if target.nc_version < 4:
        _within_bank(call, d)


def _within_bank(call: Call, d: NkiTensor) -> None:
    """On trn1/trn2 one matmul writes inside one 2 KiB PSUM bank per partition."""
    bank = call.trace.target.psum_bank_bytes
    if d.decl.bytes_per_partition <= bank:
        return   # the allocator keeps a tensor of at most one bank inside one bank
    a = d.access()
    lo = hi = a.offset.const
    for stride, count in a.dims[1:]:
        lo, hi = lo + min(0, stride * (count - 1)), hi + max(0, stride * (count - 1))
    isz = d.dtype.itemsize
    if (lo * isz) // bank != ((hi + 1) * isz - 1) // bank:
        raise call.error("nki_psum_free_size_exceeded", f"dst covers bytes "
                         f"[{lo * isz}, {(hi + 1) * isz}) of PSUM tensor {d.name!r}, crossing "
                         f"a {bank}-byte bank; on {call.trace.target.name} a matmul writes "
                         "within one bank")


def _matmul_dtypes(call: Call, d: NkiTensor, s: NkiTensor, m: NkiTensor) -> None:
    v4 = call.trace.target.nc_version >= 4
    allowed = _MM_INPUTS + (("float8_e4m3fn",) if v4 else ())
    for t, role in ((s, "stationary"), (m, "moving")):
        if t.dtype.name not in allowed:
            raise call.error("nki_dtype_mismatch", f"{role!r} is {t.dtype.name}; TensorE "
                             f"inputs on {call.trace.target.name} are {', '.join(allowed)}")
    if (s.dtype.name in _FP32ISH) != (m.dtype.name in _FP32ISH):
        raise call.error("nki_dtype_mismatch", f"float32/tfloat32 inputs pair only with "
                         f"float32/tfloat32, got {s.dtype.name} and {m.dtype.name}")
    if {s.dtype.name, m.dtype.name} == {"float8_e4m3", "float8_e4m3fn"}:
        raise call.error("nki_dtype_mismatch", "legacy float8_e4m3 and OCP float8_e4m3fn "
                         "cannot be mixed in one matmul")
    outs = ("float32", "bfloat16") if v4 else ("float32",)
    if d.dtype.name not in outs:
        raise call.error("nki_dtype_mismatch", f"dst is {d.dtype.name}; a matmul writes "
                         f"{' or '.join(outs)} PSUM on {call.trace.target.name}")


def _transpose_mode_dtypes(call: Call, d: NkiTensor, s: NkiTensor, accumulate) -> None:
    if d.dtype != s.dtype:
        raise call.error("nki_dtype_mismatch", f"is_transpose=True moves bits: dst "
                         f"({d.dtype.name}) must have the stationary dtype ({s.dtype.name})")
    if accumulate:
        raise call.error("nki_invalid_argument", "is_transpose=True cannot accumulate")


def _resolve_accumulate(call: Call, d: NkiTensor, accumulate) -> bool:
    """Decide overwrite/accumulate at trace time from which PSUM bytes a matmul wrote.

    One nc_matmul either overwrites or accumulates its whole dst (the flag is per
    instruction), so ``accumulate=None`` is decided from the bytes of this dst, however the
    view is sliced or shaped: all written by earlier matmuls (an overlapping conv-style
    write inside them included) accumulates, none overwrites."""
    state = call.trace.written_state(d.access(), matmul=True)
    if accumulate is None:
        if state == "some":
            raise fail("nki_not_implemented", f"{call.api}: accumulate=None on dst "
                       f"{d.name!r}, of which only part was written by earlier matmuls; one "
                       "matmul overwrites or accumulates all of its dst, so no flag is right "
                       "for every element on hardware and the simulator does not guess. "
                       "Split the matmul at the boundary, or pass accumulate=True or False "
                       "explicitly.", call.loc, NkiUnsupportedError)
        return state == "all"
    if accumulate and state != "all":
        _warn_accumulate(call, d, state)
    return bool(accumulate)


def _warn_accumulate(call: Call, d: NkiTensor, matmul_state: str) -> None:
    """accumulate=True onto PSUM that no matmul (completely) wrote: undefined on hardware
    where nothing wrote it, and on NeuronCore-v2/v3 where a non-matmul instruction (memset,
    tensor_copy, ...) did; NeuronCore-v4 accumulates onto such values (AWS's nc_matmul)."""
    written = call.trace.written_state(d.access())
    v4 = call.trace.target.nc_version >= 4
    if written == "all" and v4:
        return
    if written == "none":
        why = "that nothing wrote"
    elif written == "some":
        why = "that was only partly written"
    else:
        part = "part of which" if matmul_state == "some" else "which"
        why = (f"{part} a non-matmul instruction (memset, tensor_copy, ...) initialised; on "
               f"{call.trace.target.name} (NeuronCore-v2/v3) a matmul cannot accumulate onto "
               "such values")
    where = f" at {call.loc.short}" if call.loc else ""
    msg = (f"[nki_accumulate_uninitialized] {call.api}: accumulate=True on PSUM {d.name!r} "
           f"{why} (undefined on hardware){where}")
    call.trace.warnings.append(msg)
    if call.loc is None:
        warnings.warn(msg, UserWarning, stacklevel=4)
    else:
        warnings.warn_explicit(msg, UserWarning, call.loc.filename, call.loc.lineno)


# ----- transposes ---------------------------------------------------------------------------
@records("engine")
def nc_transpose(dst, data, engine=Engine.unknown, name=""):
    """Bit-exact partition↔free transpose of ``data`` (free dims flattened) into ``dst``.

    Tensor engine: ``data`` ≤ [128, 128] in SBUF, ``dst`` in PSUM. Vector engine: ≤ [32, 32],
    SBUF or PSUM either side. ``engine=unknown`` picks the Tensor engine for a PSUM ``dst``
    and the Vector engine otherwise. ``dst`` has ``data``'s dtype.

    Example:
        >>> nisa.nc_transpose(dst=ps_t, data=tile)  # doctest: +SKIP
    """
    call = Call("nisa.nc_transpose")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    eng = Engine(int(engine)) if engine is not None else Engine.unknown
    if eng is Engine.unknown:
        eng = Engine.tensor if d.buffer is Memory.PSUM else Engine.vector
    P, F = x.shape[0], _free(x)
    if eng is Engine.tensor:
        call.tensor(x, "data", _SBUF)
        call.tensor(d, "dst", _PSUM)
        limit = 128
    elif eng is Engine.vector:
        limit = 32
    else:
        raise call.error("nki_invalid_argument", f"engine={eng.name}: nc_transpose runs on "
                         "the tensor or vector engine")
    if P > limit or F > limit:
        raise call.error("err_size_of_dimension_exceed_arch_limit", f"data [{P}, {F}] "
                         f"exceeds the {eng.name} engine transpose limit [{limit}, {limit}]")
    if d.shape[0] != F or _free(d) != P:
        raise call.error("nki_shape_mismatch", f"dst {d.shape} must hold [{F}, {P}], the "
                         f"transpose of data {x.shape}")
    if d.dtype != x.dtype:
        raise call.error("nki_dtype_mismatch", f"dst ({d.dtype.name}) must have the dtype "
                         f"of data ({x.dtype.name})")
    ins = Instr(Opcode.NC_TRANSPOSE, (("dst", acc(d)),), (("data", acc(x)),),
                (("engine", eng),), call.loc, name)
    # a TensorE transpose is an identity matmul (NKI: nc_matmul(is_transpose=True))
    return call.trace.emit(ins, by_matmul=eng is Engine.tensor, api=call.api)


@records("priority", "dge_mode")
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=""):
    """Transpose ``src`` (HBM or SBUF) into SBUF ``dst`` with the DMA engines, bit-exactly.

    ``dst.shape[i] == src.shape[axes[i]]``; the permutations are (1, 0), (2, 1, 0) and
    (3, 1, 2, 0), the defaults for 2-, 3- and 4-D sources. Equal dtypes.

    Example:
        >>> nisa.dma_transpose(dst=t_sb, src=x[0:64, 0:128])  # doctest: +SKIP
    """
    if isinstance(src, NkiTensor) and src.is_indirect():
        return _indirect_transpose(dst, src, axes, priority, dge_mode, oob_mode, name)
    call = Call("nisa.dma_transpose")
    d = call.tile(dst, "dst", _SBUF)
    s = call.tensor(src, "src", _HBM_SBUF)
    if s.on_chip:
        call.tile(s, "src")
    if s.ndim not in _DMA_AXES:
        raise call.error("err_exceed_max_supported_dimension", f"src has {s.ndim} dims; "
                         "dma_transpose takes 2-, 3- or 4-D sources")
    perm = _DMA_AXES[s.ndim] if axes is None else tuple(int(a) for a in axes)
    if perm != _DMA_AXES[s.ndim]:
        raise call.error("nki_invalid_argument", f"axes={tuple(axes)} is not supported for a "
                         f"{s.ndim}-D src; use {_DMA_AXES[s.ndim]}")
    want = tuple(s.shape[a] for a in perm)
    if d.shape != want:
        raise call.error("nki_shape_mismatch", f"dst {d.shape} must be the permuted src "
                         f"shape {want}")
    if d.dtype != s.dtype:
        raise call.error("nki_dtype_mismatch", f"dst ({d.dtype.name}) and src "
                         f"({s.dtype.name}) must have the same dtype")
    _dma_options(call, s, priority, dge_mode, oob_mode)
    ins = Instr(Opcode.DMA_TRANSPOSE, (("dst", acc(d)),), (("src", acc(s)),),
                (("axes", perm),), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _indirect_transpose(dst, src: NkiTensor, axes, priority, dge_mode, oob_mode, name):
    """A source gathered by rows (``.ap(vector_offset=idx)``, software DGE: nki-library's
    block KV cache): the same values as gathering the rows into an SBUF tile of the source's
    shape, then transposing that tile, which is how it is simulated (both steps bit-exact)."""
    from nki.lang.creation import ndarray
    from nki.lang.indirect import dma_copy as rows_copy

    call = Call("nisa.dma_transpose")
    if _dge_name(dge_mode) not in ("unknown", "swdge"):
        raise call.error("nki_invalid_argument", f"dge_mode={_dge_name(dge_mode)}: an "
                         "indirect dma_transpose takes dge_mode unknown or swdge (a gather "
                         "by runtime indices needs descriptors made during the run, by "
                         "software DGE)")
    rows = ndarray(src.shape, src.dtype, buffer=Memory.SBUF, name="dma_transpose_rows")
    rows_copy(dst=rows, src=src, oob_mode=oob_mode, name=name)
    return dma_transpose(dst, rows, axes=axes, priority=priority, name=name)


def _dge_name(value) -> str:
    """The name of a ``dge_mode`` given as the enum, its name or its number (nki-library
    passes the bare int 3 for ``none``), e.g. ``"none"``; an unknown number stays as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DgeMode(value).name
        except ValueError:
            return str(value)
    return _name(value)


def _dma_options(call: Call, s: NkiTensor, priority, dge_mode, oob_mode) -> None:
    """Direct (non-indirect) transposes: dge_mode unknown/hwdge/none, oob_mode error.

    AWS's API page lists unknown and hwdge only, but AWS's own nki-library asks for ``none``
    (host-built "static" descriptors) on direct transposes of bias and gamma vectors. A
    direct transpose's addresses are all known at trace time, so descriptors built before
    the run describe it fully; the values moved are the same in every mode."""
    mode = _dge_name(dge_mode)
    if mode not in ("unknown", "hwdge", "none"):
        raise call.error("nki_invalid_argument", f"dge_mode={mode}: a direct dma_transpose "
                         "takes dge_mode unknown, hwdge or none")
    if mode == "hwdge":
        if call.trace.target.nc_version < 3:
            raise call.error("nki_invalid_argument", "dge_mode=hwdge needs NeuronCore-v3 or "
                             f"newer; the target is {call.trace.target.name}")
        if s.dtype.itemsize != 2:
            raise call.error("nki_dtype_mismatch", f"a hwdge transpose moves 2-byte "
                             f"elements, src is {s.dtype.name}")
    if _name(oob_mode) not in ("unknown", "error"):
        raise call.error("nki_invalid_argument", "oob_mode=skip is only valid for an "
                         "indirect src")
    if priority is not None and int(priority) not in (0, 1, 2, 3):
        raise call.error("nki_invalid_argument", f"priority={priority!r} must be 0-3")


# ----- nl wrappers --------------------------------------------------------------------------
def _new(shape, dtype, buffer: Memory) -> NkiTensor:
    from nki.lang.creation import value_result

    return value_result(tuple(shape), dtype, buffer=buffer)


def matmul(x, y, transpose_x=False) -> NkiTensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x=True``) as a new fp32 PSUM tile.

    ``x`` and ``y`` are SBUF tiles. With ``transpose_x=False``, ``x`` [M, K] is first
    transposed on the Tensor engine (M, K ≤ 128); AWS lists that form as failing, we run it.

    Example:
        >>> res = nl.matmul(a_t, b, transpose_x=True)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    call = Call("nl.matmul")
    xt = call.tile(x, "x", _SBUF)
    yt = call.tile(y, "y", _SBUF)
    if not transpose_x:
        if _free(xt) > 128:
            raise call.error("err_size_of_dimension_exceed_arch_limit", f"x {xt.shape}: with "
                             "transpose_x=False x is transposed first, so each dim must be at "
                             "most 128")
        ps = _new((_free(xt), xt.shape[0]), xt.dtype, Memory.PSUM)
        nc_transpose(dst=ps, data=xt, engine=Engine.tensor)
        xt = _new(ps.shape, xt.dtype, Memory.SBUF)
        tensor_copy(dst=xt, src=ps)
    call.same_partitions(xt, yt, "x (contraction)", "y")
    out = _new((_free(xt),) + yt.shape[1:], FLOAT32, Memory.PSUM)
    nc_matmul(dst=out, stationary=xt, moving=yt)
    return out


def transpose(x, dtype=None) -> NkiTensor:
    """The 2-D transpose of an on-chip tile (each dim ≤ 128) as a new PSUM tile.

    Example:
        >>> xt = nl.transpose(tile)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    call = Call("nl.transpose")
    t = call.tile(x, "x")
    if t.ndim > 2:
        raise call.error("err_exceed_max_supported_dimension", f"x has {t.ndim} dims; "
                         "nl.transpose takes 2-D tiles")
    if t.shape[1] > 128:
        raise call.error("err_size_of_dimension_exceed_arch_limit", f"x {t.shape}: each "
                         "dim of a transpose must be at most 128")
    if t.buffer is Memory.PSUM:   # TensorE reads SBUF only
        sb = _new(t.shape, t.dtype, Memory.SBUF)
        tensor_copy(dst=sb, src=t)
        t = sb
    out = _new((t.shape[1], t.shape[0]), t.dtype, Memory.PSUM)
    nc_transpose(dst=out, data=t, engine=Engine.tensor)
    if dtype is None or out.dtype == dtype_of(dtype):
        return out
    cast = _new(out.shape, dtype, Memory.PSUM)
    tensor_copy(dst=cast, src=out)
    return cast


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """Load an HBM ``[A, B]`` tensor transposed into a new SBUF ``[B, A]`` tile (B ≤ 128).

    Example:
        >>> w_t = nl.load_transpose2d(w[0:512, 0:128])  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    call = Call("nl.load_transpose2d")
    s = call.tensor(src, "src", (Memory.SHARED_HBM, Memory.PRIVATE_HBM))
    if s.ndim != 2:
        raise call.error("err_exceed_max_supported_dimension", f"src has {s.ndim} dims; "
                         "load_transpose2d takes 2-D HBM tensors")
    if s.shape[1] > call.trace.target.pmax:
        raise call.error("err_num_partition_exceed_arch_limit", f"src {s.shape}: its last "
                         f"dim becomes the partition dim and exceeds {call.trace.target.pmax}")
    out = _new((s.shape[1], s.shape[0]), s.dtype, Memory.SBUF)
    dma_transpose(dst=out, src=s)
    if dtype is None or out.dtype == dtype_of(dtype):
        return out
    cast = _new(out.shape, dtype, Memory.SBUF)
    tensor_copy(dst=cast, src=out)
    return cast


NL_EXPORTS: dict = {"matmul": matmul, "transpose": transpose,
                    "load_transpose2d": load_transpose2d}
