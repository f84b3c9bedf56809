"""The per-kernel configs of ``nki.jit`` (``compile_config=``, ``specialization_config=``)
and sub-kernels: a ``@nki.jit`` kernel called from another kernel is inlined into the
caller's trace, under the caller's configuration."""

from __future__ import annotations

import warnings

from nki.compiler import CompileConfig, SpecializationConfig
from nki.errors import NkiTypeError, fail
from nki.lang.tracer import active, user_loc


def check_configs(compile_config, specialization_config) -> tuple:
    """The two configs ``nki.jit`` was given, type-checked (``None``: the defaults)."""
    if compile_config is not None and not isinstance(compile_config, CompileConfig):
        raise NkiTypeError("nki_invalid_compile_config", "compile_config must be an "
                           f"nki.compiler.CompileConfig, got {compile_config!r}", user_loc())
    if specialization_config is not None and \
            not isinstance(specialization_config, SpecializationConfig):
        raise NkiTypeError("nki_invalid_compile_config", "specialization_config must be an "
                           "nki.compiler.SpecializationConfig, got "
                           f"{specialization_config!r}", user_loc())
    return compile_config, specialization_config


def inline_nested(kernel, args: tuple, kwargs: dict):
    """Run ``kernel``'s function inside the active trace (a sub-kernel call).

    A sub-kernel with a launch grid is an error (``err_nested_kernel_with_spmd_grid``). A
    sub-kernel whose compile config differs from the top-level kernel's raises, unless the
    top-level kernel's ``SpecializationConfig(allow_nested_config_override=True)`` lets it
    inline under the top-level config with a warning (AWS's rule). A sub-kernel without a
    config simply inherits the caller's."""
    trace = active()
    loc = user_loc()
    if kernel._lnc != 1:
        raise fail("err_nested_kernel_with_spmd_grid", f"kernel {kernel.fn.__name__!r} is "
                   f"launched with kernel[{kernel._lnc}] from inside another kernel", loc)
    top, spec = trace.configs
    mine = kernel.compile_config
    if mine is not None and mine != (top or CompileConfig()):
        if spec is None or not spec.allow_nested_config_override:
            raise fail("nki_invalid_compile_config", f"Kernel '{kernel.fn.__name__}' is called "
                       "from inside another kernel but sets compile config "
                       f"{_differences(mine, top)} that differs from the calling kernel's; "
                       "a nested kernel is inlined under the top-level kernel's config (set "
                       "SpecializationConfig(allow_nested_config_override=True) on the "
                       "top-level kernel to allow it with a warning)", loc)
        warnings.warn_explicit(f"nested kernel {kernel.fn.__name__!r} sets compile config "
                               f"{_differences(mine, top)}; it is inlined under the top-level "
                               "kernel's config (allow_nested_config_override=True)",
                               UserWarning, loc.filename if loc else "<nki>",
                               loc.lineno if loc else 0)
    return kernel.fn(*args, **kwargs)


def _differences(mine: CompileConfig, top: CompileConfig | None) -> str:
    """The options where ``mine`` differs from ``top`` (the default config when None)."""
    base = top or CompileConfig()
    diff = [f"{name}={getattr(mine, name)!r}" for name in mine.__dataclass_fields__
            if getattr(mine, name) != getattr(base, name)]
    return "(" + ", ".join(diff) + ")"
