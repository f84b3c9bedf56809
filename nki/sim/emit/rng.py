"""Random numbers: ``nisa.rng``, ``rand2``, ``set_rng_seed``, ``rand_set_state``,
``rand_get_state`` and ``nl.rand`` / ``nl.random_seed`` (one opcode, host calls).

The generator is Marsaglia's XORWOW (what NeuronCore-v4 documents), one independent stream
per engine (Vector, GpSimd) and per lane (partition ``p`` of the instruction's operands,
counted from their first partition). A lane's state is six uint32 words ``x0..x4, d``; each
draw is::

    t = x4; s = x0; (x4, x3, x2, x1) = (x3, x2, x1, s)
    t ^= t >> 2; t ^= t << 1; t ^= s ^ (s << 4); x0 = t; d += 362437; return t + d

Seeding expands a 32-bit seed with a murmur3 finaliser of (seed, lane, core, word), so lanes
and LNC cores draw different streams from one seed. Every run starts unseeded (state zero),
which behaves as seed 0. Uniform floats are ``(bits >> 8) * 2**-24`` in ``[0, 1)`` scaled to
``[min, max)`` in fp32. The state lives in the PSUM arena just below the engine registers.

``nisa.dropout`` draws from the Vector engine's stream too: element ``j`` of partition ``p``
takes lane ``p``'s next draw (elements in row-major order), and the top 24 bits decide,
dropped (zero) when ``(bits >> 8) * 2**-24 < prob`` (exactly where ``rand2`` from the same
state would return a value below ``prob``), kept bit-exactly otherwise.
"""

from __future__ import annotations

import numpy as np

from nki.ir.ops import Engine, Opcode
from nki.sim.emit import emitter, imm
from nki.sim.emit.collectives import HostCall, host_call, host_op
from nki.sim.layout import REGS_BYTES

LANES, WORDS = 128, 6
RNG_BYTES = 8192                      # 2 engines x 128 lanes x 6 uint32 = 6 KiB, padded
ENGINE_SLOT = {int(Engine.vector): 0, int(Engine.unknown): 0, int(Engine.gpsimd): 1}
RNG, RAND2, SET_SEED, SET_STATE, GET_STATE, DROPOUT = range(6)
_M32 = np.uint32(0xFFFFFFFF)


