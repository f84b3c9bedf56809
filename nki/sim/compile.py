"""Compiling generated sources with Numba, and keeping their machine code.

The source is written to a file in the program folder and imported, so tracebacks through
``linecache`` show the generated lines. Next to the generated function the module defines a
C entry point (a Numba ``cfunc`` over raw pointers); its object code is kept on disk
(``nki.sim.objcache``), so a later process runs the program without compiling or even
initialising Numba's compiler, and calls it through ctypes (which releases the GIL, so the
cores of an LNC launch still run in parallel).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import linecache
import os
import sys
import tempfile
from collections.abc import Callable

from nki.sim import objcache
from nki.sim.helpers.registry import NLOOPVARS
from nki.sim.layout import NF, ROW

_HEADER = """from numba import carray, cfunc, njit, types

from nki.sim.native import run_instr

"""

_ENTRY = f"""

_P8, _P64, _PF = (types.CPointer(types.uint8), types.CPointer(types.int64),
                  types.CPointer(types.float64))


@cfunc(types.int64(_P64, types.int64, _P8, types.int64, _P8, types.int64, _P8, types.int64,
                   _P64, types.int64, _PF, _P64), nogil=True)
def entry(addr, na, h, hn, s, sn, p, pn, it, rows, ft, lv):
    return _program(carray(addr, (na,)), carray(h, (hn,)), carray(s, (sn,)),
                    carray(p, (pn,)), carray(it, (rows, {ROW})), carray(ft, (rows, {NF})),
                    carray(lv, ({NLOOPVARS},)))
"""

_C_PROGRAM = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


def source_dir() -> str:
    """Where generated sources and their machine code live: one folder per version of the
    shared helper sources, so two nki installs never use each other's machine code."""
    from nki._digest import shared_digest
    from nki.config import from_environment

    base = from_environment().cache_dir or tempfile.gettempdir()
    path = os.path.join(base, "programs", shared_digest()[:16])
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def write_module(folder: str, modname: str, text: str) -> str:
    """Write ``text`` as ``folder/modname.py`` (atomically, once); returns the path."""
    path = os.path.join(folder, modname + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def import_module(modname: str, path: str):
    """Import (once per process) the module at ``path`` under ``modname``."""
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module   # before exec: Numba records importable module names
        spec.loader.exec_module(module)
    return module


def compile_source(name: str, source: str) -> Callable:
    """A callable ``run(ADDR, H, S, PS, IT, FT, L) -> int`` for the generated function
    ``name`` in ``source``: loaded machine code when this program was compiled before,
    else compiled now with Numba (``nogil``) and kept."""
    text = (_HEADER + source + f"\n\n_program = njit(nogil=True)({name})\n" + _ENTRY)
    modname = "nki_prog_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    folder = source_dir()
    path = write_module(folder, modname, text)
    linecache.checkcache(path)
    address = objcache.load(folder, modname)
    if address is None:
        entry = import_module(modname, path).entry
        objcache.save(folder, modname, entry)
        address = entry.address
    return _caller(address)


def _caller(address: int) -> Callable:
    fn = _C_PROGRAM(address)

    def run(ADDR, H, S, PS, IT, FT, L) -> int:
        return fn(ADDR.ctypes.data, ADDR.size, H.ctypes.data, H.size, S.ctypes.data, S.size,
                  PS.ctypes.data, PS.size, IT.ctypes.data, IT.shape[0], FT.ctypes.data,
                  L.ctypes.data)

    return run
