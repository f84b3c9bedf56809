"""The ``neuron`` PyTorch device: every behaviour against a CPU reference or an exact message."""

from __future__ import annotations

import copy
import io
import os
import pickle
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("neuron")
TOL = {"rtol": 1e-4, "atol": 1e-5}  # matmuls may run on NKI kernels (fp32, other order)


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------- the device and its module

def test_tensor_on_neuron_is_a_plain_tensor():
    x = torch.ones(2, 3, device="neuron")
    assert x.device == torch.device("neuron", 0)
    assert x.is_neuron and type(x) is torch.Tensor
    assert x.untyped_storage().device.type == "neuron"
    assert x.data_ptr() != 0  # real host memory


def test_device_module_and_accelerator(neuron):
    from nki import config

    assert torch.neuron is neuron
    assert torch.neuron.is_available() and torch.neuron.is_initialized()
    assert torch.neuron.device_count() == config.neuron_sim_device_count()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device == torch.device("neuron", 1)
    assert torch.neuron.current_device() == 0
    torch.neuron.synchronize()
    torch.accelerator.synchronize()


def test_accelerator_api_reaches_neuron():
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    try:
        assert torch.neuron.current_device() == 1
    finally:
        torch.accelerator.set_device_index(0)
    x = torch.empty(1024, device="neuron")
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.neuron.memory_allocated()
    del x


def test_device_count_setting_is_validated(monkeypatch):
    from nki import config

    monkeypatch.setenv("NEURON_SIM_DEVICE_COUNT", "many")
    with pytest.raises(ValueError, match="NEURON_SIM_DEVICE_COUNT must be an integer in 1..64"):
        config.neuron_sim_device_count()


def test_invalid_device_index_raises():
    with pytest.raises(RuntimeError, match=r"Invalid device: neuron:99 \(torch.neuron"):
        torch.empty(1, device="neuron:99")


def test_copies_both_ways_and_between_devices():
    x = _rand(5, 7)
    n = x.to("neuron")
    assert torch.equal(n.cpu(), x)
    assert torch.equal(n.to("neuron:1").cpu(), x)
    assert n.to("neuron:1").device == torch.device("neuron", 1)
    assert torch.equal(x.neuron().cpu(), x)  # generated Tensor.neuron()
    assert torch.equal(n.to(torch.float64).cpu(), x.to(torch.float64))
    assert torch.equal(n.t().contiguous().cpu(), x.t().contiguous())


@pytest.mark.parametrize("op", ["add", "mul", "relu", "sum", "mean", "softmax", "matmul",
                                "abs", "exp", "cumsum", "sort", "topk", "max_dim"])
def test_ops_match_cpu(op):
    fns = {
        "add": lambda a, b: a + b, "mul": lambda a, b: a * b * 3,
        "relu": lambda a, b: F.relu(a), "sum": lambda a, b: a.sum(0),
        "mean": lambda a, b: a.mean(), "softmax": lambda a, b: a.softmax(-1),
        "matmul": lambda a, b: a @ b.t(), "abs": lambda a, b: a.abs(),
        "exp": lambda a, b: torch.exp(a), "cumsum": lambda a, b: a.cumsum(1),
        "sort": lambda a, b: a.sort(1).values, "topk": lambda a, b: a.topk(3).indices,
        "max_dim": lambda a, b: a.max(1).values,
    }
    a, b = _rand(6, 8, seed=1), _rand(6, 8, seed=2)
    want = fns[op](a, b)
    got = fns[op](a.to("neuron"), b.to("neuron"))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), want, **TOL)


def test_indexing_cat_and_cpu_indices():
    x = _rand(6, 5)
    n = x.to("neuron")
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(n[idx].cpu(), x[idx])  # CPU indices are fine, as on CUDA
    torch.testing.assert_close(n[idx.to("neuron")].cpu(), x[idx])
    torch.testing.assert_close(torch.cat([n, n * 2]).cpu(), torch.cat([x, x * 2]))
    torch.testing.assert_close(n.nonzero().cpu(), x.nonzero())
    m, y = n.clone(), x.clone()
    m[n > 0] = 0.0
    y[x > 0] = 0.0
    torch.testing.assert_close(m.cpu(), y)


def test_out_with_several_outputs_and_tensor_lists():
    x = _rand(5, 6)
    v, i = torch.empty(0, device="neuron"), torch.empty(0, dtype=torch.long, device="neuron")
    torch.max(x.to("neuron"), 1, out=(v, i))
    want = x.max(1)
    assert torch.equal(v.cpu(), want.values) and torch.equal(i.cpu(), want.indices)
    parts = x.to("neuron").split(2)  # a list of views of one storage
    assert [p.cpu().tolist() for p in parts] == [p.tolist() for p in x.split(2)]
    ts = [x.to("neuron"), x.to("neuron") * 2]
    torch._foreach_add_(ts, 1.0)
    doubled = torch._foreach_mul(ts, 2.0)
    assert all(d.device.type == "neuron" for d in doubled)
    torch.testing.assert_close(doubled[1].cpu(), (x * 2 + 1) * 2)


