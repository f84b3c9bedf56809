"""``NkiTensor``: a tensor handle = one tensor instance + a strided view of it (spec §1.8).

Views are free: indexing and view methods only compute a new (partition, offset, dims)
triple. On chip, dim 0 is the partition dim, counted in partitions; the other dims are
(stride, count) pairs in elements inside each partition. In HBM every dim is linear.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nki.ir.affine import Affine
from nki.ir.nodes import MAX_DIMS, Access, TensorDecl
from nki.ir.types import DType, Memory
from nki.lang.tracer import active, validation


class DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start+size`` (never clipped)."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start: int, size: int, step: int = 1):
        self.start, self.size, self.step = start, size, step

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


Dims = tuple[tuple[int, int], ...]

# index parts whose conversion to int runs no Python code
_SCALARS = frozenset((int, bool, type(None), type(Ellipsis), np.int8, np.int16, np.int32,
                      np.int64, np.uint8, np.uint16, np.uint32, np.uint64))


def _plain_key(key) -> bool:
    """Whether an index holds only ints, None, ``...``, and slices / ``nl.ds`` of them:
    indexing with it runs nothing but nki's own code (nki/lang/userhook.py)."""
    for k in key if type(key) is tuple else (key,):
        kind = type(k)
        if kind in _SCALARS:
            continue
        if kind is slice or kind is DynSlice:
            parts = (k.start, k.stop, k.step) if kind is slice else (k.start, k.size, k.step)
            if type(parts[0]) in _SCALARS and type(parts[1]) in _SCALARS and \
                    type(parts[2]) in _SCALARS:
                continue
        return False
    return True


