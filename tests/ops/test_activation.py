"""nisa.activation / nisa.activation_reduce / the nl unary wrappers, against float64
numpy/scipy, under both backends; the ScalarE reduce registers; every rule error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import run_both

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiUnsupportedError, NkiValidationError
from nki.ir.ops import Act
from nki.sim import transcend as tr
from nki.sim.emit.activation import reference_activation

BF16 = ml_dtypes.bfloat16
LOC = r"[\s\S]*test_activation\.py:\d+"

# Worst error in float32 steps of each function (nki.sim.transcend's measured bounds);
# functions absent here are exact (correctly rounded) in fp32.
ULP = {"exp": 1, "log": 1, "sin": 1, "cos": 1, "tan": 2, "arctan": 2, "tanh": 1,
       "sigmoid": 2, "erf": 1, "softplus": 2, "silu": 3, "gelu": 2, "gelu_apprx_tanh": 3,
       "gelu_apprx_sigmoid": 3, "mish": 4, "gelu_dx": 6, "silu_dx": 5, "erf_dx": 2,
       "gelu_apprx_sigmoid_dx": 5, "rsqrt": 1, "reciprocal": 0}

# Input domains: the ScalarE valid ranges of the spec (§4.2) or where the function varies.
DOMAIN = {"exp": (-100.0, 88.0), "log": (1e-4, 1e4), "sin": (-np.pi, np.pi),
          "cos": (-np.pi, np.pi), "tan": (-1.5, 1.5), "arctan": (-np.pi / 2, np.pi / 2),
          "sqrt": (1e-4, 1e4), "rsqrt": (1e-4, 1e4), "reciprocal": (1e-4, 1e4),
          "softplus": (-30.0, 30.0), "silu": (-30.0, 30.0), "mish": (-30.0, 30.0)}
POSITIVE_LOG_SPACED = {"log", "sqrt", "rsqrt", "reciprocal"}
ACTS = [a for a in Act if a is not Act.prelu]


def _ordered(a: np.ndarray, bits: int) -> np.ndarray:
    i = a.view(np.int32 if bits == 32 else np.int16).astype(np.int64)
    return np.where(i < 0, -(i & (2 ** (bits - 1) - 1)), i)


def ulp_distance(y: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """Steps of ``y``'s format (fp32 or bf16) between ``y`` and the rounded reference."""
    with np.errstate(all="ignore"):
        r = ref64.astype(np.float32).astype(y.dtype)
    bits = 8 * y.dtype.itemsize
    d = np.abs(_ordered(y, bits) - _ordered(r, bits))
    ny, nr = np.isnan(y.astype(np.float32)), np.isnan(r.astype(np.float32))
    return np.where(ny | nr, np.where(ny & nr, 0, 1 << 40), d)


def sample(act: Act, shape, rng) -> np.ndarray:
    lo, hi = DOMAIN.get(act.name, (-10.0, 10.0))
    if act.name in POSITIVE_LOG_SPACED:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), shape))
        return x * (rng.choice([-1.0, 1.0], shape) if act is Act.reciprocal else 1.0)
    x = rng.uniform(lo, hi, shape)
    x.flat[:4] = (0.0, -0.0, lo, hi) if lo < 0 else (lo, hi, lo, hi)
    return x


def _tile(a, buffer=nl.sbuf):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=buffer)
    nisa.dma_copy(dst=t, src=a)
    return t


def _out(t, dtype=None):
    out = nl.ndarray(t.shape, dtype=dtype or t.dtype, buffer=nl.shared_hbm)
    return out


