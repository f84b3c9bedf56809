"""How a ``with`` block is being left, asked from its ``__exit__``.

``__exit__`` sees no exception both when the block's body ran to its end and when a
``break``/``continue``/``return`` left it early; legacy ``do_while`` must tell them apart (a
body left early is a partial runtime-loop body). CPython compiles each early exit inline, as
the statement's own code followed by an ``__exit__(None, None, None)`` call carrying the
``with`` statement's line, so the instruction before that call's argument loads is on the
exit statement's lines; the statements that can leave the block are read from its source.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import textwrap
import types


def ran_to_end(frame: types.FrameType, code: types.CodeType, with_line: int) -> bool:
    """Whether the ``with`` block at ``with_line`` of ``code`` is exiting at its end
    (``frame`` is calling ``__exit__``), not through a ``break``/``continue``/``return``:
    ``__exit__`` sees no exception either way. CPython compiles each early exit as the
    statement's own code followed by an inline ``__exit__(None, None, None)`` call, so the
    instruction just before the call's argument loads is on an exit statement's line.
    A frame that is not the one entered, or code whose source cannot be read, counts as the
    end (there is no way to tell)."""
    if frame.f_code is not code:
        return True
    block = _block(code, with_line)
    return not block[0] or not _left_early(code, frame.f_lasti, *block)


# the instructions of an inline ``__exit__(None, None, None)`` call and what follows it
_EXIT_CALL = frozenset(("LOAD_CONST", "PRECALL", "SWAP", "CACHE", "PUSH_NULL", "COPY", "CALL",
                        "POP_TOP"))


def _left_early(code: types.CodeType, lasti: int, exits, plumbing: frozenset[int],
                finals: frozenset[int], with_col: int) -> bool:
    """Whether the instruction before the exit call at ``lasti`` is an exit statement's,
    walking back past the exit calls of ``with`` blocks (at ``plumbing`` lines) and the
    ``finally`` bodies (at ``finals`` lines) an early exit runs on its way out. Any other
    instruction (a jump or return ending another exit's path included) ends the walk, so a
    normal end is not mistaken for an early one; columns tell ``if c: break``'s test from
    its ``break`` (counted from the ``with`` statement's: a legacy kernel's recompiled code
    has the columns of its dedented source, the code of an indented def its file's)."""
    before = [i for i in _instructions(code) if i.offset <= lasti]
    shift = (before[-1].positions.col_offset or 0) - with_col if before else 0
    before = before[:-1]
    while before:
        pos = before[-1].positions
        if pos.lineno is None:
            return False
        where = (pos.lineno, (pos.col_offset or 0) - shift)
        if any(first <= where <= last for first, last in exits):
            return True
        if not (pos.lineno in finals or
                (pos.lineno in plumbing and before[-1].opname in _EXIT_CALL)):
            return False
        before.pop()
    return False


@functools.lru_cache(maxsize=64)
def _instructions(code: types.CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


@functools.lru_cache(maxsize=64)
def _block(code: types.CodeType, with_line: int):
    """Of the ``with`` block at ``with_line`` of ``code``'s function: the source spans of the
    ``break``/``continue``/``return`` statements that would leave it (not those of loops or
    functions nested in it), the lines of its own and its nested ``with`` statements, and
    the lines of the ``finally`` bodies in it, and its column (all of its dedented source)."""
    none = ((), frozenset(), frozenset(), 0)
    try:
        lines, first = inspect.getsourcelines(code)
        source = textwrap.dedent("".join(lines))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return none
    ast.increment_lineno(tree, first - 1)
    block = next((n for n in ast.walk(tree) if isinstance(n, ast.With) and
                  n.lineno == with_line), None)
    if block is None:
        return none
    inner = [n for s in block.body for n in ast.walk(s)]
    withs = frozenset([with_line] + [n.lineno for n in inner if isinstance(n, ast.With)])
    finals = frozenset(line for n in inner for f in getattr(n, "finalbody", ())
                       for line in range(f.lineno, f.end_lineno + 1))
    return tuple(_exits(block.body)), withs, finals, block.col_offset


def _exits(stmts, in_loop: bool = False):
    """((line, column), (end line, end column)) of the statements in ``stmts`` that leave
    them (``in_loop``: inside a loop of theirs, where only ``return`` leaves)."""
    for node in stmts:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) or (
                isinstance(node, (ast.Break, ast.Continue)) and not in_loop):
            yield (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
        for name, field in ast.iter_fields(node):
            if isinstance(field, list) and field and isinstance(field[0], ast.AST):
                loop_body = isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and \
                    name == "body"
                yield from _exits(field, in_loop or loop_body)