class NkiTensor:
    """A view of an HBM, SBUF or PSUM tensor inside a kernel.

    Attributes:
        shape, dtype, buffer, ndim, size, name, strides, offset: as in NKI.

    Example:
        >>> t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)  # doctest: +SKIP
        >>> t[:, 0:256].shape                                               # doctest: +SKIP
        (128, 256)
    """

    __slots__ = ("_decl", "_dtype", "_part", "_off", "_dims", "_ind", "_shape", "_acc",
                 "_unchecked_span")

    def __init__(self, decl: TensorDecl, dtype: DType | None = None, part: int = 0,
                 off: int | Affine = 0, dims: Dims | None = None, ind=None):
        self._decl = decl
        self._dtype = dtype or decl.dtype
        self._part = part
        self._off = off          # an Affine when a register moves the view at run time
        self._dims = dims if dims is not None else _compact_dims(decl)
        self._ind = ind          # (index tile, indirect_dim) of a vector_offset view
        self._shape: tuple[int, ...] | None = None    # of _dims, made when first asked
        self._acc: Access | None = None               # access(), made when first asked
        # an HBM ``.ap`` pattern (or a view of one) may reach past its tensor while only its
        # shape is read (nki-library sizes tiles that way); access() checks it
        self._unchecked_span = False

    # ----- NKI attributes ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        # rules ask a few times per operand: made once (a view's dims never change)
        shape = self._shape
        if shape is None:
            shape = self._shape = tuple([c for _, c in self._dims])
        return shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def buffer(self) -> Memory:
        return self._decl.memory

    @property
    def ndim(self) -> int:
        return len(self._dims)

    @property
    def size(self) -> int:
        n = 1
        for _, c in self._dims:
            n *= c
        return n

    @property
    def name(self) -> str:
        return self._decl.name

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self._dims)

    @property
    def offset(self) -> int:
        return self._off

    @property
    def data(self) -> NkiTensor:
        """The tensor itself: the operand a grid's ``.data`` gives, so code written for
        grids and tensors alike can ask any of them for ``.data`` (NKI 0.7)."""
        return self

    @property
    def decl(self) -> TensorDecl:
        return self._decl

    @property
    def on_chip(self) -> bool:
        return self._decl.memory.on_chip

    def access(self) -> Access:
        """The IR operand for this view."""
        acc = self._acc
        if acc is not None:
            return acc
        if hasattr(self._ind, "materialize"):
            # tensor indirection: gathered into a fresh tile by the consuming instruction
            # (each time: never kept)
            return self._ind.materialize(self)
        if self._unchecked_span and type(self._off) is int:
            from nki.lang.indexing import check_hbm_span

            check_hbm_span(self, self._off, self._dims, self._dtype)
        dims = self._dims if len(self._dims) <= MAX_DIMS else _fold_dims(self)
        # kept: a view never changes, and rules ask for an operand's access several times
        # (the same object then lets the trace reuse its byte layout, Trace._layout)
        acc = self._acc = Access(self._decl.id, self._dtype, Affine.of(self._off), dims,
                                 Affine(self._part))
        return acc

    def _new(self, dims: Dims, off: int | None = None, part: int | None = None,
             dtype: DType | None = None) -> NkiTensor:
        if self._ind is not None:
            raise validation("nki_invalid_view", f"an indirect (vector_offset) view of "
                             f"{self.name!r} cannot be viewed further; pass it to the DMA")
        if len(dims) > MAX_DIMS:
            raise validation("err_exceed_max_supported_dimension",
                             f"a view of {self.name!r} would have {len(dims)} dims; "
                             f"at most {MAX_DIMS} are supported")
        view = NkiTensor(self._decl, dtype or self._dtype, self._part if part is None else part,
                         self._off if off is None else off, dims)
        view._unchecked_span = self._unchecked_span
        return view

    def __repr__(self) -> str:
        return (f"NkiTensor({self.name}, shape={self.shape}, dtype={self._dtype.name}, "
                f"buffer={self.buffer.value})")

    def __bool__(self) -> bool:
        """A tensor handle is an object, truthy as in plain Python: NKI 0.7 traces kernels as
        Python, and AWS's kernels test handles (``if bias is not None and bias:``). A value an
        nl function computed (``if nl.greater(a, b):``) is data the trace cannot see: that
        raises."""
        trace = active()
        if trace is not None and self._decl.id in trace.value_results:
            raise validation("err_ambiguous_tensor_truth_value",
                             f"the truth value of tensor {self.name!r}, computed by the kernel, "
                             "is ambiguous; control flow on tensor values is not supported "
                             "(use nl.fori_loop / nl.while_loop with a register for runtime "
                             "control flow)")
        return True

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        raise validation("err_dynamic_control_flow_not_supported",
                         f"iterating over tensor {self.name!r} is not supported; index it")

    # ----- indexing ------------------------------------------------------------------------
    def __getitem__(self, key) -> NkiTensor:
        from nki.lang.indexing import index_view, index_view_paused

        if _plain_key(key):    # no user object's __index__ can run: pause the recorder
            return index_view_paused(self, key)
        return index_view(self, key)

    # ----- view methods (spec §1.8) --------------------------------------------------------
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        """View of ``start:end:step`` along ``dim`` (no clipping, no negatives)."""
        dim = self._dim(dim)
        size = self._dims[dim][1]
        if not (0 <= start < end <= size) or step < 1:
            raise validation("err_tensor_access_out_of_bound",
                             f"{self.name}.slice({dim}, {start}, {end}, {step}) needs "
                             f"0 <= start < end <= {size} and step >= 1")
        return self[tuple([slice(None)] * dim + [slice(start, end, step)])]

    def select(self, dim: int, index) -> NkiTensor:
        """Drop ``dim`` by taking one index of it: a static int, or a register / one-element
        integer tile (a dynamic select, bounds-checked at run time).

        Example:
            >>> row = x.select(0, 3)                                   # doctest: +SKIP
        """
        dim = self._dim(dim)
        if self.on_chip and dim == 0:
            raise validation("nki_invalid_view", "select cannot drop the partition dim "
                             f"of on-chip tensor {self.name!r}")
        stride, size = self._dims[dim]
        if isinstance(index, NkiTensor):
            from nki.lang.common import Call
            from nki.lang.control import scalar_register

            index = scalar_register(Call(f"{self.name}.select"), index)
        if hasattr(index, "nki_affine"):
            dims = self._dims[:dim] + self._dims[dim + 1:]
            return self._new(dims, off=index.nki_affine() * stride + self._off)
        if not 0 <= index < size:
            raise validation("err_tensor_access_out_of_bound",
                             f"{self.name}.select({dim}, {index}): index outside [0, {size})")
        dims = self._dims[:dim] + self._dims[dim + 1:]
        return self._new(dims, off=self._off + stride * index)

    def permute(self, dims: Sequence[int]) -> NkiTensor:
        """Reorder dims; on chip dim 0 must stay first."""
        order = [self._dim(d) for d in dims]
        if sorted(order) != list(range(self.ndim)):
            raise validation("nki_invalid_view", f"permute{tuple(dims)} is not a permutation "
                             f"of the {self.ndim} dims of {self.name!r}")
        if self.on_chip and order[0] != 0:
            raise validation("nki_invalid_view",
                             f"permute cannot move the partition dim of {self.name!r}")
        return self._new(tuple(self._dims[d] for d in order))

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        """Stride-0 view repeating a size-1 dim ``size`` times."""
        dim = self._dim(dim)
        if self._dims[dim][1] != 1 or (self.on_chip and dim == 0):
            raise validation("nki_invalid_view",
                             f"broadcast({dim}, {size}) needs a size-1 dim"
                             + (" other than the partition dim" if self.on_chip else ""))
        dims = list(self._dims)
        dims[dim] = (0, int(size))
        return self._new(tuple(dims))

    def broadcast_to(self, shape: Sequence[int]) -> NkiTensor:
        """Broadcast every size-1 dim to ``shape`` (same rank)."""
        if len(shape) != self.ndim:
            raise validation("nki_shape_mismatch",
                             f"broadcast_to{tuple(shape)} needs rank {self.ndim}")
        out = self
        for d, (n, (_, c)) in enumerate(zip(shape, self._dims)):
            if n != c:
                out = out.broadcast(d, n)
        return out

    def expand_dim(self, dim: int) -> NkiTensor:
        """Insert a size-1 dim at ``dim``."""
        dim = dim + self.ndim + 1 if dim < 0 else dim
        if self.on_chip and dim == 0:
            raise validation("nki_invalid_view", "expand_dim cannot insert before the "
                             "partition dim")
        return self._new(self._dims[:dim] + ((0, 1),) + self._dims[dim:])

    expand_dims = expand_dim

    def squeeze_dim(self, dim: int) -> NkiTensor:
        """Remove a size-1 dim."""
        dim = self._dim(dim)
        if self._dims[dim][1] != 1 or (self.on_chip and dim == 0):
            raise validation("nki_invalid_view", f"squeeze_dim({dim}) needs a size-1 dim "
                             "that is not the partition dim")
        return self._new(self._dims[:dim] + self._dims[dim + 1:])

    def reshape(self, shape: Sequence[int]) -> NkiTensor:
        """View with a new shape; the reshaped dims must be contiguous."""
        from nki.lang.indexing import reshape_view

        return reshape_view(self, tuple(shape))

    def reshape_dim(self, dim: int, shape: Sequence[int]) -> NkiTensor:
        """Split one dim into ``shape``."""
        dim = self._dim(dim)
        new = self.shape[:dim] + tuple(shape) + self.shape[dim + 1:]
        return self.reshape(new)

    def flatten_dims(self, start_dim: int, end_dim: int) -> NkiTensor:
        """Merge dims ``start_dim..end_dim`` (inclusive); they must chain in memory, and on
        chip ``start_dim`` must not be the partition dim.

        Example:
            >>> t.flatten_dims(1, 2).shape        # (128, 2, 3, 4) -> (128, 6, 4)  # doctest: +SKIP
        """
        start, end = self._dim(start_dim), self._dim(end_dim)
        if start > end or (self.on_chip and start == 0 and end > 0):
            raise validation("nki_invalid_view", f"flatten_dims({start_dim}, {end_dim}) of "
                             f"{self.name!r} needs start_dim <= end_dim"
                             + (" and start_dim > 0 on chip" if self.on_chip else ""))
        n = 1
        for c in self.shape[start:end + 1]:
            n *= c
        return self.reshape(self.shape[:start] + (n,) + self.shape[end + 1:])

    def rearrange(self, src_pattern: tuple, dst_pattern: tuple,
                  fixed_sizes: dict[str, int] | None = None) -> NkiTensor:
        """einops-style view: split source groups, reorder, merge destination groups.

        Example:
            >>> t.rearrange(("p", ("h", "w")), ("p", "w", "h"), {"h": 4})  # doctest: +SKIP
        """
        from nki.lang.rearrange import rearrange_view

        return rearrange_view(self, src_pattern, dst_pattern, fixed_sizes)

    def view(self, dtype) -> NkiTensor:
        """Reinterpret the bits as ``dtype`` (last dim rescaled; it must be contiguous)."""
        from nki.lang.indexing import dtype_view

        return dtype_view(self, dtype)

    reinterpret_cast = view

    def ap(self, pattern, offset: int | None = None, *, dtype=None, scalar_offset=None,
           vector_offset=None, indirect_dim: int = 0) -> NkiTensor:
        """Address the underlying storage with ``[[stride, count], ...]`` pairs."""
        from nki.lang.indexing import ap_view

        view = ap_view(self, pattern, offset, dtype)
        view._unchecked_span = not self.on_chip     # checked when an instruction takes it
        if scalar_offset is None and vector_offset is None:
            return view
        from nki.lang.indirect import dynamic_ap

        return dynamic_ap(self, view, scalar_offset, vector_offset, indirect_dim)

    def vector_select(self, dim: int, vector_offset) -> NkiTensor:
        """HBM only: row ``i`` of dim 0 is row ``offsets[i]`` (a ``[P, 1]`` integer SBUF tile)
        of this view; an indirect view for ``dma_copy`` / ``dma_compute``.

        Example:
            >>> nisa.dma_copy(dst=rows, src=table.vector_select(0, idx))  # doctest: +SKIP
        """
        from nki.lang.indirect import vector_select

        return vector_select(self, self._dim(dim), vector_offset)

    def indirect(self, index, num_elem: int | None = None) -> NkiTensor:
        """trn3 tensor indirection (TI): a ``(P, num_elem)`` view whose column ``i`` reads,
        in every partition of a group of G partitions starting at ``s``, the flattened free
        element ``index[s + i % G, i // G]`` of this view (G = 16; 32 when the view feeds
        ``nc_matmul`` or a Tensor-engine ``nc_transpose``). ``num_elem`` defaults to
        ``index.size``. A TI view is a source (gather) or a destination (scatter: column
        ``i`` is written to that element) of an ``nisa`` instruction, including
        ``dma_copy`` to SBUF; the simulator gathers into / scatters out of a hidden tile
        around the instruction (``nki/lang/indirect.py``).

        Example:
            >>> g = data.indirect(idx, num_elem=64)                     # doctest: +SKIP
            >>> nisa.tensor_copy(dst=out, src=g)                       # doctest: +SKIP
            >>> nisa.tensor_copy(dst=data.indirect(idx, 64), src=out)  # doctest: +SKIP
        """
        from nki.lang.indirect import tensor_indirect

        return tensor_indirect(self, index, num_elem)

    def get_pattern(self) -> list[list[int]]:
        return [[s, c] for s, c in self._dims]

    def is_contiguous(self) -> bool:
        from nki.lang.indexing import is_contiguous

        return is_contiguous(self._dims, self.on_chip)

    def is_indirect(self) -> bool:
        return self._ind is not None

    def _dim(self, dim: int) -> int:
        d = dim + self.ndim if dim < 0 else dim
        if not 0 <= d < self.ndim:
            raise validation("nki_invalid_view",
                             f"dim {dim} is out of range for {self.ndim}-D {self.name!r}")
        return d


