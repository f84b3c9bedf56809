"""The CPU's bf16 dot-product units for bf16/fp8 matmuls: ``nki_bgemm`` (nki/sim/bf16gemm.c,
nki/sim/bf16amx.c): AMX (``tdpbf16ps``) where the CPU has it and Linux grants the process its
tile state, else AVX-512 BF16 (``vdpbf16ps``).

Why a small C library (compiled with the machine's ``CC``, default gcc, at first use, like
nki/hostx4) and not LLVM IR through llvmlite: the kernels are register- and tile-blocked
GEMMs (12x32 fp32 accumulators and a VNNI-interleaved block of the moving operand for
AVX-512; 2x2 accumulator tiles, an in-register transpose of the stationary operand and masked
edges for AMX; a vector guard scan for both) whose speed depends on register allocation and
scheduling; gcc does that from intrinsics (and knows AMX's tile configuration), while
llvmlite would mean hand-writing and maintaining the IR of every variant. Without a compiler,
or on a CPU without a unit, nothing is built and every matmul keeps the exact sgemm path.

This module only builds, probes and loads; nki/sim/blas.py binds ``ADDRESS`` to the symbol
``nki_bgemm`` that compiled helpers call by name and the python backend through ctypes (so
both backends get the same bits on a given machine), or to a stub answering "no unit".

``nki_bgemm`` returns :data:`DONE`, or :data:`REFUSED` (the guard found an operand the unit
could round differently from IEEE fp32: a subnormal, inf or NaN, or exponents whose products
could underflow; C untouched) or :data:`NO_UNIT`; the caller then runs the exact sgemm path.
Its numerics are modelled bit for bit by :mod:`nki.sim.bf16_model`.

Example:
    >>> from nki.sim import bf16
    >>> bf16.UNIT in (None, "avx512_bf16", "amx_bf16")
    True
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from nki import config

DONE, REFUSED, NO_UNIT = 0, 1, 2
_HERE = Path(__file__).resolve().parent
SOURCES = (_HERE / "bf16gemm.c", _HERE / "bf16amx.c")
HEADER = _HERE / "bf16gemm.h"
CFLAGS = ("-O3", "-fPIC", "-shared")
#: the unit kinds of nki_bf16_unit() (bf16gemm.h), by name
KINDS = {"avx512_bf16": 1, "amx_bf16": 2}
_UNITS = {v: k for k, v in KINDS.items()}

def _cpu_may_have_unit() -> bool:
    """Cheap pre-check before compiling anything: an x86-64 CPU that lists ``avx512_bf16`` or
    ``amx_bf16`` (where /proc/cpuinfo exists). The library's own CPUID/XCR0 probe decides in
    the end."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and (" avx512_bf16" in line or " amx_bf16"
                                                     in line) for line in f)
    except OSError:
        return True


def _library_path() -> Path:
    cc = config.c_compiler()
    h = hashlib.sha256()
    for source in (*SOURCES, HEADER):
        h.update(source.read_bytes())
    h.update(f"{cc}|{CFLAGS}".encode())
    return Path(config.from_environment().cache_dir) / "bf16gemm" / h.hexdigest()[:16] / \
        "libnki_bf16gemm.so"


