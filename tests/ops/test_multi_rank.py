"""``nki.multi_rank_simulate`` (NKI 0.7): one kernel on several ranks in one process, every
``nki.collectives`` call across them, and the prepare/trigger split of the variable-size
collectives. Both backends, against numpy references; errors assert code, words and
file:line."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRuntimeError, NkiTypeError, NkiValidationError, NkiValueError


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_multi_rank\.py:\d+"


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _to_hbm(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm)
    nisa.dma_copy(dst=t, src=x)
    return t


def _collective_kernel(x, kind, world):
    """Rank r runs one collective on its input; the result is returned."""
    rg = ncc.ReplicaGroup([list(range(world))])
    src = _to_hbm(x)
    rows = {"all_gather": x.shape[0] * world, "reduce_scatter": x.shape[0] // world}
    out = nl.ndarray((rows.get(kind, x.shape[0]), x.shape[1]), dtype=x.dtype,
                     buffer=nl.shared_hbm)
    if kind == "all_reduce":
        ncc.all_reduce(srcs=[src], dsts=[out], replica_group=rg, op=nl.add, priority=2)
    elif kind == "all_gather":
        ncc.all_gather(srcs=[src], dsts=[out], replica_group=rg, collective_dim=0)
    elif kind == "reduce_scatter":
        ncc.reduce_scatter(srcs=[src], dsts=[out], replica_group=rg, collective_dim=0,
                           op=nl.maximum)
    elif kind == "all_to_all":
        ncc.all_to_all(srcs=[src], dsts=[out], replica_group=rg, collective_dim=0)
    else:   # a ring: each rank sends to the next
        pairs = [(r, (r + 1) % world) for r in range(world)]
        ncc.collective_permute(srcs=[src], dsts=[out], source_target_pairs=pairs)
    return out


def _references(xs, kind):
    w = len(xs)
    if kind == "all_reduce":
        total = xs[0].copy()
        for x in xs[1:]:
            total = (total + x).astype(np.float32)
        return [total] * w
    if kind == "all_gather":
        return [np.concatenate(xs)] * w
    if kind == "reduce_scatter":
        best = np.maximum.reduce(xs)
        return np.split(best, w)
    if kind == "all_to_all":
        return [np.concatenate([np.split(x, w)[r] for x in xs]) for r in range(w)]
    return [xs[(r - 1) % w] for r in range(w)]


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                  "collective_permute"])
@pytest.mark.parametrize("world", [2, 4])
def test_collectives_across_ranks(backend, kind, world):
    rng = np.random.default_rng(world)
    xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(world)]
    outs = nki.multi_rank_simulate(_jit(_collective_kernel, backend=backend), world_size=world,
                                   per_rank_inputs=[((x, kind, world), {}) for x in xs])
    assert len(outs) == world
    for got, want in zip(outs, _references(xs, kind)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather"])
def test_a_rank_list_of_sixteen_ranks(backend, kind):
    """nki-library's sb2sb all-gather runs tp16..tp64: a rank-list longer than the
    instruction row's ints is still one collective over every rank."""
    world = 16
    rng = np.random.default_rng(16)
    xs = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(world)]
    outs = nki.multi_rank_simulate(_jit(_collective_kernel, backend=backend), world_size=world,
                                   per_rank_inputs=[((x, kind, world), {}) for x in xs])
    for got, want in zip(outs, _references(xs, kind)):
        np.testing.assert_array_equal(got, want)