def test_conj_and_neg_views():
    c = torch.randn(4, dtype=torch.cfloat, generator=torch.Generator().manual_seed(0))
    n = c.to("neuron")
    assert n.conj().is_conj()
    torch.testing.assert_close(n.conj().cpu(), c.conj())
    torch.testing.assert_close((n.conj() * 2).cpu(), c.conj() * 2)
    torch.testing.assert_close(n.conj().imag.neg().cpu(), c.imag)
    torch.testing.assert_close(torch.conj_physical(n).cpu(), torch.conj_physical(c))


def test_conv2d_forward_backward_match_cpu():
    # PrivateUse1 convolution is aten::convolution_overrideable (+ backward), no CPU kernel
    x = _rand(2, 3, 7, 7).requires_grad_()
    ref = torch.nn.Conv2d(3, 4, 3, padding=1)
    dev = copy.deepcopy(ref).to("neuron")
    nx = x.detach().to("neuron").requires_grad_()
    want, got = ref(x), dev(nx)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL)
    torch.testing.assert_close(nx.grad.cpu(), x.grad, **TOL)
    for p, q in zip(dev.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)


def test_printing_matches_cpu():
    x = _rand(3, 4)
    text = repr(x.to("neuron"))
    assert text.endswith("device='neuron:0')")
    assert text.replace(", device='neuron:0'", "") == repr(x)


# ---------------------------------------------------------------- memory semantics

def test_views_share_storage_and_have_real_strides():
    n = torch.arange(16.0, device="neuron").reshape(4, 4)
    t = n.t()
    assert t.stride() == (1, 4) and not t.is_contiguous()
    assert t.untyped_storage().data_ptr() == n.untyped_storage().data_ptr()
    n[1].fill_(-1.0)  # an in-place op on a view writes the base
    want = torch.arange(16.0).reshape(4, 4)
    want[1] = -1.0
    assert torch.equal(n.cpu(), want)
    d = n.diagonal()
    d.add_(100)
    want.diagonal().add_(100)
    assert torch.equal(n.cpu(), want)
    assert torch.equal(n.unfold(0, 2, 1).cpu(), want.unfold(0, 2, 1))


def test_in_place_and_out_return_the_argument():
    n = torch.zeros(3, device="neuron")
    assert n.add_(2) is n
    out = torch.empty(3, device="neuron")
    assert torch.add(n, 1, out=out) is out
    assert torch.equal(out.cpu(), torch.full((3,), 3.0))


def test_one_tensor_passed_twice():
    x = _rand(3, 3)
    n = x.to("neuron")
    assert n.add_(n) is n
    torch.testing.assert_close(n.cpu(), x + x)
    out = torch.empty(0, device="neuron")
    torch.mul(n, n, out=out)
    torch.testing.assert_close(out.cpu(), (x + x) * (x + x))


def test_out_argument_is_resized():
    x = _rand(4, 5)
    out = torch.empty(0, device="neuron")
    torch.mul(x.to("neuron"), 2, out=out)
    assert out.shape == (4, 5)
    assert torch.equal(out.cpu(), x * 2)


