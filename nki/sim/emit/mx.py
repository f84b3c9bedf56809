"""Microscaling (OCP MX v1.0) family: ``quantize_mx`` and ``nc_matmul_mx`` (host calls).

Formats, as nki stores them:

* ``float8_e4m3fn_x4`` / ``float8_e5m2_x4``: one uint32 holds four fp8 values, value ``i`` in
  byte ``i`` (little endian: the four contiguous fp8 elements in memory order).
  ``float4_e2m1fn_x4``: one uint16 holds four fp4 values, value ``i`` in bits ``4i..4i+3``.
* The four values of a packed element run along the contraction: a ``[K, F]`` x4 tile holds
  the logical ``[K, F, 4]`` values, contracted over ``K`` and the 4.
* Scales are E8M0 (``float8_e8m0fnu`` or ``uint8``): ``2**(bits - 127)``, 255 = NaN. One scale
  covers 32 values: 8 partitions x one packed element. The scale tile has the data tile's
  shape; the scale of partition group ``g`` (partitions ``8g..8g+7``) and column ``j`` sits at
  partition ``32 * (g // 4) + g % 4``, column ``j`` (four scale rows at the top of each
  32-partition quadrant; the other rows are not used).
* ``quantize_mx`` picks each group's scale as AWS documents it: OCP's shared exponent
  ``floor(log2(amax)) - emax`` plus one (a scale twice as large, so rounding the largest value
  never saturates), clamped to E8M0's range; elements are ``value / scale`` rounded to
  nearest even. An all-zero group gets scale bits 0; a group holding inf/NaN gets 255.
* ``nc_matmul_mx`` dequantises exactly (an fp8/fp4 value times a power of two is exact in
  fp32) and multiplies on fp32 BLAS with fp32 accumulation, like ``nc_matmul``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nki.ir.ops import Opcode
from nki.sim.emit import emitter
from nki.sim.emit.collectives import HostCall, host_call, host_op

FORMATS = {"float8_e4m3fn_x4": 0, "float8_e5m2_x4": 1, "float4_e2m1fn_x4": 2}
_ELEMENT = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn)
_EMAX = (8, 15, 2)
_BITS = (8, 8, 4)


def scale_rows(partitions: int) -> np.ndarray:
    """Row of the scale tile holding each data partition's group scale."""
    g = np.arange(partitions) // 8
    return 32 * (g // 4) + g % 4


def unpack(packed: np.ndarray, fmt: int) -> np.ndarray:
    """(K, F) packed bits → (K, F, 4) float32 values."""
    width = _BITS[fmt]
    mask = (1 << width) - 1
    codes = np.stack([(packed >> (width * i)) & mask for i in range(4)], axis=-1)
    return codes.astype(np.uint8).view(_ELEMENT[fmt]).astype(np.float32)


def pack(values: np.ndarray, fmt: int) -> np.ndarray:
    """(K, F, 4) float32 (already scaled) → (K, F) packed bits, rounding to nearest even."""
    codes = values.astype(_ELEMENT[fmt]).view(np.uint8).astype(np.int64)
    if _BITS[fmt] == 4:
        codes &= 0xF
    return sum(codes[..., i] << (_BITS[fmt] * i) for i in range(4))


def e8m0(bits: np.ndarray) -> np.ndarray:
    """E8M0 scale bits → float32 powers of two (255 → NaN)."""
    bits = np.asarray(bits, np.int64)
    out = np.ldexp(np.float32(1.0), (bits - 127).astype(np.int32)).astype(np.float32)
    return np.where(bits == 255, np.float32(np.nan), out)


def group_scales(values: np.ndarray, fmt: int) -> np.ndarray:
    """(K, F, 4) float32 → (K // 8, F) E8M0 bits, AWS's quantize_mx rule."""
    K, F, _ = values.shape
    amax = np.abs(values).reshape(K // 8, 8, F, 4).max(axis=(1, 3))
    _, e = np.frexp(amax)                      # amax = m * 2**e, m in [0.5, 1)
    exp = (e.astype(np.int64) - 1) - _EMAX[fmt] + 1
    bits = np.clip(exp + 127, 0, 254)
    bits = np.where(amax == 0, 0, bits)
    return np.where(np.isfinite(amax), bits, 255)


def quantize(values: np.ndarray, fmt: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, 4F) float32 → ((K, F) packed bits, (K // 8, F) scale bits)."""
    K = values.shape[0]
    v = values.reshape(K, -1, 4)
    bits = group_scales(v, fmt)
    scale = np.repeat(e8m0(bits), 8, axis=0)[:, :, None]
    return pack(v / scale, fmt), bits


@host_op(Opcode.QUANTIZE_MX)
def _quantize_mx(call: HostCall) -> None:
    """ints: format, P. operands: dst, src, dst_scale."""
    fmt, P = int(call.irow[2]), int(call.irow[3])
    packed, bits = quantize(call.f32(1).reshape(P, -1), fmt)
    call.put_bits(0, packed)
    scales = call.bits(2)
    groups = np.arange(P // 8)
    scales[32 * (groups // 4) + groups % 4, :] = bits
    call.put_bits(2, scales)


def dequantize(packed: np.ndarray, scale_tile: np.ndarray, fmt: int) -> np.ndarray:
    """(K, F) packed bits + (≥K, F) scale tile → (K, F, 4) float32 values."""
    K = packed.shape[0]
    scale = e8m0(scale_tile[scale_rows(K), :])
    return unpack(packed, fmt) * scale[:, :, None]


@host_op(Opcode.NC_MATMUL_MX)
def _nc_matmul_mx(call: HostCall) -> None:
    """ints: accumulate, stationary format, moving format.
    operands: dst, stationary, moving, stationary_scale, moving_scale."""
    acc, fs, fm = (int(v) for v in call.irow[2:5])
    st = dequantize(call.bits(1), call.bits(3), fs)
    mv = dequantize(call.bits(2), call.bits(4), fm)
    K, M, N = st.shape[0], st.shape[1], mv.shape[1]
    a = np.ascontiguousarray(st.transpose(0, 2, 1).reshape(4 * K, M))
    b = np.ascontiguousarray(mv.transpose(0, 2, 1).reshape(4 * K, N))
    out = np.dot(a.T, b).astype(np.float32)
    if acc:
        out = (call.f32(0).reshape(M, N) + out).astype(np.float32)
    call.put_f32(0, out)


def reference_matmul_mx(st_values, st_scale, mv_values, mv_scale) -> np.ndarray:
    """Oracle in float64: (K, M, 4) and (K, N, 4) values with (K//8, M) / (K//8, N) scale bits."""
    s = np.asarray(st_values, np.float64) * np.repeat(2.0 ** (st_scale - 127.0), 8, 0)[..., None]
    m = np.asarray(mv_values, np.float64) * np.repeat(2.0 ** (mv_scale - 127.0), 8, 0)[..., None]
    return np.einsum("kmi,kni->mn", s, m)


@emitter(Opcode.QUANTIZE_MX, host_call)
def encode_quantize_mx(ins, w, ops):
    w.ints(FORMATS[ins.attr("format")], ins.attr("partitions"))
    w.operand(ops["dst"]).operand(ops["src"]).operand(ops["dst_scale"])


@emitter(Opcode.NC_MATMUL_MX, host_call, reference_matmul_mx)
def encode_nc_matmul_mx(ins, w, ops):
    w.ints(int(ins.attr("accumulate")), FORMATS[ins.attr("stationary_format")],
           FORMATS[ins.attr("moving_format")])
    for role in ("dst", "stationary", "moving", "stationary_scale", "moving_scale"):
        w.operand(ops[role])
