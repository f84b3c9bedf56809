"""``nki.collectives`` rules (spec §2, §4.1; NKI 0.7's prepare/trigger pairs). A rank is an
LNC core of one launch (``kernel[2](...)``), or one rank of ``nki.multi_rank_simulate``
(``Trace.rank`` / ``Trace.world_size``). The LNC point-to-point calls (``nki.lnc``) are in
``nki/lang/lnc.py``.

Every call becomes one instruction that the runtime runs as a host call: cores meet there
(see ``nki/sim/emit/collectives.py``), and cores that can never meet raise
``nki_collective_deadlock`` naming each core's call instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.hints import records
from nki.lang.operators import as_alu, op_name
from nki.lang.tensor import NkiTensor

_HBM = (Memory.SHARED_HBM, Memory.PRIVATE_HBM)
_DATA = (Memory.SBUF,) + _HBM
_REDUCE_OPS = (Alu.add, Alu.maximum, Alu.minimum)


def ranks_of(call: Call, values, role: str, lnc: bool = False) -> tuple[int, ...]:
    """Distinct ranks of this run: the world's ranks, or with ``lnc`` the LNC cores."""
    ranks = tuple(int(c) for c in values)
    n = call.trace.num_cores if lnc else call.trace.world_size
    bad = [c for c in ranks if not 0 <= c < n]
    if bad or len(set(ranks)) != len(ranks):
        what = ("cores of this launch" if lnc or n == call.trace.num_cores
                else "ranks of this multi-rank run")
        raise call.error("nki_invalid_argument", f"{role}={tuple(values)!r} must name distinct "
                         f"{what} (0..{n - 1}); launch with kernel[2](...) for two cores")
    return ranks


def check_priority(call: Call, priority) -> int | None:
    """``priority=``: a DMA quality-of-service class, 0 (highest) to 3 (lowest), or None.
    The simulator has no DMA timing, so a valid class changes nothing."""
    if priority is None:
        return None
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 3:
        raise call.error("nki_invalid_argument", f"priority={priority!r} must be None or an "
                         "int from 0 (highest) to 3 (lowest)")
    return priority


