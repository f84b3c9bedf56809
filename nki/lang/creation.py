"""Tensor creation: ``nl.ndarray``, ``zeros``, ``ones``, ``full``, ``*_like``, constants."""

from __future__ import annotations

import os

import numpy as np

from nki.ir.types import Memory
from nki.lang.common import Call, dtype_of
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import active
from nki.lang.userhook import paused

sbuf = Memory.SBUF
psum = Memory.PSUM
shared_hbm = Memory.SHARED_HBM
private_hbm = Memory.PRIVATE_HBM
hbm = Memory.PRIVATE_HBM


def _buffer(call: Call, buffer) -> Memory:
    if buffer is None:
        return Memory.SBUF
    if isinstance(buffer, Memory):
        return buffer
    raise call.error("nki_invalid_argument", f"buffer must be one of nl.sbuf, nl.psum, "
                     f"nl.shared_hbm, nl.private_hbm (strings are rejected since NKI 0.3), "
                     f"got {buffer!r}")


def _create(call: Call, shape, dtype, buffer, name: str, address=None) -> NkiTensor:
    mem = _buffer(call, buffer)
    dt = dtype_of(dtype)
    try:
        shape = tuple([int(s) for s in shape])
    except TypeError:
        shape = (int(shape),)
    for s in shape:     # a loop, not any(genexpr): once per tile of every iteration
        if s <= 0:
            raise call.error("nki_shape_mismatch", f"shape {shape} must be positive")
    if mem.on_chip:
        if len(shape) < 2:
            raise call.error("nki_shape_mismatch", f"on-chip tensors need at least 2 dims "
                             f"(partition, free...), got shape {shape} (Insufficient rank)")
        if shape[0] > call.trace.target.pmax:
            raise call.error("err_num_partition_exceed_arch_limit",
                             f"Size of partition dimension {shape[0]} exceeds architecture "
                             f"limitation of {call.trace.target.pmax}")
    elif mem is Memory.SHARED_HBM and call.trace.in_loop:
        raise call.error("err_shared_hbm_must_in_kernel_level",
                         "shared_hbm tensors must be created at kernel level, not in a loop")
    if address is not None:
        if not mem.on_chip:
            raise call.error("nki_invalid_argument", "address= is only valid for SBUF/PSUM")
        address = (int(address[0]), int(address[1]))
        if address[1] % max(dt.itemsize, 4 if mem is Memory.PSUM else 1):
            raise call.error("nki_misaligned_address", f"byte offset {address[1]} is not "
                             f"aligned to {dt.name}")
        _check_inside(call, mem, shape, dt, address)
    role = "output" if mem is Memory.SHARED_HBM else "internal"
    decl = call.trace.new_tensor(mem, shape, dt, name=name, role=role, loc=call.loc,
                                 address=address)
    # the handle keeps the declared dtype even when NKI_PRECISE_FP=0 stores it as fp32
    return NkiTensor(decl, dtype=dt)


def _check_inside(call: Call, mem: Memory, shape: tuple, dt, address: tuple[int, int]) -> None:
    """A placed tile must lie inside its memory: the simulator's arena is larger (spill
    pages), so a tile past the end would silently land there instead of failing."""
    target = call.trace.target
    nbytes = dt.itemsize
    for n in shape[1:]:
        nbytes *= n
    size = (target.sbuf_bytes_per_partition if mem is Memory.SBUF
            else target.psum_bytes_per_partition)
    part, offset = address
    if part < 0 or offset < 0 or part + shape[0] > target.pmax or offset + nbytes > size:
        raise call.error("nki_address_out_of_range",
                         f"a [{shape[0]}, {nbytes} B] tile at partition {part}, byte {offset} "
                         f"does not fit the {mem.name} of {target.name} "
                         f"({target.pmax} partitions x {size} B)")


@paused     # shapes, dtypes, names: nothing of the user's runs inside
def ndarray(shape, dtype, buffer=sbuf, name: str = "", address=None) -> NkiTensor:
    """Create an uninitialised tensor (fresh on-chip memory reads as NaN).

    Example:
        >>> t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)  # doctest: +SKIP
    """
    return _create(Call("nl.ndarray"), shape, dtype, buffer, name, address)


