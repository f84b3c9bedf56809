"""aten mm/bmm/addmm, SDPA and nn.MultiheadAttention routed to NKI kernels on ``neuron``.

The host-side decisions (NKI kernel or torch math path) are tested on CPU tensors; the aten
registrations themselves on the neuron device (the ``routed`` fixture).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

import nki.testing  # noqa: E402
from nki.torch import ops, routing  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional


@pytest.fixture
def routed(neuron):
    """The neuron device with aten ops routed to NKI kernels."""
    assert routing.enable()


def _rand(*shape, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(grad)


def _qkv(Hq=2, Hkv=2, S=16, d=8, grad=False):
    return _rand(2, Hq, S, d, grad=grad, seed=1), _rand(2, Hkv, S, d, grad=grad, seed=2), \
        _rand(2, Hkv, S, d, grad=grad, seed=3)


def test_switch_and_context_manager():
    assert routing.is_enabled()
    with routing.routing(False):
        assert not routing.is_enabled()
        with routing.routing(True):
            assert routing.is_enabled()
        assert not routing.is_enabled()
    assert routing.is_enabled()
    assert routing.set_enabled(False) is True
    assert routing.set_enabled(True) is False


def test_matmul_hosts_use_nki_unless_disabled_or_unsupported():
    a, b, bias = _rand(8, 16), _rand(16, 12, seed=1), _rand(12, seed=2)
    with ops.count_kernels() as seen:
        torch.testing.assert_close(routing.mm_host(a, b), a @ b)
        torch.testing.assert_close(routing.bmm_host(a[None], b[None]), (a @ b)[None])
        torch.testing.assert_close(routing.addmm_host(bias, a, b, 0.5, 2.0),
                                   torch.addmm(bias, a, b, beta=0.5, alpha=2.0))
        nan_bias = torch.full_like(bias, float("nan"))     # beta=0 ignores the bias
        torch.testing.assert_close(routing.addmm_host(nan_bias, a, b, 0, 1), a @ b)
    assert seen == {"matmul": 3, "batched_matmul": 1}
    with ops.count_kernels() as seen:
        routing.mm_host(a.double(), b.double())
        with routing.routing(False):
            torch.testing.assert_close(routing.mm_host(a, b), a @ b)
    assert seen == {}


@pytest.mark.parametrize("mask,causal", [("none", False), ("none", True), ("bool", False),
                                         ("additive", False)])   # torch: mask xor causal
def test_sdpa_host_forward_backward(mask, causal):
    q, k, v = _qkv(grad=True)
    bias = None
    if mask == "bool":
        bias = _rand(16, 16, seed=4) > -1.0
        bias[:, 0] = True                           # no fully masked rows
    elif mask == "additive":
        bias = _rand(2, 1, 16, 16, seed=4, grad=True)
    args = [t.detach() for t in (q, k, v)]
    hb = bias.detach() if bias is not None else None
    with ops.count_kernels() as seen:
        out, lse = routing.sdpa_host(*args, hb, causal, None)
        grads = routing.sdpa_backward_host(torch.ones_like(out), *args, hb, out, lse,
                                           causal, None, bias_grad=True)
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if mask == "additive":
        torch.testing.assert_close(grads[3], bias.grad, rtol=1e-4, atol=1e-5)


def _causal_folded(mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """``mask`` with the causal triangle added as -inf (torch's math SDPA refuses a mask that
    requires grad together with ``is_causal``); differentiable in ``mask``."""
    if not causal:
        return mask
    keep = torch.ones(mask.shape[-2:], dtype=torch.bool).tril()
    return mask.masked_fill(~keep, float("-inf"))


def _mask_grad_reference(q, k, v, mask, causal):
    """q, k, v and mask gradients of ``sdpa(...).sum()`` by CPU torch autograd."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, mask)]
    F.scaled_dot_product_attention(*leaves[:3], attn_mask=_causal_folded(leaves[3], causal)
                                   ).sum().backward()
    return [t.grad for t in leaves]


