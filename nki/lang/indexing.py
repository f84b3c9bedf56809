"""The index algebra behind ``NkiTensor.__getitem__``, ``reshape``, ``view`` and ``ap``.

Kept apart from the handle class so each rule reads on its own. All functions return new
views; nothing here touches the trace.
"""

from __future__ import annotations

import math

from nki.ir.types import BY_NAME, DType
from nki.lang.tensor import DynSlice, NkiTensor
from nki.lang.tracer import validation
from nki.lang.userhook import paused


def _normalize_key(t: NkiTensor, key) -> list:
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is None for k in key):
        raise validation("nki_invalid_view", "None (new axis) is not supported when indexing "
                         f"{t.name!r}; use expand_dim")
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise validation("nki_invalid_view", "an index can contain at most one '...'")
    if n_ell:
        i = key.index(Ellipsis)
        fill = t.ndim - (len(key) - 1)
        key = key[:i] + (slice(None),) * fill + key[i + 1:]
    if len(key) > t.ndim:
        raise validation("err_tensor_access_out_of_bound",
                         f"{len(key)} indices for {t.ndim}-D tensor {t.name!r}")
    return list(key) + [slice(None)] * (t.ndim - len(key))


def _resolve_slice(t: NkiTensor, dim: int, k, size: int) -> tuple[int, int, int]:
    """(start, count, step) of a slice or ds along a dim, bounds-checked."""
    if isinstance(k, DynSlice):
        start, stop, step = int(k.start), int(k.start) + int(k.size), int(k.step)
        if k.step != 1:
            stop = int(k.start) + int(k.size) * int(k.step)
    else:
        step = 1 if k.step is None else int(k.step)
        if step < 1:
            raise validation("nki_invalid_view", f"slice step {step} on dim {dim} of "
                             f"{t.name!r}: steps must be positive")
        start = 0 if k.start is None else int(k.start)
        stop = size if k.stop is None else int(k.stop)
        start = start + size if start < 0 else start
        stop = stop + size if stop < 0 else stop
    if start < 0 or stop > size or start > stop:
        raise validation("err_tensor_access_out_of_bound",
                         f"index {start}:{stop} is out of bounds for dim {dim} of "
                         f"{t.name!r} (size {size}); clip tile edges with min()")
    # an empty view may be made (nki-library's LNC kernels take the rows of a core that
    # has none); only an instruction using it is an error (Trace.emit)
    count = max(0, (stop - start + step - 1) // step)
    return start, count, step


def _resolve_int(t: NkiTensor, dim: int, k, size: int) -> int:
    if not isinstance(k, int):
        k = int(k)
    i = k + size if k < 0 else k
    if not 0 <= i < size:
        raise validation("err_tensor_access_out_of_bound",
                         f"index {k} is out of bounds for dim {dim} of {t.name!r} (size {size})")
    return i


def _dynamic_index(t: NkiTensor, d: int, k, size: int, count: int = 1):
    """The offset term of a register-valued index ``k`` on dim ``d`` (in elements of the
    dim), or None when ``k`` is static. Bounds are checked at run time."""
    if isinstance(k, DynSlice):
        k = k.start
    if not hasattr(k, "nki_affine"):
        return None
    if t.on_chip and d == 0:
        raise validation("nki_invalid_view", f"a register cannot index the partition dim of "
                         f"on-chip tensor {t.name!r}; dynamic offsets move free dims only")
    if count > size:
        raise validation("err_tensor_access_out_of_bound", f"a dynamic slice of {count} "
                         f"elements exceeds dim {d} of {t.name!r} (size {size})")
    return k.nki_affine()


def index_view(t: NkiTensor, key) -> NkiTensor:
    """``t[key]`` with NKI's rules for ints, slices, ``nl.ds``, negatives and ``...``; a
    register (or ``nl.ds(register, n)``) moves the view at run time."""
    view = _tile_slices(t, key)
    if view is not None:
        return view
    key = _normalize_key(t, key)
    part, off = t._part, t._off
    dims: list[tuple[int, int]] = []
    dropped_free = False
    for d, (k, (stride, size)) in enumerate(zip(key, t._dims)):
        dyn = _dynamic_index(t, d, k, size, int(k.size) if isinstance(k, DynSlice) else 1)
        if dyn is not None:
            off = dyn * stride + off
            if isinstance(k, DynSlice):
                dims.append((stride * int(k.step), int(k.size)))
            else:
                dropped_free = True
            continue
        if isinstance(k, (slice, DynSlice)):
            start, count, step = _resolve_slice(t, d, k, size)
            if t.on_chip and d == 0:
                if step != 1:
                    raise validation("nki_invalid_view", "the partition dim cannot be strided")
                part += start
                dims.append((1, count))
            else:
                off += start * stride
                dims.append((stride * step, count))
        elif hasattr(k, "__index__") or isinstance(k, int):
            i = _resolve_int(t, d, k, size)
            if t.on_chip and d == 0:
                part += i
                dims.append((1, 1))          # an int on the partition dim keeps it
            else:
                off += i * stride
                dropped_free = True
        else:
            from nki.errors import NkiUnsupportedError, fail

            raise fail("nki_not_implemented", f"indexing {t.name!r} with {type(k).__name__}",
                       None, NkiUnsupportedError)
    if t.on_chip and len(dims) < 2 and dropped_free:
        dims.append((1, 1))                  # keep on-chip views at least 2-D
    if not dims:
        dims.append((1, 1))
    return t._new(tuple(dims), off=off, part=part)


def _tile_slices(t: NkiTensor, key) -> NkiTensor | None:
    """``t[a:b, i, ...]``: per dim an in-bounds, non-empty, unit-step slice of non-negative
    ints or a non-negative int in bounds, at most one per dim (how kernels cut tiles, once
    per tile per iteration), the general path's result without its per-dim dispatch; None
    for any other key (the general path decides, and raises)."""
    dims = t._dims
    if type(key) is not tuple:
        key = (key,)
    if len(key) > len(dims):
        return None
    part, off = t._part, t._off
    on_chip = t._decl.memory.on_chip
    out = []
    dropped_free = False
    for d, (stride, size) in enumerate(dims):
        k = key[d] if d < len(key) else _ALL
        kind = type(k)
        if kind is int:
            if not 0 <= k < size:
                return None
            if on_chip and d == 0:
                part += k
                out.append((1, 1))       # an int on the partition dim keeps it
            else:
                off += k * stride
                dropped_free = True
            continue
        if kind is not slice or k.step is not None:
            return None
        start, stop = k.start, k.stop
        if start is None:
            start = 0
        elif type(start) is not int or start < 0:
            return None
        if stop is None:
            stop = size
        elif type(stop) is not int:
            return None
        if not start < stop <= size:
            return None
        if on_chip and d == 0:
            part += start
            out.append((1, stop - start))
        else:
            off += start * stride
            out.append((stride, stop - start))
    if (on_chip and len(out) < 2 and dropped_free) or not out:
        out.append((1, 1))               # on-chip views stay at least 2-D
    return t._new(tuple(out), off=off, part=part)


_ALL = slice(None)


# for plain keys (ints and slices of them): nothing of the user's runs inside
index_view_paused = paused(index_view)


def is_contiguous(dims, on_chip: bool) -> bool:
    """Whether the (free, on chip) dims are row-major compact."""
    free = [d for d in (dims[1:] if on_chip else dims) if d[1] != 1]
    expect = 1
    for stride, count in reversed(free):
        if stride != expect:
            return False
        expect *= count
    return True


def _reshape_target(t: NkiTensor, shape: tuple[int, ...]) -> list[int]:
    """The requested shape with one ``-1`` resolved; the element count must match."""
    shape = list(int(s) for s in shape)
    total = t.size
    if shape.count(-1) == 1:
        known = 1
        for s in shape:
            known *= s if s != -1 else 1
        shape[shape.index(-1)] = total // max(known, 1)
    n = 1
    for s in shape:
        n *= s
    if n != total:
        raise validation("nki_invalid_view", f"cannot reshape {t.name!r} of shape {t.shape} "
                         f"({total} elements) to {tuple(shape)}")
    return shape


def _group_strides(t: NkiTensor, old: list[tuple[int, int, int]], new: list[int],
                   shape: tuple[int, ...]) -> list[int]:
    """Strides for ``new`` over one run of ``old`` ``(dim, stride, count)`` entries with
    the same element count: the run must be mergeable (each stride is the next one times
    the next count, as numpy requires for a reshape without a copy)."""
    for (d0, s0, _), (d1, s1, c1) in zip(old, old[1:]):
        if s0 != s1 * c1:
            dims = ", ".join(str(d) for d, _, _ in old)
            raise validation("nki_invalid_view", f"reshape of {t.name!r} to {shape}: dims "
                             f"{dims} of its pattern {t.get_pattern()} cannot be merged "
                             f"(dim {d0} has stride {s0}, but dim {d1} spans {s1 * c1}); "
                             "copy the view into a compact tile first")
    strides, stride = [], old[-1][1]
    for c in reversed(new):
        strides.append(stride)
        stride *= c
    return strides[::-1]


def _reshaped_dims(t: NkiTensor, shape: list[int], first: int) -> list[tuple[int, int]]:
    """numpy's no-copy reshape of the view's dims ``first...`` to ``shape[first:]``: split
    any dim freely; merge only dims whose strides chain. Dims of size 1 carry no stride
    information and are dropped."""
    old = [(d, s, c) for d, (s, c) in enumerate(t._dims[first:], first) if c != 1]
    new = shape[first:]
    out: list[tuple[int, int]] = []
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][2], new[ni]
        while op != np_:       # grow the smaller side until both runs hold the same count
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][2]
                oj += 1
        strides = _group_strides(t, old[oi:oj], new[ni:nj], tuple(shape))
        out += [(s, c) for s, c in zip(strides, new[ni:nj])]
        oi, ni = oj, nj
    out += [(1, c) for c in new[ni:]]        # trailing size-1 dims
    return out


