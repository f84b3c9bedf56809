"""``neuronxcc.nki._private.private_api``, as far as public kernels use it with a meaning the
kernels themselves make plain. AWS never documented this module.

* ``do_while(cond)``: a ``with`` block the machine repeats while the one-element integer
  tensor ``cond`` (which the body updates) is nonzero, testing it after each pass: the body
  runs at least once, as the name says (AWS's ``blockwise_mm`` sets ``cond`` from its
  ``conditions`` input before the block and from the next block's entry at the end of it).
  The body is traced once; it is an ``nl.while_loop`` over a register loaded from ``cond``.
* ``core_barrier``, ``sendrecv``: the LNC synchronisation and exchange made public later as
  ``nki.isa.core_barrier`` / ``nki.isa.sendrecv`` (now ``nki.lnc``), with the same keywords.
* ``float8_e4m3fn_x4``, ``float8_e5m2_x4``: the packed MX dtypes of ``nki.language``.

Any other name (``cc_div``, ``nc_matmul_sparse``, the prebuilt ``attention_kernel`` ...) raises
``ImportError`` naming it: its semantics are not public, so it is not simulated.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import sys
import textwrap

from nki.ir.nodes import DynWhile, Reg
from nki.lang import lnc
from nki.lang.control import register_alloc, register_load
from nki.lang.tracer import current, user_loc
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
        whole = exc_type is None and _ran_to_end(sys._getframe(1), self.code,
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


def _ran_to_end(frame, code, with_line: int) -> bool:
    """Whether the ``with`` block at ``with_line`` of ``code`` is exiting at its end
    (``frame`` is calling ``__exit__``), not through a ``break``/``continue``/``return``:
    ``__exit__`` sees no exception either way. CPython compiles each early exit as the
    statement's own code followed by an inline ``__exit__(None, None, None)`` call, so the
    instruction just before the call's argument loads is on an exit statement's line.
    A frame that is not the one entered, or code whose source cannot be read, counts as the
    end (there is no way to tell)."""
    if frame.f_code is not code:
        return True
    exits = _exit_lines(code, with_line)
    if not exits:
        return True
    line = _line_before_exit_call(code, frame.f_lasti, with_line)
    return not any(first <= (line or -1) <= last for first, last in exits)


# the instructions of an inline ``__exit__(None, None, None)`` call before its CALL
_EXIT_ARGS = frozenset(("LOAD_CONST", "PRECALL", "SWAP", "CACHE", "PUSH_NULL", "COPY"))


def _line_before_exit_call(code, lasti: int, with_line: int) -> int | None:
    """The source line of the instruction before the exit call at ``lasti``'s arguments."""
    before = [i for i in dis.get_instructions(code) if i.offset < lasti]
    while before and before[-1].opname in _EXIT_ARGS and \
            before[-1].positions.lineno == with_line:
        before.pop()
    return before[-1].positions.lineno if before else None


@functools.lru_cache(maxsize=64)
def _exit_lines(code, with_line: int) -> tuple[tuple[int, int], ...]:
    """The line spans of the ``break``/``continue``/``return`` statements that would leave
    the ``with`` block at ``with_line`` of ``code``'s function (not those of loops or
    functions nested in the block)."""
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ()
    ast.increment_lineno(tree, first - 1)
    block = next((n for n in ast.walk(tree) if isinstance(n, ast.With) and
                  n.lineno == with_line), None)
    return () if block is None else tuple(_exits(block.body))


def _exits(stmts, in_loop: bool = False):
    """Spans of the statements in ``stmts`` that leave them (``in_loop``: inside a loop of
    theirs, where only ``return`` leaves)."""
    for node in stmts:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) or (
                isinstance(node, (ast.Break, ast.Continue)) and not in_loop):
            yield node.lineno, node.end_lineno
        for name, field in ast.iter_fields(node):
            if isinstance(field, list) and field and isinstance(field[0], ast.AST):
                loop_body = isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and \
                    name == "body"
                yield from _exits(field, in_loop or loop_body)


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