def value_result(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    """A new tensor for the value an nl function computes and returns (``nl.load``,
    ``nl.add``, ...): a handle like any other, marked so that testing its truth value, which
    would be a test of data the trace cannot see, raises."""
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    active().value_results.add(t._decl.id)
    return t


def _filled(api: str, shape, dtype, buffer, name: str, value) -> NkiTensor:
    call = Call(api)
    mem = _buffer(call, buffer)
    if mem.is_hbm:
        raise call.error("err_hbm_tensor_with_init_value_not_supported",
                         f"{api} cannot create an HBM tensor with an initial value")
    t = _create(call, shape, dtype, buffer, name)
    from nki.lang.vector import emit_memset

    emit_memset(call, t, value)
    return t


def zeros(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    """An on-chip tensor filled with 0."""
    return _filled("nl.zeros", shape, dtype, buffer, name, 0)


def ones(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    """An on-chip tensor filled with 1."""
    return _filled("nl.ones", shape, dtype, buffer, name, 1)


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    """An on-chip tensor filled with ``fill_value``."""
    return _filled("nl.full", shape, dtype, buffer, name, fill_value)


def zeros_like(x: NkiTensor, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    """Zeros with ``x``'s shape (and dtype/buffer unless given)."""
    if not isinstance(x, NkiTensor):   # a grid's shape counts tiles, not elements
        raise Call("nl.zeros_like").error("nki_invalid_grid", "zeros_like takes a tensor; for "
                                          "a grid use nl.empty_like and memset its .data")
    return _filled("nl.zeros_like", x.shape, dtype or x.dtype, buffer or x.buffer, name, 0)


def empty_like(x, dtype=None, buffer=None, name: str = ""):
    """Uninitialised storage with ``x``'s geometry: a tensor shaped like a tensor, or a grid
    with a grid's tiles (and blocks) and selection (NKI 0.7).

    Example:
        >>> slot = nl.empty_like(tiles[i, j], buffer=nl.sbuf)   # doctest: +SKIP
    """
    from nki.lang.grid import NkiGrid, alloc_like

    if isinstance(x, NkiGrid):
        return alloc_like(x, dtype, buffer, name)
    return _create(Call("nl.empty_like"), x.shape, dtype or x.dtype, buffer or x.buffer, name)


def shared_constant(constant, dtype=None) -> NkiTensor:
    """A shared_hbm tensor holding ``constant``: a numpy array, or the path of a ``.npy`` file
    holding one (nki-library's topk writes its rotation matrices to files and passes the
    paths; the compiler embeds the file's contents).

    Example:
        >>> ids = nl.shared_constant(np.arange(128, dtype=np.int32))   # doctest: +SKIP
    """
    call = Call("nl.shared_constant")
    arr = _constant_array(call, constant)
    dt = dtype_of(dtype if dtype is not None else arr.dtype)
    decl = call.trace.new_tensor(Memory.SHARED_HBM, arr.shape or (1,), dt, role="constant",
                                 loc=call.loc, name=f"const{len(call.trace.tensors)}")
    call.trace.constants[decl.id] = arr.astype(dt.host_dtype()).reshape(arr.shape or (1,))
    return NkiTensor(decl)


def _constant_array(call: Call, constant) -> np.ndarray:
    if not isinstance(constant, (str, os.PathLike)):
        return np.asarray(constant)
    call.trace.files_read.append(os.fspath(constant))
    try:
        return np.load(constant, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise call.error("nki_invalid_argument", f"nl.shared_constant: cannot read the .npy "
                         f"file {os.fspath(constant)!r}: {e}") from None


def shared_identity_matrix(n: int, dtype="uint8", dst=None) -> NkiTensor:
    """An ``n``×``n`` identity matrix in SBUF (copied from an HBM constant)."""
    from nki.lang.dma import dma_copy

    const = shared_constant(np.eye(n), dtype=dtype)
    out = dst if dst is not None else ndarray((n, n), dtype=const.dtype, buffer=sbuf)
    dma_copy(dst=out, src=const)
    return out
