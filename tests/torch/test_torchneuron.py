"""TorchNeuron's names on the simulator: ``torch_neuronx`` (nki_op, wrap_nki, autograd,
``__version__``, environment variables), ``@nki.jit`` kernels on ``neuron`` tensors, the
``nki``/``neuron`` compile backend names, and a PrivateUse1 device already taken.

Each kernel result is checked against torch; the two clashes run in fresh interpreters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import nki  # noqa: E402
import nki.language as nl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


def scale_kernel(a, factor):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), factor))
    return out


def double_halves(x):
    """Core c of the launch doubles rows [c*h, (c+1)*h): with LNC 1 half stays unwritten."""
    me, half = nl.program_id(0), x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[me * half:(me + 1) * half, :],
             nl.multiply(nl.load(x[me * half:(me + 1) * half, :]), 2.0))
    return out


def _run(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with this checkout (and its foreign names) on the path."""
    path = os.pathsep.join([str(REPO), str(REPO / "nki" / "foreign-names"),
                            os.environ.get("PYTHONPATH", "")])
    full = {**os.environ, "PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=300)


# ---------------------------------------------------------------- the torch_neuronx module

def test_torch_neuronx_is_our_module_with_its_names(neuron):
    import torch_neuronx

    import nki.torch
    import nki.torch.neuronx

    assert torch_neuronx is nki.torch.neuronx
    assert torch_neuronx.nki_op is nki.torch.nki_op
    assert torch_neuronx.wrap_nki is nki.torch.wrap_nki
    assert torch_neuronx.register_autograd is nki.torch.register_autograd
    assert torch_neuronx.__version__ == f"{torch.__version__.split('+')[0]}+nki.{nki.__version__}"
    assert torch.device("neuron").type == "neuron"      # the import enabled the device
    import torch.distributed as dist

    assert "neuron" in dist.Backend.backend_list         # ... and the distributed backend


def test_every_torchneuron_variable_is_documented_in_the_readme():
    from nki.torch.neuronx import ENVIRONMENT

    readme = (REPO / "README.md").read_text()
    assert {"TORCH_NEURONX_NEFF_CACHE_DIR", "NKI_ENABLE_TRACE_CACHE"} <= set(ENVIRONMENT)
    missing = [name for name in ENVIRONMENT if f"`{name}`" not in readme]
    assert not missing, f"README.md does not list {missing}"


# ---------------------------------------------------------------- wrap_nki and nki_op

def test_wrap_nki_grid_is_the_lnc_degree(neuron, backend):
    from nki.torch import kernel_counts, wrap_nki

    x = torch.randn(128, 16, device="neuron")
    kernel = nki.jit(double_halves, backend=backend)
    before = kernel_counts().get("double_halves", 0)
    both = wrap_nki(kernel)[2](x)
    assert both.device.type == "neuron"
    torch.testing.assert_close(both.cpu(), x.cpu() * 2)
    one = wrap_nki(kernel)(x).cpu()          # LNC 1: only core 0's half is written
    torch.testing.assert_close(one[:64], x.cpu()[:64] * 2)
    assert torch.isnan(one[64:]).all()
    assert kernel_counts()["double_halves"] - before == 2


def test_wrap_nki_rejects_a_grid_that_is_not_an_lnc_degree():
    from nki.errors import NkiValidationError
    from nki.torch import wrap_nki

    with pytest.raises(NkiValidationError, match=r"(?s)nki_lnc_degree.*test_torchneuron\.py"):
        wrap_nki(add_kernel)[3]


def test_nki_op_with_wrap_nki_and_register_autograd(neuron, backend):
    from nki.torch import nki_op, register_autograd, wrap_nki

    kernel = nki.jit(scale_kernel, backend=backend)

    @nki_op(f"tn_test::scale3_{backend}")
    def scale3(x: torch.Tensor) -> torch.Tensor:
        return wrap_nki(kernel)[1](x, 3.0)

    register_autograd(scale3, lambda ctx, g: scale3(g))
    x = torch.randn(4, 32, device="neuron", requires_grad=True)
    y = scale3(x)
    assert y.device.type == "neuron"
    torch.testing.assert_close(y.detach().cpu(), x.detach().cpu() * 3)
    (y * torch.arange(32.0, device="neuron")).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.arange(32.0).expand(4, 32) * 3)


# ---------------------------------------------------------------- @nki.jit on neuron tensors

def test_jit_kernel_on_neuron_tensors_returns_neuron_tensors(neuron, backend):
    kernel = nki.jit(add_kernel, backend=backend)
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(8, 64, device="neuron").to(dtype)
        b = torch.randn(8, 64, device="neuron").to(dtype)
        out = kernel(a, b)
        assert out.device == a.device and out.dtype == dtype
        torch.testing.assert_close(out.cpu(), (a.cpu().float() + b.cpu().float()).to(dtype))
    cpu = kernel(a.cpu(), b.cpu())
    assert cpu.device.type == "cpu"


