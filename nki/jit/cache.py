"""The on-disk program cache: a warm call in a new process loads, it does not trace.

Key: the kernel's code, argument shapes/dtypes/constants, launch, settings and a digest of
nki's own sources. The key cannot see what else the trace depended on (helper functions the
kernel called, module globals it read), so a trace records those dependencies and every load
re-checks them; a changed dependency makes the entry stale and it is rebuilt.

Safety: entries are written to a temporary file and renamed (atomic on POSIX), so concurrent
processes never see half an entry; an unreadable entry is treated as missing and rewritten;
the directory is created private (0700) and is not used if another user could write to it.
"""

from __future__ import annotations

import enum
import hashlib
import os
import pickle
import stat
import sys
import sysconfig
import types
import warnings
from pathlib import Path

import numpy as np

from nki._digest import nki_digest
from nki.ir.packed import dtype_key
from nki.ir.types import DType

_NKI_ROOT = Path(__file__).resolve().parent.parent
# code under these prefixes is not the user's: nki itself, the standard library, installed
# packages, and frozen/generated code
_NOT_USER_CODE = tuple({str(_NKI_ROOT), sys.prefix, sys.base_prefix, sys.exec_prefix, "<",
                        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib",
                                                              "purelib", "platlib"))})
_FORMAT = 1


def code_hash(code: types.CodeType) -> str:
    """Hash of a code object including nested code (lambdas, inner functions)."""
    h = hashlib.sha256()
    _feed_code(h, code)
    return h.hexdigest()


def _feed_code(h, code: types.CodeType) -> None:
    # where the code is, too: a cached trace carries the source lines its errors, profiles and
    # cost tables name, so code that moved within its file must not reuse an old trace
    h.update(f"{code.co_filename}:{code.co_firstlineno}".encode())
    h.update(code.co_linetable)
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _feed_code(h, c)
        else:
            h.update(repr(c).encode())


IGNORED = "-"   # a value that cannot change what a trace produces (a module, a builtin)


def value_hash(value, depth: int = 0) -> str | None:
    """A stable hash of a global's or closure cell's value; ``IGNORED`` for modules and
    builtins; None when it cannot be hashed (an arbitrary object), which makes the trace
    uncacheable rather than risk a stale hit."""
    if isinstance(value, (types.ModuleType, types.BuiltinFunctionType)):
        return IGNORED
    if isinstance(value, type):
        # by identity: a class read as a value is often a dtype (np.float32, ml_dtypes'
        # bfloat16 in a kernel factory's closure), and two must not share a trace; the code
        # of a class's methods that run is recorded like any other function's
        return "type:" + _sha([value.__module__, value.__qualname__])
    if isinstance(value, np.dtype):
        return "npdtype:" + _sha([value.str, repr(value)])
    if isinstance(value, DType):
        return "dtype:" + _sha([repr(value)])
    if isinstance(value, types.FunctionType):
        # functions made by one factory share code: tell them apart by name and closure
        parts = [code_hash(value.__code__), value.__module__, value.__qualname__,
                 value.__name__]
        if depth < 3:
            # closure cells and default values are evaluated outside the code object
            parts += [str(value_hash(c.cell_contents, depth + 1))
                      for c in value.__closure__ or ()]
            parts += [str(value_hash(d, depth + 1)) for d in value.__defaults__ or ()]
            parts += [f"{k}={value_hash(d, depth + 1)}"
                      for k, d in sorted((value.__kwdefaults__ or {}).items())]
        return "fn:" + _sha(parts)
    if isinstance(getattr(value, "fn", None), types.FunctionType):
        return value_hash(value.fn, depth)                 # an nki Kernel
    if isinstance(value, enum.Enum):
        return "enum:" + _sha([repr(value)])
    if isinstance(value, np.ndarray):
        described = repr((value.shape, dtype_key(value.dtype))).encode()
        return "nd:" + hashlib.sha256(np.ascontiguousarray(value).tobytes() +
                                      described).hexdigest()
    if isinstance(value, (int, float, str, bytes, bool, type(None))):
        return "v:" + _sha([repr(value)])
    if isinstance(value, (tuple, list, frozenset, set)) and depth < 4:
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return _combine(type(value).__name__, [value_hash(v, depth + 1) for v in items])
    if isinstance(value, dict) and depth < 4:
        return _combine("dict", [value_hash((k, v), depth + 1) for k, v in value.items()])
    return None


def _sha(parts) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _combine(kind: str, hashes: list) -> str | None:
    if any(h is None for h in hashes):
        return None
    return f"{kind}:" + _sha(hashes)


