"""Row chains (nki/sim/rowchain.py): runs of row-wise instructions run one partition chunk at
a time. Runs that may be interchanged give the bits of the plain order and of numpy; runs
that must not be (a shifted reader, a transpose, a partition broadcast, an indirect DMA)
are not, and still match numpy. Both backends."""

from __future__ import annotations

import re
import threading
import time
import warnings

import numpy as np
import pytest
from nki.kernels.norms import layernorm

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiUninitializedRegisterWarning
from nki.sim import rowchain
from nki.testing import assert_close

# e.g. "L[8] = 3  # row chain ..." / "for pc in range(0, 100, 3):" / "L[9] = pc" /
# "for k in range(0, 6):": the rows each chain runs
_CHAIN = re.compile(r"L\[8\] = (\d+)  # row chain.*\n.*for pc in range\(0, (\d+), \d+\):\n"
                    r".*\n\s*for k in range\((\d+), (\d+)\):")


@pytest.fixture
def small_chunks(monkeypatch):
    """A small chunk budget, so tiles of a few KiB run as several chunks, the last partial,
    on a CPU whose L2 holds none of the tiles (so every legal run is chained)."""
    monkeypatch.setattr(rowchain, "CHAIN_BYTES", 7000)
    monkeypatch.setattr(rowchain, "l2_bytes", lambda: 0)


def _jit(fn, backend, chains=True):
    # no program cache: the chunk budget the test sets is not part of its keys
    return nki.jit(fn, backend=backend, row_chains=chains, cache=False)


def _chains(kernel, *args) -> list[tuple[int, int, range]]:
    """(chunk rows, partitions, instruction rows) of every row chain in the generated code."""
    return [(int(c), int(p), range(int(a), int(b)))
            for c, p, a, b in _CHAIN.findall(kernel.specialize(*args).source)]


def _unchained(fn, backend, *args):
    """``fn`` jitted, asserting that none of its runs became a row chain."""
    kernel = _jit(fn, backend)
    assert _chains(kernel, *args) == []
    return kernel


