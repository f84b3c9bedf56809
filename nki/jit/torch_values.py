"""Exact conversions between torch tensors and the host numpy arrays the simulator uses,
without importing torch.

A kernel called with torch tensors gets torch from the tensor itself (``sys.modules``: the
caller has imported it), so calling a kernel never imports ``nki.torch`` — importing that
package enables the ``neuron`` device, which a user who only passes CPU tensors must not pay
for. bf16 and fp8 tensors have no numpy dtype of their own; they travel as their bit patterns
and are viewed as ml_dtypes arrays, so no value is ever rounded on the way in or out.
"""

from __future__ import annotations

import functools
import sys

import ml_dtypes
import numpy as np


def is_torch_tensor(x) -> bool:
    """True for a torch tensor, recognised by its type's module (torch is not imported)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _torch():
    torch = sys.modules.get("torch")
    if torch is None:
        raise ImportError("converting to torch needs torch imported first")
    return torch


@functools.lru_cache(maxsize=1)
def _bit_views() -> tuple[dict, dict]:
    """torch dtype → (same-width int dtype, ml_dtypes type), and the way back."""
    torch = _torch()
    table = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
             torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
             torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2)}
    back = {np.dtype(ml): (bits, tdt) for tdt, (bits, ml) in table.items()}
    return table, back


def to_numpy(t) -> np.ndarray:
    """A C-contiguous numpy copy (or view) of a tensor, bf16/fp8 as ml_dtypes.

    Example:
        >>> to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype   # doctest: +SKIP
        dtype(bfloat16)
    """
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    table, _ = _bit_views()
    if t.dtype in table:
        bits, ml = table[t.dtype]
        return t.view(bits).numpy().view(ml)
    return t.numpy()


def from_numpy(a: np.ndarray):
    """A CPU torch tensor holding exactly ``a``'s values (bf16/fp8 through their bits)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    _, back = _bit_views()
    if a.dtype in back:
        bits, tdt = back[a.dtype]
        view = np.int16 if bits is torch.int16 else np.uint8
        return torch.from_numpy(a.view(view).copy()).view(tdt)
    return torch.from_numpy(a.copy())


def copy_into(t, data: np.ndarray) -> None:
    """Write ``data`` back into the caller's tensor (inputs a kernel modified)."""
    with _torch().no_grad():
        t.copy_(from_numpy(data.reshape(tuple(t.shape))).to(t.device))
