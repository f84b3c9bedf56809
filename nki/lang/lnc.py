"""``nki.lnc`` rules: data exchange, reduction and synchronisation between the two physical
NeuronCores of a Logical NeuronCore (``kernel[2](...)``), and the deprecated ``nki.isa``
spellings of the same calls (NKI 0.8 deprecates them: they warn at the call site).

Each call becomes one host-call instruction (``nki/sim/emit/collectives.py``): cores meet
there, sends are buffered, and the N-th ``sendrecv`` of one core pairs with the N-th of its
peer (program order, as AWS documents). ``sendrecv_compute`` is a ``sendrecv`` whose received
tile is reduced with the local one (fp32, rounded once into ``dst``); the two kinds never
pair with each other, so mismatched calls are reported as a deadlock, not mixed.
"""

from __future__ import annotations

import warnings

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, DmaEngine, Engine, Opcode
from nki.ir.types import Memory
from nki.lang.collectives import _DATA, check_priority, ranks_of
from nki.lang.common import Call, acc
from nki.lang.hints import records
from nki.lang.operators import as_alu, op_name
from nki.lang.tracer import user_loc

_REDUCE_OPS = (Alu.add, Alu.maximum, Alu.minimum)


def _needs_v3(call: Call) -> None:
    if call.trace.target.nc_version < 3:
        raise call.error("nki_unsupported_on_target", f"available only on NeuronCore-v3 or "
                         f"newer (trn2, trn3); the target is {call.trace.target.name}")


def _needs_lnc2(call: Call) -> None:
    if call.trace.num_cores != 2:
        raise call.error("nki_lnc_degree", "needs an LNC degree of 2: launch the kernel "
                         f"with kernel[2](...) (this launch has {call.trace.num_cores} core)")


def _barrier(api: str, data, cores, engine, name) -> Instr:
    call = Call(api)
    _needs_v3(call)
    d = call.tensor(data, "data", _DATA)
    if engine is not None and not isinstance(engine, Engine):
        raise call.error("nki_invalid_argument", f"engine={engine!r} must be a nisa.engine")
    group = ranks_of(call, cores, "cores", lnc=True)
    if call.trace.core not in group:
        raise call.error("nki_invalid_argument", f"core {call.trace.core} calls a barrier of "
                         f"cores {group} it is not part of")
    ins = Instr(Opcode.CORE_BARRIER, (), (("data", acc(d)),), (("cores", tuple(sorted(group))),),
                call.loc, name or "")
    return call.trace.emit(ins, api=call.api)


@records("engine")
def core_barrier(data, cores, engine=Engine.gpsimd, name=None) -> Instr:
    """Wait until both physical cores of the LNC reach this barrier (``cores=(0, 1)``).

    ``data`` is the shared HBM tensor the cores hand over through the barrier (it is not
    accessed): writes to it before the barrier are seen by both cores after it.

    Example:
        >>> nki.lnc.core_barrier(data=out, cores=(0, 1))  # doctest: +SKIP
    """
    return _barrier("nki.lnc.core_barrier", data, cores, engine, name)


def _exchange(api: str, src, dst, send_to_rank, recv_from_rank, *, reduce_op=None,
              dma_engine=None, priority=None, name=None, memories=_DATA) -> Instr:
    call = Call(api)
    _needs_v3(call)
    _needs_lnc2(call)
    check_priority(call, priority)
    if dma_engine is not None and not isinstance(dma_engine, DmaEngine):
        raise call.error("nki_invalid_argument", f"dma_engine={dma_engine!r} must be a "
                         "nisa.dma_engine")
    if dma_engine is DmaEngine.gpsimd_dma and priority is not None:
        raise call.error("nki_invalid_argument", "sendrecv requires priority=None when using "
                         "nki.isa.dma_engine.gpsimd_dma; explicit priorities are rejected")
    s, d = call.tensor(src, "src", memories), call.tensor(dst, "dst", memories)
    to = ranks_of(call, (send_to_rank,), "send_to_rank", lnc=True)[0]
    frm = ranks_of(call, (recv_from_rank,), "recv_from_rank", lnc=True)[0]
    if s.dtype != d.dtype or s.size != d.size:
        raise call.error("nki_shape_mismatch", f"src ({s.dtype.name}, {s.size} elements) and "
                         f"dst ({d.dtype.name}, {d.size} elements) must match")
    alu = None
    if reduce_op is not None:
        alu = as_alu(reduce_op)
        if alu not in _REDUCE_OPS:
            raise call.error("nki_invalid_argument", f"reduce_op={op_name(reduce_op)} must be "
                             "nl.add, nl.maximum or nl.minimum")
        if s.buffer is not d.buffer:
            raise call.error("err_unsupported_memory", f"src and dst must be in the same "
                             f"memory (both SBUF or both private HBM), got {s.buffer.value} "
                             f"and {d.buffer.value}")
    # pipe 0 always: nisa.sendrecv's pipe_id is ignored and messages pair in program order
    attrs = (("send_to", to), ("recv_from", frm), ("pipe_id", 0), ("reduce", alu))
    ins = Instr(Opcode.SENDRECV, (("dst", acc(d)),), (("src", acc(s)),), attrs, call.loc,
                name or "")
    return call.trace.emit(ins, api=call.api)


