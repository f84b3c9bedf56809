"""NKI kernels as torch ops: ``nki_op``, ``nki::matmul``, ``nki::flash_attention`` (+ backward)."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from nki.torch import ops  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional


@nki.jit
def _double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def _double_inplace(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=x, src=t)


@ops.nki_op("test_double")
def double(x: torch.Tensor) -> torch.Tensor:
    return ops.launch(_double, x)


double.register_fake(lambda x: torch.empty_like(x))
double.register_autograd(lambda ctx, g: 2 * g)


@ops.nki_op("test_double_", mutates_args=("x",))
def double_(x: torch.Tensor) -> None:
    ops.launch(_double_inplace, x)


def _qkv(B=1, Hq=2, Hkv=2, S=16, d=8, dtype=torch.float32, grad=True):
    g = torch.Generator().manual_seed(0)
    make = lambda h: torch.randn(B, h, S, d, generator=g, dtype=dtype).requires_grad_(grad)
    return make(Hq), make(Hkv), make(Hkv)


def test_nki_op_decorator_makes_a_custom_op():
    x = torch.randn(4, 8, requires_grad=True)
    with ops.count_kernels() as seen:
        y = torch.ops.nki.test_double(x)
        y.sum().backward()
    torch.testing.assert_close(y, 2 * x)
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    assert seen == {"_double": 1}
    assert "nki::test_double" in ops.registered_ops()


def test_nki_op_mutating_kernel():
    x = torch.arange(8.0).reshape(2, 4)
    assert torch.ops.nki.test_double_(x) is None
    torch.testing.assert_close(x, 2 * torch.arange(8.0).reshape(2, 4))
    torch.library.opcheck(torch.ops.nki.test_double_.default, (torch.randn(2, 4),))


@pytest.mark.parametrize("shapes", [((8, 16), (16, 12)), ((2, 8, 16), (2, 16, 12)),
                                    ((2, 8, 16), (16, 12))], ids=["2d", "batched", "shared"])
def test_matmul_forward_backward(shapes):
    a = torch.randn(*shapes[0], requires_grad=True)
    b = torch.randn(*shapes[1], requires_grad=True)
    with ops.count_kernels() as seen:
        out = ops.matmul(a, b)
        out.backward(torch.ones_like(out))
    a2, b2 = a.detach().requires_grad_(), b.detach().requires_grad_()
    ref = a2 @ b2
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
    # a shared 2-D right operand folds the batch into one 2-D matmul (and its gradients)
    assert seen == ({"batched_matmul": 3} if b.dim() == 3 else {"matmul": 3})


def test_matmul_bf16_and_dtype_errors():
    a, b = torch.randn(8, 16), torch.randn(16, 12)
    out = ops.matmul(a.bfloat16(), b.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), a @ b, rtol=2e-2, atol=5e-2)
    with pytest.raises(TypeError, match="NKI kernels take"):
        ops.matmul(a.double(), b.double())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_flash_attention_matches_sdpa(causal, heads):
    q, k, v = _qkv(Hq=heads[0], Hkv=heads[1])
    with ops.count_kernels() as seen:
        out, lse = ops.flash_attention(q, k, v, None, causal, 0.3)
        (out * out).sum().backward()
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q2, k2, v2, is_causal=causal, scale=0.3,
                                         enable_gqa=heads[0] != heads[1])
    (ref * ref).sum().backward()
    torch.testing.assert_close(out, ref)
    for got, want in zip((q, k, v), (q2, k2, v2)):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    s = q2 @ k2.repeat_interleave(heads[0] // heads[1], 1).mT * 0.3
    if causal:
        s = s.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))


@pytest.mark.parametrize("kind", ["bool", "additive", "key_padding"])
def test_flash_attention_masks(kind):
    q, k, v = _qkv(B=2)
    g = torch.Generator().manual_seed(5)
    mask = {"bool": torch.randn(16, 16, generator=g) > -0.5,
            "additive": torch.randn(2, 1, 16, 16, generator=g),
            "key_padding": torch.arange(16).expand(2, 1, 1, 16) < 12}[kind]
    if kind == "bool":
        mask |= torch.eye(16, dtype=torch.bool)              # no fully masked rows
    with ops.count_kernels() as seen:
        out = ops.attention(q, k, v, mask)
        out.sum().backward()
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for got, want in zip((q, k, v), (q2, k2, v2)):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


def test_flash_attention_bf16():
    q, k, v = _qkv(dtype=torch.bfloat16)
    out, lse = ops.flash_attention(q, k, v, None, True)
    out.float().square().sum().backward()
    q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True)
    ref.square().sum().backward()
    assert out.dtype == q.grad.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    for got, want in zip((q, k, v), (q2, k2, v2)):
        torch.testing.assert_close(got.grad.float(), want.grad, rtol=5e-2, atol=5e-2)
    with pytest.raises(TypeError, match="NKI kernels take"):
        ops.flash_attention(q.half(), k.half(), v.half())


def test_flash_attention_lse_gradient_and_3d():
    q, k, v = (t[0].detach().requires_grad_() for t in _qkv())     # [H, S, d]
    out, lse = ops.flash_attention(q, k, v, None, True)
    (out.sum() + lse.sum()).backward()
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    s = (q2 @ k2.mT / 8 ** 0.5).masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(),
                                              float("-inf"))
    (torch.softmax(s, -1) @ v2).sum().add(torch.logsumexp(s, -1).sum()).backward()
    for got, want in zip((q, k, v), (q2, k2, v2)):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    assert ops.attention(q, k, v, None, True).shape == q.shape


# ----- a float attn_mask that requires grad: SDPA's gradient, dS summed to the mask's shape --
def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs error relative to the reference's largest magnitude."""
    ref = ref.double()
    return float((got.double() - ref).abs().max() / ref.abs().max())


