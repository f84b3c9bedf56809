"""Cross-core rules: ``nisa.core_barrier``, ``nisa.sendrecv`` and ``nki.collectives``
(spec §2, §4.1). Cores are the LNC cores of one launch (``kernel[2](...)``); a rank is a core.

Every call becomes one instruction that the runtime runs as a host call: cores meet there
(see ``nki/sim/emit/collectives.py``), and cores that can never meet raise
``nki_collective_deadlock`` naming each core's call instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from nki.errors import NkiUnsupportedError, fail
from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.operators import as_alu, op_name
from nki.lang.tensor import NkiTensor

_HBM = (Memory.SHARED_HBM, Memory.PRIVATE_HBM)
_DATA = (Memory.SBUF,) + _HBM
_REDUCE_OPS = (Alu.add, Alu.maximum, Alu.minimum)


def _ranks(call: Call, values, role: str) -> tuple[int, ...]:
    ranks = tuple(int(c) for c in values)
    n = call.trace.num_cores
    bad = [c for c in ranks if not 0 <= c < n]
    if bad or len(set(ranks)) != len(ranks):
        raise call.error("nki_invalid_argument", f"{role}={tuple(values)!r} must name distinct "
                         f"cores of this launch (0..{n - 1}); launch with kernel[2](...) for "
                         "two cores")
    return ranks


def core_barrier(data, cores, engine=None, name=""):
    """Wait until every core in ``cores`` reached this barrier (LNC launches).

    ``data`` is the shared HBM tensor the cores synchronise on (it is not accessed).

    Example:
        >>> nisa.core_barrier(data=out, cores=(0, 1))  # doctest: +SKIP
    """
    call = Call("nisa.core_barrier")
    d = call.tensor(data, "data", _DATA)
    group = _ranks(call, cores, "cores")
    if call.trace.core not in group:
        raise call.error("nki_invalid_argument", f"core {call.trace.core} calls a barrier of "
                         f"cores {group} it is not part of")
    ins = Instr(Opcode.CORE_BARRIER, (), (("data", acc(d)),), (("cores", tuple(sorted(group))),),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None, name=""):
    """Send ``src`` to core ``send_to_rank`` and receive ``dst`` from ``recv_from_rank``.

    Bit-exact; ``src`` and ``dst`` have the same dtype and element count. Sends are buffered,
    so two cores may exchange with each other in one call each.

    Example:
        >>> nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me,
        ...               pipe_id=0)  # doctest: +SKIP
    """
    call = Call("nisa.sendrecv")
    s, d = call.tensor(src, "src", _DATA), call.tensor(dst, "dst", _DATA)
    to, frm = _ranks(call, (send_to_rank,), "send_to_rank")[0], \
        _ranks(call, (recv_from_rank,), "recv_from_rank")[0]
    if s.dtype != d.dtype or s.size != d.size:
        raise call.error("nki_shape_mismatch", f"src ({s.dtype.name}, {s.size} elements) and "
                         f"dst ({d.dtype.name}, {d.size} elements) must match")
    attrs = (("send_to", to), ("recv_from", frm), ("pipe_id", int(pipe_id or 0)))
    ins = Instr(Opcode.SENDRECV, (("dst", acc(d)),), (("src", acc(s)),), attrs, call.loc, name)
    return call.trace.emit(ins, api=call.api)


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
    return Call("nki.collectives.rank_id").trace.core


def _my_group(call: Call, replica_group) -> tuple[int, ...]:
    lists = getattr(replica_group, "rank_lists", replica_group)
    seen: set[int] = set()
    mine = None
    for rl in lists:
        ranks = _ranks(call, rl, "replica_group")
        if seen & set(ranks):
            raise call.error("nki_invalid_argument", "replica_group rank-lists must not overlap")
        seen |= set(ranks)
        if call.trace.core in ranks:
            mine = ranks
    if mine is None:
        raise call.error("nki_invalid_argument", f"core {call.trace.core} is in no rank-list "
                         f"of replica_group {lists!r}")
    return mine


def _tensors(call: Call, values, role: str) -> list[NkiTensor]:
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    if not 1 <= len(items) <= 3:
        raise call.error("nki_invalid_argument", f"{role} must list 1 to 3 tensors (the "
                         f"simulator's coalescing limit), got {len(items)}")
    return [call.tensor(t, f"{role}[{i}]", _DATA) for i, t in enumerate(items)]


def _collective(api: str, kind: str, srcs, dsts, replica_group, op=None, dim=0, name=""):
    call = Call(api)
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


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=""):
    """Every rank of a rank-list gets the elementwise ``op`` of all ranks' ``srcs`` (fp32,
    folded in rank order).

    Example:
        >>> ncc.all_reduce(srcs=[part], dsts=[total], replica_group=ncc.ReplicaGroup([[0, 1]]),
        ...                op=nl.add)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_reduce", "all_reduce", srcs, dsts, replica_group,
                       op, 0, name)