# ----- nki.collectives ---------------------------------------------------------------------
class rg_partition_op(Enum):  # noqa: N801 - NKI's spelling
    """How :meth:`ReplicaGroup.from_partition_op` maps a rank to its rank-list id."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


@dataclass
class ReplicaGroup:
    """The ranks a collective runs on, as disjoint rank-lists; the collective runs
    independently within each rank-list.

    Example:
        >>> ReplicaGroup([[0, 1]]).rank_lists
        [[0, 1]]
    """

    rank_lists: list = field(default_factory=list)

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> ReplicaGroup:
        """Ranks ``0..world_size-1`` sharing ``op(rank, operand)`` form one rank-list.

        Example:
            >>> ReplicaGroup.from_partition_op(4, rg_partition_op.mod, 2).rank_lists
            [[0, 2], [1, 3]]
        """
        key = {rg_partition_op.bitwise_and: lambda r: r & operand,
               rg_partition_op.div: lambda r: r // operand,
               rg_partition_op.mod: lambda r: r % operand}[rg_partition_op(op)]
        lists: dict[int, list[int]] = {}
        for r in range(world_size):
            lists.setdefault(key(r), []).append(r)
        return ReplicaGroup(list(lists.values()))


def rank_id(name: str = "") -> int:
    """This core's rank in the launch (a trace-time constant: each core is traced apart).

    Example:
        >>> me = ncc.rank_id()  # doctest: +SKIP
    """
    return Call("nki.collectives.rank_id").trace.rank


def _my_group(call: Call, replica_group) -> tuple[int, ...]:
    lists = getattr(replica_group, "rank_lists", replica_group)
    seen: set[int] = set()
    mine = None
    for rl in lists:
        ranks = ranks_of(call, rl, "replica_group")
        if seen & set(ranks):
            raise call.error("nki_invalid_argument", "replica_group rank-lists must not overlap")
        seen |= set(ranks)
        if call.trace.rank in ranks:
            mine = ranks
    if mine is None:
        raise call.error("nki_invalid_argument", f"rank {call.trace.rank} is in no rank-list "
                         f"of replica_group {lists!r}")
    return mine


def _tensors(call: Call, values, role: str) -> list[NkiTensor]:
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    if not 1 <= len(items) <= 3:
        raise call.error("nki_invalid_argument", f"{role} must list 1 to 3 tensors (the "
                         f"simulator's coalescing limit), got {len(items)}")
    return [call.tensor(t, f"{role}[{i}]", _DATA) for i, t in enumerate(items)]


def _collective(api: str, kind: str, srcs, dsts, replica_group, op=None, dim=0, name="",
                priority=None):
    call = Call(api)
    check_priority(call, priority)
    s, d = _tensors(call, srcs, "srcs"), _tensors(call, dsts, "dsts")
    if len(s) != len(d):
        raise call.error("nki_invalid_argument", f"{len(s)} srcs but {len(d)} dsts")
    places = {t.buffer is Memory.SBUF for t in s + d}
    if len(places) > 1 or (True in places and len(s) > 1):
        raise call.error("err_unsupported_memory", "tensors must be all in HBM or all in SBUF, "
                         "and coalescing several tensors needs HBM")
    group = _my_group(call, replica_group)
    alu = None
    if kind in ("all_reduce", "reduce_scatter"):
        alu = as_alu(op)
        if alu not in _REDUCE_OPS:
            raise call.error("nki_invalid_argument", f"op={op_name(op)} must be nl.add, "
                             "nl.maximum or nl.minimum")
    if int(dim) not in ((0, 1) if True in places else (0,)):
        raise call.error("nki_invalid_argument", f"collective_dim={dim} is not supported (0 for "
                         "HBM, 0 or 1 for 2-D SBUF tensors)")
    for i, (a, b) in enumerate(zip(s, d)):
        _sizes(call, kind, a, b, len(group), int(dim), i)
    ins = Instr(Opcode.COLLECTIVE, tuple((f"dst{i}", acc(t)) for i, t in enumerate(d)),
                tuple((f"src{i}", acc(t)) for i, t in enumerate(s)),
                (("kind", kind), ("op", alu), ("dim", int(dim)), ("group", group)),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _sizes(call: Call, kind: str, s: NkiTensor, d: NkiTensor, n: int, dim: int, i: int):
    """dst = src (all_reduce, all_to_all), n x src (all_gather), src / n (reduce_scatter)."""
    factor = {"all_gather": (n, 1), "reduce_scatter": (1, n)}.get(kind, (1, 1))
    if d.size * factor[1] != s.size * factor[0]:
        raise call.error("nki_shape_mismatch", f"dsts[{i}] has {d.size} elements; {kind} over "
                         f"{n} ranks needs {s.size * factor[0] // factor[1]}")
    if kind in ("reduce_scatter", "all_to_all") and (s.shape[dim] % n):
        raise call.error("nki_shape_mismatch", f"srcs[{i}] dim {dim} ({s.shape[dim]}) does not "
                         f"split into {n} ranks")
    if kind not in ("all_reduce", "reduce_scatter") and s.dtype != d.dtype:
        raise call.error("nki_dtype_mismatch", f"{kind} moves bits: srcs[{i}] is "
                         f"{s.dtype.name} but dsts[{i}] is {d.dtype.name}")


@records("priority")
def all_reduce(srcs, dsts, replica_group, op, priority=None, name=""):
    """Every rank of a rank-list gets the elementwise ``op`` of all ranks' ``srcs`` (fp32,
    folded in rank order).

    Example:
        >>> ncc.all_reduce(srcs=[part], dsts=[total], replica_group=ncc.ReplicaGroup([[0, 1]]),
        ...                op=nl.add)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_reduce", "all_reduce", srcs, dsts, replica_group,
                       op, 0, name, priority)