@records("dma_engine", "priority")
def sendrecv(src, dst, send_to_rank, recv_from_rank, dma_engine=DmaEngine.dma, name=None,
             priority=None) -> Instr:
    """Send ``src`` to core ``send_to_rank`` and receive ``dst`` from ``recv_from_rank``
    (bit-exact; the N-th call on one core pairs with the N-th on its peer). Needs
    NeuronCore-v3+ and ``kernel[2]``; ``priority`` 0-3 is DMA quality of service.

    Example:
        >>> nki.lnc.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me,
        ...                  recv_from_rank=1 - me)   # doctest: +SKIP
    """
    return _exchange("nki.lnc.sendrecv", src, dst, send_to_rank, recv_from_rank,
                     dma_engine=dma_engine, priority=priority, name=name)


_COMPUTE_MEMS = (Memory.SBUF, Memory.PRIVATE_HBM)


@records("priority")
def sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None,
                     priority=None) -> Instr:
    """Exchange tiles with the peer core and write ``reduce_op(src, peer)`` to ``dst``
    (``nl.add``, ``nl.maximum`` or ``nl.minimum``; computed in fp32, rounded once). ``src``
    and ``dst`` are both in SBUF or both in private HBM, of one dtype and size.

    Example:
        >>> nki.lnc.sendrecv_compute(src=part, dst=total, send_to_rank=1 - me,
        ...                          recv_from_rank=1 - me, reduce_op=nl.add)  # doctest: +SKIP
    """
    return _exchange("nki.lnc.sendrecv_compute", src, dst, send_to_rank, recv_from_rank,
                     reduce_op=reduce_op, priority=priority, name=name,
                     memories=_COMPUTE_MEMS)


# ----- the deprecated nki.isa spellings ----------------------------------------------------
def _deprecated(api: str, new: str) -> None:
    loc = user_loc()
    warnings.warn_explicit(f"{api} is deprecated (NKI 0.8); use {new}", DeprecationWarning,
                           loc.filename if loc else "<nki>", loc.lineno if loc else 0)


@records("engine")
def isa_core_barrier(data, cores, engine=None, name=""):
    """Deprecated spelling of :func:`core_barrier` (warns).

    Example:
        >>> nisa.core_barrier(data=out, cores=(0, 1))  # doctest: +SKIP
    """
    _deprecated("nki.isa.core_barrier", "nki.lnc.core_barrier")
    return _barrier("nisa.core_barrier", data, cores, engine, name)


@records("dma_engine", "priority")
def isa_sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None,
                 name="", priority=None):
    """Deprecated spelling of :func:`sendrecv` (warns); ``pipe_id`` is ignored.

    Example:
        >>> nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1, recv_from_rank=1,
        ...               pipe_id=0)  # doctest: +SKIP
    """
    _deprecated("nki.isa.sendrecv", "nki.lnc.sendrecv (without pipe_id)")
    return _exchange("nisa.sendrecv", src, dst, send_to_rank, recv_from_rank,
                     dma_engine=dma_engine, priority=priority, name=name)


def isa_sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None):
    """Deprecated spelling of :func:`sendrecv_compute` (warns).

    Example:
        >>> nisa.sendrecv_compute(src=a, dst=b, send_to_rank=1, recv_from_rank=1,
        ...                       reduce_op=nl.add)  # doctest: +SKIP
    """
    _deprecated("nki.isa.sendrecv_compute", "nki.lnc.sendrecv_compute")
    return _exchange("nisa.sendrecv_compute", src, dst, send_to_rank, recv_from_rank,
                     reduce_op=reduce_op, name=name, memories=_COMPUTE_MEMS)
