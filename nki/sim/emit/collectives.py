"""Host calls and cross-core work: ``core_barrier``, ``sendrecv``, ``nki.collectives``
(including the variable-size and ring-permute forms) and ``device_print``.

Some instructions must leave compiled code: a barrier waits for the other cores of an LNC
launch, ``device_print`` writes to Python's ``sys.stdout``, and a few rare GpSimd/Vector
instructions are simplest in numpy. They all run through one *host call* helper:

* ``host_call`` is a registered helper like any other, so codegen, tables and caches treat it
  as usual. Its compiled body is a stub; the runtime points its entry in the address table
  at a ``ctypes`` callback instead (:func:`patch_addresses`), which re-acquires the GIL and
  runs the Python function registered for the instruction's opcode with :func:`host_op`.
  The python backend calls the same Python function directly, so both backends run the very
  same code and agree bit for bit, and no host op costs an LLVM compile.
* Cores are threads. A :class:`Launch` (one per kernel call) holds what the cores exchange
  (collective rounds and point-to-point mailboxes) under one ``threading.Condition``. A core
  that must wait records what it waits for; when every core of the launch is finished or
  waiting on something that cannot complete, the launch is deadlocked and every waiting core
  raises ``nki_collective_deadlock`` naming each core's call and ``file:line``.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import threading
import time
from collections.abc import Callable

import numpy as np
from numba import njit
from numba.extending import overload

from nki.errors import NkiError, NkiRuntimeError, fail
from nki.ir.ops import Alu, Opcode
from nki.sim.emit import emitter
from nki.sim.helpers.memory import load_bits, load_f32, shape_of, store_bits, store_f32
from nki.sim.helpers.registry import NLOOPVARS, helper, helper_id
from nki.sim.layout import O_SPACE, ROW, operand_base

# a wait longer than this is reported even if the deadlock check saw progress was possible
WAIT_TIMEOUT_S = 120.0
FAULT_HOST = 7   # L[-1] code of a failed host call (the runtime raises the recorded error)

# ----- the host-call helper ----------------------------------------------------------------
_HOST_OPS: dict[int, Callable] = {}


def host_op(opcode: Opcode):
    """Register ``fn(call: HostCall) -> None`` as the host implementation of ``opcode``."""

    def deco(fn: Callable) -> Callable:
        _HOST_OPS[int(opcode)] = fn
        return fn

    return deco


def _host(H, S, PS, irow, frow, L) -> int:
    """Run the host op of this row; a failure is recorded for the runtime to raise."""
    ctx = _context()
    try:
        _HOST_OPS[int(irow[1])](HostCall(H, S, PS, irow, frow, L, ctx))
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the runtime on the caller
        ctx.pending = e if isinstance(e, NkiError) else _wrap(ctx, irow, e)
        L[NLOOPVARS - 1] = FAULT_HOST
        return 1


@overload(_host, jit_options={"nogil": True})
def _host_compiled(H, S, PS, irow, frow, L):
    # never runs: the runtime replaces host_call's address with the ctypes callback
    return lambda H, S, PS, irow, frow, L: 1


@helper
@njit(cache=True, nogil=True)
def host_call(H, S, PS, irow, frow, L):
    """Leave compiled code: run the Python host op registered for this row's opcode."""
    return _host(H, S, PS, irow, frow, L)


def _as_array(addr: int, n: int, ctype, dtype) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(addr, ctypes.POINTER(ctype)), shape=(n,)).view(
        dtype)


_CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p)


def _callback(h, hn, s, sn, p, pn, ir, fr, lv):
    u8 = ctypes.c_uint8
    return _host(_as_array(h, hn, u8, np.uint8), _as_array(s, sn, u8, np.uint8),
                 _as_array(p, pn, u8, np.uint8), _as_array(ir, ROW, ctypes.c_int64, np.int64),
                 _as_array(fr, 16, ctypes.c_double, np.float64),
                 _as_array(lv, NLOOPVARS, ctypes.c_int64, np.int64))


_CALLBACK = _CALLBACK_TYPE(_callback)   # kept alive for the life of the process