def reshape_view(t: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """Reshape a view with numpy's no-copy rules: on chip the partition dim is kept and only
    the free dims are reshaped; in HBM any dims may be. A dim can always be split (a row
    stride of 300 split into (3, 128) gives strides (128*300, 300)); dims can be merged only
    where their strides chain, else ``nki_invalid_view`` names them."""
    shape = _reshape_target(t, shape)
    if t.on_chip:
        if shape[0] != t.shape[0]:
            raise validation("nki_invalid_view", f"reshape of on-chip {t.name!r} must keep "
                             f"the partition dim {t.shape[0]}, got {tuple(shape)}")
    dims = _reshaped_dims(t, shape, 1 if t.on_chip else 0)
    if t.on_chip:
        dims.insert(0, t._dims[0])
    return t._new(tuple(dims))


def as_dtype(dtype) -> DType:
    """Accept nki dtypes, their names and numpy/ml_dtypes dtypes."""
    if isinstance(dtype, DType):
        # a DType subclass (the legacy dialect's numpy-comparable face) becomes the plain one
        return dtype if type(dtype) is DType else BY_NAME[dtype.name]
    if isinstance(dtype, str) and dtype in BY_NAME:
        return BY_NAME[dtype]
    import numpy as np

    from nki.ir.types import from_host

    try:
        found = from_host(np.dtype(dtype))
    except TypeError:
        found = None
    if found is None:
        raise validation("nki_unsupported_dtype", f"{dtype!r} is not an NKI dtype; use one of "
                         + ", ".join(sorted(k for k in BY_NAME if k != "bool")))
    return found


def dtype_view(t: NkiTensor, dtype) -> NkiTensor:
    """Bit reinterpretation: the last dim is rescaled by the itemsize ratio."""
    new = as_dtype(dtype)
    old = t.dtype
    if not isinstance(t._off, int) and new.itemsize != old.itemsize:
        raise validation("nki_invalid_view", f"view({new.name}) of {t.name!r}: a view moved "
                         "by a register cannot change its element size")
    if new.itemsize == old.itemsize:
        return t._new(t._dims, dtype=new)
    last_stride, last_count = t._dims[-1]
    if last_stride != 1 or (t.on_chip and t.ndim == 1):
        raise validation("nki_invalid_view", f"view({new.name}) needs a contiguous last dim "
                         f"on {t.name!r}")
    nbytes = last_count * old.itemsize
    if nbytes % new.itemsize:
        raise validation("nki_invalid_view", f"view({new.name}): last dim of {t.name!r} holds "
                         f"{nbytes} bytes, not a multiple of {new.itemsize}")
    dims = []
    first_free = 1 if t.on_chip else 0
    for i, (s, c) in enumerate(t._dims[:-1]):
        if i < first_free:
            dims.append((s, c))
            continue
        if (s * old.itemsize) % new.itemsize:
            raise validation("nki_invalid_view", f"view({new.name}) of {t.name!r}: stride {s} "
                             "is not a whole number of new elements")
        dims.append((s * old.itemsize // new.itemsize, c))
    if (t._off * old.itemsize) % new.itemsize:
        raise validation("nki_invalid_view", f"view({new.name}) of {t.name!r}: offset is "
                         "not aligned to the new dtype")
    dims.append((1, nbytes // new.itemsize))
    return t._new(tuple(dims), off=t._off * old.itemsize // new.itemsize, dtype=new)


def check_hbm_span(t: NkiTensor, off: int, pairs, dt) -> None:
    """A fixed HBM access pattern must stay inside its tensor: elements ``off + sum(i*s)``
    for ``0 <= i < count`` (in ``dt`` elements) within the tensor's storage."""
    size = math.prod(t.decl.shape) * t.decl.dtype.itemsize // dt.itemsize
    low = off + sum((c - 1) * s for s, c in pairs if s < 0 and c > 0)
    high = off + sum((c - 1) * s for s, c in pairs if s > 0 and c > 0)
    if any(c <= 0 for _, c in pairs):
        return
    if low < 0 or high >= size:
        raise validation("err_tensor_access_out_of_bound", f".ap on {t.name!r} reaches "
                         f"elements {low}..{high}, outside its {size} elements "
                         f"({dt.name}); pattern {[list(p) for p in pairs]}, offset {off}")


def ap_view(t: NkiTensor, pattern, offset, dtype) -> NkiTensor:
    """``.ap([[stride, count], ...], offset)``: address the storage directly (spec §1.8)."""
    dt = as_dtype(dtype) if dtype is not None else t.dtype
    pairs = [(int(s), int(c)) for s, c in pattern]
    if not pairs:
        raise validation("nki_invalid_view", ".ap needs at least one [stride, count] pair")
    decl = t.decl
    if offset is None and not isinstance(t.offset, int):
        raise validation("nki_invalid_view", f".ap on {t.name!r}, a view moved by a register, "
                         "needs an explicit offset=")
    if not t.on_chip:
        off = t.offset * t.dtype.itemsize // dt.itemsize if offset is None else int(offset)
        return t._new(tuple(pairs), off=off, part=0, dtype=dt)
    per_part = decl.bytes_per_partition // dt.itemsize
    pstride, pcount = pairs[0]
    if pstride != per_part and pcount != 1:
        raise validation("nki_invalid_view", f".ap on on-chip {t.name!r}: the first pair is "
                         f"the partition pair and its stride must be {per_part} (elements per "
                         f"partition), got {pstride}")
    if offset is None:
        part, off = t._part, t.offset * t.dtype.itemsize // dt.itemsize
    else:
        part, off = divmod(int(offset), per_part)
    return t._new(((1, pcount),) + tuple(pairs[1:]), off=off, part=part, dtype=dt)