@records("priority")
def all_gather(srcs, dsts, replica_group, collective_dim=0, priority=None, name=""):
    """Every rank gets all ranks' ``srcs`` concatenated along ``collective_dim`` (bit-exact).

    Example:
        >>> ncc.all_gather(srcs=[mine], dsts=[both], replica_group=rg,
        ...                collective_dim=0)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_gather", "all_gather", srcs, dsts, replica_group,
                       None, collective_dim, name, priority)


@records("priority")
def reduce_scatter(srcs, dsts, replica_group, collective_dim=0, op=None, priority=None,
                   name=""):
    """Rank ``r`` gets chunk ``r`` (along ``collective_dim``) of the ``op``-reduction.

    Example:
        >>> ncc.reduce_scatter(srcs=[x], dsts=[half], replica_group=rg, collective_dim=0,
        ...                    op=nl.add)  # doctest: +SKIP
    """
    return _collective("nki.collectives.reduce_scatter", "reduce_scatter", srcs, dsts,
                       replica_group, op, collective_dim, name, priority)


@records("priority")
def all_to_all(srcs, dsts, replica_group, collective_dim=0, priority=None, name=""):
    """Chunk ``s`` of rank ``r``'s dst is chunk ``r`` of rank ``s``'s src (bit-exact).

    Example:
        >>> ncc.all_to_all(srcs=[x], dsts=[y], replica_group=rg, collective_dim=0)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_to_all", "all_to_all", srcs, dsts, replica_group,
                       None, collective_dim, name, priority)


