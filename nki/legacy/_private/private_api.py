"""``neuronxcc.nki._private.private_api``, as far as public kernels use it with a meaning the
kernels themselves make plain. AWS never documented this module.

* ``do_while(cond)``: a ``with`` block the machine repeats while the one-element integer
  tensor ``cond`` (which the body updates) is nonzero, testing it after each pass: the body
  runs at least once, as the name says (AWS's ``blockwise_mm`` sets ``cond`` from its
  ``conditions`` input before the block and from the next block's entry at the end of it).
  The body is traced once; it is an ``nl.while_loop`` over a register loaded from ``cond``.
  A ``break``/``continue``/``return`` out of the block would leave a partial body the machine
  repeats whole, so the trace raises for it (:mod:`nki.legacy._private.block_exit`).
* ``core_barrier``, ``sendrecv``: the LNC synchronisation and exchange made public later as
  ``nki.isa.core_barrier`` / ``nki.isa.sendrecv`` (now ``nki.lnc``), with the same keywords.
* ``float8_e4m3fn_x4``, ``float8_e5m2_x4``: the packed MX dtypes of ``nki.language``.

Any other name (``cc_div``, ``nc_matmul_sparse``, the prebuilt ``attention_kernel`` ...) raises
``ImportError`` naming it: its semantics are not public, so it is not simulated.
"""

from __future__ import annotations

import sys

from nki.ir.nodes import DynWhile, Reg
from nki.lang import lnc
from nki.lang.control import register_alloc, register_load
from nki.lang.tracer import current, user_loc
from nki.legacy._private.block_exit import ran_to_end
from nki.legacy.pending import before_write, flush, state, value

_NOT_SIMULATED = ("is AWS-internal and undocumented; its semantics cannot be simulated "
                  "faithfully, so nki does not provide it")


class do_while:  # noqa: N801 - AWS's name
    """``with do_while(cond): body``: run the body, then again while ``cond`` (a one-element
    integer tensor the body writes) is nonzero. A class, not a generator context manager, so
    the frames around ``__enter__``/``__exit__`` are the kernel's ``with`` line (instructions
    and the loop name it, not contextlib).

    Example:
        >>> with do_while(cond):                                    # doctest: +SKIP
        ...     ...; nl.store(dst=cond[0], value=next_flag[0, 0])
    """

    def __init__(self, cond):
        self.cond = cond

    def __enter__(self) -> None:
        self.trace, self.loc = current("do_while"), user_loc()
        frame = sys._getframe(1)                   # the kernel's 'with' statement
        self.code, self.line = frame.f_code, frame.f_lineno
        flush()
        self.again = register_alloc(1)     # the first pass always runs
        state("do_while").user_loops += 1
        self.body = self.trace.begin_dyn((self.loc, "do_while"))

    def __exit__(self, exc_type, exc, tb) -> bool:
        # a break/return/continue also exits with no exception: the body was left early
        whole = exc_type is None and ran_to_end(sys._getframe(1), self.code,
                                                       self.line)
        try:
            if whole:
                flush()
                register_load(self.again, value(self.cond))  # the body's last word: again?
        finally:
            self.trace.end_dyn(self.body, whole)
            state("do_while").user_loops -= 1
        if whole:
            self.trace.append(DynWhile(Reg(self.again.id), Reg(self.again.id), None,
                                       tuple(self.body), self.loc, "do_while"))
        return False


def core_barrier(data, cores, **kwargs) -> None:
    """``nki.lnc.core_barrier`` under its private legacy name."""
    flush()
    lnc.core_barrier(data=value(data), cores=cores, **kwargs)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, **kwargs) -> None:
    """``nki.lnc.sendrecv`` under its private legacy name (``dst`` is written; the N-th
    exchange of a core pairs with its peer's N-th, so ``pipe_id`` changes nothing)."""
    dst_tile = value(dst)
    before_write(dst_tile)
    lnc.sendrecv(src=value(src), dst=dst_tile, send_to_rank=send_to_rank,
                 recv_from_rank=recv_from_rank, **kwargs)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in ("float8_e4m3fn_x4", "float8_e5m2_x4"):
        import nki.language as nl

        return getattr(nl, name)
    raise ImportError(f"[nki_not_implemented] neuronxcc.nki._private.private_api.{name} "
                      f"{_NOT_SIMULATED}")