def _sdpa_grads(q, k, v, mask, dout, causal, with_lse=False):
    """float64 torch autograd of ``F.scaled_dot_product_attention`` with the float
    ``attn_mask`` (causal: plus a -inf triangle); ``with_lse``: of SDPA's math written out,
    plus the sum of the log-sum-exp, to send a gradient into lse. Returns the grads of q,
    k, v and mask."""
    q, k, v, mask = (t.detach().double().requires_grad_() for t in (q, k, v, mask))
    G = q.shape[-3] // k.shape[-3]
    kr, vr = k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3)
    full = mask
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        full = mask + torch.zeros(keep.shape, dtype=mask.dtype).masked_fill(~keep, -math.inf)
    if with_lse:
        s = q @ kr.mT / math.sqrt(q.shape[-1]) + full
        loss = (torch.softmax(s, -1) @ vr * dout.double()).sum() + torch.logsumexp(s, -1).sum()
    else:
        out = F.scaled_dot_product_attention(q, kr, vr, attn_mask=full)
        loss = (out * dout.double()).sum()
    loss.backward()
    return q.grad, k.grad, v.grad, mask.grad


@pytest.mark.parametrize("mask_shape,causal", [((150, 200), True), ((2, 1, 150, 200), False),
                                               ((1, 200), False)], ids=str)