@records("priority")
def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=""):
    """Send ``srcs`` along each ``(source, target)`` pair; a target receives into ``dsts``.

    Example:
        >>> ncc.collective_permute(srcs=[x], dsts=[y],
        ...                        source_target_pairs=[(0, 1), (1, 0)])  # doctest: +SKIP
    """
    call = Call("nki.collectives.collective_permute")
    s, d = _tensors(call, srcs, "srcs"), _tensors(call, dsts, "dsts")
    if len(s) != 1 or len(d) != 1:
        raise call.error("nki_invalid_argument", "collective_permute takes exactly one src "
                         "and one dst")
    check_priority(call, priority)
    me = call.trace.rank
    pairs = [tuple(ranks_of(call, p, "source_target_pairs")) for p in source_target_pairs]
    to = [t for a, t in pairs if a == me]
    frm = [a for a, t in pairs if t == me]
    if len(to) > 1 or len(frm) > 1:
        raise call.error("nki_invalid_argument", f"rank {me} may send and receive at most once "
                         f"in source_target_pairs {pairs!r}")
    if s[0].dtype != d[0].dtype or s[0].size != d[0].size:
        raise call.error("nki_shape_mismatch", "src and dst must have the same dtype and size")
    group = (to[0] if to else -1, frm[0] if frm else -1)
    ins = Instr(Opcode.COLLECTIVE, (("dst0", acc(d[0])),), (("src0", acc(s[0])),),
                (("kind", "collective_permute"), ("op", None), ("dim", 0), ("group", group)),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


# ----- variable-size collectives: all_gather_v / all_to_all_v ------------------------------
def _v_collective(api: str, kind: str, srcs, dsts, replica_group, metadata_tensor,
                  recv_counts_known: bool, has_rdispls: bool, name: str,
                  priority=None) -> Instr:
    call = Call(api)
    check_priority(call, priority)
    s, d, group, meta = _v_operands(call, kind, srcs, dsts, replica_group, metadata_tensor,
                                    has_rdispls)
    return _v_emit(call, kind, s, d, group, meta, meta, recv_counts_known, has_rdispls, name)


def _v_operands(call: Call, kind: str, srcs, dsts, replica_group, metadata_tensor,
                has_rdispls: bool):
    """The checked ``(src, dst, rank-list, metadata)`` of a variable-size collective."""
    s, d = _tensors(call, srcs, "srcs"), _tensors(call, dsts, "dsts")
    if len(s) != 1 or len(d) != 1:
        raise call.error("nki_invalid_argument", f"{kind} takes exactly one src and one dst")
    for role, t in (("srcs[0]", s[0]), ("dsts[0]", d[0])):
        if t.buffer not in _HBM:
            raise call.error("err_unsupported_memory", f"{role} must be in HBM, got "
                             f"{t.buffer.value}")
    if s[0].dtype != d[0].dtype:
        raise call.error("nki_dtype_mismatch", f"{kind} moves bits: srcs[0] is "
                         f"{s[0].dtype.name} but dsts[0] is {d[0].dtype.name}")
    group = _my_group(call, replica_group)
    return s[0], d[0], group, _metadata(call, metadata_tensor, len(group), bool(has_rdispls))


def _v_emit(call: Call, kind: str, s: NkiTensor, d: NkiTensor, group, meta_in: NkiTensor,
            meta_out: NkiTensor, recv_counts_known: bool, has_rdispls: bool,
            name: str) -> Instr:
    """The collective reads its counts from ``meta_in``; unless ``recv_counts_known``, row 2
    (recv_counts) of ``meta_out`` receives the counts."""
    writes = (("dst0", acc(d)),)
    if not recv_counts_known:
        writes += (("meta_out", acc(meta_out)),)
    attrs = (("kind", kind), ("group", group), ("recv_known", bool(recv_counts_known)),
             ("rdispls", bool(has_rdispls)))
    ins = Instr(Opcode.COLLECTIVE_V, writes, (("src0", acc(s)), ("meta", acc(meta_in))),
                attrs, call.loc, name or "")
    return call.trace.emit(ins, api=call.api)


def _intervening(call: Call):
    _, api, loc = call.trace.pending_prepare
    return call.error("nki_invalid_argument", f"{api} at {loc.short if loc else '?'} is not "
                      "triggered yet: prepares share one slot, so each prepare must be "
                      "followed by exactly one trigger with no other prepare between")


def _v_prepare(api: str, kind: str, srcs, dsts, replica_group, metadata_tensor,
               recv_counts_known: bool, has_rdispls: bool, priority, name) -> Instr:
    """The prepare half: checks everything and reads ``metadata_tensor`` now (into a
    snapshot the trigger uses); ``srcs``/``dsts`` are not read until the trigger."""
    from nki.lang.creation import ndarray
    from nki.lang.dma import dma_copy

    call = Call(api)
    check_priority(call, priority)
    if call.trace.pending_prepare is not None:
        raise _intervening(call)
    s, d, group, meta = _v_operands(call, kind, srcs, dsts, replica_group, metadata_tensor,
                                    has_rdispls)
    buffer = Memory.SBUF if meta.buffer is Memory.SBUF else Memory.PRIVATE_HBM
    snapshot = ndarray(meta.shape, meta.dtype, buffer=buffer, name=f"{kind}_prepared_meta")
    handle = dma_copy(dst=snapshot, src=meta, name=name or "")
    call.trace.pending_prepare = ((handle, kind, s, d, group, snapshot, meta,
                                   bool(recv_counts_known), bool(has_rdispls)), api, call.loc)
    return handle


def _v_trigger(api: str, kind: str, prepare_instr, name) -> Instr:
    """The trigger half: runs the collective its prepare set up."""
    call = Call(api)
    pending = call.trace.pending_prepare
    if pending is None:
        raise call.error("nki_invalid_argument", "no prepare is waiting for this trigger "
                         f"(call nki.collectives.{kind}_prepare first)")
    handle, pkind, s, d, group, snapshot, meta, known, rdispls = pending[0]
    if prepare_instr is not handle or pkind != kind:
        raise call.error("nki_invalid_argument", f"prepare_instr must be the instruction the "
                         f"pending {pending[1]} at {pending[2].short if pending[2] else '?'} "
                         "returned")
    call.trace.pending_prepare = None
    return _v_emit(call, kind, s, d, group, snapshot, meta, known, rdispls, name)


def _metadata(call: Call, value, n: int, rdispls: bool) -> NkiTensor:
    m = call.tensor(value, "metadata_tensor", _DATA)
    rows = 4 if rdispls else 3
    want = (rows, n) if m.buffer in _HBM else (1, rows, n)
    if m.dtype.name != "uint32":
        raise call.error("nki_dtype_mismatch", f"metadata_tensor must be uint32, got "
                         f"{m.dtype.name}")
    if tuple(m.shape) != want or not m.is_contiguous():
        raise call.error("nki_shape_mismatch", f"metadata_tensor must be a contiguous {want} "
                         f"tensor in {m.buffer.value} (rows: send_counts, send_displs, "
                         f"recv_counts{', recv_displs' if rdispls else ''}; one column per "
                         f"rank of the rank-list), got {m.shape}")
    return m


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known: bool = False,
                 has_rdispls: bool = False, priority=None, name: str = "") -> Instr:
    """All-to-all with per-rank element counts read from ``metadata_tensor`` at run time.

    Tensors are flat element buffers. Rank ``r`` (column = position in its rank-list) gets
    ``src[send_displs[r] : send_displs[r] + send_counts[r]]`` from every sender ``s``, written
    at ``dst[recv_displs[s]:...]`` (``has_rdispls``) or at slot ``s`` of ``dst.size / n``
    elements. Unless ``recv_counts_known``, row 2 receives the counts. Counts that leave a
    buffer or overflow a slot raise ``nki_runtime_out_of_bounds``.

    Example:
        >>> ncc.all_to_all_v(srcs=[x], dsts=[y], replica_group=rg,
        ...                  metadata_tensor=meta)  # doctest: +SKIP
    """
    return _v_collective("nki.collectives.all_to_all_v", "all_to_all_v", srcs, dsts,
                         replica_group, metadata_tensor, recv_counts_known, has_rdispls, name,
                         priority)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known: bool = False,
                 has_rdispls: bool = False, priority=None, name: str = "") -> Instr:
    """Variable-size all-gather: the same metadata and data movement as
    :func:`all_to_all_v`; the broadcast form sends one chunk (equal counts and displacements
    in every column), so ``dst`` holds the senders' chunks in rank order.

    Example:
        >>> ncc.all_gather_v(srcs=[x], dsts=[y], replica_group=rg,
        ...                  metadata_tensor=meta)  # doctest: +SKIP
    """
    return _v_collective("nki.collectives.all_gather_v", "all_gather_v", srcs, dsts,
                         replica_group, metadata_tensor, recv_counts_known, has_rdispls, name,
                         priority)


