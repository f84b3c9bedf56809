"""Legacy ``nl``: creation (with ``nl.par_dim`` block dims), ``load``/``store``, loops and
SPMD program ids (spec §1.4, §1.5, §3.1-§3.3). The compute functions are in
:mod:`nki.legacy.math`; ``neuronxcc.nki.language`` gathers both.
"""

from __future__ import annotations

from nki.ir.ops import Alu
from nki.ir.types import Memory
from nki.lang import iterators
from nki.lang.common import Call, dtype_of
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation
from nki.legacy import loops
from nki.legacy.compiler import DirectAlloc, linear_base
from nki.legacy.mask import rectangle, shrink
from nki.legacy.pending import Pending, before_write, flush, state, value
from nki.legacy.tile import BlockTensor, LegacyTile, as_legacy, copy_into, new_tile
from nki.legacy.views import PlacedBlocks

sbuf = Memory.SBUF
psum = Memory.PSUM
shared_hbm = Memory.SHARED_HBM
private_hbm = Memory.PRIVATE_HBM
hbm = Memory.PRIVATE_HBM


class ParDim(int):
    """``nl.par_dim(n)``: marks the partition dim in a shape; dims before it are block dims."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


def par_dim(n: int) -> ParDim:
    """Mark the partition dim of a tile shape (``nl.ndarray((4, nl.par_dim(128), 512))``).

    Example:
        >>> t = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32)   # doctest: +SKIP
    """
    return ParDim(int(n))


# ----- creation -------------------------------------------------------------------------------
def _split(shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(block dims, tile shape) of a legacy shape."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    marks = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    k = marks[0] if marks else 0
    return tuple(int(s) for s in shape[:k]), tuple(int(s) for s in shape[k:])


def _output(call: Call, shape, dtype, name: str) -> LegacyTile:
    """A shared_hbm tensor: created once and shared by every program of an SPMD grid (the
    k-th one a program creates is the k-th of program 0)."""
    st = state(call.api)
    if st.user_loops:
        raise call.error("err_shared_hbm_must_in_kernel_level", "shared_hbm tensors must be "
                         "created at kernel level, not in a loop")
    k = st.num_outputs
    st.num_outputs += 1
    found = st.outputs.get(k)
    dt = dtype_of(dtype)
    if found is not None:
        if found.shape != tuple(shape) or found.dtype != dt:
            raise call.error("nki_invalid_argument", "SPMD programs must create the same "
                             "shared_hbm tensors")
        return found
    if any(s <= 0 for s in shape):
        raise call.error("nki_shape_mismatch", f"shape {tuple(shape)} must be positive")
    decl = call.trace.new_tensor(Memory.SHARED_HBM, tuple(shape), dt, name=name,
                                 role="output", loc=call.loc)
    st.outputs[k] = as_legacy(NkiTensor(decl, dtype=dt))
    return st.outputs[k]


def ndarray(shape, dtype, *, buffer=None, name: str = "", **kwargs):
    """An uninitialised tensor (SBUF by default). Dims before ``nl.par_dim`` are block dims.

    Example:
        >>> out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)   # doctest: +SKIP
    """
    from nki.lang.creation import ndarray as nd

    buffer = Memory.SBUF if buffer is None else buffer
    blocks, tile = _split(shape)
    address = None
    if isinstance(buffer, DirectAlloc):
        alloc, buffer = buffer, buffer.memory
        addrs = alloc.addresses(blocks, tile[0], _tile_bytes(tile, dtype))
        addrs = loops.first_addresses(state().loops, addrs, (blocks, tile))
        address = linear_base(addrs, _tile_bytes(tile, dtype))
        if address is None:      # blocks placed apart (or on the same bytes): one tile each
            return PlacedBlocks({idx: as_legacy(nd(tile, dtype, buffer=buffer, name=name,
                                                   address=a)) for idx, a in addrs.items()})
    if buffer is Memory.SHARED_HBM:
        return _output(Call("nl.ndarray"), blocks + tile, dtype, name)
    if not blocks or not buffer.on_chip:
        return as_legacy(nd(blocks + tile, dtype, buffer=buffer, name=name, address=address))
    if buffer is Memory.PSUM and address is None:
        # NKI 0.1 placed the blocks of a PSUM tensor one by one (a block lives from its
        # matmul to its last read, so blocks reuse banks): one tile per block, each with its
        # own live range, not one tensor the size of every block together
        import itertools

        return PlacedBlocks({idx: as_legacy(nd(tile, dtype, buffer=buffer, name=name))
                             for idx in itertools.product(*(range(b) for b in blocks))})
    base = nd((tile[0],) + blocks + tile[1:], dtype, buffer=buffer, name=name,
              address=address)
    return BlockTensor(as_legacy(base), len(blocks))


def _tile_bytes(tile, dtype) -> int:
    """Bytes per partition of one block (the ``fdim_size`` allocation functions get)."""
    fbytes = dtype_of(dtype).itemsize
    for n in tile[1:]:
        fbytes *= n
    return fbytes


def _filled(api: str, shape, dtype, buffer, name: str, fill) -> LegacyTile | BlockTensor:
    from nki.lang.vector import emit_memset

    call = Call(api)
    if isinstance(buffer, DirectAlloc):
        raise call.error("err_tensor_creation_on_scratchpad_with_init_value_not_supported",
                         f"{api}: a directly allocated tensor cannot have an initial value; "
                         "create it with nl.ndarray and fill it (nisa.memset)")
    if buffer is not None and buffer.is_hbm:
        raise call.error("err_hbm_tensor_with_init_value_not_supported",
                         f"{api} cannot create an HBM tensor with an initial value")
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    base = t.base if isinstance(t, BlockTensor) else t
    emit_memset(call, base, fill)
    if base.buffer is Memory.PSUM and fill == 0:
        state(api).zero_psum.add(base.decl.id)
    return t


def zeros(shape, dtype, *, buffer=None, name: str = "", **kwargs):
    """A tile of zeros (``nl.zeros(..., buffer=nl.psum)`` is the matmul accumulator).

    Example:
        >>> acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)    # doctest: +SKIP
    """
    return _filled("nl.zeros", shape, dtype, buffer, name, 0)


def ones(shape, dtype, *, buffer=None, name: str = "", **kwargs):
    """A tile of ones."""
    return _filled("nl.ones", shape, dtype, buffer, name, 1)


def full(shape, fill_value, dtype, *, buffer=None, name: str = "", **kwargs):
    """A tile filled with ``fill_value``."""
    return _filled("nl.full", shape, dtype, buffer, name, fill_value)


def zeros_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs):
    """Zeros shaped like ``a``."""
    return _filled("nl.zeros_like", a.shape, dtype or a.dtype, buffer, name, 0)


def ones_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs):
    """Ones shaped like ``a``."""
    return _filled("nl.ones_like", a.shape, dtype or a.dtype, buffer, name, 1)


def empty_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs):
    """An uninitialised tensor shaped like ``a``."""
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer, name=name)


def shared_constant(constant, dtype=None, **kwargs) -> LegacyTile:
    """A shared_hbm tensor holding a numpy constant."""
    from nki.lang.creation import shared_constant as sc

    return as_legacy(sc(constant, dtype))


def shared_identity_matrix(n: int, dtype="uint8", **kwargs) -> LegacyTile:
    """An ``n``×``n`` identity in SBUF."""
    from nki.lang.creation import shared_identity_matrix as sim

    return as_legacy(sim(n, dtype))


# ----- memory ---------------------------------------------------------------------------------
def _source(api: str, src) -> NkiTensor:
    s = value(src)
    if not isinstance(s, NkiTensor):
        raise validation("nki_invalid_argument", f"{api}: src must be a tensor, got "
                         f"{type(s).__name__}")
    return s


def load(src, *, mask=None, dtype=None, mode=None, **kwargs) -> Pending:
    """A new SBUF tile loaded from an HBM view (``mask=`` loads part of it; ``mode=``, an
    ``oob_mode``, applies to an indirect or register-indexed source, as AWS's
    flash_paged_attn_varlen passes ``mode=oob_mode.skip``).

    Example:
        >>> tile = nl.load(x[i_p, i_f], mask=(i_p < n))    # doctest: +SKIP
    """
    from nki.lang.indirect import dma_copy  # plain DMAs and gathers

    s = _source("nl.load", src)
    shape = s.shape if s.ndim >= 2 else (1,) + s.shape
    return Pending("nl.load", shape, dtype_of(dtype) if dtype else s.dtype, Memory.SBUF,
                   {"src": s}, lambda dst, src: dma_copy(dst=dst, src=src, oob_mode=mode),
                   mask=mask)


def store(dst, value, *, mask=None, mode=None, **kwargs) -> None:
    """Write a tile into an HBM view; a PSUM value goes through an SBUF copy (``mode=``: the
    ``oob_mode`` of an indirect or register-indexed destination, as for ``load``).

    Example:
        >>> nl.store(out[i_p, i_f], value=tile, mask=(i_p < n))    # doctest: +SKIP
    """
    d = _source("nl.store", dst)
    if _is_number(value):
        _fill_hbm(d, value, mask)
        return
    if isinstance(value, Pending) and value._tile is None and value.mask is None \
            and mask is None and value.buffer is Memory.SBUF and value.shape == d.shape \
            and value.api == "nl.load" and not d.is_indirect() \
            and not value.operands["src"].is_indirect():
        value.emit_into(d)       # HBM → HBM: one DMA
        return
    write("nl.store", d, value, mask, oob_mode=mode)


def _is_number(x) -> bool:
    import numpy as np

    return isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))


def _fill_hbm(d: NkiTensor, number, mask) -> None:
    """``nl.store(out, 100)``: AWS's example calls it "effectively a memset": a filled SBUF
    tile stored over the view, 128 partitions at a time."""
    from nki.lang.tracer import current

    pmax = current("nl.store").target.pmax
    shape = d.shape if d.ndim >= 2 else (1,) + d.shape
    view = d if d.ndim >= 2 else d.reshape(shape)
    rows = min(shape[0], pmax)
    tile = _filled("nl.store", (rows,) + shape[1:], d.dtype, None, "", number)
    for p0 in range(0, shape[0], rows):
        n = min(rows, shape[0] - p0)
        write("nl.store", view[p0:p0 + n], tile[0:n] if n < rows else tile, mask)


def write(api: str, dst, value, mask=None, oob_mode=None, accumulate: bool = False) -> None:
    """``dst[mask] = value`` (or ``+=`` with ``accumulate``: a DMA read-modify-write,
    ``nisa.dma_compute`` of the current dialect) from ``nl.store``, ``nisa.dma_copy`` and
    ``nl.atomic_rmw``; ``oob_mode`` applies to an indirect side."""
    from nki.lang.indirect import dma_compute

    d, v = _source(api, dst), _source(api, value)
    rect = rectangle(mask, d.shape, api)
    if rect is None:
        return
    d, v = shrink(d, rect, d.shape, "dst", api), shrink(v, rect, d.shape, "value", api)
    if not accumulate:
        copy_into(d, v, oob_mode=oob_mode)
        return
    if v.buffer is Memory.PSUM or v.shape != d.shape:   # DMA reads no PSUM, no broadcast
        staged = new_tile(d.shape, v.dtype, Memory.SBUF)
        copy_into(staged, v)
        v = staged
    before_write(d)
    dma_compute(dst=d, srcs=[d, v], reduce_op=Alu.add, oob_mode=oob_mode)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> Pending:
    """Load a 2-D HBM ``[A, B]`` view transposed into a new SBUF ``[B, A]`` tile.

    Example:
        >>> w_t = nl.load_transpose2d(w[i_r, i_c])          # doctest: +SKIP
    """
    from nki.lang.matmul import dma_transpose

    s = _source("nl.load_transpose2d", src)
    if s.ndim != 2:
        raise validation("err_exceed_max_supported_dimension", "nl.load_transpose2d: src "
                         f"has {s.ndim} dims; 2-D only")
    dt = dtype_of(dtype) if dtype else s.dtype

    def run(dst, src):
        if dst.dtype == src.dtype:
            dma_transpose(dst=dst, src=src)
            return
        tmp = new_tile(dst.shape, src.dtype, Memory.SBUF)
        dma_transpose(dst=tmp, src=src)
        copy_into(dst, tmp)

    if mask is not None:
        raise validation("err_unsupported_expression_in_mask", "nl.load_transpose2d: mask= "
                         "is not supported; index the source instead")
    return Pending("nl.load_transpose2d", (s.shape[1], s.shape[0]), dt, Memory.SBUF,
                   {"src": s}, run)


# ----- loops and SPMD ids ---------------------------------------------------------------------
def _counted(args, make, static: bool = False):
    """Count open legacy loops (shared_hbm tensors must be created outside them), and emit
    pending results at loop and iteration boundaries, so that deferring never moves an
    instruction into another iteration; the loop frames serve NKI 0.1's traced-once body
    semantics (:mod:`nki.legacy.loops`)."""
    st = state("nl.affine_range")
    flush()
    trips = len(range(*(int(a) for a in args)))
    st.user_loops += 1
    try:
        yield from loops.counted(st.loops, make(*args), trips, static, flush)
    finally:
        st.user_loops -= 1


def affine_range(*args, **kwargs):
    """A loop with independent iterations. Python unrolls it while tracing (ints); the reroll
    pass folds the iterations back into an IR loop.

    Example:
        >>> for k in nl.affine_range(4): ...        # doctest: +SKIP
    """
    return _counted(args, iterators.affine_range)


def sequential_range(*args, **kwargs):
    """A loop with loop-carried dependencies (unrolled while tracing, recorded)."""
    return _counted(args, iterators.sequential_range)


def static_range(*args, **kwargs):
    """A loop unrolled at trace time (recorded)."""
    return _counted(args, iterators.static_range, static=True)


class CoreDim(int):
    """A grid dim size that says how many NeuronCores share it (``nl.nc(2)``,
    ``nl.spmd_dim(nl.nc(2), 2)``). It is the plain size everywhere; the launch records
    ``cores`` in the program's ``spmd_grid`` meta for a cost model (the simulator runs the
    programs one after another on one core)."""

    cores: int

    def __new__(cls, size: int, cores: int) -> CoreDim:
        dim = super().__new__(cls, size)
        dim.cores = cores
        return dim

    def __repr__(self) -> str:
        return f"spmd_dim({int(self)}, cores={self.cores})"

    def __mul__(self, other):
        return spmd_dim(self, other)

    __rmul__ = __mul__


def nc(n: int) -> CoreDim:
    """``nl.nc(n)``: a grid dim spread over ``n`` NeuronCores. Programs are independent and
    run one after another here, so it counts as the plain size ``n``."""
    return CoreDim(int(n), int(n))


def spmd_dim(*sizes) -> int:
    """``nl.spmd_dim(nl.nc(2), 2)``: a grid dim made of sub-dims (their product); the
    ``nl.nc`` parts give its core count."""
    n, cores = 1, 1
    for s in sizes:
        n *= int(s)
        cores *= getattr(s, "cores", 1)
    return CoreDim(n, cores) if cores > 1 else n


def program_id(axis: int = 0) -> int:
    """This program's index along ``axis`` of the SPMD grid (``kernel[4, 2]``).

    Example:
        >>> m = nl.program_id(0)                    # doctest: +SKIP
    """
    st = state("nl.program_id")
    axis = int(axis)
    if not st.grid:
        return 0
    if not 0 <= axis < len(st.grid):
        raise validation("nki_invalid_argument", f"nl.program_id({axis}): the grid "
                         f"{st.grid} has {len(st.grid)} dims")
    return st.program[axis]


def num_programs(axes=None) -> int:
    """The grid size along ``axes`` (int or tuple), or the total number of programs."""
    st = state("nl.num_programs")
    grid = st.grid or (1,)
    if axes is None:
        axes = tuple(range(len(grid)))
    n = 1
    for a in (axes if isinstance(axes, (tuple, list)) else (axes,)):
        n *= grid[int(a)] if int(a) < len(grid) else 1
    return n


def program_ndim() -> int:
    """The rank of the SPMD grid (0 without one)."""
    return len(state("nl.program_ndim").grid)
