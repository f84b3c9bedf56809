"""A numpy model, bit for bit, of the CPU's bf16 dot units and of ``nki_bgemm``
(nki/sim/bf16gemm.c, bf16amx.c), so their semantics are tested on machines without them.

``vdpbf16ps`` (Intel SDM, AVX512_BF16): for each fp32 lane ``l`` with accumulator ``acc`` and
bf16 pairs ``a = (a0, a1)``, ``b = (b0, b1)`` (element ``2l`` is ``a0``, the low half):

    t   = acc + a1 * b1        # the odd pair first
    out = t + a0 * b0

each step a fused multiply-add (the product is exact: 8-bit significands), rounded once to
fp32 with round-to-nearest-even, with subnormal inputs (the bf16 elements and ``acc``) read
as zero and subnormal results flushed to a zero of the same sign; MXCSR is not consulted.
``daz_ftz=False`` gives the same steps in plain IEEE fp32 (what the guard makes them
equal to). tests/ops/test_bf16_units.py checks the model against the instruction itself
wherever the CPU has it.

``tdpbf16ps`` (AMX-BF16) per fp32 element, for up to 16 pairs of K rows (measured bit for bit
on the unit; Intel's pseudocode is one accumulation per product, which the unit does not do):

    even = +0 (+) a[2p] * b[2p]    over p in order    # one chain of the even rows
    odd  = +0 (+) a[2p+1] * b[2p+1]                    # and one of the odd rows
    out  = acc (+) (even (+) odd)

each ``(+)`` rounded once to fp32 (nearest even) and flushed to zero when subnormal, with
subnormal inputs read as zero.

``nki_bgemm`` per nc_matmul instruction: each output starts from +0, takes one unit step
per pair of contraction rows (``avx512_bf16``; an odd K pads a zero row) or one ``tdpbf16ps``
per 32 rows (``amx_bf16``), and is then added to PSUM with an IEEE fp32 add (or stored,
without accumulation).
"""

from __future__ import annotations

import numpy as np

TINY = 2.0 ** -126   # the smallest normal fp32


def bf16_values(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) → float64 values (exact)."""
    wide = np.asarray(bits, np.uint16).astype(np.uint32) << 16
    return wide.view(np.float32).astype(np.float64)


def _flush(x: np.ndarray) -> np.ndarray:
    """Subnormals → a zero of the same sign (float64 array of fp32 values)."""
    return np.where(np.abs(x) < TINY, np.copysign(0.0, x), x)


def _round_f32(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """fp32 round-to-nearest-even of the exact sum ``hi + lo`` (``hi = fl64(hi + lo)``):
    round to odd in float64 first (53 >= 24 + 2 bits, so the second rounding is exact)."""
    bits = hi.view(np.int64)
    inexact_even = (lo != 0) & ((bits & 1) == 0) & np.isfinite(hi)
    toward = np.where(lo > 0, np.inf, -np.inf)
    odd = np.where(inexact_even, np.nextafter(hi, toward), hi)
    with np.errstate(over="ignore", invalid="ignore"):
        return odd.astype(np.float32).astype(np.float64)


def fma_f32(acc, p) -> np.ndarray:
    """``acc + p`` rounded once to fp32 (``acc`` fp32 values, ``p`` an exact product), both
    float64 arrays; inf/NaN follow IEEE."""
    acc, p = np.asarray(acc, np.float64), np.asarray(p, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = acc + p
        bp = s - acc                       # TwoSum: the exact error of s
        err = (acc - (s - bp)) + (p - bp)
    err = np.where(np.isfinite(s), err, 0.0)
    return _round_f32(s, err)


def dot_step(acc, a_pair, b_pair, daz_ftz: bool = True) -> np.ndarray:
    """One ``vdpbf16ps`` lane: ``acc`` fp32 (float32 array), pairs as uint32 (element 0 in the
    low half). Returns float32."""
    acc = np.asarray(acc, np.float32).astype(np.float64)
    a_pair, b_pair = np.asarray(a_pair, np.uint32), np.asarray(b_pair, np.uint32)
    a0, a1 = bf16_values(a_pair & 0xFFFF), bf16_values(a_pair >> 16)
    b0, b1 = bf16_values(b_pair & 0xFFFF), bf16_values(b_pair >> 16)
    if daz_ftz:
        acc, a0, a1, b0, b1 = (_flush(x) for x in (acc, a0, a1, b0, b1))
    with np.errstate(invalid="ignore", over="ignore"):
        t = fma_f32(acc, a1 * b1)
        if daz_ftz:
            t = _flush(t)
        out = fma_f32(t, a0 * b0)
    if daz_ftz:
        out = _flush(out)
    return out.astype(np.float32)


def pairs(bits: np.ndarray) -> np.ndarray:
    """bf16 bits [K, X] → uint32 row pairs [ceil(K/2), X] (row 2p low, 2p+1 high; an odd K
    pads a zero row), the operand layout the unit multiplies."""
    bits = np.asarray(bits, np.uint16)
    if bits.shape[0] % 2:
        bits = np.vstack([bits, np.zeros((1, bits.shape[1]), np.uint16)])
    return bits[0::2].astype(np.uint32) | (bits[1::2].astype(np.uint32) << 16)


def _add_ftz(x, y, daz_ftz: bool) -> np.ndarray:
    """``x (+) y`` for float64 arrays of fp32 values: rounded once, flushed if asked."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = fma_f32(x, y)
    return _flush(out) if daz_ftz else out


def amx_step(acc, st_bits, mv_bits, daz_ftz: bool = True) -> np.ndarray:
    """One ``tdpbf16ps`` on the operands' natural layout: ``acc`` fp32 [M, N] plus
    ``st.T @ mv`` for bf16 bits ``st`` [K, M], ``mv`` [K, N], K <= 32 (rows 2p, 2p+1 a pair).
    Returns float32 [M, N]."""
    st, mv = bf16_values(st_bits), bf16_values(mv_bits)
    acc = np.asarray(acc, np.float32).astype(np.float64)
    if daz_ftz:
        st, mv, acc = _flush(st), _flush(mv), _flush(acc)
    chains = []
    for half in (0, 1):
        t = np.zeros(acc.shape)
        for k in range(half, st.shape[0], 2):
            with np.errstate(invalid="ignore", over="ignore"):
                t = _add_ftz(t, st[k][:, None] * mv[k][None, :], daz_ftz)
        chains.append(t)
    out = _add_ftz(acc, _add_ftz(chains[0], chains[1], daz_ftz), daz_ftz)
    return out.astype(np.float32)


UNITS = ("avx512_bf16", "amx_bf16")


def bgemm(st_bits, mv_bits, psum=None, daz_ftz: bool = True,
          unit: str = "avx512_bf16") -> np.ndarray:
    """What ``nki_bgemm`` computes for one instruction on ``unit``: ``psum + st.T @ mv``
    (fp32)."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: one of {UNITS}")
    st_bits, mv_bits = np.asarray(st_bits, np.uint16), np.asarray(mv_bits, np.uint16)
    t = np.zeros((st_bits.shape[1], mv_bits.shape[1]), np.float32)
    if unit == "amx_bf16":
        for k0 in range(0, st_bits.shape[0], 32):
            t = amx_step(t, st_bits[k0:k0 + 32], mv_bits[k0:k0 + 32], daz_ftz)
    else:
        sp, mp = pairs(st_bits), pairs(mv_bits)
        for p in range(sp.shape[0]):
            t = dot_step(t, sp[p][:, None], mp[p][None, :], daz_ftz)
    if psum is None:
        return t
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(psum, np.float32) + t).astype(np.float32)