@records("priority")
def all_to_all_v_prepare(srcs, dsts, replica_group, metadata_tensor,
                         recv_counts_known: bool = False, has_rdispls: bool = False,
                         priority=None, name=None) -> Instr:
    """Begin a split :func:`all_to_all_v`: reads ``metadata_tensor`` now (it must hold its
    counts already), not ``srcs``/``dsts``. Follow it with exactly one
    :func:`all_to_all_v_trigger` and no other prepare or v-collective in between.

    Example:
        >>> p = ncc.all_to_all_v_prepare(srcs=[x], dsts=[y], replica_group=rg,
        ...                              metadata_tensor=meta)        # doctest: +SKIP
        >>> ncc.all_to_all_v_trigger(p)                                 # doctest: +SKIP
    """
    return _v_prepare("nki.collectives.all_to_all_v_prepare", "all_to_all_v", srcs, dsts,
                      replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                      priority, name)


def all_to_all_v_trigger(prepare_instr, name=None) -> Instr:
    """Run the :func:`all_to_all_v` that ``prepare_instr`` (its prepare's result) set up.

    Example:
        >>> ncc.all_to_all_v_trigger(p)                                 # doctest: +SKIP
    """
    return _v_trigger("nki.collectives.all_to_all_v_trigger", "all_to_all_v", prepare_instr,
                      name)