def all_gather(srcs, dsts, replica_group, collective_dim=0, priority=None, name=""):
    """Every rank gets all ranks' ``srcs`` concatenated along ``collective_dim`` (bit-exact).

    Example:
        >>> ncc.all_gather(srcs=[mine], dsts=[both], replica_group=rg,
        ...                collective_dim=0)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_gather", "all_gather", srcs, dsts, replica_group,
                       None, collective_dim, name)


def reduce_scatter(srcs, dsts, replica_group, collective_dim=0, op=None, priority=None,
                   name=""):
    """Rank ``r`` gets chunk ``r`` (along ``collective_dim``) of the ``op``-reduction.

    Example:
        >>> ncc.reduce_scatter(srcs=[x], dsts=[half], replica_group=rg, collective_dim=0,
        ...                    op=nl.add)  # doctest: +SKIP
    """
    return _collective("nki.collectives.reduce_scatter", "reduce_scatter", srcs, dsts,
                       replica_group, op, collective_dim, name)


def all_to_all(srcs, dsts, replica_group, collective_dim=0, priority=None, name=""):
    """Chunk ``s`` of rank ``r``'s dst is chunk ``r`` of rank ``s``'s src (bit-exact).

    Example:
        >>> ncc.all_to_all(srcs=[x], dsts=[y], replica_group=rg, collective_dim=0)  # doctest: +SKIP
    """
    return _collective("nki.collectives.all_to_all", "all_to_all", srcs, dsts, replica_group,
                       None, collective_dim, name)


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
    me = call.trace.core
    pairs = [tuple(_ranks(call, p, "source_target_pairs")) for p in source_target_pairs]
    to = [t for a, t in pairs if a == me]
    frm = [a for a, t in pairs if t == me]
    if len(to) > 1 or len(frm) > 1:
        raise call.error("nki_invalid_argument", f"core {me} may send and receive at most once "
                         f"in source_target_pairs {pairs!r}")
    if s[0].dtype != d[0].dtype or s[0].size != d[0].size:
        raise call.error("nki_shape_mismatch", "src and dst must have the same dtype and size")
    group = (to[0] if to else -1, frm[0] if frm else -1)
    ins = Instr(Opcode.COLLECTIVE, (("dst0", acc(d[0])),), (("src0", acc(s[0])),),
                (("kind", "collective_permute"), ("op", None), ("dim", 0), ("group", group)),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _unsupported(api: str):
    def stub(*args, **kwargs):
        raise fail("nki_not_implemented", f"{api} is not simulated yet (its data-dependent "
                   "counts need registers)", Call(api).loc, NkiUnsupportedError)

    stub.__name__ = api.rsplit(".", 1)[1]
    stub.__doc__ = (f"``{api}``: accepted name; raises ``nki_not_implemented``.\n\n"
                    f"Example:\n    >>> {api}(...)  # doctest: +SKIP\n")
    return stub


all_gather_v = _unsupported("nki.collectives.all_gather_v")
all_to_all_v = _unsupported("nki.collectives.all_to_all_v")
collective_permute_implicit = _unsupported("nki.collectives.collective_permute_implicit")
collective_permute_implicit_reduce = _unsupported(
    "nki.collectives.collective_permute_implicit_reduce")
collective_permute_implicit_current_processing_rank_id = _unsupported(
    "nki.collectives.collective_permute_implicit_current_processing_rank_id")
