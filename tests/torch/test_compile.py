"""``torch.compile(backend="neuron")``: AOTAutograd graphs with NKI matmul nodes."""

from __future__ import annotations

import copy
import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from nki.torch import compile as ncompile  # noqa: E402
from nki.torch import ops, routing  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional
DEVICES = ["cpu", "neuron"]
ncompile.register_backend()


@pytest.fixture
def device(request):
    """``cpu``, or ``neuron`` enabled with aten ops routed to NKI kernels."""
    if request.param == "neuron":
        request.getfixturevalue("neuron")
        assert routing.enable()
    return request.param


class _Attn(torch.nn.Module):
    """Linear layers around causal SDPA, as in a transformer block."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, 2, 8).transpose(1, 2) for t in self.qkv(x).split(C, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(F.gelu(y.transpose(1, 2).reshape(B, T, C)))


def _check_against_eager(model, x, device):
    torch._dynamo.reset()
    ncompile.reset_lowering_stats()
    eager = copy.deepcopy(model).to(device)
    compiled_model = copy.deepcopy(model).to(device)
    compiled = torch.compile(compiled_model, backend="neuron")
    xe, xc = (x.to(device).requires_grad_() for _ in range(2))
    ref = eager(xe)
    ref.square().sum().backward()
    with ops.count_kernels() as seen:
        out = compiled(xc)
        out.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(xc.grad.cpu(), xe.grad.cpu(), rtol=1e-4, atol=1e-5)
    for a, b in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad.cpu(), rtol=1e-4, atol=1e-5)
    return ncompile.lowering_stats(), seen


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_mlp_forward_backward_match_eager(device):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8))
    stats, seen = _check_against_eager(model, torch.randn(2, 4, 16), device)
    assert stats["graphs"] == 2
    assert stats["aten.addmm -> nki.matmul + add"] == 2
    assert stats["aten.mm/bmm -> nki.matmul"] == 4                # backward: 2 dW, 2 dX
    assert seen == {"matmul": 6}


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_attention_block_matches_eager(device):
    stats, seen = _check_against_eager(_Attn(), torch.randn(2, 8, 16), device)
    assert stats["aten.addmm -> nki.matmul + add"] == 2
    assert seen["matmul"] >= 5
    assert seen["flash_attention"] == seen["flash_attention_bwd"] == 1
    if device == "cpu":      # torch's CPU flash attention nodes became NKI op nodes
        assert stats["aten.sdpa(cpu) -> nki.flash_attention"] == 1
        assert stats["aten.sdpa_backward(cpu) -> nki.flash_attention_backward"] == 1


def test_rewrite_keeps_unsupported_dtypes_and_scales_addmm():
    def fn(bias, a, b, c):
        return (torch.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.bmm(c, c),
                a.double() @ b.double())

    args = (torch.randn(12), torch.randn(8, 16), torch.randn(16, 12), torch.randn(2, 4, 4))
    torch._dynamo.reset()
    ncompile.reset_lowering_stats()
    got = torch.compile(fn, backend="neuron", fullgraph=True)(*args)
    for g, w in zip(got, fn(*args)):
        torch.testing.assert_close(g, w)
    stats = ncompile.lowering_stats()
    assert stats["aten.addmm -> nki.matmul + add"] == 1
    assert stats["aten.mm/bmm -> nki.matmul"] == 1                # the float64 mm stays aten


def test_custom_op_inside_fullgraph_compile():
    def fn(a, b):
        return torch.relu(ops.matmul(a, b)) + 1

    a, b = torch.randn(8, 16), torch.randn(16, 12)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", fullgraph=True)(a, b)
    torch.testing.assert_close(got, torch.relu(a @ b) + 1)


def test_backend_is_registered():
    assert "neuron" in torch._dynamo.list_backends()
    ncompile.register_backend()                                    # idempotent
