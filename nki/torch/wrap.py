"""TorchNeuron's launch and autograd helpers: ``wrap_nki(kernel)[grid](*args)`` and
``register_autograd(op, backward, setup_context=...)``.

``wrap_nki`` gives an ``@nki.jit`` kernel (or a plain kernel function) TorchNeuron's launch
syntax: ``wrap_nki(kernel)[2](x, y)`` runs it with LNC 2 on torch tensors (CPU or ``neuron``;
``neuron`` in, ``neuron`` out), ``wrap_nki(kernel)(x, y)`` with LNC 1. Every launch is counted
by :func:`nki.torch.kernel_counts`. Inside an :func:`nki.torch.nki_op` body it is the usual
way to call the kernel. Example::

    @nki_op("demo::add")
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return wrap_nki(add_kernel)[1](x, y)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nki.jit.kernel import Kernel, jit
from nki.torch.ops import launch


class WrappedKernel:
    """An NKI kernel launched from torch code: ``[grid]`` picks the LNC degree."""

    def __init__(self, kernel: Kernel | Callable, grid=1):
        self.kernel = kernel if isinstance(kernel, Kernel) else jit(kernel)
        self.grid = grid

    def __getitem__(self, grid) -> WrappedKernel:
        """``wrap_nki(k)[2]`` (or ``[(2,)]``): the launch on 2 logical cores (LNC 2)."""
        self.kernel[grid]    # checks the grid now, with the caller's line in the error
        return WrappedKernel(self.kernel, grid)

    def __call__(self, *args, **kwargs):
        kernel = self.kernel if self.grid == 1 else self.kernel[self.grid]
        if torch.compiler.is_compiling():   # Dynamo: the kernel call becomes a graph node,
            return kernel(*args, **kwargs)  # whose runs are counted (nki.torch.jit_ops)
        return launch(kernel, *args, **kwargs)

    def __repr__(self) -> str:
        return f"wrap_nki({self.kernel.__name__})[{self.grid!r}]"


def wrap_nki(kernel: Kernel | Callable) -> WrappedKernel:
    """TorchNeuron's ``wrap_nki``: ``wrap_nki(kernel)[grid](*tensors)`` runs ``kernel``."""
    return WrappedKernel(kernel)


def register_autograd(op, backward: Callable, *, setup_context: Callable | None = None) -> None:
    """Give a custom op (an :func:`nki.torch.nki_op`, or its qualified name) a backward, as
    ``torch.library.register_autograd``: ``setup_context(ctx, inputs, output)`` saves what
    ``backward(ctx, *grads)`` needs; it returns one gradient (or None) per input."""
    torch.library.register_autograd(op, backward, setup_context=setup_context)