MASK_SHAPES = {"shared": (16, 16), "per_batch": (2, 1, 16, 16), "per_head": (2, 2, 16, 16)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(MASK_SHAPES))
def test_sdpa_host_mask_gradient_runs_nki_backward(shape, causal):
    q, k, v = _qkv()
    mask = _rand(*MASK_SHAPES[shape], seed=4)
    with ops.count_kernels() as seen:
        out, lse = routing.sdpa_host(q, k, v, mask, causal, None)
        *grads, dmask = routing.sdpa_backward_host(torch.ones_like(out), q, k, v, mask, out,
                                                   lse, causal, None, bias_grad=True)
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    assert dmask.shape == mask.shape and dmask.dtype == mask.dtype
    want = _mask_grad_reference(q, k, v, mask, causal)
    for got, ref in zip((*grads, dmask), want):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_sdpa_host_mask_gradient_fallback_and_bool_mask():
    q, k, v = _qkv()
    mask = _rand(16, 16, seed=4)
    want = _mask_grad_reference(q, k, v, mask, False)
    with routing.routing(False), ops.count_kernels() as seen:     # the torch math path
        out, lse = routing.sdpa_host(q, k, v, mask, False, None)
        *grads, dmask = routing.sdpa_backward_host(torch.ones_like(out), q, k, v, mask, out,
                                                   lse, False, None, bias_grad=True)
    assert seen == {}
    for got, ref in zip((*grads, dmask), want):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    keep = mask > -1.0
    out, lse = routing.sdpa_host(q, k, v, keep, False, None)
    assert routing.sdpa_backward_host(torch.ones_like(out), q, k, v, keep, out, lse, False,
                                      None, bias_grad=True)[3] is None      # no bool gradient


def test_sdpa_host_gqa_and_fallbacks():
    q, k, v = _qkv(Hq=4, Hkv=2)
    assert routing.attention_ok(q, k, v)
    assert not routing.attention_ok(q.double(), k.double(), v.double())
    assert not routing.attention_ok(q, k, v, dropout_p=0.1)
    with routing.routing(False):
        assert not routing.attention_ok(q, k, v)
    big = _rand(1, 1, 4, 192)
    assert not routing.attention_ok(big, big, big)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(routing.sdpa_host(q, k, v, None, True, None)[0], ref)
    torch.testing.assert_close(routing.sdpa_host(big, big, big, None, True, None)[0],
                               F.scaled_dot_product_attention(big, big, big, is_causal=True))


# ---------------------------------------------------------------- on the neuron device

def _both(module, *inputs, grad=True):
    """Run ``module`` on CPU and on neuron; compare outputs and gradients; return counts."""
    module.zero_grad(set_to_none=True)
    dev = __import__("copy").deepcopy(module).to("neuron")
    xs = [x.detach().clone().requires_grad_(grad) for x in inputs]
    xn = [x.detach().to("neuron").requires_grad_(grad) for x in inputs]
    ref = module(*xs)
    with ops.count_kernels() as seen:
        out = dev(*xn)
        if grad:
            out.sum().backward()
    if grad:
        ref.sum().backward()
        for a, b in zip(module.parameters(), dev.parameters()):
            torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
        for a, b in zip(xs, xn):
            torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    return seen


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_linear_layers_run_nki_matmul(routed):
    lin = torch.nn.Linear(16, 12)
    assert _both(lin, _rand(8, 16)) == {"matmul": 3}               # addmm + 2 mm backward
    assert _both(lin, _rand(2, 4, 16)) == {"matmul": 3}
    w = _rand(12, 16, seed=5)
    seen = _both(_Fn(lambda x: torch.matmul(x, w.to(x.device).t())), _rand(2, 4, 16))
    assert seen["matmul"] >= 2
    seen = _both(_Fn(torch.bmm), _rand(2, 4, 16), _rand(2, 16, 8, seed=6))
    assert seen == {"batched_matmul": 3}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sdpa_runs_nki_flash_attention(routed, causal):
    fn = _Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    seen = _both(fn, *_qkv())
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}