def patch_addresses(addr: np.ndarray) -> None:
    """Point ``host_call``'s slot of a program's address table at the ctypes callback."""
    addr[helper_id(host_call)] = ctypes.cast(_CALLBACK, ctypes.c_void_p).value


def host_helper_ids() -> set[int]:
    """Helpers whose compiled entry is never used (the runtime patches their addresses)."""
    return {helper_id(host_call)}


# ----- per-thread context and the launch ---------------------------------------------------
_TLS = threading.local()


class _Context:
    __slots__ = ("launch", "core", "generated", "pending", "table")

    def __init__(self, launch, core, generated, table=None):
        self.launch, self.core, self.generated, self.pending = launch, core, generated, None
        # the instruction table the core runs (a per-call copy when HBM offsets moved)
        self.table = generated.int_table if table is None and generated is not None else table


def _context() -> _Context:
    ctx = getattr(_TLS, "ctx", None)
    if ctx is None:   # a helper run outside run_cores (tests of single rows)
        ctx = _TLS.ctx = _Context(Launch(1), 0, None)
    return ctx


@contextlib.contextmanager
def running(launch: Launch, core: int, generated, table=None):
    """Install the thread's context while core ``core`` runs (``table``: its instruction
    table, if not the program's own); marks it finished on exit."""
    _TLS.ctx = _Context(launch, core, generated, table)
    try:
        yield _TLS.ctx
    finally:
        _TLS.ctx = None
        launch.finish(core)


def where(ctx: _Context, irow) -> tuple[str, object]:
    """(``api at file:line``, SourceLoc) of the instruction whose row is ``irow``."""
    g = ctx.generated
    if g is None:
        return "a host call", None
    k = (irow.ctypes.data - ctx.table.ctypes.data) // (ROW * 8)
    loc = g.locs[k] if 0 <= k < len(g.locs) else None
    api = _API.get(int(irow[1]), Opcode(int(irow[1])).name.lower())
    if int(irow[1]) == Opcode.COLLECTIVE:
        api = f"nki.collectives.{_KINDS[int(irow[2])]}"
    elif int(irow[1]) == Opcode.COLLECTIVE_V:
        api = f"nki.collectives.{_V_KINDS[int(irow[2])]}"
    elif int(irow[1]) == Opcode.PERMUTE_IMPLICIT:
        api = "nki.collectives.collective_permute_implicit" + ("_reduce" if irow[5] >= 0
                                                               else "")
    return (f"{api} at {loc.short}" if loc else api), loc


def _wrap(ctx: _Context, irow, e: BaseException) -> NkiError:
    text, loc = where(ctx, irow)
    err = fail("nki_runtime_out_of_bounds" if isinstance(e, IndexError) else
               "nki_invalid_argument", f"core {ctx.core}: {text}: {type(e).__name__}: {e}",
               loc, NkiRuntimeError)
    err.__cause__ = e
    return err