def all_acts_kernel(a):
    """One activation per function: a[k] through ACTS[k]; one program for all of them."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for k, act in enumerate(ACTS):
        x = _tile(a[k])
        y = nl.ndarray(x.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=act, data=x)
        nisa.dma_copy(dst=out[k], src=y)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_every_function_within_ulp_bound(backend, rng, dtype):
    a = np.stack([sample(act, (100, 24), rng) for act in ACTS]).astype(dtype)
    y = nki.jit(all_acts_kernel, backend=backend)(a)
    assert y.dtype == a.dtype
    for k, act in enumerate(ACTS):
        ref = reference_activation(act, a[k])
        bound = ULP.get(act.name, 0) if dtype is np.float32 else 1
        err = ulp_distance(y[k], ref)
        assert err.max() <= bound, (act.name, err.max(), a[k].flat[err.argmax()])


def test_every_function_bit_identical_across_backends(rng):
    a = np.stack([sample(act, (100, 24), rng) for act in ACTS]).astype(np.float32)
    a[:, 0, :8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 1e30]
    run_both(all_acts_kernel, a)


# ----------------------------------------------------------------- scale, bias, ufunc tokens


def _scale_bias_kernel(op, scale_kind, bias_kind):
    def kernel(a, s, b):
        x = _tile(a)
        st = _tile(s) if scale_kind == "tile" else 0.75
        bt = {"tile": _tile(b) if bias_kind == "tile" else None, "scalar": -0.25,
              "none": None}[bias_kind]
        y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=op, data=x, bias=bt, scale=st)
        out = _out(y)
        nisa.dma_copy(dst=out, src=y)
        return out
    return kernel


@pytest.mark.parametrize("scale_kind", ["scalar", "tile"])
@pytest.mark.parametrize("bias_kind,bias_dtype", [("none", np.float32), ("tile", np.float32),
                                                  ("tile", BF16), ("scalar", np.float32)])
@pytest.mark.parametrize("op", [nl.tanh, np.exp, nl.copy])
def test_scale_and_bias(backend, rng, op, scale_kind, bias_kind, bias_dtype):
    a = rng.uniform(-3, 3, (100, 40)).astype(np.float32)
    s = rng.uniform(-2, 2, (100, 1)).astype(np.float32)
    b = rng.uniform(-1, 1, (100, 1)).astype(bias_dtype)
    y = nki.jit(_scale_bias_kernel(op, scale_kind, bias_kind), backend=backend)(a, s, b)
    scale = s if scale_kind == "tile" else 0.75
    bias = {"tile": b, "scalar": np.float32(-0.25), "none": None}[bias_kind]
    ref = reference_activation(Act.tanh if op is nl.tanh else Act.exp if op is np.exp
                               else Act.copy, a, scale, bias)
    assert ulp_distance(y, ref).max() <= 1


def test_numpy_ufunc_tokens_and_act_enum(backend, rng):
    a = rng.uniform(0.5, 4.0, (64, 16)).astype(np.float32)

    def kernel(a):
        out = nl.ndarray((3,) + a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = _tile(a)
        for k, op in enumerate((np.log, np.square, Act.rsqrt)):
            y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.activation(dst=y, op=op, data=x)
            nisa.dma_copy(dst=out[k], src=y)
        return out

    y = nki.jit(kernel, backend=backend)(a)
    a64 = a.astype(np.float64)
    for k, ref in enumerate((np.log(a64), a64 * a64, 1 / np.sqrt(a64))):
        assert ulp_distance(y[k], ref).max() <= 1


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_nl_unary_wrappers(backend, rng, dtype):
    a = rng.uniform(0.1, 3.0, (100, 32)).astype(dtype)
    names = ["exp", "log", "tanh", "sigmoid", "gelu", "silu", "sqrt", "rsqrt", "abs",
             "negative", "square", "reciprocal", "sign", "floor", "ceil", "trunc", "relu"]

    def kernel(a):
        out = nl.ndarray((len(names),) + a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = _tile(a)
        for k, n in enumerate(names):
            nisa.dma_copy(dst=out[k], src=getattr(nl, n)(x))
        return out

    y = nki.jit(kernel, backend=backend)(a)
    for k, n in enumerate(names):
        bound = ULP.get(n, 0) if dtype is np.float32 else 1
        assert ulp_distance(y[k], reference_activation(Act[n], a)).max() <= bound, n


def test_nl_wrapper_dtype_argument(backend, rng):
    a = rng.uniform(-2, 2, (32, 8)).astype(np.float32)

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=nl.exp(_tile(a), dtype=nl.bfloat16))
        return out

    y = nki.jit(kernel, backend=backend)(a)
    assert y.dtype == BF16
    assert ulp_distance(y, np.exp(a.astype(np.float64))).max() <= 1


def test_int_output_rounds_to_nearest_even_and_saturates(backend):
    a = np.array([[0.5, 1.5, 2.5, -0.5, 1000.0, -1000.0, 3.49, -3.51]], np.float32)

    def kernel(a):
        x = _tile(a)
        y = nl.ndarray(a.shape, dtype=nl.int8, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=x)
        out = _out(y)
        nisa.dma_copy(dst=out, src=y)
        return out

    y = nki.jit(kernel, backend=backend)(a)
    np.testing.assert_array_equal(y, np.array([[0, 2, 2, 0, 127, -128, 3, -4]], np.int8))


# ----------------------------------------------------------------- the ScalarE reduce registers


def seq_sum(y: np.ndarray, start=None) -> np.ndarray:
    """Row sums in fp32, one addition per element in free-dim order (the engine's order)."""
    y = y.astype(np.float32).reshape(y.shape[0], -1)
    acc = y[:, 0].copy() if start is None else start.astype(np.float32) + y[:, 0]
    for j in range(1, y.shape[1]):
        acc = acc + y[:, j]
    return acc[:, None]


def _chain_kernel(a, b, c):
    """reset; exp(a) reset_reduce (no readout); exp(b) reduce; copy(c) reduce → r3;
    then idle → r4 (registers unchanged) and reset → r5 (zeros)."""
    P = a.shape[0]
    ys = nl.ndarray((3,) + a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    rs = nl.ndarray((3, P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    y = [nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]
    r = [nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]
    x = [_tile(t) for t in (a, b, c)]
    nisa.activation(dst=y[0], op=nl.exp, data=x[0], reduce_cmd=nisa.reduce_cmd.reset)
    nisa.activation(dst=y[0], op=nl.exp, data=x[0], reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(dst=y[1], op=nl.exp, data=x[1], reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.activation(dst=y[2], op=nl.copy, data=x[2], reduce_op=nl.add, reduce_res=r[0],
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.activation(dst=y[2], op=nl.copy, data=x[2], reduce_res=r[1])
    nisa.activation(dst=y[2], op=nl.copy, data=x[2], reduce_res=r[2],
                    reduce_cmd=nisa.reduce_cmd.reset)
    for k in range(3):
        nisa.dma_copy(dst=ys[k], src=y[k])
        nisa.dma_copy(dst=rs[k], src=r[k])
    return ys, rs


def test_reduce_cmd_chain_across_calls(backend, rng):
    a, b, c = (rng.uniform(-2, 2, (100, 24)).astype(np.float32) for _ in range(3))
    ys, rs = nki.jit(_chain_kernel, backend=backend)(a, b, c)
    # exact: the register continues from its value, one fp32 addition per element
    expect = seq_sum(ys[2], seq_sum(ys[1], seq_sum(ys[0])[:, 0])[:, 0])
    np.testing.assert_array_equal(rs[0], expect)
    np.testing.assert_array_equal(rs[1], expect)          # idle: unchanged, read out
    np.testing.assert_array_equal(rs[2], np.zeros_like(expect))   # reset
    total = np.exp(a.astype(np.float64)).sum(1) + np.exp(b.astype(np.float64)).sum(1) + \
        c.astype(np.float64).sum(1)
    np.testing.assert_allclose(rs[0][:, 0], total, rtol=1e-5)


def test_reduce_chain_bit_identical_across_backends(rng):
    a, b, c = (rng.uniform(-2, 2, (100, 24)).astype(np.float32) for _ in range(3))
    run_both(_chain_kernel, a, b, c)


def _act_reduce_kernel(op, dst_dtype, res_dtype, keep):
    def kernel(a, s, b):
        P = a.shape[0]
        x = _tile(a)
        y = nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.sbuf)
        r = nl.ndarray((P, 1), dtype=res_dtype, buffer=nl.sbuf)
        if keep:   # the sum stays in the registers; a later idle call reads it out
            nisa.activation_reduce(dst=y, op=op, data=x, reduce_op=nl.add, reduce_res=None,
                                   bias=_tile(b), scale=_tile(s))
            nisa.activation(dst=y, op=op, data=x, bias=_tile(b), scale=_tile(s),
                            reduce_res=r)
        else:
            nisa.activation_reduce(dst=y, op=op, data=x, reduce_op=np.add, reduce_res=r,
                                   bias=_tile(b), scale=_tile(s))
        out, res = _out(y), _out(r)
        nisa.dma_copy(dst=out, src=y)
        nisa.dma_copy(dst=res, src=r)
        return out, res
    return kernel


@pytest.mark.parametrize("P", [1, 100, 128])
@pytest.mark.parametrize("keep", [False, True])
def test_activation_reduce(backend, rng, P, keep):
    a = rng.uniform(-2, 2, (P, 40)).astype(np.float32)
    s = rng.uniform(0.5, 1.5, (P, 1)).astype(np.float32)
    b = rng.uniform(-1, 1, (P, 1)).astype(np.float32)
    y, r = nki.jit(_act_reduce_kernel(nl.exp, nl.float32, nl.float32, keep),
                   backend=backend)(a, s, b)
    ref = reference_activation(Act.exp, a, s, b)
    assert ulp_distance(y, ref).max() <= 1
    np.testing.assert_array_equal(r, seq_sum(y))
    np.testing.assert_allclose(r[:, 0], ref.sum(1), rtol=1e-5)


def _tiled_kernel(a):
    """Row tiles of 128 (the last one partial) and, inside each, 32-partition blocks: the
    loops reroll, so operand offsets (and register lanes) depend on loop variables."""
    N, F = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((N, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        x = nl.ndarray((p1 - p0, F), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((p1 - p0, F), dtype=a.dtype, buffer=nl.sbuf)
        r = nl.ndarray((p1 - p0, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[p0:p1, :])
        for q in nl.affine_range((p1 - p0) // 32):
            nisa.activation_reduce(dst=y[q * 32:q * 32 + 32], op=nl.gelu,
                                   data=x[q * 32:q * 32 + 32], reduce_op=nl.add,
                                   reduce_res=None, scale=2.0)
            nisa.activation(dst=y[q * 32:q * 32 + 32], op=nl.silu,
                            data=x[q * 32:q * 32 + 32], reduce_op=nl.add,
                            reduce_res=r[q * 32:q * 32 + 32],
                            reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.dma_copy(dst=out[p0:p1, :], src=y)
        nisa.dma_copy(dst=sums[p0:p1, :], src=r)
    return out, sums


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tiled_loops_with_partial_tile(backend, rng, dtype):
    a = rng.uniform(-3, 3, (224, 20)).astype(dtype)     # tiles of 128 and 96 partitions
    y, r = nki.jit(_tiled_kernel, backend=backend)(a)
    ref = reference_activation(Act.silu, a)
    assert ulp_distance(y, ref).max() <= (3 if dtype is np.float32 else 1)
    g = reference_activation(Act.gelu, a, 2.0)
    np.testing.assert_allclose(r[:, 0], g.sum(1) + ref.sum(1), rtol=1e-5, atol=1e-5)


def test_tiled_loops_bit_identical_across_backends(rng):
    run_both(_tiled_kernel, rng.uniform(-3, 3, (224, 20)).astype(np.float32))


def test_reduce_sums_fp32_results_before_dst_rounding(backend, rng):
    """dst bf16: the registers hold the sum of the fp32 results, not of the bf16 values."""
    a = rng.uniform(1, 2, (64, 48)).astype(np.float32)
    one, zero = np.ones((64, 1), np.float32), np.zeros((64, 1), np.float32)
    y, r = nki.jit(_act_reduce_kernel(nl.copy, nl.bfloat16, nl.float32, False),
                   backend=backend)(a, one, zero)
    np.testing.assert_array_equal(y, a.astype(BF16))
    np.testing.assert_array_equal(r, seq_sum(a))
    assert np.abs(r - seq_sum(y)).max() > 1e-3


def test_reduce_res_is_cast_to_its_dtype(backend, rng):
    a = rng.uniform(-2, 2, (100, 40)).astype(np.float32)
    one, zero = np.ones((100, 1), np.float32), np.zeros((100, 1), np.float32)
    _, r = nki.jit(_act_reduce_kernel(nl.tanh, nl.float32, nl.bfloat16, False),
                   backend=backend)(a, one, zero)
    y = nki.jit(_act_reduce_kernel(nl.tanh, nl.float32, nl.float32, False),
                backend=backend)(a, one, zero)[0]
    assert r.dtype == BF16
    np.testing.assert_array_equal(r, seq_sum(y).astype(BF16))


def test_registers_belong_to_physical_partitions(backend):
    """A reduce over partitions 32..63 only updates registers 32..63."""
    def kernel(a):
        x = _tile(a)
        y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=y, op=nl.copy, data=x, reduce_op=nl.add, reduce_res=None)
        nisa.activation(dst=y[32:64], op=nl.copy, data=x[32:64], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(dst=y, op=nl.copy, data=x, reduce_res=r)
        out = _out(r)
        nisa.dma_copy(dst=out, src=r)
        return out

    r = nki.jit(kernel, backend=backend)(np.ones((128, 16), np.float32))
    expect = np.full((128, 1), 16.0, np.float32)
    expect[32:64] = 32.0
    np.testing.assert_array_equal(r, expect)


def test_psum_in_and_out(backend, rng):
    """SBUF → PSUM → PSUM (reduce_res in PSUM) → SBUF."""
    a = rng.uniform(-3, 3, (100, 32)).astype(BF16)

    def kernel(a):
        x = _tile(a)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        q = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.psum)
        y = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        rs = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=p, op=nl.sigmoid, data=x)
        nisa.activation_reduce(dst=q, op=nl.square, data=p, reduce_op=nl.add, reduce_res=r)
        nisa.activation(dst=y, op=nl.negative, data=q)
        nisa.activation(dst=rs, op=nl.copy, data=r)
        out, res = _out(y), _out(rs)
        nisa.dma_copy(dst=out, src=y)
        nisa.dma_copy(dst=res, src=rs)
        return out, res

    y, r = nki.jit(kernel, backend=backend)(a)
    sig = reference_activation(Act.sigmoid, a).astype(np.float32)
    assert ulp_distance(y, -(sig.astype(np.float64) ** 2)).max() <= 1
    np.testing.assert_allclose(r[:, 0], (sig.astype(np.float64) ** 2).sum(1), rtol=1e-5)


# ----------------------------------------------------------------- rules


def _rule_kernel(**kw):
    """An activation whose operands are chosen by keyword; defaults are legal."""
    def kernel(a):
        P = kw.get("P", 64)
        x = nl.ndarray((P, 8), dtype=nl.float32, buffer=kw.get("data_buffer", nl.sbuf))
        if x.buffer != nl.shared_hbm:
            nisa.memset(dst=x, value=1.0)
        y = nl.ndarray(kw.get("dst_shape", (P, 8)), dtype=kw.get("dst_dtype", nl.float32),
                       buffer=nl.sbuf)
        extra = {}
        for role in ("bias", "scale", "reduce_res"):
            spec = kw.get(role)
            if isinstance(spec, tuple):           # (shape, dtype): a fresh tile
                t = nl.ndarray(spec[0], dtype=spec[1], buffer=nl.sbuf)
                nisa.memset(dst=t, value=0 if spec[1] == nl.int32 else 1.0)
                extra[role] = t
            elif spec is not None:
                extra[role] = spec
        for k in ("reduce_op", "reduce_cmd"):
            if k in kw:
                extra[k] = kw[k]
        fn = kw.get("fn", nisa.activation)
        if fn is nisa.activation_reduce:
            extra.setdefault("reduce_op", nl.add)
            extra.setdefault("reduce_res", None)
        fn(dst=y, op=kw.get("op", nl.exp), data=x, **extra)
        return a
    return kernel


def _raises(code: str, words: str, target: str = "trn3", cls=NkiValidationError, **kw):
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(cls, match=rf"{code}.*{words}{LOC}"):
        nki.jit(_rule_kernel(**kw), target=target)(a)


@pytest.mark.parametrize("code,words,kw", [
    ("err_num_partition_exceed_arch_limit", "partition dimension 256", {"P": 256}),
    ("err_num_partition_mismatch", "'dst' has 32 partitions", {"dst_shape": (32, 8)}),
    ("nki_shape_mismatch", "elements per partition", {"dst_shape": (64, 4)}),
    ("err_unsupported_memory", "'data'", {"data_buffer": nl.shared_hbm}),
    ("nki_dtype_mismatch", "float8_e4m3fn_x4", {"dst_dtype": nl.float8_e4m3fn_x4}),
    ("nki_invalid_argument", "not a Scalar-engine activation", {"op": nl.add}),
    ("nki_invalid_argument", "not a Scalar-engine activation", {"op": [nl.exp]}),
    ("nki_invalid_argument", "reduce_op must be nl.add", {"reduce_op": nl.multiply}),
    ("nki_invalid_argument", "reduce_op must be nl.add",
     {"fn": nisa.activation_reduce, "reduce_op": None}),
    ("nki_invalid_argument", "reduce_cmd", {"reduce_cmd": nisa.reduce_cmd.load_reduce}),
    ("err_activation_scale_invalid_type", "must be float32", {"scale": ((64, 1), nl.bfloat16)}),
    ("err_activation_scale_invalid_type", "got str", {"scale": "2.0"}),
    ("err_activation_scale_scalar_or_vector", r"\[64, 1\] vector", {"scale": ((64, 4),
                                                                      nl.float32)}),
    ("err_num_partition_mismatch", "'scale' has 32", {"scale": ((32, 1), nl.float32)}),
    ("err_activation_bias_invalid_type", "int32", {"bias": ((64, 1), nl.int32)}),
    ("err_activation_bias_invalid_type", "tfloat32", {"bias": ((64, 1), nl.tfloat32)}),
    ("err_activation_bias_invalid_type", r"\[64, 1\] vector", {"bias": ((64, 2), nl.float32)}),
    ("err_activation_bias_invalid_type", "got list", {"bias": [1.0]}),
    ("err_num_partition_mismatch", "'bias' has 128", {"bias": ((128, 1), nl.float32)}),
    ("nki_shape_mismatch", r"reduce_res must be a \[64, 1\]",
     {"reduce_res": ((64, 2), nl.float32)}),
    ("err_num_partition_mismatch", "'reduce_res' has 16",
     {"reduce_res": ((16, 1), nl.float32)}),
])
def test_rule_errors(code, words, kw):
    _raises(code, words, **kw)


def test_scalar_bias_needs_trn2_or_later():
    _raises("err_activation_bias_invalid_type", "NeuronCore-v3", target="trn1", bias=0.5)
    nki.jit(_rule_kernel(bias=0.5), target="trn2")(np.zeros((4, 4), np.float32))


def test_reciprocal_bias_rejected_on_trn1():
    _raises("nki_invalid_argument", "reciprocal cannot take a bias", target="trn1",
            op=nl.reciprocal, bias=((64, 1), nl.float32))


def test_prelu_is_not_implemented():
    _raises("nki_not_implemented", "prelu", cls=NkiUnsupportedError, op=nl.prelu)


# ----- rows computed straight from the data rows into the dst rows (the fast path) ---------
# fp32 and bf16; in place, apart, and overlapping the data by a shift (which must fall back to
# the gathered path: every input element is read before any result lands), with [P, 1] scale
# and bias tiles, and with and without the row sums into reduce_res (a bf16 dst with sums
# takes the gathered path: the sums are of the fp32 results).
def _rows_aliasing_kernel(where, reduce):
    def kernel(a, s, b):
        P, W = a.shape
        out = nl.ndarray((P, W), dtype=a.dtype, buffer=nl.shared_hbm)
        sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 2 * W), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:W], src=a)
        st, bt = _tile(s), _tile(b)
        x = t[:, 0:W]
        dst = {"in_place": x, "apart": nl.ndarray((P, W), dtype=a.dtype, buffer=nl.sbuf),
               "shifted": t[:, 1:W + 1]}[where]
        r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if reduce:
            nisa.activation(dst=dst, op=nl.exp, data=x, scale=st, bias=bt, reduce_op=nl.add,
                            reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        else:
            nisa.activation(dst=dst, op=nl.exp, data=x, scale=st, bias=bt)
            nisa.memset(dst=r, value=0.0)
        nisa.dma_copy(dst=out, src=dst)
        nisa.dma_copy(dst=sums, src=r)
        return out, sums
    return kernel


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("reduce", [True, False])
@pytest.mark.parametrize("where", ["in_place", "apart", "shifted"])
def test_rows_in_arena_aliasing(rng, where, reduce, dtype):
    # 300 columns: the helper runs 54 partitions at a time (a ragged last chunk of 12)
    a = rng.uniform(-3, 3, (120, 300)).astype(dtype)
    s = rng.uniform(-2, 2, (120, 1)).astype(np.float32)
    b = rng.uniform(-1, 1, (120, 1)).astype(np.float32)
    y, r = run_both(_rows_aliasing_kernel(where, reduce), a, s, b)
    ref = reference_activation(Act.exp, a, s, b)
    assert ulp_distance(y, ref).max() <= (ULP["exp"] if dtype is np.float32 else 1)
    if not reduce:
        np.testing.assert_array_equal(r, np.zeros_like(r))
    elif dtype is np.float32:
        np.testing.assert_array_equal(r, seq_sum(y))
    else:
        np.testing.assert_allclose(r, seq_sum(ref.astype(np.float32)), rtol=1e-5)


# ------------------------------------- the row path: scale, bias and sums fused per row group


def _row_path_kernel(cmd, scale_kind, bias_kind, dst_dtype=nl.float32):
    def kernel(a, s, b, r0):
        P = a.shape[0]
        x = _tile(a)
        y = nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.sbuf)
        r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        st = _tile(s) if scale_kind == "tile" else (0.75 if scale_kind == "scalar" else 1.0)
        bt = {"tile": _tile(b) if bias_kind == "tile" else None, "scalar": -0.25,
              "none": None}[bias_kind]
        if cmd == "reduce":   # registers first hold r0's row sums, then continue from there
            y0 = nl.ndarray(r0.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=y0, op=nl.copy, data=_tile(r0), reduce_op=nl.add,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=y, op=nl.exp, data=x, bias=bt, scale=st, reduce_op=nl.add,
                        reduce_res=r, reduce_cmd=getattr(nisa.reduce_cmd, cmd))
        out, res = _out(y), _out(r)
        nisa.dma_copy(dst=out, src=y)
        nisa.dma_copy(dst=res, src=r)
        return out, res
    return kernel


def _special_values(rng, shape) -> np.ndarray:
    """Normal values with NaN, +-inf, +-0, subnormals and exp's boundaries sprinkled in."""
    a = rng.uniform(-30, 30, shape).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-39, -3e-39,
                        88.72283, 88.72284, -103.97, -104.0, -110.0, 1e30, -1e30],
                       np.float32)
    flat = a.reshape(-1)
    at = rng.choice(flat.size, min(flat.size, 3 * special.size), replace=False)
    flat[at] = np.resize(special, at.size)
    return a


@pytest.mark.parametrize("P,F", [(1, 40), (7, 33), (9, 1024), (100, 2048), (128, 1024)])
@pytest.mark.parametrize("cmd", ["reset_reduce", "reduce"])
@pytest.mark.parametrize("scale_kind,bias_kind", [("tile", "tile"), ("scalar", "scalar"),
                                                  ("none", "tile"), ("tile", "none")])
def test_row_path_bits(backend, rng, P, F, cmd, scale_kind, bias_kind):
    """The row path (scale and bias in one pass, sums folded every few rows) gives exactly
    ``exp(fp32(fp32(a * s) + b))`` with the whole-array exp and in-order fp32 row sums."""
    a = _special_values(rng, (P, F))
    s = rng.uniform(0.5, 1.5, (P, 1)).astype(np.float32)
    b = rng.uniform(-2, 2, (P, 1)).astype(np.float32)
    r0 = rng.uniform(-1, 1, (P, 3)).astype(np.float32)
    y, r = nki.jit(_row_path_kernel(cmd, scale_kind, bias_kind), backend=backend)(a, s, b, r0)
    scale = {"tile": s, "scalar": np.float32(0.75), "none": None}[scale_kind]
    bias = {"tile": b, "scalar": np.float32(-0.25), "none": None}[bias_kind]
    with np.errstate(all="ignore"):
        z = a * scale if scale is not None else a.copy()
        z = z + bias if bias is not None else z
    expect = tr.exp(np.ascontiguousarray(z, np.float32))
    np.testing.assert_array_equal(y.view(np.int32), expect.view(np.int32))
    start = seq_sum(r0)[:, 0] if cmd == "reduce" else None
    np.testing.assert_array_equal(r.view(np.int32), seq_sum(expect, start).view(np.int32))


@pytest.mark.parametrize("P,F", [(9, 1024), (128, 512)])
@pytest.mark.parametrize("cmd", ["reset_reduce", "reduce"])
def test_row_path_bf16_dst_sums_the_fp32_results(backend, rng, P, F, cmd):
    """A bf16 dst on the row path (flash attention's exp into bf16 probabilities): each value
    rounded once from the fp32 result, the registers summing the fp32 results in order."""
    a = _special_values(rng, (P, F))
    s = rng.uniform(0.5, 1.5, (P, 1)).astype(np.float32)
    b = rng.uniform(-2, 2, (P, 1)).astype(np.float32)
    r0 = rng.uniform(-1, 1, (P, 3)).astype(np.float32)
    y, r = nki.jit(_row_path_kernel(cmd, "none", "tile", nl.bfloat16),
                   backend=backend)(a, s, b, r0)
    with np.errstate(all="ignore"):
        expect = tr.exp(np.ascontiguousarray(a + b, np.float32))
    assert y.dtype == BF16
    np.testing.assert_array_equal(y.view(np.uint16), expect.astype(BF16).view(np.uint16))
    start = seq_sum(r0)[:, 0] if cmd == "reduce" else None
    np.testing.assert_array_equal(r.view(np.int32), seq_sum(expect, start).view(np.int32))


@pytest.mark.parametrize("use_scale,use_bias", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_exp_affine_is_the_affine_step_then_exp(rng, use_scale, use_bias):
    """``tr.exp_affine`` (the fp32 row path's fused exp) against numpy's fp32 affine step then
    ``tr.exp``, compiled and interpreted, in place too: the same bits."""
    a = _special_values(rng, (1, 1000))[0]
    s, b = np.float32(0.75), np.float32(-1.5)
    with np.errstate(all="ignore"):
        z = a * s if use_scale else a.copy()
        z = z + b if use_bias else z
    expect = tr.exp(z)
    for fn in (tr.exp_affine, tr.exp_affine.py_func):
        out = np.empty_like(a)
        with np.errstate(all="ignore"):
            fn(a, out, use_scale, s, use_bias, b)
        np.testing.assert_array_equal(out.view(np.int32), expect.view(np.int32))
    in_place = a.copy()
    tr.exp_affine(in_place, in_place, use_scale, s, use_bias, b)
    np.testing.assert_array_equal(in_place.view(np.int32), expect.view(np.int32))


@pytest.mark.parametrize("P,F", [(128, 4096), (120, 3000), (128, 200)])
@pytest.mark.parametrize("dst", [nl.float32, nl.bfloat16])
def test_several_chunks_per_call(backend, rng, P, F, dst):
    """activation's C entry runs 8 of ``memory.chunk_rows``' chunks at a time (a [128, 1024]
    tile in one call, registry ``chunk_scale``): wider tiles still split by partitions (32
    and 43 rows here), narrow ones run whole, and every row's bits are those of one pass."""
    a = _special_values(rng, (P, F))
    s = rng.uniform(0.5, 1.5, (P, 1)).astype(np.float32)
    b = rng.uniform(-2, 2, (P, 1)).astype(np.float32)
    r0 = rng.uniform(-1, 1, (P, 3)).astype(np.float32)
    y, r = nki.jit(_row_path_kernel("reduce", "tile", "tile", dst), backend=backend)(a, s, b, r0)
    with np.errstate(all="ignore"):
        expect = tr.exp(np.ascontiguousarray(a * s + b, np.float32))
    got = y if dst == nl.float32 else y.astype(np.float32)
    want = expect if dst == nl.float32 else expect.astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    sums = seq_sum(expect, seq_sum(r0)[:, 0])
    np.testing.assert_array_equal(r.view(np.int32), sums.view(np.int32))


def test_chunk_scale_entry_text():
    """A helper's ``chunk_scale`` scales only the rows ``chunk_rows`` chose; scale 1 keeps
    the default entry's text (and so every other helper's kept machine code)."""
    from nki.sim.emit.activation import activation
    from nki.sim.emit.vector import tensor_tensor
    from nki.sim.helpers import registry

    plain = registry._row_wise_entry(registry.helper_id(tensor_tensor))
    scaled = registry._row_wise_entry(registry.helper_id(activation))
    assert plain == registry._ROW_WISE_ENTRY
    assert "rows *= 8" in scaled and scaled.endswith(plain.split("\n", 1)[1])


@pytest.mark.parametrize("P", [9, 128])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_square_row_path_with_sums(backend, rng, P, dtype):
    """rmsnorm's sum of squares on the row path (its own inlined square per row): each dst
    element is the fp32 square, the register sums those squares in order."""
    a = _special_values(rng, (P, 1024)).astype(dtype)

    def kernel(a):
        x = _tile(a)
        y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=y, op=nl.square, data=x, reduce_op=nl.add, reduce_res=r)
        out, res = _out(y), _out(r)
        nisa.dma_copy(dst=out, src=y)
        nisa.dma_copy(dst=res, src=r)
        return out, res

    y, r = nki.jit(kernel, backend=backend)(a)
    x32 = a.astype(np.float32)
    with np.errstate(all="ignore"):
        expect = x32 * x32
    np.testing.assert_array_equal(y.view(np.int32), expect.view(np.int32))
    np.testing.assert_array_equal(r.view(np.int32), seq_sum(expect).view(np.int32))