def _fmix(h: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finaliser (uint32 arithmetic wraps)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def seed_state(seeds: np.ndarray, core: int) -> np.ndarray:
    """The (lanes, 6) uint32 XORWOW state of lanes seeded with ``seeds`` (one per lane)."""
    seeds = np.asarray(seeds).astype(np.uint32)
    lanes = np.arange(seeds.size, dtype=np.uint32)
    out = np.empty((seeds.size, WORDS), np.uint32)
    for w in range(WORDS):
        out[:, w] = _fmix(seeds * np.uint32(0x9E3779B9) ^ (lanes + np.uint32(1)) *
                          np.uint32(0x27D4EB2F) ^ np.uint32((core + 1) * 0x165667B1 & 0xFFFFFFFF)
                          ^ np.uint32(w * 0x61C88647 & 0xFFFFFFFF))
    dead = ~out[:, :5].any(axis=1)      # XORWOW needs a non-zero x
    out[dead, 0] = 1
    return out


def draw(state: np.ndarray, n: int) -> np.ndarray:
    """(lanes, n) uint32 draws; advances ``state`` (lanes, 6) in place."""
    x0, x1, x2, x3, x4, d = (state[:, k].copy() for k in range(WORDS))
    out = np.empty((state.shape[0], n), np.uint32)
    for j in range(n):
        t, s = x4, x0
        x4, x3, x2, x1 = x3, x2, x1, s
        t = t ^ (t >> np.uint32(2))
        t = t ^ (t << np.uint32(1))
        t = t ^ s ^ (s << np.uint32(4))
        x0 = t
        d = d + np.uint32(362437)
        out[:, j] = t + d
    for k, v in enumerate((x0, x1, x2, x3, x4, d)):
        state[:, k] = v
    return out


def uniform(bits: np.ndarray) -> np.ndarray:
    """uint32 draws → fp32 uniforms in [0, 1) (24 random bits)."""
    return (bits >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def _engine_state(call: HostCall, slot: int) -> np.ndarray:
    """The (128, 6) uint32 state of one engine (seeded with 0 on first use in a run)."""
    start = call.PS.size - REGS_BYTES - RNG_BYTES
    words = call.PS[start:start + RNG_BYTES].view(np.uint32)[:2 * LANES * WORDS]
    st = words.reshape(2, LANES, WORDS)[slot]
    if not st.any():
        st[:] = seed_state(np.zeros(LANES, np.uint32), call.ctx.core)
    return st


@host_op(Opcode.RNG)
def _rng(call: HostCall) -> None:
    """ints: kind, engine slot, P; floats: min, max. operands: dst / src, min, max."""
    kind, slot, P = (int(v) for v in call.irow[2:5])
    if kind in (RNG, RAND2):
        n = call.shape(0)[1]
        st = _engine_state(call, slot)
        bits = draw(st[:P], n)
        if kind == RNG:
            call.put_bits(0, bits.astype(np.int64))
            return
        lo = call.f32(1) if call.present(1) else np.float32(call.frow[0])
        hi = call.f32(2) if call.present(2) else np.float32(call.frow[1])
        call.put_f32(0, lo + uniform(bits) * (np.float32(hi) - np.float32(lo)))
    elif kind == DROPOUT:
        _dropout(call, slot, P)
    elif kind == SET_SEED:
        seeds = call.bits(0)[:, 0].astype(np.uint32)
        seeds = np.resize(seeds, LANES) if seeds.size == 1 else seeds
        for s in (0, 1):
            _engine_state(call, s)[:seeds.size] = seed_state(seeds, call.ctx.core)
    elif kind == SET_STATE:
        words = call.bits(0).astype(np.uint32).reshape(P, WORDS)
        _engine_state(call, slot)[:P] = words
    else:
        call.put_bits(0, _engine_state(call, slot)[:P].astype(np.int64))


def _dropout(call: HostCall, slot: int, P: int) -> None:
    """operands: dst, data (dst's element count), prob ([P, 1] tile; else frow[0])."""
    n = call.shape(0)[1]
    bits = draw(_engine_state(call, slot)[:P], n)
    prob = call.f32(2) if call.present(2) else np.float32(call.frow[0])
    data = call.bits(1).reshape(P, n)
    call.put_bits(0, np.where(uniform(bits) < prob, 0, data))


def reference_dropout(data: np.ndarray, bits: np.ndarray, prob) -> np.ndarray:
    """Oracle: ``data`` zeroed where the draws' uniforms ``(bits >> 8) / 2**24`` are below
    ``prob`` (a number or a [P, 1] array); ``bits`` are the lanes' raw draws."""
    u = (np.asarray(bits, np.uint64) >> 8).astype(np.float64) / 2.0**24
    return np.where(u < np.asarray(prob, np.float64), np.zeros_like(data), data)


def reference_xorwow(seed: int, lanes: int, n: int, core: int = 0) -> np.ndarray:
    """Oracle: ``n`` raw draws per lane after seeding every lane with ``seed``."""
    state = seed_state(np.full(lanes, seed, np.uint32), core)
    out = np.empty((lanes, n), np.uint32)
    for j in range(n):   # scalar XORWOW, written independently of ``draw``
        for p in range(lanes):
            x = [int(v) for v in state[p]]
            t, s = x[4], x[0]
            t ^= t >> 2
            t = (t ^ (t << 1)) & 0xFFFFFFFF
            t ^= s ^ ((s << 4) & 0xFFFFFFFF)
            x = [t, s, x[1], x[2], x[3], (x[5] + 362437) & 0xFFFFFFFF]
            state[p] = x
            out[p, j] = (t + x[5]) & 0xFFFFFFFF
    return out


@emitter(Opcode.RNG, host_call, reference_xorwow)
def encode_rng(ins, w, ops):
    w.ints(ins.attr("kind"), ENGINE_SLOT.get(int(ins.attr("engine")), 0), ins.attr("lanes"))
    w.floats(imm(ins.attr("min")), imm(ins.attr("max")))
    roles = ("dst", "data", "prob") if ins.attr("kind") == DROPOUT else ("dst", "min", "max")
    for role in roles:
        if role == "dst" and "dst" not in ops:
            w.operand(ops.get("src"))
        else:
            w.operand(ops.get(role))