def _compact_dims(decl: TensorDecl) -> Dims:
    shape = decl.shape
    dims = []
    stride = 1
    for c in reversed(shape[1:] if decl.memory.on_chip else shape):
        dims.append((stride, c))
        stride *= c
    dims.reverse()
    if decl.memory.on_chip:
        dims.insert(0, (1, shape[0]))
    return tuple(dims)


def fold_dims(dims: Dims) -> Dims:
    """``dims`` with adjacent free dims that walk memory as one (outer stride = inner
    stride x inner count, or a count of 1) merged, innermost first, until at most
    MAX_DIMS remain or none merge; row-major element order is kept and dim 0 (the
    partition) never merges."""
    dims = list(dims)
    k = len(dims) - 2
    while len(dims) > MAX_DIMS and k >= 1:
        (so, co), (si, ci) = dims[k], dims[k + 1]
        if ci == 1:
            dims[k:k + 2] = [(so, co)]
        elif co == 1:
            dims[k:k + 2] = [(si, ci)]
        elif so == si * ci:
            dims[k:k + 2] = [(si, co * ci)]
        else:
            k -= 1
            continue
        k = min(k, len(dims) - 2)
    return tuple(dims)


def _fold_dims(t: NkiTensor) -> Dims:
    """A view of more than MAX_DIMS dims (a whole 6-d tensor) as the instructions see it:
    the machine's access patterns have MAX_DIMS levels, and dropping one silently lost its
    elements, so the dims fold (:func:`fold_dims`) or the view raises."""
    dims = fold_dims(t._dims)
    if len(dims) > MAX_DIMS:
        raise validation("err_exceed_max_supported_dimension",
                         f"a view of {t.name!r} has {len(t._dims)} dims that do not fold into "
                         f"{MAX_DIMS} (shape {t.shape}, strides {t.strides})")
    return dims