@records("priority")
def all_gather_v_prepare(srcs, dsts, replica_group, metadata_tensor,
                         recv_counts_known: bool = False, has_rdispls: bool = False,
                         priority=None, name=None) -> Instr:
    """Begin a split :func:`all_gather_v` (the rules of :func:`all_to_all_v_prepare`).

    Example:
        >>> p = ncc.all_gather_v_prepare(srcs=[x], dsts=[y], replica_group=rg,
        ...                              metadata_tensor=meta)        # doctest: +SKIP
    """
    return _v_prepare("nki.collectives.all_gather_v_prepare", "all_gather_v", srcs, dsts,
                      replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                      priority, name)


def all_gather_v_trigger(prepare_instr, name=None) -> Instr:
    """Run the :func:`all_gather_v` that ``prepare_instr`` set up.

    Example:
        >>> ncc.all_gather_v_trigger(p)                                 # doctest: +SKIP
    """
    return _v_trigger("nki.collectives.all_gather_v_trigger", "all_gather_v", prepare_instr,
                      name)


# ----- ring permutes: collective_permute_implicit(_reduce) --------------------------------
_MAX_CHANNELS = 4


def _channels(call: Call, lists: list, channel_ids) -> list[int]:
    ids = [int(c) for c in channel_ids]
    if ids != list(range(len(ids))) or not 1 <= len(ids) <= _MAX_CHANNELS:
        raise call.error("nki_invalid_argument", f"channel_ids={list(channel_ids)!r} must be "
                         f"consecutive from 0, at most {_MAX_CHANNELS}")
    for role, per in lists:
        if len(per) != len(ids) or any(len(x) != 1 for x in per):
            raise call.error("nki_invalid_argument", f"{role} must hold one list of exactly "
                             f"one tensor per channel ({len(ids)} channels)")
    return ids


def _ring(api: str, srcs0, srcs1, dsts, replica_group, op, channel_ids, name: str,
          priority=None):
    call = Call(api)
    check_priority(call, priority)
    lists = [("srcs_by_channel" if srcs1 is None else "srcs0_by_channel", list(srcs0)),
             ("dsts_by_channel", list(dsts))] + \
        ([] if srcs1 is None else [("srcs1_by_channel", list(srcs1))])
    ids = _channels(call, lists, channel_ids)
    group = _my_group(call, replica_group)
    me = group.index(call.trace.rank)
    ring = (group[(me + 1) % len(group)], group[(me - 1) % len(group)])
    alu = None if srcs1 is None else _reduce_op(call, op)
    for ch in ids:
        d = call.tensor(dsts[ch][0], f"dsts_by_channel[{ch}][0]", _DATA)
        ss = [call.tensor(x[ch][0], f"srcs{k}[{ch}][0]", _DATA)
              for k, x in enumerate([srcs0] if srcs1 is None else [srcs0, srcs1])]
        if len({t.buffer is Memory.SBUF for t in ss + [d]}) > 1:
            raise call.error("err_unsupported_memory", "tensors must be all in HBM or all "
                             "in SBUF")
        for k, t in enumerate(ss):
            if t.size != d.size or (alu is None and t.dtype != d.dtype):
                raise call.error("nki_shape_mismatch", f"channel {ch}: src{k} ({t.dtype.name}, "
                                 f"{t.size} elements) and dst ({d.dtype.name}, {d.size}) must "
                                 "have the same " + ("size" if alu else "dtype and size"))
        ins = Instr(Opcode.PERMUTE_IMPLICIT, (("dst", acc(d)),),
                    tuple((f"src{k}", acc(t)) for k, t in enumerate(ss)),
                    (("channel", ch), ("ring", ring), ("op", alu)), call.loc, name)
        call.trace.emit(ins, api=call.api)


