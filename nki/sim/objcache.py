"""Machine code on disk, loaded without Numba: the warm path of every compiled C entry point.

Numba's own cache reloads a function by parsing its LLVM bitcode and by first initialising
its whole typing and lowering machinery: measured ~0.13 s per helper entry plus ~0.5 s once
per process, most of a warm kernel call. Generated programs and helper entries are plain C
functions called through addresses, so their *object code* is all we need: after a fresh
Numba compile we keep the object file; later processes hand it to an LLVM MCJIT engine of
their own (a few ms) and take the entry's address.

An object file may refer to symbols that Numba provides to its JIT (its C helpers, the NRT
allocator, libm, the Python C API). They are registered with LLVM's process-wide symbol table
by :func:`runtime_ready`; an object is loaded only after every symbol it needs is known to
resolve (LLVM aborts the process on an unresolved symbol), and otherwise the caller falls
back to compiling with Numba.
"""

from __future__ import annotations

import json
import os
import threading

from llvmlite import binding as ll

_ENGINES: list = []            # keep every engine (and so its code) alive for the process
_LOCK = threading.Lock()
_READY = False


def runtime_ready() -> None:
    """Register Numba's runtime symbols with LLVM (its C helpers, NRT, libm) and set up NRT's
    allocator, once: all that loaded helpers need to allocate. Only the target context is
    touched, never a dispatcher: running one loads Numba's typing registries, which import
    numba.np.arraymath and through it scipy.linalg (~0.9 s of a warm process's first call)."""
    global _READY
    if _READY:
        return
    from numba.core.registry import cpu_target
    from numba.core.runtime import rtsys

    rtsys.initialize(cpu_target.target_context)
    _READY = True


def _paths(folder: str, name: str) -> tuple[str, str]:
    base = os.path.join(folder, "objects", name)
    return base + ".o", base + ".json"


def save(folder: str, name: str, cfunc) -> None:
    """Keep the object code of a freshly compiled Numba ``cfunc`` under ``name``.

    Does nothing when the library holds no object code (it came from Numba's own cache) or
    embeds addresses of this process (Numba's "dynamic globals")."""
    library = cfunc._library
    if library.has_dynamic_globals:    # absolute addresses of this process: not reusable
        return
    try:
        data = library._get_compiled_object()
    except (RuntimeError, ValueError):
        return
    module = library._final_module
    externals = sorted(f.name for f in module.functions
                       if f.is_declaration and not f.name.startswith("llvm."))
    externals += sorted(g.name for g in module.global_variables if g.is_declaration)
    meta = {"symbol": cfunc.native_name, "externals": externals}
    obj_path, meta_path = _paths(folder, name)
    os.makedirs(os.path.dirname(obj_path), mode=0o700, exist_ok=True)
    for path, payload, mode in ((obj_path, data, "wb"), (meta_path, json.dumps(meta), "w")):
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, mode) as f:
            f.write(payload)
        os.replace(tmp, path)


def saved(folder: str, name: str) -> bool:
    """Whether object code was kept under ``name`` (it may still fail to load)."""
    return all(os.path.exists(p) for p in _paths(folder, name))


def load(folder: str, name: str) -> int | None:
    """The address of the entry saved under ``name``, or None (not saved, unreadable, or a
    symbol it needs is unknown in this process)."""
    obj_path, meta_path = _paths(folder, name)
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(obj_path, "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    runtime_ready()
    if any(ll.address_of_symbol(s) is None for s in meta.get("externals", ())):
        return None
    with _LOCK:
        target = ll.Target.from_default_triple()
        engine = ll.create_mcjit_compiler(ll.parse_assembly(""), target.create_target_machine())
        engine.add_object_file(ll.ObjectFileRef.from_data(data))
        engine.finalize_object()
        address = engine.get_function_address(meta["symbol"])
        if not address:
            return None
        _ENGINES.append(engine)
    return address
