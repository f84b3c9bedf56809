"""Flash attention forward and backward (``nki.kernels.attention``, ``attention_bwd``) against
torch's ``scaled_dot_product_attention`` and its autograd gradients.

Tolerances. fp32: the kernel computes in fp32 with fp32 PSUM accumulation, so the error
against a float64 torch reference is a few fp32 ulps amplified by the softmax (observed
≤ 2e-6 relative); we assert 1e-4 relative to the largest reference magnitude. bf16: q kᵀ and
P V (and the five backward matmuls) take bf16 operands, so errors of ~2^-8 relative are
inherent. We bound the kernel's error by twice the error of torch's own bf16 SDPA (forward
and autograd) on the same inputs, plus a small floor, and by 3e-2 relative outright.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import run_both
from nki.kernels.attention import attention_reference_torch, flash_attention
from nki.kernels.attention_bwd import attention_bwd_reference_torch, flash_attention_bwd

import nki

BF16 = ml_dtypes.bfloat16
DTYPES = {"fp32": np.float32, "bf16": BF16}

# (batch, q heads, kv heads, Sq, Sk, d, dtype, causal, mask): mask is None, "2d" ([Sq, Sk])
# or "4d" ([B, 1, Sq, Sk] with fully masked key stripes)
FWD = [
    (1, 2, 2, 200, 200, 64, "fp32", True, None),
    (1, 2, 2, 200, 200, 64, "fp32", False, None),
    (2, 4, 2, 333, 333, 128, "fp32", True, None),          # GQA, odd sizes
    (1, 2, 1, 130, 600, 64, "fp32", False, None),           # cross attention, Sk > one block
    (1, 1, 1, 1100, 1100, 128, "fp32", True, None),         # 512-blocks + chunks + diagonal
    (1, 2, 2, 200, 333, 64, "fp32", True, "2d"),
    (2, 2, 1, 150, 250, 96, "fp32", False, "4d"),
    (1, 2, 2, 333, 333, 128, "bf16", True, None),
    (1, 4, 2, 200, 300, 64, "bf16", False, "2d"),
]
BWD = [
    (1, 2, 2, 200, 200, 64, "fp32", True, None),
    (1, 2, 2, 200, 200, 128, "fp32", False, None),
    (1, 4, 2, 333, 333, 128, "fp32", True, None),           # GQA: dk/dv summed per group
    (2, 2, 1, 130, 600, 64, "fp32", False, "4d"),
    (1, 1, 1, 700, 700, 64, "fp32", True, "2d"),            # blocks + chunks + diagonal
    (1, 4, 2, 200, 200, 64, "bf16", True, None),
    (1, 2, 2, 150, 333, 128, "bf16", False, "2d"),
]


def case_id(c) -> str:
    b, h, hk, sq, sk, d, dt, causal, mask = c
    heads = f"h{h}" if h == hk else f"h{h}kv{hk}"
    seq = f"s{sq}" if sq == sk else f"sq{sq}-sk{sk}"
    return "-".join([f"b{b}", heads, seq, f"d{d}", dt, "causal" if causal else "full"]
                    + ([f"mask{mask}"] if mask else []))


def make_inputs(c, seed=0):
    b, h, hk, sq, sk, d, dt, causal, mask = c
    rng = np.random.default_rng(seed)
    dtype = DTYPES[dt]
    q = rng.standard_normal((b, h, sq, d)).astype(dtype)
    k = rng.standard_normal((b, hk, sk, d)).astype(dtype)
    v = rng.standard_normal((b, hk, sk, d)).astype(dtype)
    m = None
    if mask == "2d":
        m = rng.standard_normal((sq, sk)).astype(np.float32)
    elif mask == "4d":
        m = rng.standard_normal((b, 1, sq, sk)).astype(np.float32)
        m[:, :, :, 7:19] = -np.inf                      # keys nobody may see
    return q, k, v, m


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def rel_err(x, ref) -> float:
    ref = f64(ref)
    return float(np.abs(f64(x) - ref).max() / np.abs(ref).max())


def torch_bf16_fwd_error(q, k, v, m, causal, ref) -> float:
    """Error of torch's own bf16 SDPA against the float64 reference ``ref``."""
    o, _ = attention_reference_torch(torch.from_numpy(f64(q)).bfloat16(),
                                     torch.from_numpy(f64(k)).bfloat16(),
                                     torch.from_numpy(f64(v)).bfloat16(),
                                     None if m is None else torch.from_numpy(m).bfloat16(),
                                     causal, dtype="bfloat16")
    return rel_err(o.float().numpy(), ref)


@pytest.mark.parametrize("c", FWD, ids=case_id)
def test_forward(c):
    q, k, v, m = make_inputs(c)
    causal = c[7]
    o, lse = flash_attention(q, k, v, m, causal=causal)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == np.float32
    ref_o, ref_lse = attention_reference_torch(q, k, v, m, causal)
    ref_o, ref_lse = ref_o.numpy(), ref_lse.numpy()
    # lse: fp32 softmax statistics in both dtypes (scores of bf16 inputs are exact products)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)
    err = rel_err(o, ref_o)
    if c[6] == "fp32":
        assert err < 1e-4
    else:
        assert err < min(3e-2, 2 * torch_bf16_fwd_error(q, k, v, m, causal, ref_o) + 2e-3)


