"""Ctrl-C stops a running kernel within a second, naming the line it was running, in both
backends and with LNC 2; a loop budget turns a runaway runtime loop into an error."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRaceWarning

X = np.zeros((128, 64), np.float32)


def _spin_forever(x):
    """A runtime loop whose condition register never changes: it runs until stopped."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    flag = nisa.register_alloc(1)

    def body(reg):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)   # the running line
        return reg

    nl.while_loop(flag, body)
    nisa.dma_copy(dst=out, src=t)
    return out


def _count_to(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nl.fori_loop(0, n, lambda i: nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0))
    nisa.dma_copy(dst=out, src=t)
    return out


def _running() -> bool:
    """A core runs: a core thread exists (compiled cores), or the main thread is inside a
    core's run (the python backend runs core 0 there); compilation is over in both cases."""
    if any(t.name.startswith("nki-core-") for t in threading.enumerate()):
        return True
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "_run_core":
            return True
        frame = frame.f_back
    return False


def _interrupt_once_running(sent: list) -> None:
    """SIGINT this process 0.3 s after a core starts running."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _running():
            time.sleep(0.3)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.01)


@pytest.mark.parametrize("lnc", [1, 2])
def test_ctrl_c_stops_a_running_kernel(backend, lnc, sigint_delivered):
    # the python backend's first call of a helper in a process can take a second (Numba loads
    # what the helper's Python calls); warm the two helpers up so the loop is what runs
    nki.jit(_count_to, backend=backend)(X, 1)
    kernel = nki.jit(_spin_forever, backend=backend, cache=False)[lnc]
    sent: list = []
    watcher = threading.Thread(target=_interrupt_once_running, args=(sent,), daemon=True)
    watcher.start()
    with pytest.warns(NkiRaceWarning) if lnc == 2 else contextlib.nullcontext():
        with pytest.raises(KeyboardInterrupt) as info:
            kernel(X)
    stopped = time.monotonic()
    watcher.join()
    assert sent and stopped - sent[0] < 1.0
    text = str(info.value)
    assert text.count("stopped before test_interrupt.py:") == lnc
    assert "nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)" in text


def test_kernel_runs_again_after_an_interrupt(backend, sigint_delivered):
    """The interrupted run leaves nothing behind: the next call computes normally."""
    kernel = nki.jit(_spin_forever, backend=backend, cache=False)
    sent: list = []
    threading.Thread(target=_interrupt_once_running, args=(sent,), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        kernel(X)
    np.testing.assert_array_equal(nki.jit(_count_to, backend=backend)(X, 7), X + 7)


@pytest.mark.parametrize("how", ["keyword", "environment"])
def test_loop_budget(backend, how, monkeypatch):
    if how == "environment":
        monkeypatch.setenv("NKI_LOOP_BUDGET", "50")
        kernel = nki.jit(_count_to, backend=backend, cache=False)
    else:
        kernel = nki.jit(_count_to, backend=backend, cache=False, loop_budget=50)
    np.testing.assert_array_equal(kernel(X, 50), X + 50)      # at the budget: fine
    with pytest.raises(nki.NkiRuntimeError, match=r"nki_loop_budget_exceeded\] core 0: "
                       r"nl.fori_loop ran 50 iterations(.|\n)*test_interrupt.py:\d+: "
                       r"nl.fori_loop"):
        kernel(X, 51)


def test_loop_budget_stops_an_endless_while_loop(backend):
    kernel = nki.jit(_spin_forever, backend=backend, cache=False, loop_budget=1000)
    with pytest.raises(nki.NkiRuntimeError, match=r"nl.while_loop ran 1000 iterations"):
        kernel(X)


def test_a_signal_byte_left_in_the_pipe_never_stops_the_next_run():
    """A SIGINT that arrived at the very end of one run (its byte still unread) must not stop
    the next run: that run would raise a KeyboardInterrupt nobody sent."""
    from nki.sim import interrupt
    from nki.sim.codegen import STOP_SLOT

    for _ in range(20):
        first, second = np.zeros(16, np.int64), np.zeros(16, np.int64)
        with interrupt.watching([first]):
            watcher = interrupt._watcher()
            os.write(watcher.write_fd, bytes([signal.SIGINT]))   # as the C handler would
        with interrupt.watching([second]):
            time.sleep(0.01)
            assert second[STOP_SLOT] == 0
