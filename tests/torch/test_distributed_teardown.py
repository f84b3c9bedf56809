"""Tearing down the ``neuron`` process group: with work pending, and at exit without
``destroy_process_group``. Two ranks, each its own interpreter, on 127.0.0.1.

The failure these guard against: Gloo's worker threads live as long as their backend object,
and one finishing a collective while the interpreter finalizes frees the caller's tensors,
needs the GIL, is ended by Python with ``pthread_exit``, and the process aborts with
"terminate called without an active exception" (see ``nki/torch/csrc/c10d.cpp``). With
torch's own ``gloo`` backend the exit scenario below aborts that way every time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

RANK = textwrap.dedent("""
    import os, sys, time
    from datetime import timedelta
    import numpy as np, torch, torch.distributed as dist
    import nki.torch
    rank, port, scenario = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.neuron.set_device(rank)
    dist.init_process_group("neuron", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(4))
    if scenario == "destroy_with_work_pending":
        neuron = [torch.full((1 << 16,), float(rank + 1), device="neuron") for _ in range(4)]
        host = torch.from_numpy(np.full(1 << 16, rank + 1.0, np.float32))
        works = [dist.all_reduce(t, async_op=True) for t in (*neuron, host)]
        pg = dist.group.WORLD
        dist.destroy_process_group()          # no wait(): the pending work must still finish
        assert all(bool((t.cpu() == 3.0).all()) for t in (*neuron, host)), "work lost"
        try:
            pg.allreduce([torch.ones(1, device="neuron")])
        except RuntimeError as e:
            assert "was shut down" in str(e), e
        else:
            raise AssertionError("a collective on a destroyed group ran")
    elif scenario == "exit_without_destroy":
        if rank == 1:
            time.sleep(3)      # rank 0 is already exiting when this rank's work is queued
        for _ in range(4):    # works the Gloo workers finish (or fail) while Python exits
            dist.all_reduce(torch.from_numpy(np.ones(1 << 18, np.float32)), async_op=True)
            dist.all_reduce(torch.ones(1 << 18, device="neuron"), async_op=True)
    print(f"rank {rank} finished {scenario}", flush=True)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def c10d_built(neuron):
    from nki.torch import _build

    _build.load("c10d")      # once here, not in both ranks


@pytest.mark.parametrize("scenario", ["destroy_with_work_pending", "exit_without_destroy"])
def test_teardown_exits_cleanly(c10d_built, tmp_path, scenario):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    port = str(_free_port())
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), port, scenario], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    results = []
    for proc in ranks:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for p in ranks:
                p.kill()
            pytest.fail(f"{scenario}: a rank did not exit within 240 s")
        results.append((proc.returncode, out, err))
    for rank, (code, out, err) in enumerate(results):
        assert "terminate called" not in err, f"rank {rank} aborted:\n{err[-3000:]}"
        assert code == 0, f"rank {rank} exited with {code}:\n{err[-3000:]}"
        assert f"rank {rank} finished {scenario}" in out