@pytest.mark.parametrize("c", BWD, ids=case_id)
def test_backward(c):
    q, k, v, m = make_inputs(c)
    causal = c[7]
    do = np.random.default_rng(1).standard_normal(q.shape).astype(q.dtype)
    o, lse = flash_attention(q, k, v, m, causal=causal)
    dq, dk, dv = flash_attention_bwd(q, k, v, o, do, lse, m, causal=causal)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == q.dtype
    refs = [g.numpy() for g in attention_bwd_reference_torch(q, k, v, do, m, causal)]
    errs = [rel_err(x, r) for x, r in zip((dq, dk, dv), refs)]
    if c[6] == "fp32":
        assert max(errs) < 1e-4, errs
        return
    # bf16: torch's own autograd in bf16 on the same inputs sets the scale of the error
    tm = None if m is None else torch.from_numpy(m)
    t_grads = attention_bwd_reference_torch(*(torch.from_numpy(f64(x)).bfloat16()
                                              for x in (q, k, v, do)), tm, causal,
                                            dtype="bfloat16")
    for name, e, tg, r in zip("qkv", errs, t_grads, refs):
        bound = min(3e-2, 2 * rel_err(tg.float().numpy(), r) + 2e-3)
        assert e < bound, (f"d{name}", e, bound)


def test_default_scale_matches_explicit():
    c = (1, 2, 2, 130, 130, 64, "fp32", True, None)
    q, k, v, _ = make_inputs(c)
    o1, l1 = flash_attention(q, k, v, causal=True)
    o2, l2 = flash_attention(q, k, v, causal=True, scale=1 / math.sqrt(64))
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(l1, l2)
    o3, l3 = flash_attention(q, k, v, causal=True, scale=0.3)
    r3, rl3 = attention_reference_torch(q, k, v, None, True, scale=0.3)
    assert rel_err(o3, r3.numpy()) < 1e-4
    np.testing.assert_allclose(l3, rl3.numpy(), rtol=1e-5, atol=1e-4)


def test_bad_shapes_are_rejected():
    q = np.zeros((1, 3, 64, 32), np.float32)
    kv = np.zeros((1, 2, 64, 32), np.float32)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention(q, kv, kv)
    with pytest.raises(ValueError, match="mask"):
        flash_attention(q[:, :2], kv, kv, np.zeros((64, 63), np.float32))


# ----- python backend: tiny shapes, bit-identical to the compiled backend -------------------
def test_python_backend_forward():
    c = (1, 2, 1, 136, 140, 32, "fp32", True, "2d")
    q, k, v, m = make_inputs(c)
    o, lse = run_both(flash_attention.fn, q, k, v, m, causal=True)
    ref_o, ref_lse = attention_reference_torch(q, k, v, m, True)
    assert rel_err(o, ref_o.numpy()) < 1e-4
    np.testing.assert_allclose(lse, ref_lse.numpy(), rtol=1e-5, atol=1e-4)


def test_python_backend_backward():
    c = (1, 2, 1, 136, 140, 32, "bf16", True, None)
    q, k, v, _ = make_inputs(c)
    do = np.random.default_rng(1).standard_normal(q.shape).astype(q.dtype)
    o, lse = flash_attention(q, k, v, causal=True)
    grads = run_both(flash_attention_bwd.fn, q, k, v, o, do, lse, causal=True)
    refs = attention_bwd_reference_torch(q, k, v, do, None, True)
    for g, r in zip(grads, refs):
        assert rel_err(g, r.numpy()) < 3e-2


def test_legacy_single_head_entry_point():
    from nki.kernels.attention import attention_reference, flash_attention_fwd

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((200, 64)).astype(np.float32) for _ in range(3))
    out = nki.jit(flash_attention_fwd.fn)(q, k, v, causal=True)
    np.testing.assert_allclose(out, attention_reference(q, k, v, True), rtol=1e-4, atol=1e-4)


def test_trn1_target_limits():
    """trn1: 512-wide matmuls within one PSUM bank, the smallest SBUF; fwd and bwd still fit."""
    c = (1, 4, 2, 300, 300, 128, "fp32", True, None)
    q, k, v, _ = make_inputs(c)
    do = np.random.default_rng(1).standard_normal(q.shape).astype(q.dtype)
    o, lse = nki.jit(flash_attention.fn, target="trn1")(q, k, v, None, True)
    grads = nki.jit(flash_attention_bwd.fn, target="trn1")(q, k, v, o, do, lse, None, True)
    ref_o, _ = attention_reference_torch(q, k, v, None, True)
    assert rel_err(o, ref_o.numpy()) < 1e-4
    for g, r in zip(grads, attention_bwd_reference_torch(q, k, v, do, None, True)):
        assert rel_err(g, r.numpy()) < 1e-4