def test_flash_attention_mask_gradient(mask_shape, causal):
    """A float mask that requires grad gets dS summed to its shape (a ``[1, Sk]`` mask is
    expanded for the kernel and folded back), in its dtype; q, k, v grads unchanged."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 150, 32, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, 200, 32, generator=g, requires_grad=True) for _ in range(2))
    mask = torch.randn(mask_shape, generator=g, requires_grad=True)
    dout = torch.randn(2, 4, 150, 32, generator=g)
    with ops.count_kernels() as seen:
        ops.attention(q, k, v, mask, causal).backward(dout)
    assert seen == {"flash_attention": 1, "flash_attention_bwd": 1}
    refs = _sdpa_grads(q, k, v, mask, dout, causal)
    assert mask.grad.shape == mask.shape and mask.grad.dtype == mask.dtype
    for got, ref in zip((q.grad, k.grad, v.grad, mask.grad), refs):
        assert _rel_err(got, ref) < 1e-4


def test_flash_attention_mask_gradient_through_lse():
    """A gradient into lse takes the torch recomputation path; the mask still gets dS."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.randn(40, 40, generator=g, requires_grad=True)
    dout = torch.randn(1, 2, 40, 16, generator=g)
    out, lse = ops.flash_attention(q, k, v, mask, False)
    ((out * dout).sum() + lse.sum()).backward()
    for got, ref in zip((q.grad, k.grad, v.grad, mask.grad),
                        _sdpa_grads(q, k, v, mask, dout, False, with_lse=True)):
        assert _rel_err(got, ref) < 1e-4


def test_flash_attention_mask_gradient_opcheck():
    """The backward op's schema, fake kernel and autograd registration with a mask grad."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    mask = torch.randn(16, 16, generator=g)
    out, lse = ops.flash_attention(q, k, v, mask, False)
    args = (torch.randn_like(out), q, k, v, out, lse, None, mask, False, None, True)
    torch.library.opcheck(torch.ops.nki.flash_attention_backward.default, args)
    assert torch.ops.nki.flash_attention_backward(*args)[3].shape == mask.shape
    torch.library.opcheck(torch.ops.nki.flash_attention.default,
                          (q.requires_grad_(), k, v, mask.requires_grad_(), True, None))


def _opcheck_cases():
    q, k, v = _qkv(Hq=4, Hkv=2)
    out, lse = (t.detach() for t in ops.flash_attention(q, k, v, None, True))
    dout = torch.randn_like(out)
    return [
        ("matmul", torch.ops.nki.matmul.default, (torch.randn(8, 16, requires_grad=True),
                                                  torch.randn(16, 12, requires_grad=True))),
        ("bmm", torch.ops.nki.matmul.default, (torch.randn(2, 8, 16, requires_grad=True),
                                               torch.randn(2, 16, 12))),
        ("attention", torch.ops.nki.flash_attention.default, (q, k, v, None, True, None)),
        ("attention_mask", torch.ops.nki.flash_attention.default,
         (q, k, v, torch.randn(16, 16) > 0, False, 0.5)),
        ("attention_bwd", torch.ops.nki.flash_attention_backward.default,
         (dout, q.detach(), k.detach(), v.detach(), out, lse, None, None, True, None)),
        ("test_double", torch.ops.nki.test_double.default, (torch.randn(4, 8),)),
    ]


@pytest.mark.parametrize("case", _opcheck_cases(), ids=lambda c: c[0])
def test_opcheck(case):
    _, op, args = case
    torch.library.opcheck(op, args)


def test_every_registered_op_is_opchecked():
    checked = {str(c[1]._schema.name) for c in _opcheck_cases()} | {"nki::test_double_"}
    assert set(ops.registered_ops()) <= checked


def test_ops_on_neuron(neuron):
    a = torch.randn(8, 16, device="neuron", requires_grad=True)
    b = torch.randn(16, 12, device="neuron", requires_grad=True)
    out = ops.matmul(a, b)
    out.sum().backward()
    assert out.device.type == "neuron" and a.grad.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), a.detach().cpu() @ b.detach().cpu())
    q, k, v = (t.detach().to("neuron").requires_grad_() for t in _qkv())
    # torch's autograd-registration check knows only CPU/CUDA/XPU ("NYI devices other than
    # CPU/CUDA/XPU"); the CPU opchecks above cover it, the rest runs on neuron
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.nki.flash_attention.default, (q, k, v, None, True, None),
                          test_utils=utils)
    torch.library.opcheck(torch.ops.nki.matmul.default, (a, b), test_utils=utils)