def test_autocast_bf16_linear_and_attention(routed):
    lin = torch.nn.Linear(16, 16).to("neuron")
    x = _rand(2, 8, 16).to("neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16), ops.count_kernels() as seen:
        h = lin(x).unflatten(-1, (2, 8)).transpose(1, 2)
        y = F.scaled_dot_product_attention(h, h, h, is_causal=True)
    assert y.dtype == torch.bfloat16 and seen == {"matmul": 1, "flash_attention": 1}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = lin.cpu()(x.cpu()).unflatten(-1, (2, 8)).transpose(1, 2)
        ref = F.scaled_dot_product_attention(h, h, h, is_causal=True)
    torch.testing.assert_close(y.cpu().float(), ref.float(), rtol=3e-2, atol=3e-2)


def test_sdpa_value_head_dim_differs(routed):
    q, k, _ = _qkv()
    v = _rand(2, 2, 16, 4, seed=8)                      # the math path; output [.., 4]
    fn = _Fn(lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k, v))
    _both(fn, q.transpose(1, 2), k, v)


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_sdpa_masks_on_neuron(routed, kind):
    mask = _rand(16, 16, seed=7)
    mask = (mask > -1.0) | torch.eye(16, dtype=torch.bool) if kind == "bool" else mask
    fn = _Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                           attn_mask=mask.to(q.device)))
    _both(fn, *_qkv())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(MASK_SHAPES))
def test_sdpa_mask_gradient_on_neuron(routed, shape, causal):
    """The overrideable SDPA op called directly, and its autograd on neuron: a float mask
    that requires grad gets its gradient from the NKI backward kernel."""
    q, k, v = _qkv()
    mask = _rand(*MASK_SHAPES[shape], seed=4)
    leaves = [t.to("neuron").requires_grad_() for t in (q, k, v, mask)]
    sdpa = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with ops.count_kernels() as seen:
        out = sdpa(*leaves[:3], attn_bias=leaves[3], is_causal=causal)[0]
        out.sum().backward()
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    assert leaves[3].grad.device.type == "neuron" and leaves[3].grad.shape == mask.shape
    for leaf, ref in zip(leaves, _mask_grad_reference(q, k, v, mask, causal)):
        torch.testing.assert_close(leaf.grad.cpu(), ref, rtol=1e-4, atol=1e-5)


def _functional_mask_grads(q, k, v, mask, causal):
    """``F.scaled_dot_product_attention(...).sum()`` on neuron with every input a leaf:
    (output on CPU, [q, k, v, mask grads on CPU], the NKI kernels that ran)."""
    leaves = [t.to("neuron").requires_grad_() for t in (q, k, v, mask)]
    with ops.count_kernels() as seen:
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3],
                                             is_causal=causal)
        out.sum().backward()
    assert all(t.grad.device.type == "neuron" for t in leaves)
    assert leaves[3].grad.shape == mask.shape and leaves[3].grad.dtype == mask.dtype
    return out.detach().cpu(), [t.grad.cpu() for t in leaves], seen


def _sdpa_reference_out(q, k, v, mask, causal):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_causal_folded(mask, causal))


