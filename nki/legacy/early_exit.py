"""NKI 0.1's ``return``/``break`` inside a traced-once loop, replayed.

NKI 0.1 traced the body of ``nl.affine_range`` / ``sequential_range`` once, so a ``return``
or ``break`` inside it ended only the trace of the body: every iteration still ran the body
up to that statement (AWS's ``blockwise_mm_bwd`` has its ``return`` indented into its store
loop). Python leaves the loop after the first iteration. So before a legacy kernel is traced
its own function is recompiled with each such statement guarded:

* ``break`` becomes ``if <this loop is traced once>: continue`` before the ``break``;
* ``return X`` becomes: remember ``X``, mark the function as returning, ``continue``
  (when traced once); after the loop, a marked function continues its enclosing
  traced-once loop or returns the remembered value.

Whether a loop is traced once is asked at run time of the trace, of the innermost open
legacy loop (:mod:`nki.legacy.loops`), so ``static_range`` and plain Python loops keep
Python's meaning. The kernel and the module-level functions of its own module (where AWS's
kernels keep their helpers) are recompiled, functions nested in them included; each copy
keeps its file, line numbers, defaults and closure cells, and the copies see each other
through one copy of the module's globals made per trace (so a ``global`` the kernel assigns
lands in that copy). Functions of other modules are not rewritten: ``check_abandoned``
still raises for those.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

from nki.legacy.pending import state
from nki.legacy.scalar_loop import with_runtime_range

_VALUE = "_nki_exit_value_"
_EXITING = "_nki_exiting_"


def traced_once(first_line: int, last_line: int) -> bool:
    """Whether the innermost open legacy loop is a traced-once loop whose ``for`` header
    spans ``first_line..last_line`` of the kernel's file."""
    frames = state().loops.frames
    if not frames:
        return False
    frame = frames[-1]
    line = frame.loc.lineno if frame.loc is not None else -1
    return not frame.static and first_line <= line <= last_line


def _ask(loop: ast.For) -> ast.expr:
    """``traced_once(<loop's header lines>)``, reached through the import system so the
    kernel's module globals gain no name."""
    module = ast.Call(ast.Name("__import__", ast.Load()),
                      [ast.Constant(__name__)], [ast.keyword("fromlist", ast.Constant(("_",)))])
    return ast.Call(ast.Attribute(module, "traced_once", ast.Load()),
                    [ast.Constant(loop.lineno), ast.Constant(loop.iter.end_lineno)], [])


class _Guard(ast.NodeTransformer):
    """Guards ``return``/``break`` statements of ``for`` bodies (not of nested functions)."""

    def __init__(self):
        self.loops: list[ast.For] = []
        self.changed = False
        self.returns = 0        # guarded returns so far in the current function

    def visit_FunctionDef(self, node):
        """A def is its own scope: its loops and its exit flag start afresh."""
        saved, self.loops = self.loops, []
        changed, self.changed = self.changed, False
        returns, self.returns = self.returns, 0
        node.body = [s for stmt in node.body for s in _as_list(self.visit(stmt))]
        if self.changed:
            start = ast.Assign([ast.Name(_EXITING, ast.Store())], ast.Constant(False))
            node.body.insert(0, ast.copy_location(start, node.body[0]))
        self.loops, self.changed, self.returns = saved, changed or self.changed, returns
        return node

    def visit_ClassDef(self, node):             # a class body has no loops of ours
        return node

    def visit_While(self, node):                # break/continue there belong to the while
        saved, self.loops = self.loops, []
        self.generic_visit(node)
        self.loops = saved
        return node

    def visit_For(self, node):
        before = self.returns
        self.loops.append(node)
        node.body = [s for stmt in node.body for s in _as_list(self.visit(stmt))]
        self.loops.pop()
        node.orelse = [s for stmt in node.orelse for s in _as_list(self.visit(stmt))]
        if self.returns == before:            # no guarded return of this function inside
            return node
        after = [ast.If(ast.Name(_EXITING, ast.Load()), self._leave(), [])]
        return [node] + [ast.copy_location(s, node) for s in after]

    def _leave(self) -> list[ast.stmt]:
        """After a loop whose body returned: continue an enclosing traced-once loop, else
        return the remembered value."""
        ret = ast.Return(ast.Name(_VALUE, ast.Load()))
        if not self.loops:
            return [ret]
        return [ast.If(_ask(self.loops[-1]), [ast.Continue()], []), ret]

    def visit_Break(self, node):
        if not self.loops:
            return node
        self.changed = True
        guard = ast.If(_ask(self.loops[-1]), [ast.Continue()], [])
        return [ast.copy_location(guard, node), node]

    def visit_Return(self, node):
        if not self.loops:
            return node
        self.changed = True
        self.returns += 1
        value = node.value if node.value is not None else ast.Constant(None)
        remember = [ast.Assign([ast.Name(_VALUE, ast.Store())], value),
                    ast.Assign([ast.Name(_EXITING, ast.Store())], ast.Constant(True)),
                    ast.Continue()]
        guard = ast.If(_ask(self.loops[-1]), remember, [])
        return [ast.copy_location(guard, node), node]