def _sbuf(*shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


def _hbm(*shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)


def _exact(a, b):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _calls_match(kernel, reference, *inputs):
    """Two calls, the second on other values: a reordered read would find the first call's
    values still in the pooled arenas, and so look right on one call alone."""
    for k in range(2):
        args = [a if a.dtype.kind == "i" else a * np.float32(1 - 3 * k) for a in inputs]
        _exact(kernel(*args), reference(*args))


def softmax_kernel(x):
    """dma in, row max, exp(x - max) with row sums, 1/sum, scale, dma out: one run."""
    P, D = x.shape
    out, t, e = _hbm(P, D), _sbuf(P, D), _sbuf(P, D)
    neg_max, sums, inv = _sbuf(P, 1), _sbuf(P, 1), _sbuf(P, 1)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
    nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max, reduce_res=sums,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.reciprocal(dst=inv, data=sums)
    nisa.tensor_scalar(dst=e, data=e, op0=nl.multiply, operand0=inv)
    nisa.dma_copy(dst=out, src=e)
    return out


def _softmax_ref(x):
    z = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rows", [100, 128])   # P < 128 and a full tile; 6 rows a chunk
def test_softmax_chain_matches_plain_order_and_numpy(backend, rng, small_chunks, rows):
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    kernel = _jit(softmax_kernel, backend)
    chains = _chains(kernel, x)
    assert len(chains) == 1 and chains[0][2] == range(0, 6) and chains[0][1] == rows
    assert rows % chains[0][0] != 0          # a partial last chunk
    y = kernel(x)
    _exact(y, _jit(softmax_kernel, backend, chains=False)(x))
    assert _chains(_jit(softmax_kernel, backend, chains=False), x) == []
    assert_close(y, _softmax_ref(x), dtype=np.float32)


def test_compile_free_tier_chains_with_the_compiled_bits(rng, small_chunks, monkeypatch):
    x = rng.standard_normal((100, 64)).astype(np.float32) * 4
    x[3, 5], x[7, :] = np.inf, -np.inf
    kernel = _jit(softmax_kernel, "numba")
    assert _chains(kernel, x)
    outs = []
    for tier in ("compiled", "python"):
        monkeypatch.setenv("NKI_TIER", tier)
        outs.append(kernel(x))
    _exact(outs[0], outs[1])


@pytest.mark.parametrize("rows", [200, 64])   # a full and a partial tile; one short tile
def test_layernorm_chain_matches_plain_order_and_numpy(backend, rng, small_chunks, rows):
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    g, b = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    kernel = _jit(layernorm.fn, backend)
    assert _chains(kernel, x, g, b)
    y = kernel(x, g, b)
    _exact(y, _jit(layernorm.fn, backend, chains=False)(x, g, b))
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
    assert_close(y, ref, dtype=np.float32)


def test_default_budget_chains_a_4096_wide_softmax(backend, rng, monkeypatch):
    # 4 MiB of tiles: more than an L2 of 1 MiB holds
    monkeypatch.setattr(rowchain, "l2_bytes", lambda: rowchain.L2_FALLBACK)
    x = rng.standard_normal((128, 4096)).astype(np.float32)
    kernel = _jit(softmax_kernel, backend)
    (chunk, parts, rows), = _chains(kernel, x)
    assert parts == 128 and rows == range(0, 6) and 1 <= chunk < 128
    assert _chains(_jit(softmax_kernel, backend), x[:, :512]) == []   # 0.5 MiB of tiles fit
    _exact(kernel(x), _jit(softmax_kernel, backend, chains=False)(x))


# ----- runs that must not be interchanged ----------------------------------------------------
def shifted_reader(x):
    """dst rows 0..95 of a tile written, then read at partitions 32..127: partition p of the
    reader is the writer's p + 32, written in a later chunk."""
    out = _hbm(96, 16)
    t = _sbuf(128, 16)
    u = _sbuf(96, 16)
    nisa.iota(dst=t, pattern=[[1, 16]], channel_multiplier=16)   # not row-wise: ends a run
    nisa.dma_copy(dst=t[0:96, :], src=x)
    nisa.tensor_scalar(dst=u, data=t[32:128, :], op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_shifted_reader_is_not_chained(backend, rng, small_chunks):
    x = rng.standard_normal((96, 16)).astype(np.float32)
    kernel = _unchained(shifted_reader, backend, x)

    def reference(x):
        t = np.arange(128 * 16, dtype=np.float32).reshape(128, 16)
        t[:96] = x
        return t[32:] * np.float32(2)

    _calls_match(kernel, reference, x)


def transpose_between(x):
    """Row-wise steps, a transpose (cross-partition), row-wise steps."""
    out = _hbm(32, 32)
    a = _sbuf(32, 32)
    b = _sbuf(32, 32)
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.0)
    nisa.nc_transpose(dst=b, data=a, engine=nisa.engine.vector)
    nisa.tensor_tensor(dst=b, data1=b, data2=a, op=nl.multiply)
    nisa.dma_copy(dst=out, src=b)
    return out


def test_no_chain_spans_a_transpose(backend, rng, small_chunks):
    x = rng.standard_normal((32, 32)).astype(np.float32)
    kernel = _jit(transpose_between, backend)
    for _, _, rows in _chains(kernel, x):
        assert 2 not in rows                  # row 2 is the transpose

    def reference(x):
        a = x + np.float32(1)
        return a.T * a

    _calls_match(kernel, reference, x)


def broadcast_between(x):
    """Rows written to HBM, then the last of them read back broadcast to every partition."""
    out = _hbm(64, 16)
    scratch = _hbm(64, 16)
    t = _sbuf(64, 16)
    u = _sbuf(64, 16)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=scratch, src=t)
    nisa.dma_copy(dst=u, src=scratch[63:64, :].broadcast(0, 64))
    nisa.tensor_tensor(dst=u, data1=u, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_partition_broadcast_is_not_chained(backend, rng, small_chunks):
    x = rng.standard_normal((64, 16)).astype(np.float32)
    _calls_match(_unchained(broadcast_between, backend, x), lambda x: x + x[63:64], x)


def indirect_between(table, idx):
    """Row-wise steps around an indirect gather (which checks its indices as it runs)."""
    out = _hbm(64, 16)
    ids = nl.ndarray((64, 1), dtype=nl.int32, buffer=nl.sbuf)
    rows = _sbuf(64, 16)
    nisa.dma_copy(dst=ids, src=idx)
    nisa.memset(dst=rows, value=0.0)
    src = table.ap([[16, 64], [1, 16]], 0, vector_offset=ids, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=src)
    nisa.tensor_scalar(dst=rows, data=rows, op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_indirect_dma_is_not_chained(backend, rng, small_chunks):
    table = rng.standard_normal((80, 16)).astype(np.float32)
    idx = rng.integers(0, 80, (64, 1)).astype(np.int32)
    kernel = _jit(indirect_between, backend)
    for _, _, rows in _chains(kernel, table, idx):
        assert 2 not in rows                  # row 2 is the gather
    _calls_match(kernel, lambda table, idx: table[idx[:, 0]] * np.float32(3), table, idx)


# ----- the profile still attributes per instruction ------------------------------------------
def test_profile_counts_each_instruction_once_per_run(rng, small_chunks):
    x = rng.standard_normal((100, 64)).astype(np.float32)
    kernel = _jit(softmax_kernel, "numba")
    assert _chains(kernel, x)
    prof, = kernel.profile(x)
    plain, = _jit(softmax_kernel, "numba", chains=False).profile(x)
    np.testing.assert_array_equal(prof.calls, plain.calls)
    assert (prof.calls == 1).all() and (prof.seconds > 0).all()


# ----- engine accumulators ---------------------------------------------------------------------
def _lane_warnings(kernel, *args):
    """The kernel's result and its accumulator warnings' texts."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NkiUninitializedRegisterWarning)
        out = kernel(*args)
    return out, [str(w.message) for w in caught
                 if issubclass(w.category, NkiUninitializedRegisterWarning)]


def sum_onto_fresh_lanes(x):
    """One lane reader in the run: reduce onto ScalarE registers nothing set (they read 0)."""
    P, D = x.shape
    t, y, s, out = _sbuf(P, D), _sbuf(P, D), _sbuf(P, 1), _hbm(P, 1)
    nisa.dma_copy(dst=t, src=x)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=s,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=out, src=s)
    return out


def test_one_lane_reader_chains_with_the_same_warnings(backend, rng, small_chunks):
    x = rng.standard_normal((100, 64)).astype(np.float32)
    kernel = _jit(sum_onto_fresh_lanes, backend)
    assert _chains(kernel, x)
    s, msgs = _lane_warnings(kernel, x)
    plain, plain_msgs = _lane_warnings(_jit(sum_onto_fresh_lanes, backend, chains=False), x)
    _exact(s, plain)
    assert msgs == plain_msgs and len(msgs) == 1 and "partitions 0-99," in msgs[0]
    assert_close(s[:, 0], x.astype(np.float64).sum(1), dtype=np.float32)


def shifted_lanes(x):
    """Lanes 0-63 reset, then a reduce over data at partitions 32-95: its lane p is the
    reset's lane p + 32, which a later chunk of the reset would set."""
    t = _sbuf(128, 32)
    y1 = _sbuf(128, 32)
    y2 = _sbuf(128, 32)
    s = _sbuf(128, 1)
    out = _hbm(64, 33)
    nisa.dma_copy(dst=t, src=x)
    nisa.iota(dst=s, pattern=[[0, 1]])         # not row-wise: the run starts after it
    nisa.activation(dst=y1[0:64], op=nl.copy, data=t[0:64], reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(dst=y2[32:96], op=nl.copy, data=t[32:96], reduce_op=nl.add,
                    reduce_res=s[32:96], reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=out[:, 0:1], src=s[32:96])
    nisa.dma_copy(dst=out[:, 1:33], src=y1[0:64])    # y1 kept apart from y2
    return out


def test_shifted_accumulator_lanes_are_not_chained(backend, rng, small_chunks):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    kernel = _jit(shifted_lanes, backend)
    for _, _, rows in _chains(kernel, x):
        assert not {2, 3} <= set(rows)       # the reset and the reduce never in one chain
    s, msgs = _lane_warnings(kernel, x)
    sums = x.astype(np.float64).sum(1)
    expect = sums[32:96] + np.concatenate([sums[32:64], np.zeros(32)])   # 64-95 read 0
    assert_close(s[:, 0], expect, dtype=np.float32)
    _exact(s[:, 1:], x[:64])
    assert len(msgs) == 1 and "partitions 64-95," in msgs[0]


# ----- Ctrl-C ------------------------------------------------------------------------------------
def spin_chained(x):
    """A runtime loop that never ends, its body one chained run of two instructions."""
    out, t, u = _hbm(128, 64), _sbuf(128, 64), _sbuf(128, 64)
    nisa.dma_copy(dst=t, src=x)
    flag = nisa.register_alloc(1)

    def body(reg):
        nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.0)
        nisa.tensor_tensor(dst=t, data1=u, data2=t, op=nl.maximum)
        return reg

    nl.while_loop(flag, body)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_ctrl_c_stops_a_chain_and_the_kernel_runs_again(backend, small_chunks, sigint_delivered):
    from test_interrupt import _interrupt_once_running

    x = np.zeros((128, 64), np.float32)
    kernel = _jit(spin_chained, backend)
    assert [rows for _, _, rows in _chains(kernel, x)] == [range(2, 4)]   # the body
    kernel.specialize(x)       # compiled before the clock starts
    sent: list = []
    watcher = threading.Thread(target=_interrupt_once_running, args=(sent,), daemon=True)
    watcher.start()
    with pytest.raises(KeyboardInterrupt) as info:
        kernel(x)
    stopped = time.monotonic()
    watcher.join()
    assert sent and stopped - sent[0] < 1.0
    assert "stopped before test_row_chains.py:" in str(info.value)
    assert re.search(r"nisa\.tensor_(scalar|tensor)\(dst=", str(info.value))
    y = np.random.default_rng(5).standard_normal((100, 64)).astype(np.float32)
    _exact(_jit(softmax_kernel, backend)(y), _jit(softmax_kernel, backend, chains=False)(y))
