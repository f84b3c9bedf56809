"""Exact conversions between torch tensors and the host numpy arrays the simulator uses.

bf16 and fp8 tensors have no numpy dtype of their own; they travel as their bit patterns and
are viewed as ml_dtypes arrays, so no value is ever rounded on the way in or out.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

_BITS = {
    torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
    torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
}
_BACK = {np.dtype(ml): (bits, tdt) for tdt, (bits, ml) in _BITS.items()}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy copy (or view) of a CPU tensor, bf16/fp8 as ml_dtypes."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.dtype in _BITS:
        bits, ml = _BITS[t.dtype]
        return t.view(bits).numpy().view(ml)
    return t.numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A torch tensor holding exactly ``a``'s values (bf16/fp8 through their bits)."""
    a = np.ascontiguousarray(a)
    if a.dtype in _BACK:
        bits, tdt = _BACK[a.dtype]
        view = np.int16 if bits is torch.int16 else np.uint8
        return torch.from_numpy(a.view(view).copy()).view(tdt)
    return torch.from_numpy(a.copy())


def copy_into(t: torch.Tensor, data: np.ndarray) -> None:
    """Write ``data`` back into the caller's tensor (inputs a kernel modified)."""
    with torch.no_grad():
        t.copy_(from_numpy(data.reshape(tuple(t.shape))).to(t.device))
