"""Keywords and argument orders earlier releases of the current dialect accepted.

AWS's published current-dialect kernels were written against every release from NKI 0.1.0
(Neuron 2.27, "Beta 2") on, and use spellings later releases dropped. Each entry of
:data:`OLD_SPELLINGS` names the call, what it accepted, the release that dropped it, and
what it meant then. Where that meaning is unambiguous the call is rewritten to today's
spelling with a ``DeprecationWarning`` naming the release; otherwise it raises
``nki_removed_in_release`` naming it. ``docs/releases.md`` is the same table, for people.

The public ``nisa`` functions are wrapped once (:func:`accept_old_spellings`, called at the
end of ``nki/isa/__init__.py``); the rules in ``nki/lang/*`` see only today's spelling.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable

from nki.lang.tracer import validation
from nki.lang.userhook import paused

R_0_2 = "NKI 0.2.0 (Neuron 2.28)"
R_0_3 = "NKI 0.3.0 (Neuron 2.29)"


@dataclasses.dataclass(frozen=True)
class OldSpelling:
    """One spelling an earlier release accepted: ``api`` (e.g. ``nisa.nc_matmul``), what it
    was, the release that dropped it, and how a call using it is handled here."""

    api: str
    spelling: str
    dropped_in: str
    handling: str
    rewrite: Callable[[str, tuple, dict], tuple[tuple, dict]]


def _warn(api: str, what: str, release: str, instead: str) -> None:
    warnings.warn(f"{api}: {what} was dropped in {release}; {instead}", DeprecationWarning,
                  stacklevel=4)


def _removed(api: str, what: str, release: str, why: str) -> Exception:
    return validation("nki_removed_in_release", f"{api}: {what} was dropped in {release} "
                      f"({why})")


def _renamed(old: str, new: str, release: str):
    def rewrite(api, args, kwargs):
        if old in kwargs:
            if new in kwargs:
                raise _removed(api, f"{old}=", release, f"it is {new}= now; pass one of them")
            _warn(api, f"{old}=", release, f"it is called {new}= now")
            kwargs[new] = kwargs.pop(old)
        return args, kwargs
    return rewrite


def _no_effect(old: str, release: str):
    def rewrite(api, args, kwargs):
        if old in kwargs:
            _warn(api, f"{old}=", release, "it had no effect and is ignored")
            kwargs.pop(old)
        return args, kwargs
    return rewrite


def _dst(args: tuple, kwargs: dict):
    return kwargs["dst"] if "dst" in kwargs else (args[0] if args else None)


def _ignored_dtype(api, args, kwargs):
    """NKI 0.1.0 ignored unknown keywords, so ``dtype=`` left the destination's dtype in
    charge. Here too, as that release ran it: a deprecation warning when it names that dtype,
    a visible warning when it names another, since the cast it asks for is not made (AWS's
    current matmul tutorial copies PSUM into an fp32 tile with ``dtype=bfloat16`` and lets
    the DMA to its bf16 output round, which gives the same bits)."""
    if "dtype" not in kwargs:
        return args, kwargs
    from nki.lang.common import dtype_of

    want, have = dtype_of(kwargs.pop("dtype")), getattr(_dst(args, kwargs), "dtype", None)
    if have is None or want == dtype_of(have):
        _warn(api, "dtype=", R_0_2, "the destination's dtype decides (it is the same here)")
    else:
        warnings.warn(f"{api}: dtype={want.name} was dropped in {R_0_2}; NKI 0.1.0 ignored it "
                      f"and so does this call: the result keeps dst's {have.name} (give dst "
                      f"the dtype {want.name} to cast)", UserWarning, stacklevel=3)
    return args, kwargs


def _ignored_mask(api, args, kwargs):
    if "mask" in kwargs:
        raise _removed(api, "mask=", R_0_2, "NKI 0.1.0 ignored it and computed every element; "
                       "index the operands instead")
    return args, kwargs


def _rmw_copy(api, args, kwargs):
    """``dma_copy(dst, src, dst_rmw_op=np.add)`` (before NKI 0.3.0) is
    ``dma_compute(dst, [dst, src], np.add)``: the read-modify-write moved there."""
    if "dst_rmw_op" not in kwargs and "unique_indices" not in kwargs:
        return args, kwargs
    from nki.ir.ops import Alu
    from nki.lang.indirect import dma_compute
    from nki.lang.operators import as_alu

    names = ("dst", "src", "priority", "oob_mode", "dge_mode", "engine", "name")
    bound = dict(zip(names, args)) | kwargs
    op = bound.pop("dst_rmw_op", None)
    if op is None:
        _warn(api, "unique_indices=", R_0_3, "it belongs to nisa.dma_compute and is ignored")
        bound.pop("unique_indices")
        return (), bound
    if as_alu(op) is not Alu.add:
        raise _removed(api, "dst_rmw_op=", R_0_3, "only np.add maps onto nisa.dma_compute")
    _warn(api, "dst_rmw_op=", R_0_3, "it runs as nisa.dma_compute(dst, [dst, src], np.add)")
    extra = {k: bound[k] for k in ("oob_mode", "name", "unique_indices") if k in bound}
    return (), dict(_call=dma_compute, dst=bound["dst"], srcs=[bound["dst"], bound["src"]],
                    reduce_op=op, **extra)


_DST_CALLS = "every nisa call with a dst"

OLD_SPELLINGS: tuple[OldSpelling, ...] = (
    OldSpelling(_DST_CALLS, "dtype=", R_0_2, "ignored, as NKI 0.1.0 ignored it: a deprecation "
                "warning when it names dst's dtype, else a warning that the cast is not made",
                _ignored_dtype),
    OldSpelling(_DST_CALLS, "mask=", R_0_2, "an error (NKI 0.1.0 ignored it)", _ignored_mask),
    OldSpelling("nisa.nc_matmul", "psumAccumulateFlag=", R_0_2, "warning, ignored (it had no "
                "effect)", _no_effect("psumAccumulateFlag", R_0_2)),
    OldSpelling("nisa.nc_matmul", "is_moving_zero=", R_0_2, "warning, renamed "
                "is_moving_onezero=", _renamed("is_moving_zero", "is_moving_onezero", R_0_2)),
    OldSpelling("nisa.register_move", "imm=", R_0_3, "warning, renamed src=",
                _renamed("imm", "src", R_0_3)),
    OldSpelling("nisa.dma_copy", "dst_rmw_op=np.add, unique_indices=", R_0_3, "warning, runs "
                "as nisa.dma_compute(dst, [dst, src], np.add); other ops an error", _rmw_copy),
)


def _rules_for(api: str) -> list:
    return [o.rewrite for o in OLD_SPELLINGS if o.api in (api, _DST_CALLS)]


def _keywords_for(api: str) -> frozenset[str]:
    """The keywords whose presence makes a rule of ``api`` act (every rule acts on
    keywords only, those its spelling names)."""
    return frozenset(k for o in OLD_SPELLINGS if o.api in (api, _DST_CALLS)
                     for k in re.findall(r"(\w+)=", o.spelling))


def accept_old_spellings(fn: Callable, api: str) -> Callable:
    """``fn`` (a public ``nisa`` function) also taking the spellings earlier releases
    accepted (see :data:`OLD_SPELLINGS`)."""
    rules = _rules_for(api)
    keywords = _keywords_for(api)

    @functools.wraps(fn)
    @paused     # a rule never calls user code (nki/lang/userhook.py)
    def call(*args, **kwargs):
        if keywords.isdisjoint(kwargs):     # the usual call: no old spelling to rewrite
            return fn(*args, **kwargs)
        for rule in rules:
            args, kwargs = rule(api, args, kwargs)
        target = kwargs.pop("_call", fn)
        return target(*args, **kwargs)

    return call


def wrap_namespace(names: dict, prefix: str = "nisa") -> None:
    """Wrap every public function of a namespace module's ``globals()`` whose signature has
    a ``dst`` first parameter (the instructions) with :func:`accept_old_spellings`."""
    import inspect

    for key, value in list(names.items()):
        if key.startswith("_") or not inspect.isfunction(value):
            continue
        try:
            params = list(inspect.signature(value).parameters)
        except (TypeError, ValueError):
            continue
        if params and params[0] == "dst":
            names[key] = accept_old_spellings(value, f"{prefix}.{key}")