def _compile(path: Path) -> None:
    import subprocess  # only a first build pays for it

    from nki.hostx4 import _locked  # the same cross-process build lock as the x4 dtypes

    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent / "build.lock"):
        if path.exists():
            return
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.so")
        cmd = [*config.c_compiler(), *CFLAGS, *map(str, SOURCES), "-o", str(tmp)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.SubprocessError as e:    # a compiler that hangs
            raise OSError(str(e)) from e
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise OSError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        os.replace(tmp, path)


def _load() -> tuple[ctypes.CDLL | None, str]:
    """The library, or None and why not."""
    if not config.bf16_unit_enabled():
        return None, "disabled by NKI_BF16_UNIT=0"
    if not _cpu_may_have_unit():
        return None, "this CPU has no bf16 dot unit"
    try:
        path = _library_path()
        if not path.exists():
            t0 = time.perf_counter()
            print("nki: compiling the bf16 units' GEMM (bf16gemm.c, once per machine)",
                  file=sys.stderr, flush=True)
            _compile(path)
            global compiled_seconds
            compiled_seconds = time.perf_counter() - t0
            print(f"nki: bf16gemm.c compiled in {compiled_seconds:.1f}s", file=sys.stderr)
        lib = ctypes.CDLL(str(path))
    except OSError as e:     # no compiler, a compile error, an unwritable cache folder
        return None, f"the bf16 GEMM did not build: {e}"
    if lib.nki_bf16_unit() == 0:
        return None, "CPUID/XCR0: no usable bf16 dot unit"
    wanted = config.bf16_unit_kind()
    if wanted != "auto" and lib.nki_bf16_select(KINDS[wanted]) < 0:
        return lib, f"loaded (NKI_BF16_UNIT={wanted}: not on this CPU)"
    return lib, "loaded"


compiled_seconds: float | None = None   # set when this process compiled the library
_LIB, STATUS = _load()
#: every unit this CPU has and the library can use, by name (AMX first)
FOUND = tuple(name for name, kind in sorted(KINDS.items(), key=lambda kv: -kv[1])
              if _LIB is not None and (_LIB.nki_bf16_units() >> kind) & 1)
#: the unit in use (``"amx_bf16"`` or ``"avx512_bf16"``), or None where matmuls always take
#: the sgemm path
UNIT = _UNITS.get(_LIB.nki_bf16_unit()) if _LIB is not None else None
#: the address of ``nki_bgemm`` in the loaded library, or None
ADDRESS = ctypes.cast(_LIB.nki_bgemm, ctypes.c_void_p).value if _LIB is not None else None


def set_enabled(on: bool) -> bool:
    """Let matmuls use the unit (True) or force the sgemm path (False) in this process;
    returns the previous setting (tests compare the two paths)."""
    if _LIB is None:
        return False
    return bool(_LIB.nki_bf16_set_enabled(int(on)))


def select(name: str) -> str:
    """Run matmuls on unit ``name`` (one of :data:`FOUND`) in this process from now on;
    returns the previous unit's name (tests and benchmarks compare the units of one CPU)."""
    global UNIT
    if _LIB is None or name not in FOUND:
        raise ValueError(f"bf16 unit {name!r} is not usable here (found: {FOUND or 'none'})")
    was = _UNITS[_LIB.nki_bf16_select(KINDS[name])]
    UNIT = name
    return was


def amx_dot_tile(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """One ``tdpbf16ps`` on full tiles: ``acc`` fp32 [16, 16] plus ``a`` bf16 bits [16, 32]
    (row m: 16 pairs) times ``b`` bf16 bits [16, 32] (row p: column n's pair at 2n, 2n+1);
    None without AMX."""
    if _LIB is None or "amx_bf16" not in FOUND:
        return None
    acc, a, b = (np.ascontiguousarray(x) for x in (np.asarray(acc, np.float32),
                                                   np.asarray(a, np.uint16),
                                                   np.asarray(b, np.uint16)))
    assert acc.shape == (16, 16) and a.shape == b.shape == (16, 32)
    out = np.empty((16, 16), np.float32)
    was = _LIB.nki_bf16_select(KINDS["amx_bf16"])
    try:
        _LIB.nki_amx_dot_tile(*(ctypes.c_void_p(x.ctypes.data) for x in (acc, a, b, out)))
    finally:
        _LIB.nki_bf16_select(was)
    return out


def dot_lanes(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """The unit's instruction itself on each lane: ``acc`` fp32 [n], ``a``/``b`` bf16 bit
    pairs as uint32 [n] (element 2l in the low half); None without the unit."""
    if _LIB is None:
        return None
    n = len(acc)
    pad = (-n) % 16
    acc, a, b = (np.ascontiguousarray(np.concatenate([x.view(np.uint32), np.zeros(pad,
                 np.uint32)])) for x in (acc, a, b))
    out = np.empty_like(acc)
    _LIB.nki_bf16_dot_lanes(*(ctypes.c_void_p(x.ctypes.data) for x in (acc, a, b, out)),
                            ctypes.c_int64(len(out)))
    return out[:n].view(np.float32)