def _as_list(result) -> list:
    return result if isinstance(result, list) else [result]


_CODES: dict[types.CodeType, types.CodeType | None] = {}    # original -> recompiled


def _rewritten_def(fn) -> ast.FunctionDef | None:
    """``fn``'s definition with its loop exits guarded, or None when it has none (or its
    source cannot be read)."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != fn.__code__.co_name:
        return None
    guard = _Guard()
    guard.visit(fdef)
    if not guard.changed:
        return None
    fdef.decorator_list = []
    return ast.fix_missing_locations(fdef)


def _compiled_code(fn, fdef: ast.FunctionDef) -> types.CodeType | None:
    """The code object of ``fdef``, compiled inside a function that binds ``fn``'s free
    variables, so the new code reads the same closure cells."""
    free = fn.__code__.co_freevars
    outer = ast.FunctionDef(
        name="_nki_scope_", args=ast.arguments([], [], None, [], [], None, []),
        body=[ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None)) for v in free]
        + [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], decorator_list=[])
    module = ast.fix_missing_locations(ast.Module([ast.copy_location(outer, fdef)], []))
    code = compile(module, fn.__code__.co_filename, "exec")
    scope = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in scope.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    return inner if inner.co_freevars == free else None


def _replayed_code(fn) -> types.CodeType | None:
    """``fn``'s recompiled code, or None when it needs none (memoised per code object)."""
    code = fn.__code__
    if code not in _CODES:
        fdef = _rewritten_def(fn)
        _CODES[code] = _compiled_code(fn, fdef) if fdef is not None else None
    return _CODES[code]


def _copy(fn, code: types.CodeType, namespace: dict):
    """``fn`` with ``code``, reading its globals from ``namespace``."""
    copy = types.FunctionType(code, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update(fn.__dict__)
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    copy.__annotations__ = dict(fn.__annotations__)
    return copy


def _module_functions(fn) -> dict:
    """The plain functions defined at the top of ``fn``'s module (by name)."""
    return {name: value for name, value in fn.__globals__.items()
            if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__
            and value.__code__.co_filename == fn.__code__.co_filename}


def replay_loop_exits(fn):
    """``fn``, or a copy of it whose ``return``/``break`` statements in traced-once loops
    (its own and those of its module's functions) run as NKI 0.1 ran them (see the module
    docstring). Called when a trace starts, so helpers defined after the kernel count.
    The copy also runs ``range(nt.scalar(t))`` as a runtime loop (:mod:`nki.legacy.scalar_loop`)."""
    return with_runtime_range(_with_exits(fn), _copy)


def _with_exits(fn):
    if not isinstance(fn, types.FunctionType):
        return fn
    functions = _module_functions(fn)
    codes = {name: _replayed_code(f) for name, f in functions.items()}
    own = _replayed_code(fn)
    if own is None and not any(codes.values()):
        return fn
    # every function of the module is rebound to the copied globals, so a kernel reaches
    # the recompiled helpers through functions that need no recompiling themselves
    namespace = dict(fn.__globals__)
    for name, f in functions.items():
        namespace[name] = _copy(f, codes[name] or f.__code__, namespace)
    return _copy(fn, own or fn.__code__, namespace)