def test_jit_kernel_on_neuron_is_cached_per_shape_dtype_and_constant(neuron):
    kernel = nki.jit(scale_kernel, cache=False)
    x = torch.randn(4, 16, device="neuron")
    for _ in range(2):
        torch.testing.assert_close(kernel(x, 2.0).cpu(), x.cpu() * 2)
    assert len(kernel._cache) == 1                        # the second call reused the first
    kernel(torch.randn(4, 16, device="neuron"), 2.0)      # same shape, other values: cached
    assert len(kernel._cache) == 1
    kernel(x, 3.0)
    kernel(torch.randn(8, 16, device="neuron"), 2.0)
    kernel(x.to(torch.bfloat16), 2.0)
    assert len(kernel._cache) == 4


def test_backward_through_a_bare_jit_kernel_raises_a_clear_error(neuron):
    kernel = nki.jit(add_kernel)
    a = torch.randn(4, 8, device="neuron", requires_grad=True)
    out = kernel(a, torch.randn(4, 8, device="neuron"))
    assert out.requires_grad and out.device.type == "neuron"
    torch.testing.assert_close(out.detach().cpu(), a.detach().cpu() + (out - a).detach().cpu())
    with pytest.raises(RuntimeError, match="nki kernel 'add_kernel' has no backward.*nki_op"):
        out.sum().backward()
    with torch.no_grad():
        assert not kernel(a, a).requires_grad


# ---------------------------------------------------------------- ours and theirs

def test_compile_backend_nki_and_neuron_when_nobody_else_has_it():
    from torch._dynamo.backends.registry import lookup_backend

    from nki.torch import compile as ncompile

    ncompile.register_backend()
    assert lookup_backend("nki") is ncompile.nki_backend
    assert lookup_backend("neuron") is ncompile.neuron_backend
    assert ncompile.foreign_neuron_entry_point() is None


def test_another_packages_neuron_backend_wins(tmp_path):
    """A distribution declaring a ``neuron`` dynamo backend (as AWS's torch-neuronx does):
    ``backend="neuron"`` is theirs, ``backend="nki"`` stays ours."""
    dist = tmp_path / "fake_neuronx-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-neuronx\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[torch_dynamo_backends]\nneuron = fake_neuronx:be\n")
    (tmp_path / "fake_neuronx.py").write_text(
        "def be(gm, example_inputs):\n    be.calls += 1\n    return gm.forward\nbe.calls = 0\n")
    code = f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import torch, fake_neuronx
        from nki.torch import compile as ncompile
        from torch._dynamo.backends.registry import lookup_backend
        ncompile.register_backend()
        f = torch.compile(lambda x: x * 2 + 1, backend="neuron")
        assert torch.equal(f(torch.ones(3)), torch.full((3,), 3.0))
        print(fake_neuronx.be.calls, lookup_backend("nki") is ncompile.nki_backend)
        # our own entry point, had torch picked it for the name, hands over to theirs too
        ncompile.neuron_backend(torch.fx.symbolic_trace(lambda x: x + 1), [torch.ones(1)])
        print(fake_neuronx.be.calls)
    """
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "True", "2"]


@pytest.mark.parametrize("claim", ["rename_only", "neuron_by_another_module"])
def test_import_nki_torch_when_private_use1_is_taken_raises(claim):
    take = ('torch.utils.rename_privateuse1_backend("otherdev")' if claim == "rename_only" else
            'import types; torch.utils.rename_privateuse1_backend("neuron"); '
            'torch._register_device_module("neuron", types.ModuleType("torch_neuronx_real"))')
    code = f"""
        import torch
        {take}
        try:
            import nki.torch
        except RuntimeError as e:
            print(type(e).__name__, "|", e)
        else:
            print("imported")
    """
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kind, message = proc.stdout.split(" | ", 1)
    assert kind == "PrivateUse1TakenError"
    owner = "otherdev" if claim == "rename_only" else "torch_neuronx_real"
    assert "already taken" in message and owner in message
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in message


# ---------------------------------------------------------------- under torch.compile

def rowsum_kernel(a):
    out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.sum(nl.load(a), axis=1, keepdims=True))
    return out


def double_in_place(a):
    nl.store(a, nl.multiply(nl.load(a), 2.0))


def _graphs_backend(graphs: list):
    """A compile backend that keeps each AOT forward graph's text and runs it eagerly."""
    from torch._dynamo.backends.common import aot_autograd

    def keep(gm, example_inputs):
        graphs.append(gm.graph)
        return gm.forward

    return aot_autograd(fw_compiler=keep)


