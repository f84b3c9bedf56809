"""Microscaling (MX) rules: ``nisa.quantize_mx`` and ``nisa.nc_matmul_mx`` (spec §3.7, §4.1).

Packed formats, group layout and scale placement are documented in ``nki/sim/emit/mx.py``
(OCP MX v1.0 where AWS's docs leave a detail open).
"""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.matmul import _resolve_accumulate, _tiling
from nki.lang.tensor import NkiTensor

_SBUF, _PSUM = (Memory.SBUF,), (Memory.PSUM,)
_FP8_X4 = ("float8_e4m3fn_x4", "float8_e5m2_x4")
_MX_X4 = _FP8_X4 + ("float4_e2m1fn_x4",)
_SCALES = ("float8_e8m0fnu", "uint8")


def _v4(call: Call) -> None:
    if call.trace.target.nc_version < 4:
        raise call.error("nki_unsupported_on_target", f"{call.api} needs NeuronCore-v4 (trn3); "
                         f"the target is {call.trace.target.name}")


def _free(t: NkiTensor) -> int:
    return t.size // t.shape[0]


def _scale(call: Call, value, role: str, data: NkiTensor, data_role: str) -> NkiTensor:
    s = call.tile(value, role, _SBUF)
    if s.dtype.name not in _SCALES:
        raise call.error("nki_dtype_mismatch", f"{role!r} must be float8_e8m0fnu or uint8, got "
                         f"{s.dtype.name}")
    if s.shape[0] != data.shape[0] or _free(s) != _free(data):
        raise call.error("nki_shape_mismatch", f"{role!r} {s.shape} must have the shape of "
                         f"{data_role!r} {data.shape} (group scales sit in the first four "
                         "partitions of each 32-partition quadrant)")
    return s


def _groups(call: Call, t: NkiTensor, role: str) -> None:
    if t.shape[0] % 32:
        raise call.error("nki_shape_mismatch", f"{role!r} has {t.shape[0]} partitions; MX "
                         "groups of 8 partitions need a multiple of 32")


def quantize_mx(dst, src, dst_scale, name=""):
    """Quantise bf16/fp16 ``src`` [P, 4F] to MXFP8: ``dst`` [P, F] (``float8_e4m3fn_x4`` or
    ``float8_e5m2_x4``) and one E8M0 scale per 32 values (8 partitions x 4) in ``dst_scale``,
    laid out for ``nc_matmul_mx``. All in SBUF; NeuronCore-v4.

    Example:
        >>> nisa.quantize_mx(dst=q, src=x_bf16, dst_scale=q_scale)  # doctest: +SKIP
    """
    call = Call("nisa.quantize_mx")
    _v4(call)
    d, s = call.tile(dst, "dst", _SBUF), call.tile(src, "src", _SBUF)
    if s.dtype.name not in ("bfloat16", "float16"):
        raise call.error("nki_dtype_mismatch", f"src must be bfloat16 or float16, got "
                         f"{s.dtype.name}")
    if d.dtype.name not in _FP8_X4:
        raise call.error("nki_dtype_mismatch", f"dst must be float8_e4m3fn_x4 or "
                         f"float8_e5m2_x4, got {d.dtype.name}")
    call.same_partitions(d, s, "dst", "src")
    _groups(call, s, "src")
    if _free(s) != 4 * _free(d):
        raise call.error("nki_shape_mismatch", f"dst packs 4 values per element: src "
                         f"{s.shape} needs {_free(s) // 4} dst elements per partition, dst "
                         f"has {_free(d)}")
    sc = _scale(call, dst_scale, "dst_scale", d, "dst")
    attrs = (("format", d.dtype.name), ("partitions", s.shape[0]))
    ins = Instr(Opcode.QUANTIZE_MX, (("dst", acc(d)), ("dst_scale", acc(sc))),
                (("src", acc(s)),), attrs, call.loc, name)
    return call.trace.emit(ins, api=call.api)


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None, name=""):
    """``dst[M, N] (+)= stationary.T @ moving`` on MXFP8/MXFP4 x4 tiles with E8M0 group
    scales, dequantised exactly and accumulated in fp32 PSUM (fp32 or bf16 dst).

    ``stationary`` [K, M] and ``moving`` [K, N] hold 4 contraction values per element; K a
    multiple of 32 (≤ 128), M ≤ 128 and even, N ≤ 512. ``accumulate`` as ``nc_matmul``.

    Example:
        >>> nisa.nc_matmul_mx(dst=ps, stationary=w_q, moving=x_q, stationary_scale=w_s,
        ...                   moving_scale=x_s)  # doctest: +SKIP
    """
    call = Call("nisa.nc_matmul_mx")
    _v4(call)
    d = call.tile(dst, "dst", _PSUM)
    st, mv = call.tile(stationary, "stationary", _SBUF), call.tile(moving, "moving", _SBUF)
    for t, role in ((st, "stationary"), (mv, "moving")):
        if t.dtype.name not in _MX_X4:
            raise call.error("nki_dtype_mismatch", f"{role!r} must be an x4 MX type "
                             f"({', '.join(_MX_X4)}), got {t.dtype.name}")
        _groups(call, t, role)
    call.same_partitions(st, mv, "stationary", "moving")
    K, M, N = st.shape[0], _free(st), _free(mv)
    if M > 128 or M % 2:
        raise call.error("nki_matmul_free_size_exceeded", f"stationary free size {M} must be "
                         "even and at most 128")
    if N > 512:
        raise call.error("nki_matmul_free_size_exceeded", f"moving free size {N} exceeds 512")
    if d.shape[0] != M or _free(d) != N or d.dtype.name not in ("float32", "bfloat16"):
        raise call.error("nki_shape_mismatch", f"dst must be a float32/bfloat16 [{M}, {N}] "
                         f"PSUM tile, got {d.shape} {d.dtype.name}")
    if tile_size and int(tuple(tile_size)[1]) != 128:
        raise call.error("nki_invalid_argument", "nc_matmul_mx tiles rows only: tile_size's "
                         "column size must be 128")
    _tiling(call, tile_position, tile_size, K, M, 1)
    ss = _scale(call, stationary_scale, "stationary_scale", st, "stationary")
    ms = _scale(call, moving_scale, "moving_scale", mv, "moving")
    add = _resolve_accumulate(call, d, accumulate)
    attrs = (("accumulate", add), ("stationary_format", st.dtype.name),
             ("moving_format", mv.dtype.name))
    ins = Instr(Opcode.NC_MATMUL_MX, (("dst", acc(d)),),
                (("stationary", acc(st)), ("moving", acc(mv)), ("stationary_scale", acc(ss)),
                 ("moving_scale", acc(ms))), attrs, call.loc, name)
    return call.trace.emit(ins, by_matmul=True, api=call.api, reads_dst=add)