class DependencyRecorder:
    """Records, while a kernel traces, every user function that runs and the module globals
    it can read; nki's and the standard library's own calls are skipped.

    The hook is ``sys.settrace`` when no tracer is installed: it sees only Python calls
    (returning None keeps it out of every frame's lines), where ``sys.setprofile`` also
    fires on every return and every builtin call, which made tracing flash attention
    2.4x slower (S=8192: 2.9 s -> 7.0 s). Under a debugger or coverage (a tracer already
    installed) it stays a profile hook, so theirs keeps working; a tracer installed while
    recording (``breakpoint()`` in a kernel) replaces ours, so the trace is not cached."""

    def __init__(self):
        self.functions: dict[tuple[str, str], str] = {}
        self.globals: dict[tuple[str, str], str | None] = {}
        self._seen: set[int] = set()
        self._previous = None
        self._tracing = False   # the hook is sys.settrace (else sys.setprofile)
        self.cacheable = True   # False once the trace read a value we cannot re-check

    def __enter__(self) -> DependencyRecorder:
        self._tracing = sys.gettrace() is None
        if self._tracing:
            sys.settrace(self._on_event)
        else:
            self._previous = sys.getprofile()
            sys.setprofile(self._on_event)
        return self

    def __exit__(self, *exc) -> None:
        if self._tracing:
            if sys.gettrace() != self._on_event:   # someone else's tracer took over
                self.cacheable = False
            sys.settrace(None)
        else:
            sys.setprofile(self._previous)

    def _on_event(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        if id(code) in self._seen:
            return
        self._seen.add(id(code))
        if code.co_filename.startswith(_NOT_USER_CODE):
            return
        module = frame.f_globals.get("__name__", "")
        qual = getattr(code, "co_qualname", code.co_name)
        self.functions[(module, qual)] = _function_hash(_resolve(module, qual), code)
        for name in code.co_names:
            if name in frame.f_globals:
                h = value_hash(frame.f_globals[name])
                if h is None:
                    self.cacheable = False
                self.globals[(module, name)] = h

    # it needs to see only user code: nki's instruction calls take it off while they run
    # (nki/lang/userhook.py)
    _on_event.nki_pausable = True

    def snapshot(self) -> dict:
        return {"functions": dict(self.functions), "globals": dict(self.globals)}


def _function_hash(fn, code) -> str:
    """A recorded function: its code, and its default values when it is reachable by name
    (a default is evaluated where the function is defined, not in its code)."""
    fn = getattr(fn, "__wrapped__", fn)
    if not isinstance(fn, types.FunctionType) or fn.__code__ is not code and \
            code_hash(fn.__code__) != code_hash(code):
        return code_hash(code)
    defaults = [value_hash(d) for d in fn.__defaults__ or ()]
    defaults += [value_hash(d) for _, d in sorted((fn.__kwdefaults__ or {}).items())]
    return _sha([code_hash(code)] + [str(d) for d in defaults]) if defaults else code_hash(code)


def _resolve(module: str, qual: str):
    mod = sys.modules.get(module)
    if mod is None:
        return None
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def dependencies_hold(deps: dict) -> bool:
    """Re-check a recorded trace's dependencies against the running process."""
    for (module, qual), h in deps["functions"].items():
        if "<locals>" in qual or "<lambda>" in qual:
            continue  # nested code is hashed inside its enclosing function
        obj = _resolve(module, qual)
        code = getattr(getattr(obj, "__wrapped__", obj), "__code__", None)
        if code is None or _function_hash(obj, code) != h:
            return False
    for (module, name), h in deps["globals"].items():
        mod = sys.modules.get(module)
        if mod is None or (h != IGNORED and value_hash(mod.__dict__.get(name)) != h):
            return False
    return True


class ProgramCache:
    """Entries ``<dir>/specs/<key>.pkl`` holding a pickled specialization + its dependencies."""

    def __init__(self, directory: str):
        self.dir = Path(directory) / "specs"
        self.usable = self._prepare()

    def _prepare(self) -> bool:
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = self.dir.stat()
        except OSError:
            return False
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            warnings.warn(f"nki: not using program cache {self.dir}: it is writable by other "
                          "users or not owned by you", stacklevel=3)
            return False
        return True

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.pkl"

    def load(self, key: str):
        """The cached value, or None if missing, corrupt or stale."""
        if not self.usable:
            return None
        try:
            with open(self.path(key), "rb") as f:
                entry = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # corrupt or from an incompatible version: rebuild it
            return None
        if entry.get("format") != _FORMAT or not dependencies_hold(entry["deps"]):
            return None
        return entry["value"]

    def store(self, key: str, value, deps: dict) -> None:
        if not self.usable:
            return
        tmp = self.dir / f".{key}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                pickle.dump({"format": _FORMAT, "deps": deps, "value": value}, f,
                            protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path(key))
        except Exception:
            tmp.unlink(missing_ok=True)


def spec_key(fn, arg_signature: tuple, lnc: int, settings) -> str | None:
    """The entry key, or None when the kernel closes over a value that cannot be hashed."""
    h = hashlib.sha256()
    for part in (str(_FORMAT), nki_digest(), fn.__module__, fn.__qualname__, code_hash(fn.__code__),
                 repr(arg_signature), str(lnc), repr(settings)):
        h.update(part.encode())
        h.update(b"\0")
    for cell in fn.__closure__ or ():
        cell_hash = value_hash(cell.cell_contents)
        if cell_hash is None:
            return None
        h.update(cell_hash.encode())
    return h.hexdigest()[:40]