def _calls(graph, namespace: str) -> list[str]:
    """The graph's calls of ops in ``namespace`` (a mutating op is functionalized into an
    ``auto_functionalized`` node whose first argument is the op)."""
    targets = [n.args[0] if "auto_functionalized" in str(n.target) else n.target
               for n in graph.nodes if n.op == "call_function"]
    return [str(t) for t in targets if str(t).startswith(namespace)]


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_nki_op_without_a_fake_works_under_compile(neuron, device):
    """No register_fake: the fake comes from the kernel's trace (shape [N, 1], fp32 from a
    bf16 input), and the op is one node; opcheck checks fake against real."""
    from nki.torch import compile as ncompile
    from nki.torch import kernel_counts, nki_op, wrap_nki

    ncompile.register_backend()
    kernel = nki.jit(rowsum_kernel)

    @nki_op(f"tn_test::rowsum_{device}")
    def rowsum(a: torch.Tensor) -> torch.Tensor:
        return wrap_nki(kernel)(a.contiguous())

    x = torch.randn(16, 32, device=device).to(torch.bfloat16)
    torch.library.opcheck(rowsum, (x,))
    graphs: list = []
    before = kernel_counts().get("rowsum_kernel", 0)
    fn = torch.compile(lambda t: rowsum(t * 2) + 1, backend=_graphs_backend(graphs),
                       fullgraph=True)
    y = fn(x)
    assert y.shape == (16, 1) and y.dtype == torch.float32 and y.device == x.device
    want = (x.cpu() * 2).float().sum(1, keepdim=True) + 1
    torch.testing.assert_close(y.cpu(), want, rtol=1e-2, atol=1e-2)
    assert _calls(graphs[-1], "tn_test.") == [f"tn_test.rowsum_{device}.default"]
    assert kernel_counts()["rowsum_kernel"] - before == 1      # tracing ran no kernel
    z = torch.compile(lambda t: rowsum(t), backend="neuron", fullgraph=True)(x[:8])
    torch.testing.assert_close(z.cpu(), x[:8].cpu().float().sum(1, keepdim=True),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_jit_kernel_is_one_graph_node_under_compile(neuron, device):
    from nki.torch import compile as ncompile

    ncompile.register_backend()
    kernel = nki.jit(add_kernel)
    graphs: list = []
    x = torch.randn(16, 32, device=device)
    fn = torch.compile(lambda t: kernel(t * 2, t) + 1, backend=_graphs_backend(graphs),
                       fullgraph=True)
    y = fn(x)
    assert y.device == x.device
    torch.testing.assert_close(y.cpu(), x.cpu() * 3 + 1)
    (node,) = _calls(graphs[-1], "nki_jit.")
    assert node.startswith("nki_jit.add_kernel_")
    y = torch.compile(lambda t: kernel(t, t), backend="neuron", fullgraph=True)(x)
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_jit_kernel_writing_its_input_under_compile(neuron):
    from nki.torch import compile as ncompile

    ncompile.register_backend()
    kernel = nki.jit(double_in_place)

    def fn(t):
        z = t + 1
        kernel(z)
        return z

    x = torch.randn(8, 16, device="neuron")
    graphs: list = []
    y = torch.compile(fn, backend=_graphs_backend(graphs), fullgraph=True)(x)
    torch.testing.assert_close(y.cpu(), (x.cpu() + 1) * 2)
    assert len(_calls(graphs[-1], "nki_jit.")) == 1


def test_backward_through_a_jit_kernel_under_compile_raises(neuron):
    from nki.torch import compile as ncompile

    ncompile.register_backend()
    kernel = nki.jit(add_kernel)
    x = torch.randn(4, 8, device="neuron", requires_grad=True)
    fn = torch.compile(lambda t: kernel(t, t).sum(), backend="neuron", fullgraph=True)
    with pytest.raises(Exception, match="nki kernel 'add_kernel' has no backward.*nki_op"):
        fn(x).backward()


def test_lnc_launches_are_graph_nodes_under_compile(neuron):
    """``kernel[2](x)`` and ``wrap_nki(kernel)[2](x)`` inside the compiled function: one node
    each, LNC 2 (both halves written), and each run counted."""
    from nki.torch import compile as ncompile
    from nki.torch import kernel_counts, wrap_nki

    ncompile.register_backend()
    kernel = nki.jit(double_halves)
    x = torch.randn(128, 16, device="neuron")
    for fn in (lambda t: kernel[2](t) + 1, lambda t: wrap_nki(kernel)[2](t) + 1):
        graphs: list = []
        before = kernel_counts().get("double_halves", 0)
        y = torch.compile(fn, backend=_graphs_backend(graphs), fullgraph=True)(x)
        torch.testing.assert_close(y.cpu(), x.cpu() * 2 + 1)
        assert len(_calls(graphs[-1], "nki_jit.")) == 1
        assert kernel_counts()["double_halves"] - before == 1