FUNCTIONAL_MASK_SHAPES = {**MASK_SHAPES, "per_head_shared_batch": (1, 2, 16, 16)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(FUNCTIONAL_MASK_SHAPES))
def test_sdpa_functional_mask_gradient_runs_nki(routed, shape, causal):
    """F.scaled_dot_product_attention with a 2-D or broadcastable 4-D float mask that
    requires grad: routed, the device's backend choice sends it to the overrideable op, so
    the NKI forward and backward kernels compute q, k, v and mask gradients."""
    q, k, v = _qkv()
    mask = _rand(*FUNCTIONAL_MASK_SHAPES[shape], seed=4)
    out, grads, seen = _functional_mask_grads(q, k, v, mask, causal)
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    torch.testing.assert_close(out, _sdpa_reference_out(q, k, v, mask, causal),
                               rtol=1e-4, atol=1e-5)
    for got, ref in zip(grads, _mask_grad_reference(q, k, v, mask, causal)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sdpa_functional_mask_gradient_bf16(routed, causal):
    """bf16 q, k, v and mask on the NKI kernels, against fp32 CPU autograd of the same
    (bf16-valued) inputs under nki.testing's bf16 tolerance."""
    q, k, v = (t.bfloat16() for t in _qkv())
    mask = _rand(2, 1, 16, 16, seed=4).bfloat16()
    out, grads, seen = _functional_mask_grads(q, k, v, mask, causal)
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    assert out.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads)
    wide = [t.float() for t in (q, k, v, mask)]
    nki.testing.assert_close(out, _sdpa_reference_out(*wide, causal), msg="out")
    for name, got, ref in zip("qkvm", grads, _mask_grad_reference(*wide, causal)):
        nki.testing.assert_close(got, ref, msg=f"d{name}")


@pytest.mark.parametrize("shape,dtype", [((1, 16), torch.float32), ((16,), torch.float32),
                                         ((2, 16, 16), torch.float32),
                                         ((2, 2, 1, 16), torch.float32),
                                         ((16, 16), torch.float64)], ids=str)
def test_sdpa_mask_gradient_kernel_cannot_take_uses_math(routed, shape, dtype):
    """Routed, but a mask the kernel does not take as it is (a broadcast over Sq, a 1-D or
    3-D mask, float64): the C++ backend choice keeps the math path, whose autograd gives the
    gradient (its matmuls may still run on NKI, attention does not)."""
    q, k, v = (t.to(dtype) for t in _qkv())
    mask = _rand(*shape, seed=4, dtype=dtype)
    _, grads, seen = _functional_mask_grads(q, k, v, mask, False)
    assert "flash_attention" not in seen and "flash_attention_bwd" not in seen
    for got, ref in zip(grads, _mask_grad_reference(q, k, v, mask, False)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", ["shared", "per_head"])
def test_sdpa_mask_gradient_routing_off_uses_math(routed, neuron, shape):
    """Routing off: the device is told so, a float mask that requires grad takes the math
    path on torch's CPU kernels (no NKI kernel) and still gets its gradient."""
    assert neuron.sdpa_mask_grad_routed()
    q, k, v = _qkv()
    mask = _rand(*MASK_SHAPES[shape], seed=4)
    with routing.routing(False):
        assert not neuron.sdpa_mask_grad_routed()
        out, grads, seen = _functional_mask_grads(q, k, v, mask, False)
    assert neuron.sdpa_mask_grad_routed()
    assert seen == {}
    torch.testing.assert_close(out, _sdpa_reference_out(q, k, v, mask, False),
                               rtol=1e-4, atol=1e-5)
    for got, ref in zip(grads, _mask_grad_reference(q, k, v, mask, False)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_routing_off_runs_no_nki_kernel(routed):
    with routing.routing(False):
        seen = _both(torch.nn.Linear(16, 12), _rand(8, 16))
        seen.update(_both(_Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
                          *_qkv()))
    assert seen == {}


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention(routed, need_weights):
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = _rand(2, 8, 16)
    fn = _Fn(lambda x: mha.to(x.device)(x, x, x, need_weights=need_weights)[0])
    seen = _both(fn, x)
    assert seen["matmul"] >= 2
    assert ("flash_attention" in seen) == (not need_weights)


def test_multihead_attention_inference_fast_path(routed):
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = _rand(2, 8, 16)
    with torch.no_grad():
        ref = mha(x, x, x, need_weights=False)[0]
        dev = __import__("copy").deepcopy(mha).to("neuron")
        xn = x.to("neuron")
        with ops.count_kernels() as seen:
            out = dev(xn, xn, xn, need_weights=False)[0]
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    assert seen.get("matmul", 0) >= 2 and seen.get("flash_attention") == 1