def test_composite_out_ops_and_mse_loss_match_cpu():
    # abs = empty({0}) + abs.out (resize inside a CPU kernel); mse_loss had a resize warning
    x, y = _rand(8, seed=3), _rand(8, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = F.mse_loss(x.to("neuron"), y.to("neuron"))
        assert torch.equal(x.to("neuron").abs().cpu(), x.abs())
    torch.testing.assert_close(got.cpu(), F.mse_loss(x, y))


def test_overlapping_views_are_seen_by_cpu_kernels():
    n = torch.arange(6.0, device="neuron")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.add(n[1:], n[:-1], out=n[1:])  # partial overlap, as CPU reports it


def test_storage_resize_like_fsdp2(neuron):
    n = torch.ones(1024, device="neuron")
    storage = n.untyped_storage()
    before = neuron.memory_allocated()
    storage.resize_(0)
    assert neuron.memory_allocated() == before - 4096
    storage.resize_(4096)
    assert neuron.memory_allocated() == before
    n.fill_(2.0)
    assert torch.equal(n.cpu(), torch.full((1024,), 2.0))


def test_memory_allocated_counts_live_bytes(neuron):
    base = neuron.memory_allocated()
    neuron.reset_peak_memory_stats()
    x = torch.empty(1024, 1024, device="neuron")  # 4 MiB
    assert neuron.memory_allocated() - base == 4 * 2**20
    y = x + 1  # a fallback result (CPU buffer relabelled) counts too
    assert neuron.memory_allocated() - base == 8 * 2**20
    del x, y
    assert neuron.memory_allocated() == base
    assert neuron.max_memory_allocated() >= base + 8 * 2**20
    assert torch.accelerator.memory_allocated() == neuron.memory_allocated()
    on_1 = neuron.memory_allocated(1)
    z = torch.empty(256, device="neuron:1")
    assert neuron.memory_allocated(1) == on_1 + 1024  # counted per device
    del z


def test_as_cpu_and_as_neuron_are_zero_copy(neuron):
    n = torch.arange(6.0, device="neuron").reshape(2, 3)
    c = neuron.as_cpu(n)
    assert c.device.type == "cpu" and c.data_ptr() == n.data_ptr()
    c[0, 0] = 42.0
    assert n[0, 0].item() == 42.0
    assert c.numpy()[0, 0] == 42.0
    back = neuron.as_neuron(c)
    assert back.untyped_storage().data_ptr() == n.untyped_storage().data_ptr()
    t = torch.ones(4)
    m = neuron.as_neuron(t, 1)
    assert m.device == torch.device("neuron", 1) and m.data_ptr() == t.data_ptr()
    assert neuron.as_cpu(n.t()).stride() == (1, 3)


def test_numpy_raises_like_cuda():
    with pytest.raises(TypeError, match="can't convert neuron:0 device type tensor to numpy"):
        torch.ones(2, device="neuron").numpy()


def test_pin_memory():
    p = torch.ones(8).pin_memory()
    assert p.is_pinned()
    assert not torch.ones(8).is_pinned()
    assert torch.equal(p.to("neuron", non_blocking=True).cpu(), torch.ones(8))


# ---------------------------------------------------------------- device mixing

def test_mixing_devices_raises_cudas_message():
    n, c = torch.ones(3, device="neuron"), torch.ones(3)
    msg = "Expected all tensors to be on the same device, but found at least two devices, "
    with pytest.raises(RuntimeError, match=msg + r"neuron:0 and cpu! \(in aten::add.Tensor\)"):
        n + c
    with pytest.raises(RuntimeError, match=msg + "neuron:0 and neuron:1!"):
        n + torch.ones(3, device="neuron:1")
    assert torch.equal((n + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))  # 0-dim CPU: ok


# ---------------------------------------------------------------- RNG

def test_manual_seed_makes_neuron_rng_deterministic_and_separate():
    torch.manual_seed(123)
    a = torch.randn(64, device="neuron")
    torch.manual_seed(123)
    torch.randn(1000)  # the CPU stream is another generator: drawing it changes nothing
    b = torch.randn(64, device="neuron")
    assert torch.equal(a.cpu(), b.cpu())
    state = torch.neuron.get_rng_state()
    c = torch.rand(8, device="neuron")
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.rand(8, device="neuron").cpu(), c.cpu())
    d = F.dropout(torch.ones(100, device="neuron"), 0.5)
    assert 0 < int((d == 0).sum()) < 100


def test_generators_per_device_and_explicit():
    torch.neuron.manual_seed_all(7)
    x0 = torch.randn(16, device="neuron:0")
    x1 = torch.randn(16, device="neuron:1")
    assert torch.equal(x0.cpu(), x1.cpu())  # same seed, separate streams
    g = torch.Generator(device="neuron").manual_seed(5)
    h = torch.Generator().manual_seed(5)
    assert torch.equal(torch.randn(8, generator=g, device="neuron").cpu(),
                       torch.randn(8, generator=h))
    assert len(torch.neuron.default_generators) == torch.neuron.device_count()


# ---------------------------------------------------------------- autocast

def test_autocast_follows_cudas_policy():
    a, b = _rand(8, 8).to("neuron"), _rand(8, 8, seed=1).to("neuron")
    assert torch.get_autocast_dtype("neuron") == torch.bfloat16
    with torch.autocast("neuron"):
        mm = a @ b
        ln = F.layer_norm(mm, (8,))
        s = a + b
    assert mm.dtype == torch.bfloat16  # lower_precision_fp list
    assert ln.dtype == torch.float32  # fp32 list
    assert s.dtype == torch.float32  # not listed: unchanged
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = a.cpu() @ b.cpu()
    torch.testing.assert_close(mm.cpu().float(), want.float(), rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- serialization

def test_save_load_keeps_device_and_maps_to_cpu():
    x = _rand(3, 5)
    buf = io.BytesIO()
    torch.save({"w": x.to("neuron:1")}, buf)
    buf.seek(0)
    loaded = torch.load(buf)["w"]
    assert loaded.device == torch.device("neuron", 1) and torch.equal(loaded.cpu(), x)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")["w"]
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x)


