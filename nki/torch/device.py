"""The ``neuron`` device: torch's PrivateUse1 backend, renamed, and its ``torch.neuron`` module.

:func:`enable` (run by ``import nki.torch``) loads the C++ extension (allocator, device
guard, hooks, the CPU-kernel fallback), renames PrivateUse1 to ``neuron`` and registers
*this module* as ``torch.neuron``, so its functions below are ``torch.neuron.device_count()``
and friends, with CUDA's names. Example::

    import torch, nki.torch
    x = torch.randn(4, 4, device="neuron")
    (x @ x).cpu()
    torch.neuron.memory_allocated()        # bytes held by live neuron tensors

Neuron memory is host memory: :func:`as_cpu` gives a CPU tensor on a neuron tensor's bytes
(no copy), which is how kernels read and write device tensors. ``NEURON_SIM_DEVICE_COUNT``
(default 8) sets how many devices there are; all run on this host, synchronously.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

from nki import config
from nki.torch import _build

_state: dict[str, Any] = {"ext": None}

DeviceLike = torch.device | str | int | None
_DEVICE_TYPE = int(torch._C._autograd.DeviceType.PrivateUse1)


class PrivateUse1TakenError(RuntimeError):
    """Another backend (e.g. AWS's torch-neuronx) already owns torch's PrivateUse1 device."""


def _check_private_use1_free() -> str:
    """PrivateUse1's current name, unless another backend holds it: torch has one
    PrivateUse1 device per process, and a backend renamed to ``neuron`` that is not this
    module (AWS's torch-neuronx uses the same name) owns it just as well."""
    name = torch._C._get_privateuse1_backend_name()
    theirs = name not in ("privateuseone", "neuron") or (
        name == "neuron" and getattr(torch, "neuron", None) not in (None, sys.modules[__name__]))
    if theirs:
        owner = getattr(getattr(torch, name, None), "__name__", "another package")
        raise PrivateUse1TakenError(
            f"torch's PrivateUse1 device is already taken by '{name}' (registered by {owner}); "
            "torch allows one per process, so nki's simulated 'neuron' device cannot be "
            "enabled here. Run with TORCH_DEVICE_BACKEND_AUTOLOAD=0 to keep other backends "
            "from claiming it on 'import torch', or use nki kernels with CPU tensors")
    return name


def enable() -> None:
    """Make ``neuron`` a torch device in this process (idempotent).

    Raises:
        nki.torch._build.BuildError: the C++ extension could not be compiled.
        PrivateUse1TakenError: another backend already owns torch's PrivateUse1 key.
    """
    if _state["ext"] is not None:
        return
    name = _check_private_use1_free()
    ext = _build.load("device")
    ext.set_device_count(config.neuron_sim_device_count())
    if name != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    if not hasattr(torch, "neuron"):
        torch._register_device_module("neuron", sys.modules[__name__])
    if not hasattr(torch.Tensor, "is_neuron"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    ext.mirror_cpu_kernels()
    torch.set_autocast_dtype("neuron", torch.bfloat16)  # Trainium's native low precision
    _state["ext"] = ext


def _ext():
    enable()
    return _state["ext"]


def _get_device_index(device: DeviceLike = None, optional: bool = True) -> int:
    """The index a device argument names (None, an int, ``"neuron:1"``, a torch.device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"Expected a neuron device, but got: {device}")
    return current_device() if device.index is None else device.index


_utils = types.SimpleNamespace(_get_device_index=_get_device_index)


# ---------------------------------------------------------------- devices

def is_available() -> bool:
    """True when the device is usable (its extension loads or builds)."""
    try:
        _ext()
    except RuntimeError:
        return False
    return True


def is_initialized() -> bool:
    return _state["ext"] is not None


def init() -> None:
    enable()


def _lazy_init() -> None:
    enable()


def _is_in_bad_fork() -> bool:
    return False  # host memory and no driver: forked children can use the device


def device_count() -> int:
    """How many simulated devices there are (``NEURON_SIM_DEVICE_COUNT``)."""
    return _ext().device_count()


def current_device() -> int:
    return _ext().current_device()


def set_device(device: DeviceLike) -> None:
    _ext().set_device(_get_device_index(device))


class device:  # noqa: N801  (torch.cuda.device's name)
    """Context manager that makes ``device`` the current neuron device."""

    def __init__(self, device: DeviceLike):
        self.index = _get_device_index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.previous)
        return False


def synchronize(device: DeviceLike = None) -> None:
    """Every op has finished when it returns; this only validates ``device``."""
    _ext().memory_allocated(_get_device_index(device))


def get_device_name(device: DeviceLike = None) -> str:
    return f"neuron:{_get_device_index(device)} (simulated NeuronCore)"


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


# ---------------------------------------------------------------- memory

def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live neuron tensors' storages on ``device``."""
    return _ext().memory_allocated(_get_device_index(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`."""
    return _ext().max_memory_allocated(_get_device_index(device))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _ext().reset_peak_memory_stats(_get_device_index(device))


reset_max_memory_allocated = reset_peak_memory_stats
memory_reserved = memory_allocated  # no caching allocator: reserved == allocated
max_memory_reserved = max_memory_allocated


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    return {"allocated_bytes.all.current": memory_allocated(device),
            "allocated_bytes.all.peak": max_memory_allocated(device)}


def empty_cache() -> None:
    """Nothing is cached: freed neuron memory returns to the host at once."""


# ---------------------------------------------------------------- RNG

def default_generator(device: DeviceLike = None) -> torch.Generator:
    """The generator random ops on ``device`` use when given none."""
    return _ext().default_generator(_get_device_index(device))


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (``torch.manual_seed`` calls this)."""
    for i in range(device_count()):
        default_generator(i).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    s = default_generator(0).seed()
    for i in range(1, device_count()):
        default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device: DeviceLike = "neuron") -> torch.Tensor:
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "neuron") -> None:
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def __getattr__(name: str):
    if name == "default_generators":  # torch.cuda.default_generators' counterpart
        return tuple(default_generator(i) for i in range(device_count()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- streams and events

class Stream:
    """``torch.neuron.Stream(device=None, priority=0)``: a ``torch.Stream`` on a neuron device.

    A factory (torch's stream and event methods accept only their own classes). Ops run
    synchronously, so every stream is always idle.
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> torch.Stream:
        return torch.Stream(device=torch.device("neuron", _get_device_index(device)),
                            priority=priority)


class Event:
    """``torch.neuron.Event(enable_timing=False, ...)``: a ``torch.Event`` on the current
    neuron device; ``elapsed_time`` measures host time between two records."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        return torch.Event(device=torch.device("neuron", current_device()),
                           enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device: DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_get_device_index(device))


def default_stream(device: DeviceLike = None) -> torch.Stream:
    """The device's default stream (stream id 0)."""
    index = _get_device_index(device)
    return torch.Stream(stream_id=0, device_index=index, device_type=_DEVICE_TYPE)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its device inside the ``with`` block."""
    if s is None:
        yield
        return
    previous = torch.accelerator.current_stream(s.device)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


# ---------------------------------------------------------------- zero-copy views

def as_cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor on the same bytes as neuron tensor ``t`` (no copy; CPU tensors as is).

    The result is detached from autograd; writing to it writes to ``t``. Example::

        as_cpu(x).numpy()      # read a neuron tensor with numpy, zero copy
    """
    return _ext().as_cpu(t)


def as_neuron(t: torch.Tensor, device: DeviceLike = None) -> torch.Tensor:
    """A neuron tensor on the same bytes as CPU tensor ``t`` (no copy; neuron tensors as is).

    The bytes count as neuron memory while the result lives; ``as_neuron(as_cpu(x))``
    shares ``x``'s storage.
    """
    return _ext().as_neuron(t, _get_device_index(device))


def fallback_calls() -> int:
    """How many aten calls ran torch's CPU kernel through the fallback so far."""
    return _ext().fallback_calls()


def set_sdpa_mask_grad_routed(routed: bool) -> None:
    """Let SDPA with a float ``attn_mask`` that requires grad onto the device's overrideable
    op (True) or keep it on the math path (False). :mod:`nki.torch.routing` sets it: the
    device's own SDPA backward has no mask gradient, its routed backward does."""
    _ext().set_sdpa_mask_grad_routed(bool(routed))


def sdpa_mask_grad_routed() -> bool:
    """The flag :func:`set_sdpa_mask_grad_routed` set (False until routing enables it)."""
    return _ext().sdpa_mask_grad_routed()
