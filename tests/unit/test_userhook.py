"""The dependency recorder's pause inside nki's own calls, and estimates without codegen."""

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.jit.cache import DependencyRecorder
from nki.lang.userhook import paused


def _probe():
    return sys.gettrace()


def test_paused_takes_off_only_a_pausable_hook():
    seen = []

    def hook(frame, event, arg):
        seen.append(frame.f_code.co_name)

    hook.nki_pausable = True
    other = lambda frame, event, arg: None  # noqa: E731  (a debugger's hook, say)
    previous = sys.gettrace()
    try:
        sys.settrace(hook)
        inside = paused(_probe)()
        after = sys.gettrace()
        sys.settrace(other)
        untouched = paused(_probe)()
    finally:
        sys.settrace(previous)
    assert inside is None and after is hook
    assert untouched is other
    assert "_probe" not in seen          # the paused call ran unobserved


def _user_helper(n):
    return n * 2


@nki.jit
def _copy_twice(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:_user_helper(64), :])
    nisa.dma_copy(dst=out, src=t)
    return out


def test_recorder_still_sees_user_functions_between_instructions():
    from nki.jit.specialize import Launch, trace_core

    x = np.ones((128, 64), np.float32)
    k = _copy_twice
    args, kwargs = k._positional((x,), {})
    settings = k.settings()
    from nki.ir.target import get_target

    with DependencyRecorder() as rec:
        trace_core(k.fn, args, kwargs, k._tensor_args(args), get_target(settings.target), 0,
                   Launch(), settings)
    names = {qual for _, qual in rec.functions}
    assert {"_copy_twice", "_user_helper"} <= names
    assert not any(q.startswith(("dma_copy", "ndarray", "index_view")) for q in names)


def test_estimate_generates_no_code(monkeypatch):
    monkeypatch.setenv("NKI_CACHE", "0")
    x = np.ones((128, 64), np.float32)
    est = nki.estimate(_copy_twice, target="trn2")(x)
    assert est.latency_us > 0
    spec = _copy_twice.specialize_for_model(x)
    assert all(core._generated is None for core in spec.cores)
    assert "dma" in spec.cores[0].generated.source.lower()   # made on first use
    np.testing.assert_array_equal(_copy_twice(x), x)