def test_pickle_and_deepcopy():
    n = _rand(4, 4).to("neuron")
    p = pickle.loads(pickle.dumps(n))
    assert p.device == n.device and torch.equal(p.cpu(), n.cpu())
    d = copy.deepcopy(n)
    assert d.device == n.device and d.data_ptr() != n.data_ptr()
    assert torch.equal(d.cpu(), n.cpu())


# ---------------------------------------------------------------- training

def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 8))


def _train(model, x, y, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_module_to_neuron_and_training_match_cpu():
    x, y = _rand(10, 16), torch.randint(0, 8, (10,), generator=torch.Generator().manual_seed(1))
    ref, dev = _mlp(0), _mlp(0).to("neuron")
    assert all(p.device.type == "neuron" for p in dev.parameters())
    want = _train(ref, x, y)
    got = _train(dev, x.to("neuron"), y.to("neuron"))
    assert got == pytest.approx(want, rel=1e-4)
    for p, q in zip(dev.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)
        assert p.grad.device.type == "neuron"


def test_state_dict_round_trip():
    dev = _mlp(1).to("neuron")
    sd = dev.state_dict()
    assert all(v.device.type == "neuron" for v in sd.values())
    ref = _mlp(2)
    ref.load_state_dict(sd)
    x = _rand(3, 16)
    torch.testing.assert_close(ref(x), dev(x.to("neuron")).cpu(), **TOL)


# ---------------------------------------------------------------- SDPA

@pytest.mark.parametrize("mask", ["none", "causal", "float", "bool"])
def test_sdpa_forward_backward_match_cpu(mask):
    q, k, v = (_rand(2, 3, 5, 8, seed=s).requires_grad_() for s in (1, 2, 3))
    kw = {"none": {}, "causal": {"is_causal": True},
          "float": {"attn_mask": _rand(5, 5, seed=4)},
          "bool": {"attn_mask": _rand(5, 5, seed=4) > -0.5}}[mask]
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    want.sum().backward()
    nq, nk, nv = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    nkw = {key: val.to("neuron") if torch.is_tensor(val) else val for key, val in kw.items()}
    assert torch._fused_sdp_choice(nq, nk, nv, **nkw) == 4  # SDPBackend.overrideable
    got = F.scaled_dot_product_attention(nq, nk, nv, **nkw)
    got.sum().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL)
    for a, b in ((nq, q), (nk, k), (nv, v)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)


def test_sdpa_output_follows_query_layout():
    q = _rand(2, 5, 3, 8).to("neuron").transpose(1, 2)  # (B, H, L, E) in BLHE memory
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q)[0]
    assert out.stride() == q.stride()


def test_sdpa_dropout_takes_the_math_path():
    q = _rand(1, 2, 4, 8).to("neuron")
    assert torch._fused_sdp_choice(q, q, q, dropout_p=0.5) == 0  # SDPBackend.math
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert out.device.type == "neuron" and out.shape == q.shape


# ---------------------------------------------------------------- streams, events

def test_streams_and_events():
    s = torch.neuron.Stream()
    assert s.device == torch.device("neuron", 0)
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        x = torch.ones(4, device="neuron") * 2
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    x.record_stream(s)
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    s.wait_stream(torch.neuron.current_stream())
    s.synchronize()
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


# ---------------------------------------------------------------- fallback, build, autoload

def test_fallback_runs_cpu_kernels(neuron):
    before = neuron.fallback_calls()
    torch.ones(3, device="neuron").sin()
    assert neuron.fallback_calls() > before


def test_extension_build_is_cached():
    from nki.torch import _build

    assert _build.is_built("device")
    assert _build.build_dir("device").name.startswith("device-")


def test_autoload_entry_point_is_opt_in():
    code = (
        "import os, torch\n"
        "import sys\n"
        "from nki_autoload import autoload\n"
        "autoload()\n"
        "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
        "assert 'nki' not in sys.modules   # a plain import torch never pays for nki\n"
        "os.environ['NKI_TORCH_AUTOLOAD'] = '1'\n"
        "autoload()\n"
        "assert torch.ones(1, device='neuron').device.type == 'neuron'\n"
        "assert torch.neuron.device_count() == 3\n"
        "print('ok')\n")
    env = {**os.environ, "NKI_TORCH_AUTOLOAD": "0", "NEURON_SIM_DEVICE_COUNT": "3"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