class Launch:
    """What the cores of one kernel launch share: collective rounds, mailboxes, who waits.

    Every method runs under ``cond``; a waiting core sleeps on it and is woken by any change.
    """

    def __init__(self, num_cores: int, cores_per_rank: int | None = None):
        self.num_cores = num_cores
        # None: one LNC launch, whose cores are the collectives' ranks; else a multi-rank
        # run of ``num_cores // cores_per_rank`` ranks, rank r's LNC core c at r * k + c
        self.cores_per_rank = cores_per_rank
        self.cond = threading.Condition()
        self.finished = [False] * num_cores
        self.waits: list = [None] * num_cores          # (text, ready predicate) per core
        self.rounds: dict = {}                         # (group, ordinal) -> {core: payload}
        self.taken: dict = collections.Counter()
        self.ordinals: dict = collections.Counter()    # (core, group) -> calls so far
        self.mail: dict = collections.defaultdict(collections.deque)
        self.broken: str | None = None

    def finish(self, core: int) -> None:
        with self.cond:
            self.finished[core] = True
            self.cond.notify_all()

    def abort(self, reason: str) -> None:
        """End every wait of this launch (Ctrl-C): waiting cores return with ``reason``."""
        with self.cond:
            self.broken = self.broken or reason
            self.cond.notify_all()

    def rank_cores(self, me: int, ranks) -> tuple[int, ...]:
        """The launch cores of collective ``ranks`` as seen from core ``me``: LNC core c of
        a rank meets LNC core c of the other ranks (each LNC core issues its own call)."""
        k = self.cores_per_rank
        return tuple(ranks) if k is None else tuple(r * k + me % k for r in ranks)

    def lnc_cores(self, me: int, cores) -> tuple[int, ...]:
        """The launch cores of LNC cores ``cores`` (``nki.lnc`` calls) of ``me``'s rank."""
        k = self.cores_per_rank or self.num_cores
        return tuple(me // k * k + c for c in cores)

    # ----- waiting with deadlock detection -------------------------------------------------
    def wait(self, core: int, text: str, ready: Callable, loc):
        """Block until ``ready()`` returns non-None; raise if that can never happen.

        ``ready`` must not change anything: other cores call it to check for a deadlock."""
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        with self.cond:
            self.waits[core] = (text, ready)
            self.cond.notify_all()
            try:
                while True:
                    value = ready()
                    if value is not None:
                        return value
                    if self.broken is None and self._stuck():
                        self.broken = self._describe()
                        self.cond.notify_all()
                    if self.broken is not None:
                        raise fail("nki_collective_deadlock", f"core {core} waits in {text}, "
                                   f"which can never complete: {self.broken}", loc,
                                   NkiRuntimeError)
                    if time.monotonic() > deadline:
                        raise fail("nki_collective_deadlock", f"core {core} waited "
                                   f"{WAIT_TIMEOUT_S:.0f} s in {text}: {self._describe()}",
                                   loc, NkiRuntimeError)
                    self.cond.wait(0.2)
            finally:
                self.waits[core] = None

    def _stuck(self) -> bool:
        for c in range(self.num_cores):
            if self.finished[c]:
                continue
            w = self.waits[c]
            if w is None or w[1]() is not None:
                return False    # a core still runs, or can proceed
        return True

    def _describe(self) -> str:
        parts = []
        for c in range(self.num_cores):
            w = self.waits[c]
            parts.append(f"core {c} " + ("finished the kernel" if w is None
                                         else f"waits in {w[0]}"))
        return "; ".join(parts)

    # ----- collective rounds ---------------------------------------------------------------
    def collective(self, core: int, group: tuple[int, ...], payload: dict, text: str, loc):
        """Post ``payload`` to this core's next round on ``group``; wait for every member's.

        Returns ``{core: payload}`` of the round. Members whose posts disagree in ``kind`` or
        ``sig`` (the call and its operand sizes) raise ``nki_collective_mismatch``."""
        with self.cond:
            key = (group, self.ordinals[(core, group)])
            self.ordinals[(core, group)] += 1
            posts = self.rounds.setdefault(key, {})
            posts[core] = dict(payload, text=text)
            self.cond.notify_all()

        def ready():
            return posts if len(posts) == len(group) else None

        posts = self.wait(core, text, ready, loc)
        with self.cond:
            first = posts[group[0]]
            for c in group:
                if (posts[c]["kind"], posts[c]["sig"]) != (first["kind"], first["sig"]):
                    raise fail("nki_collective_mismatch", "cores met in different cross-core "
                               "calls: " + "; ".join(f"core {m} in {posts[m]['text']}"
                                                     f"{_sig_text(posts[m])}" for m in group),
                               loc, NkiRuntimeError)
            self.taken[key] += 1
            if self.taken[key] == len(group):
                del self.rounds[key], self.taken[key]
            return posts

    def send(self, src: int, dst: int, channel, data) -> None:
        with self.cond:
            self.mail[(src, dst, channel)].append(data)
            self.cond.notify_all()

    def receive(self, src: int, dst: int, channel, text: str, loc):
        with self.cond:
            box = self.mail[(src, dst, channel)]
        if not 0 <= src < self.num_cores:
            raise fail("nki_collective_deadlock", f"core {dst} waits in {text} for core {src}, "
                       f"which is not part of this launch of {self.num_cores} core(s)", loc,
                       NkiRuntimeError)
        # the predicate only peeks: other cores evaluate it when checking for a deadlock
        self.wait(dst, text, lambda: True if box else None, loc)
        with self.cond:
            return box.popleft()


def _sig_text(post: dict) -> str:
    return f" ({post['sig']})" if post.get("sig") else ""


# ----- operand access for host ops ---------------------------------------------------------
class HostCall:
    """One host-op invocation: the arenas, its rows, and the core's context."""

    __slots__ = ("H", "S", "PS", "irow", "frow", "L", "ctx")

    def __init__(self, H, S, PS, irow, frow, L, ctx):
        self.H, self.S, self.PS, self.irow, self.frow, self.L, self.ctx = (H, S, PS, irow,
                                                                          frow, L, ctx)

    @staticmethod
    def base(k: int) -> int:
        return operand_base(k)

    def present(self, k: int) -> bool:
        return self.irow[operand_base(k) + O_SPACE] >= 0

    def shape(self, k: int) -> tuple[int, int]:
        p, n = shape_of(self.irow, operand_base(k))
        return int(p), int(n)

    def f32(self, k: int) -> np.ndarray:
        """Operand ``k`` decoded to a (P, N) float32 array."""
        return load_f32(self.H, self.S, self.PS, self.irow, operand_base(k), self.L)

    def bits(self, k: int) -> np.ndarray:
        """Operand ``k``'s raw element bits as a (P, N) int64 array."""
        p, n = self.shape(k)
        return load_bits(self.H, self.S, self.PS, self.irow, operand_base(k), self.L, p, n)

    def put_f32(self, k: int, values: np.ndarray) -> None:
        store_f32(self.H, self.S, self.PS, self.irow, operand_base(k), self.L,
                  np.ascontiguousarray(values, np.float32))

    def put_bits(self, k: int, values: np.ndarray) -> None:
        store_bits(self.H, self.S, self.PS, self.irow, operand_base(k), self.L,
                   np.ascontiguousarray(values, np.int64))

    def where(self) -> tuple[str, object]:
        return where(self.ctx, self.irow)


# ----- core_barrier / sendrecv / collectives -----------------------------------------------
_KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"]
_API = {int(Opcode.CORE_BARRIER): "nisa.core_barrier", int(Opcode.SENDRECV): "nisa.sendrecv",
        int(Opcode.DEVICE_PRINT): "nl.device_print", int(Opcode.LOCAL_GATHER): "nisa.local_gather",
        int(Opcode.TENSOR_GATHER): "tensor indirection (.indirect)"}
_V_KINDS = ["all_gather_v", "all_to_all_v"]
_REDUCE = {int(Alu.add): np.add, int(Alu.maximum): np.maximum, int(Alu.minimum): np.minimum}


def _group(irow, at: int) -> tuple[int, ...]:
    """The rank-list ``group_ints`` wrote at column ``at``."""
    n = int(irow[at])
    if n < 0:
        start, step = int(irow[at + 1]), int(irow[at + 2])
        return tuple(start + i * step for i in range(-n))
    return tuple(int(c) for c in irow[at + 1:at + 1 + n])


def group_ints(group) -> tuple[int, ...]:
    """A rank-list as row ints: ``-n, start, step`` for an arithmetic progression (rank-lists
    of 16-64 ranks must fit the instruction row's 16 ints), else ``n, members...``."""
    group = tuple(int(c) for c in group)
    if len(group) > 2:
        step = group[1] - group[0]
        if all(b - a == step for a, b in zip(group, group[1:])):
            return (-len(group), group[0], step)
    return (len(group), *group)


@host_op(Opcode.CORE_BARRIER)
def _core_barrier(call: HostCall) -> None:
    """ints: group size, members."""
    text, loc = call.where()
    launch, me = call.ctx.launch, call.ctx.core
    launch.collective(me, launch.lnc_cores(me, _group(call.irow, 2)),
                      {"kind": "barrier", "sig": ""}, text, loc)


@host_op(Opcode.SENDRECV)
def _sendrecv(call: HostCall) -> None:
    """ints: send_to, recv_from, pipe_id, reduce op (-1: a plain sendrecv). operands: dst,
    src (equal dtypes; raw bits, or fp32 values reduced with the peer's for
    sendrecv_compute)."""
    send_to, recv_from, pipe, op = (int(v) for v in call.irow[2:6])
    text, loc = call.where()
    launch, me = call.ctx.launch, call.ctx.core
    send_to, recv_from = launch.lnc_cores(me, (send_to, recv_from))
    mine = call.bits(1) if op < 0 else call.f32(1)
    # the reduce flag is part of the channel: a sendrecv never pairs with a sendrecv_compute
    box = ("sendrecv", pipe, op >= 0)
    launch.send(me, send_to, box, mine)
    got = launch.receive(recv_from, me, box,
                         f"{text} (receiving from core {recv_from}, pipe {pipe})", loc)
    if got.size != call.shape(0)[0] * call.shape(0)[1]:
        raise fail("nki_collective_mismatch", f"{text}: core {me} receives {got.size} elements "
                   f"from core {recv_from} into a dst of {call.shape(0)}", loc, NkiRuntimeError)
    if op < 0:
        call.put_bits(0, got)
    else:
        call.put_f32(0, _REDUCE[op](mine, got.reshape(mine.shape)).astype(np.float32))


def _split(a: np.ndarray, parts: int, dim: int) -> list[np.ndarray]:
    """Split a (P, N) operand into ``parts`` along dim 0 (row-major flat) or dim 1 (free)."""
    if dim == 0:
        return np.split(a.reshape(-1), parts)
    return np.split(a, parts, axis=1)


def _join(chunks: list[np.ndarray], dim: int) -> np.ndarray:
    if dim == 0:
        return np.concatenate([c.reshape(-1) for c in chunks])
    return np.concatenate(chunks, axis=1)


@host_op(Opcode.COLLECTIVE)
def _collective(call: HostCall) -> None:
    """ints: kind, pairs, alu op, dim, group size, members...; operands dst_i then src_i."""
    kind, pairs, op, dim = (int(v) for v in call.irow[2:6])
    text, loc = call.where()
    me, launch = call.ctx.core, call.ctx.launch
    group = launch.rank_cores(me, _group(call.irow, 6))
    if kind == 4:
        return _permute(call, text, loc)
    reduce = kind in (0, 2)
    srcs = [call.f32(pairs + i) if reduce else call.bits(pairs + i) for i in range(pairs)]
    sig = ", ".join("x".join(map(str, s.shape)) for s in srcs)
    posts = launch.collective(me, group, {"kind": _KINDS[kind], "sig": sig, "data": srcs},
                              text, loc)
    rank = group.index(me)
    for i in range(pairs):
        contrib = [posts[c]["data"][i] for c in group]   # in rank order: deterministic
        if kind == 0:
            out = _fold(op, contrib)
        elif kind == 1:
            out = _join(contrib, dim)
        elif kind == 2:
            out = _fold(op, [_split(c, len(group), dim)[rank] for c in contrib])
        else:
            out = _join([_split(c, len(group), dim)[rank] for c in contrib], dim)
        (call.put_f32 if reduce else call.put_bits)(i, out)


def _fold(op: int, arrays: list[np.ndarray]) -> np.ndarray:
    out = np.array(arrays[0], np.float32)
    for a in arrays[1:]:
        out = _REDUCE[op](out, a).astype(np.float32)
    return out


def _permute(call: HostCall, text: str, loc) -> None:
    """collective_permute: ints[6:8] = send_to, recv_from (-1: none)."""
    launch, me = call.ctx.launch, call.ctx.core
    send_to, recv_from = (launch.rank_cores(me, (r,))[0] if r >= 0 else r
                          for r in (int(call.irow[7]), int(call.irow[8])))
    if send_to >= 0:
        launch.send(me, send_to, "permute", call.bits(1))
    if recv_from >= 0:
        call.put_bits(0, launch.receive(recv_from, me, "permute",
                                        f"{text} (receiving from core {recv_from})", loc))


# ----- variable-size collectives and ring permutes -----------------------------------------
def _oob(call: HostCall, what: str) -> NkiError:
    text, loc = call.where()
    return fail("nki_runtime_out_of_bounds", f"core {call.ctx.core}: {text}: {what}", loc,
                NkiRuntimeError)


def _send_chunks(call: HostCall, meta: np.ndarray, src: np.ndarray) -> dict:
    """The chunk of ``src`` for each rank-list position: rows 0/1 = counts/displacements."""
    chunks = {}
    for r in range(meta.shape[1]):
        count, displ = int(meta[0, r]), int(meta[1, r])
        if displ + count > src.size:
            raise _oob(call, f"send_counts[{r}]={count} at send_displs[{r}]={displ} leaves "
                       f"the {src.size}-element src")
        chunks[r] = src[displ:displ + count]
    return chunks


@host_op(Opcode.COLLECTIVE_V)
def _collective_v(call: HostCall) -> None:
    """ints: kind, recv_counts_known, has_rdispls, group size, members. operands: dst, src,
    metadata read (rows x n uint32), metadata written (row 2, unless recv_counts_known; the
    same tensor except after a prepare, whose snapshot is read)."""
    kind, known, rdispls = (int(v) for v in call.irow[2:5])
    text, loc = call.where()
    me = call.ctx.core
    group = call.ctx.launch.rank_cores(me, _group(call.irow, 5))
    n = len(group)
    meta = call.bits(2).reshape(-1, n)
    chunks = _send_chunks(call, meta, call.bits(1).reshape(-1))
    posts = call.ctx.launch.collective(me, group, {"kind": _V_KINDS[kind], "sig": "",
                                                   "chunks": chunks}, text, loc)
    dst, pos = call.bits(0).reshape(-1), group.index(me)
    slot = dst.size // n
    for s, sender in enumerate(group):
        data = posts[sender]["chunks"][pos]
        start = int(meta[3, s]) if rdispls else s * slot
        end = dst.size if rdispls else (s + 1) * slot
        if start + data.size > end:
            raise _oob(call, f"{data.size} elements from rank {sender} at dst offset {start} "
                       f"overflow " + ("the dst" if rdispls else f"its {slot}-element slot"))
        dst[start:start + data.size] = data
        meta[2, s] = data.size
    call.put_bits(0, dst.reshape(call.shape(0)))
    if not known:   # only row 2 is written (the rest may have changed since a prepare)
        written = call.bits(3).reshape(-1, n)
        written[2] = meta[2]
        call.put_bits(3, written.reshape(call.shape(3)))


@host_op(Opcode.PERMUTE_IMPLICIT)
def _permute_implicit(call: HostCall) -> None:
    """ints: channel, successor, predecessor, alu op (-1: plain permute). operands: dst,
    src0, src1 (reduce only)."""
    ch, to, frm, op = (int(v) for v in call.irow[2:6])
    text, loc = call.where()
    launch, me = call.ctx.launch, call.ctx.core
    to, frm = launch.rank_cores(me, (to, frm))
    if op < 0:
        payload = call.bits(1)
    else:
        payload = _REDUCE[op](call.f32(1), call.f32(2)).astype(np.float32)
    # the reduce flag is part of the channel: mismatched calls never meet (deadlock report)
    box = ("implicit", op >= 0, ch)
    launch.send(me, to, box, payload)
    got = launch.receive(frm, me, box, f"{text} (channel {ch}, receiving from core {frm})",
                         loc)
    if got.size != call.shape(0)[0] * call.shape(0)[1]:
        raise fail("nki_collective_mismatch", f"{text}: core {me} receives {got.size} elements "
                   f"from core {frm} into a dst of {call.shape(0)}", loc, NkiRuntimeError)
    (call.put_bits if op < 0 else call.put_f32)(0, got.reshape(call.shape(0)))


# ----- device_print ------------------------------------------------------------------------
def pack_text(text: str) -> list[float]:
    """Up to 90 UTF-8 bytes as 15 floats of 6 bytes each (exact in float64); float 0 is the
    byte count."""
    raw = text.encode()[:90]
    words = [float(len(raw))]
    for i in range(0, len(raw), 6):
        words.append(float(int.from_bytes(raw[i:i + 6], "little")))
    return words


def unpack_text(frow) -> str:
    n = int(frow[0])
    raw = b"".join(int(frow[1 + i]).to_bytes(6, "little") for i in range((n + 5) // 6))
    return raw[:n].decode(errors="replace")


@host_op(Opcode.DEVICE_PRINT)
def _device_print(call: HostCall) -> None:
    """ints: is_int, num_cores, ndim, shape[5]. floats: the prefix. operand: the tensor."""
    is_int, ncores, ndim = (int(v) for v in call.irow[2:5])
    shape = tuple(int(v) for v in call.irow[5:5 + ndim])
    values = call.bits(0) if is_int else call.f32(0)
    if is_int:
        values = _signed_ints(values, int(call.irow[operand_base(0) + 1]))
    head = f"[core {call.ctx.core}] " if ncores > 1 else ""
    print(f"{head}{unpack_text(call.frow)}", values.reshape(shape), flush=True)


def _signed_ints(bits: np.ndarray, code: int) -> np.ndarray:
    """Raw bits of an integer dtype (nki.ir.types code) as its values."""
    width = {7: 8, 8: 16, 9: 32}.get(code)
    if width is None:
        return bits
    return np.where(bits >= 1 << (width - 1), bits - (1 << width), bits)


# ----- references and encoders -------------------------------------------------------------
def reference_all_reduce(op, arrays) -> np.ndarray:
    """Oracle: fold the cores' fp32 contributions in rank order."""
    out = np.asarray(arrays[0], np.float32)
    for a in arrays[1:]:
        out = op(out, np.asarray(a, np.float32)).astype(np.float32)
    return out


def _roles(ops: dict, prefix: str) -> list:
    return [ops[f"{prefix}{i}"] for i in range(3) if f"{prefix}{i}" in ops]


@emitter(Opcode.CORE_BARRIER, host_call)
def encode_core_barrier(ins, w, ops):
    w.ints(*group_ints(ins.attr("cores"))).operand(ops.get("data"))


@emitter(Opcode.SENDRECV, host_call)
def encode_sendrecv(ins, w, ops):
    reduce = ins.attr("reduce")
    w.ints(ins.attr("send_to"), ins.attr("recv_from"), ins.attr("pipe_id"),
           -1 if reduce is None else int(reduce))
    w.operand(ops["dst"]).operand(ops["src"])


@emitter(Opcode.COLLECTIVE, host_call, reference_all_reduce)
def encode_collective(ins, w, ops):
    dsts, srcs = _roles(ops, "dst"), _roles(ops, "src")
    group = ins.attr("group")
    w.ints(_KINDS.index(ins.attr("kind")), len(srcs), int(ins.attr("op") or 0),
           ins.attr("dim"), *group_ints(group))
    for op in dsts + srcs:
        w.operand(op)


@emitter(Opcode.DEVICE_PRINT, host_call)
def encode_device_print(ins, w, ops):
    shape = ins.attr("shape")
    w.ints(int(ins.attr("is_int")), ins.attr("num_cores"), len(shape), *shape)
    w.floats(*pack_text(ins.attr("prefix")))
    w.operand(ops["tensor"])


@emitter(Opcode.COLLECTIVE_V, host_call)
def encode_collective_v(ins, w, ops):
    group = ins.attr("group")
    w.ints(_V_KINDS.index(ins.attr("kind")), int(ins.attr("recv_known")),
           int(ins.attr("rdispls")), *group_ints(group))
    w.operand(ops["dst0"]).operand(ops["src0"]).operand(ops["meta"]).operand(
        ops.get("meta_out"))


@emitter(Opcode.PERMUTE_IMPLICIT, host_call)
def encode_permute_implicit(ins, w, ops):
    op = ins.attr("op")
    to, frm = ins.attr("ring")
    w.ints(ins.attr("channel"), to, frm, -1 if op is None else int(op))
    w.operand(ops["dst"]).operand(ops["src0"]).operand(ops.get("src1"))