def _reduce_op(call: Call, op) -> Alu:
    alu = as_alu(op)
    if alu not in _REDUCE_OPS:
        raise call.error("nki_invalid_argument", f"op={op_name(op)} must be nl.add, "
                         "nl.maximum or nl.minimum")
    return alu


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group,
                                channel_ids=(0,), priority=None, name: str = "") -> None:
    """Ring permute: each rank sends channel ``c``'s src to its successor in its rank-list
    (``list[(i + 1) % n]``) and receives its predecessor's into channel ``c``'s dst (bits).

    Example:
        >>> ncc.collective_permute_implicit([[x]], [[y]], ncc.ReplicaGroup([[0, 1]]))
        ... # doctest: +SKIP
    """
    _ring("nki.collectives.collective_permute_implicit", srcs_by_channel, None,
          dsts_by_channel, replica_group, None, channel_ids, name, priority)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel,
                                       replica_group, op, channel_ids=(0,), priority=None,
                                       name: str = "") -> None:
    """Ring permute of ``op(srcs0[c], srcs1[c])`` (fp32, cast to dst's dtype): each rank
    reduces its two sources, sends the result to its successor and receives its
    predecessor's into ``dsts[c]``.

    Example:
        >>> ncc.collective_permute_implicit_reduce([[a]], [[b]], [[y]], rg,
        ...                                        op=nl.add)  # doctest: +SKIP
    """
    _ring("nki.collectives.collective_permute_implicit_reduce", srcs0_by_channel,
          srcs1_by_channel, dsts_by_channel, replica_group, op, channel_ids, name, priority)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group,
                                                           channel_id: int = 0,
                                                           num_channels: int = 1,
                                                           name: str = ""):
    """A register holding the rank whose data this rank holds after ``iteration_id`` ring
    steps: itself at 0, then its predecessors (``list[(i - k) % n]``). ``iteration_id`` is a
    Python int, or a register (a ``nl.fori_loop`` counter, ``nisa.register_alloc``) whose
    value is used at run time.

    Example:
        >>> r = ncc.collective_permute_implicit_current_processing_rank_id(k, rg)
        ... # doctest: +SKIP
    """
    from nki.lang.control import RegExpr, VirtualRegister, register_alloc

    api = "nki.collectives.collective_permute_implicit_current_processing_rank_id"
    call = Call(api)
    group = _my_group(call, replica_group)
    me = group.index(call.trace.rank)
    if isinstance(iteration_id, VirtualRegister):
        return _rank_at_run_time(iteration_id, group, me)
    if isinstance(iteration_id, RegExpr) or isinstance(iteration_id, bool) or \
            not isinstance(iteration_id, int):
        raise call.error("nki_invalid_argument", f"{api}: iteration_id={iteration_id!r} must "
                         "be a Python int or a VirtualRegister (compute an expression of a "
                         "register into a register first)")
    return register_alloc(group[(me - iteration_id) % len(group)])


def _rank_at_run_time(iteration, group: tuple[int, ...], me: int):
    """``group[(me - iteration) % n]`` for a register ``iteration``, on the machine: store
    the register, reduce it mod n on the Vector engine, and load the rank from a table
    ``table[k] = group[(me - k) % n]`` at that (register) offset. Plain instructions, so it
    runs inside runtime loops like any other."""
    from nki.ir.types import INT32
    from nki.lang.control import register_alloc, register_store
    from nki.lang.creation import ndarray
    from nki.lang.iterators import ds
    from nki.lang.vector import memset, tensor_scalar

    n = len(group)
    step = ndarray((1, 1), INT32, buffer=Memory.SBUF, name="ring_step")
    register_store(step, iteration)
    tensor_scalar(dst=step, data=step, op0=Alu.mod, operand0=n)   # floor mod: never negative
    table = ndarray((1, n), INT32, buffer=Memory.SBUF, name="ring_ranks")
    for k in range(n):
        memset(dst=table[0:1, k:k + 1], value=group[(me - k) % n])
    return register_alloc(table[0:1, ds(register_alloc(step), 1)])
