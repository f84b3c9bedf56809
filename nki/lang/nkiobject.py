"""``nl.NKIObject``: the base class of user classes used inside kernels.

AWS's language guide (Class Support): in NKI every class is "similar to a Python data class";
``@dataclass`` is optional, and when the user provides no ``__init__`` the compiler creates
``__init__(self, x=None, y=False)`` that assigns each field (its class-level default, else
``None``) and then calls ``__post_init__``. nki-library relies on this with plain,
unannotated class attributes under ``@dataclass`` (``class SectionParams(nl.NKIObject):
section_idx = None`` constructed as ``SectionParams(section_idx=...)``), which CPython's
dataclass alone would reject. So the fields are the annotated attributes (a dataclass's
fields when decorated) followed by the plain data attributes of the class body.
"""

from __future__ import annotations

import dataclasses
import types

_NO_DEFAULT = object()
_FIELDS: dict[type, list[tuple[str, object, object]]] = {}


class NKIObject:
    """Base class for user classes passed into or built inside kernels (dataclass-like).

    Example:
        >>> class Tile(NKIObject):
        ...     start: int = 0
        ...     size = None
        >>> t = Tile(size=128)
        >>> (t.start, t.size)
        (0, 128)
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _FIELDS.pop(cls, None)
        if not _user_init(cls):
            cls.__init__ = _default_init


def _user_init(cls: type) -> bool:
    """Whether ``cls`` or a base between it and NKIObject defines its own ``__init__`` (the
    generated initializer only stands in for a missing one)."""
    for klass in cls.__mro__:
        if klass is NKIObject:
            return False
        init = klass.__dict__.get("__init__")
        if init is not None and init is not _default_init:
            return True
    return False


def _is_plain_attribute(cls: type, name: str, value) -> bool:
    """A data attribute of the class body: not a dunder, method, descriptor or nested class.
    A function object is a method only when defined in this class body (``op = nl.add`` is
    a field whose default is an operator)."""
    if name.startswith("__") or isinstance(value, (staticmethod, classmethod, property, type)):
        return False
    if isinstance(value, types.FunctionType):
        return not value.__qualname__.startswith(cls.__qualname__ + ".")
    return True


def _class_fields(klass: type) -> list[tuple[str, object, object]]:
    """(name, default, default_factory) of one class body, annotated names first."""
    out, seen = [], set()
    for name in klass.__dict__.get("__annotations__", {}):
        value = klass.__dict__.get(name, _NO_DEFAULT)
        if isinstance(value, dataclasses.Field):
            factory = value.default_factory
            value = value.default
            out.append((name, value, factory))
        else:
            out.append((name, value, dataclasses.MISSING))
        seen.add(name)
    for name, value in klass.__dict__.items():
        if name not in seen and _is_plain_attribute(klass, name, value):
            out.append((name, value, dataclasses.MISSING))
    return out


def _fields(cls: type) -> list[tuple[str, object, object]]:
    """The initializer's fields of ``cls`` (cached per class)."""
    if cls not in _FIELDS:
        specs: dict[str, tuple[str, object, object]] = {}
        if dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                if f.init:
                    specs[f.name] = (f.name, f.default, f.default_factory)
        for klass in reversed(cls.__mro__):
            if issubclass(klass, NKIObject) and klass is not NKIObject:
                for spec in _class_fields(klass):
                    specs.setdefault(spec[0], spec)
        _FIELDS[cls] = list(specs.values())
    return _FIELDS[cls]


def _default_init(self, *args, **kwargs) -> None:
    """The generated ``__init__(self, field=default-or-None, ...)``; then ``__post_init__``."""
    fields = _fields(type(self))
    if len(args) > len(fields):
        raise TypeError(f"{type(self).__name__}() takes {len(fields)} positional arguments "
                        f"(its fields {[f[0] for f in fields]}) but {len(args)} were given")
    names = {f[0] for f in fields}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s) {unknown}; "
                        f"its fields are {[f[0] for f in fields]}")
    for i, (name, default, factory) in enumerate(fields):
        if i < len(args):
            value = args[i]
        elif name in kwargs:
            value = kwargs[name]
        elif factory is not dataclasses.MISSING:
            value = factory()
        else:
            value = None if default in (_NO_DEFAULT, dataclasses.MISSING) else default
        object.__setattr__(self, name, value)
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


__all__ = ["NKIObject"]