def _rank_scaled(x, scale):
    """rank_id() is the world rank: each rank scales by (rank + 1) * scale."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply,
                       operand0=float((ncc.rank_id() + 1) * scale))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_mapping_inputs_kwargs_and_plain_function(backend):
    xs = {r: np.full((4, 8), r + 1, np.float32) for r in range(3)}
    pairs = {r: ((xs[r],), {"scale": 0.5}) for r in (2, 0, 1)}
    kernel = _jit(_rank_scaled, backend=backend)
    outs = nki.multi_rank_simulate(kernel, world_size=3, per_rank_inputs=pairs)
    for r in range(3):
        np.testing.assert_array_equal(outs[r], xs[r] * np.float32((r + 1) * 0.5))
    plain = nki.multi_rank_simulate(_rank_scaled, world_size=2,
                                    per_rank_inputs=[((xs[r],), {"scale": 1.0}) for r in (0, 1)])
    np.testing.assert_array_equal(plain[1], xs[1] * np.float32(2.0))


def test_multi_rank_execute_runs_on_the_simulator():
    xs = [np.full((4, 8), 3.0, np.float32)] * 2
    outs = nki.multi_rank_execute(_rank_scaled, world_size=2,
                                  per_rank_inputs=[((x, 1.0), {}) for x in xs])
    np.testing.assert_array_equal(outs[1], xs[1] * np.float32(2.0))


@pytest.mark.parametrize("inputs,cls,code,words", [
    ([((np.ones((4, 8), np.float32), 1.0), {}), ((np.ones((4, 4), np.float32), 1.0), {})],
     NkiValueError, "nki_rank_inputs_mismatch", ("'x' of rank 1", "shape \\(4, 4\\)")),
    ([((np.ones((4, 8), np.float32), 1.0), {}), ((np.ones((4, 8), np.int32), 1.0), {})],
     NkiValueError, "nki_rank_inputs_mismatch", ("'x' of rank 1", "int32")),
    ([((np.ones((4, 8), np.float32), 1.0), {}), ((np.ones((4, 8), np.float32), 2.0), {})],
     NkiValueError, "nki_rank_inputs_mismatch", ("'scale' of rank 1", "is 2.0", "1.0")),
    ([((np.ones((4, 8), np.float32), 1.0), {})],
     NkiValueError, "nki_invalid_argument", ("1 entries for world_size=2",)),
    ({0: ((np.ones((4, 8), np.float32), 1.0), {}), 5: ((np.ones((4, 8), np.float32), 1.0), {})},
     NkiValueError, "nki_invalid_argument", ("one key per rank 0..1",)),
    ([(np.ones((4, 8), np.float32), 1.0), ((np.ones((4, 8), np.float32), 1.0), {})],
     NkiTypeError, "nki_invalid_argument", ("per_rank_inputs\\[0\\]", "pair")),
])
def test_rank_input_rules(inputs, cls, code, words):
    with pytest.raises(cls, match=_err(code, *words)):
        nki.multi_rank_simulate(_rank_scaled, world_size=2, per_rank_inputs=inputs)


def _lnc_sharded_gather(x):
    """nki-library's LNC2 collective idiom (sb2sb all-gather, tiled): each LNC core of a rank
    all-gathers its own row shard across the ranks; a core barrier inside the rank."""
    world, n = 2, nl.num_programs(axes=0)
    me = nl.program_id(0)
    rows = x.shape[0] // n
    rg = ncc.ReplicaGroup([list(range(world))])
    src = _to_hbm(x[nl.ds(me * rows, rows), :])
    got = nl.ndarray((rows * world, x.shape[1]), dtype=x.dtype, buffer=nl.private_hbm)
    ncc.all_gather(srcs=[src], dsts=[got], replica_group=rg, collective_dim=0)
    out = nl.ndarray((n, rows * world, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[me], src=got)
    return out


def test_lnc_cores_of_each_rank_meet_their_peers(backend):
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2)]
    outs = nki.multi_rank_simulate(_jit(_lnc_sharded_gather, backend=backend)[2], world_size=2,
                                   per_rank_inputs=[((x,), {}) for x in xs])
    for got in outs:
        for core in range(2):   # core c's shard of every rank, in rank order
            want = np.concatenate([x[core * 4:(core + 1) * 4] for x in xs])
            np.testing.assert_array_equal(got[core], want)


def _half_reduce(x):
    """Only ranks 0 and 1 of 3 are in the group: rank 2 waits for nobody."""
    src = _to_hbm(x)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    group = [[0, 1], [2]] if ncc.rank_id() != 2 else [[0, 1, 2]]
    ncc.all_reduce(srcs=[src], dsts=[out], replica_group=ncc.ReplicaGroup(group), op=nl.add)
    return out


def test_ranks_that_never_meet_are_a_named_deadlock(backend):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_deadlock", "waits in",
                                                   "all_reduce at test_multi_rank")):
        nki.multi_rank_simulate(_jit(_half_reduce, backend=backend), world_size=3,
                                per_rank_inputs=[((x,), {})] * 3)


# ----- prepare / trigger ------------------------------------------------------------------
def _split_v(x, meta_in, kind, world, change_after_prepare):
    """all_to_all_v / all_gather_v as prepare + trigger; the metadata is read at the prepare
    (a later change to it does not reach the collective)."""
    rg = ncc.ReplicaGroup([list(range(world))])
    me = ncc.rank_id()
    src = _to_hbm(x)
    dst = nl.ndarray((world * 4,), dtype=x.dtype, buffer=nl.private_hbm)
    fill = nl.ndarray((1, world * 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1.0)
    nisa.dma_copy(dst=dst, src=fill)
    meta = nl.ndarray(meta_in.shape[1:], dtype=nl.uint32, buffer=nl.private_hbm)
    nisa.dma_copy(dst=meta, src=meta_in[me])
    prepare = getattr(ncc, f"{kind}_prepare")
    trigger = getattr(ncc, f"{kind}_trigger")
    handle = prepare(srcs=[src], dsts=[dst], replica_group=rg, metadata_tensor=meta,
                     priority=3)
    if change_after_prepare:
        zeros = nl.ndarray((1,) + meta_in.shape[1:], dtype=nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=zeros, value=0)
        nisa.dma_copy(dst=meta, src=zeros)
    trigger(handle)
    out = nl.ndarray((world * 4,), dtype=x.dtype, buffer=nl.shared_hbm)
    meta_out = nl.ndarray(meta_in.shape[1:], dtype=nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    nisa.dma_copy(dst=meta_out, src=meta)
    return out, meta_out


def _reference_split(xs, metas, kind):
    w = len(xs)
    outs, recvs = [], []
    for r in range(w):
        dst, recv = np.full(w * 4, -1.0, np.float32), np.zeros(w, np.uint32)
        for s in range(w):
            col = r if kind == "all_to_all_v" else 0
            cnt, dsp = int(metas[s][0, col]), int(metas[s][1, col])
            dst[s * 4:s * 4 + cnt] = xs[s][dsp:dsp + cnt]
            recv[s] = cnt
        outs.append(dst)
        recvs.append(recv)
    return outs, recvs


@pytest.mark.parametrize("kind", ["all_to_all_v", "all_gather_v"])
@pytest.mark.parametrize("change", [False, True], ids=["plain", "meta-changed-after-prepare"])
def test_prepare_trigger(backend, kind, change):
    world = 3
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(10).astype(np.float32) for _ in range(world)]
    metas = []
    for _ in range(world):
        m = np.zeros((3, world), np.uint32)
        counts = rng.integers(0, 5, world) if kind == "all_to_all_v" else \
            np.full(world, rng.integers(0, 5))
        m[0] = counts
        m[1] = rng.integers(0, 10 - 4, world) if kind == "all_to_all_v" else \
            np.full(world, rng.integers(0, 6))
        metas.append(m)
    meta_in = np.stack(metas)
    kernel = _jit(_split_v, backend=backend)
    outs = nki.multi_rank_simulate(kernel, world_size=world, per_rank_inputs=[
        ((xs[r], meta_in, kind, world, change), {}) for r in range(world)])
    want, recv = _reference_split(xs, metas, kind)
    for r, (out, meta_out) in enumerate(outs):
        np.testing.assert_array_equal(out, want[r])
        np.testing.assert_array_equal(meta_out[2], recv[r])
        rows = np.zeros((2, world), np.uint32) if change else metas[r][:2]
        np.testing.assert_array_equal(meta_out[:2], rows)


def _bad_pairing(x, meta_in, how):
    rg = ncc.ReplicaGroup([[0, 1]])
    src = _to_hbm(x)
    dst = nl.ndarray((8,), dtype=x.dtype, buffer=nl.private_hbm)
    meta = nl.ndarray(meta_in.shape[1:], dtype=nl.uint32, buffer=nl.private_hbm)
    nisa.dma_copy(dst=meta, src=meta_in[ncc.rank_id()])
    args = dict(srcs=[src], dsts=[dst], replica_group=rg, metadata_tensor=meta)
    if how == "trigger-first":
        ncc.all_to_all_v_trigger(None)
    first = ncc.all_to_all_v_prepare(**args)
    if how == "two-prepares":
        ncc.all_gather_v_prepare(**args)
    elif how == "wrong-handle":
        ncc.all_to_all_v_trigger(src)
    elif how == "wrong-kind":
        ncc.all_gather_v_trigger(first)
    elif how != "never-triggered":
        ncc.all_to_all_v_trigger(first)
    out = nl.ndarray((8,), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("how,words", [
    ("trigger-first", ("all_to_all_v_trigger", "no prepare is waiting")),
    ("two-prepares", ("all_gather_v_prepare", "all_to_all_v_prepare at test_multi_rank",
                      "not triggered yet")),
    ("wrong-handle", ("prepare_instr must be the instruction",)),
    ("wrong-kind", ("all_gather_v_trigger", "prepare_instr must be")),
    ("never-triggered", ("all_to_all_v_prepare is never triggered",)),
])
def test_prepare_trigger_pairing_rules(how, words):
    x = np.ones(8, np.float32)
    meta = np.zeros((2, 3, 2), np.uint32)
    with pytest.raises(NkiValidationError, match=_err("nki_invalid_argument", *words)):
        nki.multi_rank_simulate(_bad_pairing, world_size=2,
                                per_rank_inputs=[((x, meta, how), {})] * 2)
