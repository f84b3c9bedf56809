"""torch.distributed on ``neuron``: two ranks on 127.0.0.1, every check against a reference.

One spawn runs all checks (process start-up dominates the cost); each check is then reported
as its own test, and fails with the rank's traceback.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.fail("torch.distributed is not available in this torch build")

import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
TIMEOUT_S = 240
TOL = {"rtol": 1e-4, "atol": 1e-5}


# ---------------------------------------------------------------- checks (run in each rank)

def _t(values, rank_offset: float = 0.0) -> torch.Tensor:
    return (torch.tensor(values, dtype=torch.float32) + rank_offset).to("neuron")


def check_all_reduce(rank, world):
    t = _t([1.0, 2.0, 3.0], rank)
    dist.all_reduce(t)
    assert t.device == torch.device("neuron", rank)
    torch.testing.assert_close(t.cpu(), torch.tensor([3.0, 5.0, 7.0]))


def check_async_work_reports_neuron_tensors(rank, world):
    t = _t([2.0], rank)
    work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    assert t.item() == 3.0
    (value,) = work.get_future().wait()
    assert value.device.type == "neuron" and value.data_ptr() == t.data_ptr()


def check_all_gather_into_tensor(rank, world):
    out = torch.empty(2 * world, device="neuron")
    dist.all_gather_into_tensor(out, _t([10.0, 11.0], 10 * rank))
    torch.testing.assert_close(out.cpu(), torch.tensor([10.0, 11.0, 20.0, 21.0]))


def check_reduce_scatter_tensor(rank, world):
    out = torch.empty(2, device="neuron")
    dist.reduce_scatter_tensor(out, _t([1.0, 2.0, 3.0, 4.0], rank))
    want = torch.tensor([3.0, 5.0, 7.0, 9.0])[2 * rank:2 * rank + 2]
    torch.testing.assert_close(out.cpu(), want)


def check_broadcast(rank, world):
    t = _t([5.0, 6.0], 100 * rank)
    dist.broadcast(t, src=1)
    torch.testing.assert_close(t.cpu(), torch.tensor([105.0, 106.0]))


def check_all_gather_list(rank, world):
    outs = [torch.empty(1, device="neuron") for _ in range(world)]
    dist.all_gather(outs, _t([float(rank)]))
    assert [o.item() for o in outs] == [0.0, 1.0]


def check_all_gather_object(rank, world):
    got = [None] * world
    dist.all_gather_object(got, {"rank": rank})
    assert got == [{"rank": 0}, {"rank": 1}]


def check_all_to_all_single(rank, world):
    out = torch.empty(2, device="neuron")
    dist.all_to_all_single(out, _t([0.0, 1.0], 10 * rank))
    torch.testing.assert_close(out.cpu(), torch.tensor([0.0, 10.0]) + rank)


def check_send_recv(rank, world):
    if rank == 0:
        dist.send(_t([7.0, 8.0]), dst=1)
    else:
        t = torch.zeros(2, device="neuron")
        dist.recv(t, src=0)
        torch.testing.assert_close(t.cpu(), torch.tensor([7.0, 8.0]))
    dist.barrier()


def check_backend_name(rank, world):
    assert dist.get_backend() == "neuron"
    pg = dist.group.WORLD
    assert pg._get_backend(torch.device("neuron")).name() == "neuron"


def _model(seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def _reference_grads(world):
    """Gradients of the mean of every rank's loss, on CPU (what data parallelism computes)."""
    ref = _model()
    for r in range(world):
        x, y = _batch(r)
        (torch.nn.functional.mse_loss(ref(x), y) / world).backward()
    return ref


def check_ddp_grads_match_reference(rank, world):
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_model().to("neuron"))
    x, y = _batch(rank)
    torch.nn.functional.mse_loss(model(x.to("neuron")), y.to("neuron")).backward()
    ref = _reference_grads(world)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad.device.type == "neuron"
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = torch.empty(world * flat.numel(), device="neuron")
    dist.all_gather_into_tensor(gathered, flat)
    a, b = gathered.cpu().chunk(world)
    assert torch.equal(a, b), "DDP replicas differ after the step"


def check_fsdp2_grads_match_reference(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh("neuron", (world,))
    model = _model().to("neuron")
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    p0 = next(model.parameters())
    assert isinstance(p0, DTensor) and p0.to_local().device.type == "neuron"
    x, y = _batch(rank)
    torch.nn.functional.mse_loss(model(x.to("neuron")), y.to("neuron")).backward()
    ref = _reference_grads(world)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, **TOL)


def check_tensor_parallel_matches_reference(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("neuron", (world,))
    model = parallelize_module(_model().to("neuron"), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, y = _batch(0)  # the same batch on every rank
    out = model(x.to("neuron"))
    torch.nn.functional.mse_loss(out, y.to("neuron")).backward()
    ref = _model()
    want = ref(x)
    torch.nn.functional.mse_loss(want, y).backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach(), **TOL)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, **TOL)


CHECKS = {name[len("check_"):]: fn for name, fn in dict(globals()).items()
          if name.startswith("check_")}


# ---------------------------------------------------------------- the spawn

def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    import nki.torch  # noqa: F401  (the neuron device and backend)

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.neuron.set_device(rank)
    dist.init_process_group("neuron", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn(rank, world)
            results[name] = "ok"
        except Exception:  # reported per check by the parent
            results[name] = traceback.format_exc()
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(neuron, tmp_path_factory):
    """Each rank's {check: "ok" or traceback}, from one 2-process run."""
    from nki.torch import _build

    _build.load("c10d")  # build once here, not in both ranks
    out = tmp_path_factory.mktemp("dist")
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # spawned children inherit the environment
    try:
        ctx = mp.start_processes(_worker, args=(WORLD, _free_port(), str(out)), nprocs=WORLD,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                pytest.fail(f"distributed workers did not finish within {TIMEOUT_S} s")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_collective(results, check):
    for rank, res in enumerate(results):
        assert res[check] == "ok", f"rank {rank}:\n{res[check]}"
