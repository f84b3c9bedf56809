"""The GEMMs every matmul helper calls: ``nki_sgemm``, a CBLAS-style fp32 ``sgemm``, and
``nki_bgemm``, bf16 products on the CPU's bf16 dot unit (nki/sim/bf16.py) where it is safe.

Which BLAS: numpy's wheels bundle a newer OpenBLAS (64-bit integers) than scipy's, and on
this machine kind its AVX-512 sgemm is ~1.7x faster on large problems (2048^3: 99 ms vs
169 ms; torch's MKL 99 ms) and ~12% faster on the 128x512x128 tile products our helpers
issue. So the symbol ``nki_sgemm`` is bound, once per process, to numpy's bundled
``cblas_sgemm`` when it can be found, and otherwise to a small compiled adapter over
Numba's own ``numba_xxgemm`` shim (scipy's OpenBLAS, what ``np.dot`` uses inside Numba).

Compiled helpers call ``nki_sgemm`` by name (an LLVM external symbol registered here with
``llvmlite.binding.add_symbol``), so cached machine code never holds an address; the python
backend calls the same function through ctypes. Both backends therefore run the very same
BLAS and agree bit for bit.

Signature (row-major only, as the helpers use it)::

    nki_sgemm(order, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)

with ``order = 101`` (row major), ``trans_* = 111`` (no) / ``112`` (yes): ``C = alpha *
op(A) @ op(B) + beta * C``.

``nki_bgemm(M, N, K, nseg, A, lda, a_step, B, ldb, b_step, C, ldc, accumulate) -> status``
(nki/sim/bf16gemm.c): ``C[M, N] (+)= sum_s A_s[K, M].T @ B_s[K, N]`` on bf16 bit patterns,
status 0 done, else C untouched and the caller uses ``nki_sgemm``. Bound to the library
nki/sim/bf16.py loads, or to a stub that always answers "no unit" (status 2).
"""

from __future__ import annotations

import ctypes
import glob
import os

import numba._helperlib
import numpy as np
from llvmlite import binding as ll
from numba import cfunc, types

from nki.sim import bf16

SYMBOL = "nki_sgemm"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_F32P = types.CPointer(types.float32)
SIGNATURE = types.void(types.int32, types.int32, types.int32, types.int64, types.int64,
                       types.int64, types.float32, _F32P, types.int64, _F32P, types.int64,
                       types.float32, _F32P, types.int64)
_CTYPES_SIGNATURE = ctypes.CFUNCTYPE(
    None, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64,
    ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)

# numpy's bundled OpenBLAS (ILP64, symbols prefixed "scipy_" and suffixed "64_" since
# numpy 2.0; older or differently built wheels use plainer names)
_LIB_GLOBS = ("numpy.libs/libscipy_openblas64_*.so*", "numpy.libs/libopenblas64_*.so*",
              "numpy/.dylibs/libscipy_openblas64_*.dylib")
_CBLAS_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")


def _numpy_cblas_sgemm() -> int | None:
    """Address of ``cblas_sgemm`` in numpy's bundled ILP64 OpenBLAS, or None."""
    site = os.path.dirname(os.path.dirname(np.__file__))
    for pattern in _LIB_GLOBS:
        for path in sorted(glob.glob(os.path.join(site, pattern))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for name in _CBLAS_NAMES:
                fn = getattr(lib, name, None)
                if fn is not None:
                    return ctypes.cast(fn, ctypes.c_void_p).value
    return None


_XXGEMM = types.ExternalFunction("numba_xxgemm", types.intc(
    types.char, types.char, types.char, types.intp, types.intp, types.intp, _F32P, _F32P,
    types.intp, _F32P, types.intp, _F32P, _F32P, types.intp))


def _xxgemm_adapter() -> int:
    """Address of a compiled ``nki_sgemm`` over Numba's column-major ``numba_xxgemm``.

    Row-major ``C = op(A) op(B)`` is column-major ``Cᵀ = op(B)ᵀ op(A)ᵀ``: swap the
    operands and the sizes, keep each operand's own transpose flag."""
    ll.add_symbol("numba_xxgemm", numba._helperlib.c_helpers["xxgemm"])

    @cfunc(SIGNATURE, nopython=True)
    def adapter(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        scal = np.empty(2, np.float32)
        scal[0] = alpha
        scal[1] = beta
        ta = 84 if trans_a == 112 else 78     # 'T' / 'N'
        tb = 84 if trans_b == 112 else 78
        _XXGEMM(115, tb, ta, n, m, k, scal[0:].ctypes, b, ldb, a, lda, scal[1:].ctypes,
                c, ldc)

    return adapter.address


def _bind() -> tuple[int, str]:
    address = _numpy_cblas_sgemm()
    source = "numpy's OpenBLAS"
    if address is None:
        address, source = _xxgemm_adapter(), "numba_xxgemm (scipy's OpenBLAS)"
    ll.add_symbol(SYMBOL, address)
    return address, source


ADDRESS, SOURCE = _bind()

#: the compiled helpers' handle on ``nki_sgemm``
nki_sgemm = types.ExternalFunction(SYMBOL, SIGNATURE)
#: the python backend's handle on the same function
nki_sgemm_py = _CTYPES_SIGNATURE(ADDRESS)


# ----- nki_bgemm ------------------------------------------------------------------------------
BGEMM_SYMBOL = "nki_bgemm"
_U16P = types.CPointer(types.uint16)
BGEMM_SIGNATURE = types.int32(types.int64, types.int64, types.int64, types.int64, _U16P,
                              types.int64, types.int64, _U16P, types.int64, types.int64,
                              _F32P, types.int64, types.int32)
_I64, _P = ctypes.c_int64, ctypes.c_void_p
_BGEMM_CTYPES = ctypes.CFUNCTYPE(ctypes.c_int32, _I64, _I64, _I64, _I64, _P, _I64, _I64, _P,
                                 _I64, _I64, _P, _I64, ctypes.c_int32)


@cfunc(BGEMM_SIGNATURE, nopython=True)
def _no_bf16_unit(m, n, k, nseg, a, lda, a_step, b, ldb, b_step, c, ldc, accumulate):
    """``nki_bgemm`` where no library loaded: always "no unit" (status 2)."""
    return 2


BGEMM_ADDRESS = bf16.ADDRESS or _no_bf16_unit.address
ll.add_symbol(BGEMM_SYMBOL, BGEMM_ADDRESS)
#: the compiled helpers' handle on ``nki_bgemm``
nki_bgemm = types.ExternalFunction(BGEMM_SYMBOL, BGEMM_SIGNATURE)
#: the python backend's handle on the same function
nki_bgemm_py = _BGEMM_CTYPES(BGEMM_ADDRESS)
