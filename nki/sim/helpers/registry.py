"""The helper registry: every simulator helper, by id, with its compiled C entry point.

A helper is an ``@njit`` function ``helper(H, S, PS, irow, frow, L) -> int`` (0 = ok, else a
fault code). Generated programs call helpers through their C addresses (``cfunc``), never by
linking them in: Numba would otherwise inline every helper at every call site and a kernel of
100 instructions would take a minute to compile instead of a fraction of a second.

Helpers register with :func:`helper` next to their code; the ids follow import order, which
``nki.sim.helpers`` fixes.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable

import numpy as np
from numba import types

from nki.sim.layout import NF, ROW

NLOOPVARS = 16  # L: loop slots, then scratch for dynamic registers
# The chunk window of a row chain (nki/sim/rowchain.py): while generated code runs a run of
# row-wise instructions one partition chunk at a time, L[WINDOW_SLOT] holds the chunk's
# partition count and L[WINDOW_SLOT + 1] its first partition (0 rows: no window). Slots 8-10
# of L are no loop's: loop slots are 0..7, slots 11-15 the stop word and the fault record.
WINDOW_SLOT = 8

_IMPLS: list[Callable] = []
_NAMES: list[str] = []
_ROW_WISE: list[bool] = []
_CHUNK_SCALE: list[int] = []      # a row-wise helper's chunks, in multiples of chunk_rows'
_ADDRESSES: dict[int, int] = {}
_PURE: list[Callable] = []        # the compile-free tier's helpers, built on first use

C_SIGNATURE = types.int64(
    types.CPointer(types.uint8), types.int64,
    types.CPointer(types.uint8), types.int64,
    types.CPointer(types.uint8), types.int64,
    types.CPointer(types.int64), types.CPointer(types.float64), types.CPointer(types.int64))


def helper(fn: Callable | None = None, *, row_wise: bool = False, chunk_scale: int = 1):
    """Register a compiled helper; returns it unchanged. Its id is ``helper_id(fn)``.

    ``row_wise=True`` declares that each partition's results depend only on that partition's
    inputs; such helpers run a few partitions at a time (see ``memory.chunk_rows``), and
    never fault (status 0 always): a row chain (nki/sim/rowchain.py) runs later
    instructions on a chunk before earlier ones have run on the next chunks.
    ``chunk_scale``: chunks of that many times ``chunk_rows``' rows, for a helper whose
    per-call set-up costs more than its temporaries gain from smaller chunks."""
    if fn is None:
        return lambda f: helper(f, row_wise=row_wise, chunk_scale=chunk_scale)
    name = fn.__name__ if hasattr(fn, "__name__") else fn.py_func.__name__
    if name in _NAMES:
        raise RuntimeError(f"two simulator helpers named {name!r}: names identify helpers in "
                           "cached programs and must be unique")
    _IMPLS.append(fn)
    _NAMES.append(name)
    _ROW_WISE.append(row_wise)
    _CHUNK_SCALE.append(chunk_scale)
    _module_digest(getattr(fn, "py_func", fn).__module__)
    return fn


@functools.cache
def _module_digest(module: str) -> str:
    """Hash of a helper module's source as it is imported (its helpers register while it
    runs). Read later, the file may already hold an edit the process never imported, and its
    machine code would be cached under the edited source's name: stale code for every later
    process (seen while a background compile ran during an edit)."""
    return hashlib.sha256(inspect.getsource(sys.modules[module]).encode()).hexdigest()[:16]


def helper_id(fn: Callable) -> int:
    return _IMPLS.index(fn)


def helper_id_by_name(name: str) -> int:
    return _NAMES.index(name)


def helper_name(hid: int) -> str:
    return _NAMES[hid]


def is_row_wise(hid: int) -> bool:
    """Whether helper ``hid`` was registered ``row_wise=True``."""
    return _ROW_WISE[hid]


def python_impls() -> list[Callable]:
    """The plain-Python bodies of the helpers, by id (the python backend's table); row-wise
    helpers are wrapped in the same partition chunking as their C entries."""
    return [_chunked_py(getattr(f, "py_func", f), _row_wise_entry(k)) if rw
            else getattr(f, "py_func", f) for k, (f, rw) in enumerate(zip(_IMPLS, _ROW_WISE))]


def pure_impls() -> list[Callable]:
    """The helpers of the compile-free tier, by id: :func:`python_impls` with every ``@njit``
    sub-function they reach bound to plain Python too (``nki.sim.helpers.pure``)."""
    from nki.sim.helpers.pure import pure_value

    if len(_PURE) != len(_IMPLS):
        _PURE[:] = [_chunked_py(pure_value(f), _row_wise_entry(k), pure=True) if rw
                    else pure_value(f) for k, (f, rw) in enumerate(zip(_IMPLS, _ROW_WISE))]
    return _PURE


def _chunked_py(impl: Callable, body: str, pure: bool = False) -> Callable:
    """The python backend's row-wise wrapper: the very body of the C entry, as Python."""
    from nki.sim.helpers import memory
    from nki.sim.helpers.pure import pure_value

    chunk_rows, set_chunk = memory.chunk_rows, memory.set_chunk
    if pure:
        chunk_rows, set_chunk = pure_value(chunk_rows), pure_value(set_chunk)
    ns = {"impl": impl, "chunk_rows": chunk_rows, "set_chunk": set_chunk}
    exec(f"def run(H, S, PS, irow, frow, L):\n{body}\n", ns)
    return ns["run"]


_PLAIN_ENTRY = "    return impl(H, S, PS, irow, frow, L)"
# one call site of impl (the entry inlines it): rows == 0 runs it once on the whole row. A
# row chain's chunk window (WINDOW_SLOT) narrows the partitions run to p0 .. end, still in
# chunks of ``rows``; a window past P runs nothing.
_ROW_WISE_ENTRY = f"""    P, rows = chunk_rows(irow)
    p0, end = 0, P
    if L[{WINDOW_SLOT}] > 0 and P > 0:
        p0 = min(L[{WINDOW_SLOT + 1}], P)
        end = min(p0 + L[{WINDOW_SLOT}], P)
        if end <= p0:
            return 0
        if rows == 0:
            rows = end - p0
    sub = irow      # one piece: no copy of the row to narrow (an allocation per call)
    if rows > 0:
        sub = irow.copy()
    while True:
        if rows > 0:
            set_chunk(irow, sub, p0, min(rows, end - p0))
        status = impl(H, S, PS, sub, frow, L)
        p0 += rows
        if status != 0 or rows == 0 or p0 >= end:
            return status"""
# a chunk_scale other than 1 scales the rows after chunk_rows (the default entry's text, and
# so its kept machine code, stays as it was)
_SCALED_CHUNKS = """    P, rows = chunk_rows(irow)
    if rows > 0:
        rows *= {scale}
        if rows >= P:
            rows = 0
"""


def _row_wise_entry(hid: int) -> str:
    """The chunk loop of row-wise helper ``hid``, C entry and python backend alike."""
    scale = _CHUNK_SCALE[hid]
    if scale == 1:
        return _ROW_WISE_ENTRY
    _, rest = _ROW_WISE_ENTRY.split("\n", 1)
    return _SCALED_CHUNKS.format(scale=scale) + rest


_ENTRY_NAMES: dict[int, str] = {}


def entry_ready(hid: int) -> bool:
    """Whether helper ``hid``'s C entry is loaded in this process or its machine code is on
    disk (a file check: no Numba, no LLVM)."""
    from nki.sim import objcache
    from nki.sim.modules import source_dir

    if hid in _ADDRESSES:
        return True
    if hid not in _ENTRY_NAMES:
        _ENTRY_NAMES[hid] = _entry_module(hid)[0]
    return objcache.saved(source_dir(), _ENTRY_NAMES[hid])


def _entry_module(hid: int) -> tuple[str, str]:
    """(module name, source) of the small generated module defining helper ``hid``'s C entry.

    The entry names its helper as a module global (a closure's cells would pickle differently
    in every process). The module name carries a hash of the helper's module source and of
    the entry text, so an edited helper never reuses an old entry's machine code."""
    impl = _IMPLS[hid]
    body = _row_wise_entry(hid) if _ROW_WISE[hid] else _PLAIN_ENTRY
    text = "\n".join([
        f"# helper source {_module_digest(impl.py_func.__module__)}",
        "from numba import carray, cfunc, njit",
        "from nki.sim.helpers.memory import chunk_rows, set_chunk",
        "from nki.sim.helpers.registry import C_SIGNATURE",
        f"from {impl.py_func.__module__} import {_NAMES[hid]} as helper",
        "",
        "# the helper's body inlined (Numba IR) into the entry: compiled once, in the entry,",
        "# rather than once as a function of its own and again in the entry that links it",
        "impl = njit(inline='always', nogil=True)(helper.py_func)",
        "",
        "",
        "@cfunc(C_SIGNATURE, nogil=True)",
        "def entry(h, hn, s, sn, p, pn, ir, fr, lv):",
        "    H, S, PS = carray(h, (hn,)), carray(s, (sn,)), carray(p, (pn,))",
        f"    irow, frow, L = carray(ir, ({ROW},)), carray(fr, ({NF},)), "
        f"carray(lv, ({NLOOPVARS},))",
        body, ""])
    return f"nki_entry_{_NAMES[hid]}_" + hashlib.sha256(text.encode()).hexdigest()[:16], text


def _entry_address(hid: int) -> int:
    """The C address of helper ``hid``'s entry: its kept machine code when some process
    compiled it before (no Numba involved), else compiled now by Numba and kept
    (``nki.sim.objcache``). Only the helpers a program uses are ever compiled."""
    from nki.sim import objcache
    from nki.sim.modules import import_module, source_dir, write_module

    name, text = _entry_module(hid)
    folder = source_dir()
    address = objcache.load(folder, name)
    if address is None:
        entry = import_module(name, write_module(folder, name, text)).entry
        objcache.save(folder, name, entry)
        address = entry.address
    return address


def addresses(used: set[int] | None = None) -> np.ndarray:
    """C addresses of the helpers (compiling/loading only the ``used`` ones)."""
    out = np.zeros(len(_IMPLS), np.int64)
    for hid in range(len(_IMPLS)) if used is None else sorted(used):
        if hid not in _ADDRESSES:
            _ADDRESSES[hid] = _entry_address(hid)
        out[hid] = _ADDRESSES[hid]
    return out


def helper_count() -> int:
    return len(_IMPLS)