def test_race_checked_forward_runs():
    """check_races=True: each query tile's state, made in one affine loop and first written
    in a later one, gets bytes of its own (no two iterations write the same SBUF bytes)."""
    from nki.kernels.attention import attention_reference, flash_attention_fwd

    c = (1, 1, 1, 256, 256, 64, "fp32", True, None)
    q, k, v, _ = make_inputs(c)
    o, lse = nki.jit(flash_attention.fn, check_races=True, cache=False)(q, k, v, None, True)
    ref_o, ref_lse = attention_reference_torch(q, k, v, None, True)
    assert rel_err(o, ref_o.numpy()) < 1e-4
    np.testing.assert_allclose(lse, ref_lse.numpy(), rtol=1e-5, atol=1e-4)
    out = nki.jit(flash_attention_fwd.fn, check_races=True, cache=False)(
        q[0, 0], k[0, 0], v[0, 0], True)
    np.testing.assert_allclose(out, attention_reference(q[0, 0], k[0, 0], v[0, 0], True),
                               rtol=1e-4, atol=1e-4)


# ----- mask gradient: dS summed over the mask's broadcast dims ------------------------------
# (batch, q heads, kv heads, Sq, Sk, d, dtype, causal, mask) as above, plus "4dfull"
# ([B, H, Sq, Sk]: one mask row per head, stored without accumulation)
MASK_GRAD = [
    (2, 2, 1, 130, 200, 32, "fp32", False, "2d"),     # shared by all 4 (b, h): accumulated
    (1, 2, 2, 200, 200, 64, "fp32", True, "2d"),      # causal: skipped blocks stay 0
    (2, 4, 2, 150, 250, 32, "fp32", False, "4d"),     # [B, 1, ..]: summed over heads, -inf
    (1, 2, 1, 140, 600, 32, "fp32", True, "4dfull"),  # plain stores, zero-filled (causal)
    (1, 2, 2, 150, 333, 64, "bf16", False, "2d"),
]


def mask_grad_inputs(c):
    if c[-1] != "4dfull":
        return make_inputs(c)
    q, k, v, _ = make_inputs(c[:-1] + (None,))
    b, h, sq, sk = c[0], c[1], c[3], c[4]
    return q, k, v, np.random.default_rng(2).standard_normal((b, h, sq, sk)).astype(np.float32)


@pytest.mark.parametrize("c", MASK_GRAD, ids=case_id)
def test_backward_mask_grad(c):
    """``mask_grad=True`` adds dMask = dS (fp32, the mask's shape) to (dq, dk, dv), which
    are unchanged; compared with the autograd of SDPA's additive ``attn_mask``."""
    q, k, v, m = mask_grad_inputs(c)
    causal = c[7]
    do = np.random.default_rng(1).standard_normal(q.shape).astype(q.dtype)
    o, lse = flash_attention(q, k, v, m, causal=causal)
    *grads, dm = flash_attention_bwd(q, k, v, o, do, lse, m, causal=causal, mask_grad=True)
    assert dm.shape == m.shape and dm.dtype == np.float32
    for g, g0 in zip(grads, flash_attention_bwd(q, k, v, o, do, lse, m, causal=causal)):
        np.testing.assert_array_equal(g, g0)
    ref = attention_bwd_reference_torch(q, k, v, do, m, causal, mask_grad=True)[3].numpy()
    if causal:           # above the diagonal (some blocks never visited): exactly 0
        above = np.triu_indices(c[3], 1, c[4])
        assert not dm[..., above[0], above[1]].any()
    if c[6] == "fp32":
        assert rel_err(dm, ref) < 1e-4
        return
    t_dm = attention_bwd_reference_torch(*(torch.from_numpy(f64(x)).bfloat16()
                                           for x in (q, k, v, do)), torch.from_numpy(m),
                                         causal, dtype="bfloat16", mask_grad=True)[3]
    assert rel_err(dm, ref) < min(3e-2, 2 * rel_err(t_dm.float().numpy(), ref) + 2e-3)


def test_mask_grad_needs_a_mask():
    q, k, v, _ = make_inputs((1, 1, 1, 16, 16, 8, "fp32", False, None))
    o, lse = flash_attention(q, k, v)
    with pytest.raises(ValueError, match="mask_grad=True needs a mask"):
        flash_attention_bwd(q, k, v, o, q, lse, mask_grad=True)


def test_python_backend_mask_grad():
    c = (1, 2, 1, 136, 140, 32, "fp32", True, "2d")
    q, k, v, m = make_inputs(c)
    do = np.random.default_rng(1).standard_normal(q.shape).astype(q.dtype)
    o, lse = flash_attention(q, k, v, m, causal=True)
    outs = run_both(flash_attention_bwd.fn, q, k, v, o, do, lse, m, causal=True, mask_grad=True)
    refs = attention_bwd_reference_torch(q, k, v, do, m, True, mask_grad=True)
    for g, r in zip(outs, refs):
        assert rel_err(g, r.numpy()) < 1e-4

