"""``@nki.jit`` kernels called inside ``torch.compile``: each call becomes one graph node.

In eager mode a kernel called on torch tensors runs at once (``neuron`` in, ``neuron`` out).
Under ``torch.compile`` Dynamo must not trace the kernel's Python (it is a trace of its own):
once this module is enabled, which happens when a ``nki``/``neuron`` compile backend is looked
up (:func:`enable`, called by :mod:`nki.torch.compile` on import), every kernel is marked
``allow_in_graph``, so Dynamo records the call as is. Called on fake tensors, the kernel then
turns into a custom op made for it (``torch.ops.nki_jit.<kernel>_<n>``, one per kernel and
argument signature: shapes, dtypes and constants), whose fake kernel describes the outputs
from the kernel's trace and whose real kernel runs the kernel; AOTAutograd records that op,
one node. Inputs the kernel writes are declared mutated. A backward through the node raises
(a bare kernel has no derivative: make it an :func:`nki.torch.nki_op` with autograd).

Kernels are marked when enabled (every kernel made so far) and when made later, LNC clones
(``kernel[2]``) included; ``wrap_nki(kernel)[2](...)`` inside a compiled function calls the
kernel directly, so it is a node too. Runs of a node count in :func:`nki.torch.kernel_counts`.
"""

from __future__ import annotations

import itertools
import threading

import torch

from nki.jit.args import signature_of
from nki.jit.torch_values import describing, known_kernels
from nki.torch.ops import launch

NAMESPACE = "nki_jit"
_state = {"enabled": False}
# kernel (the object, not its id: each op keeps its kernel alive) -> {signature: its op}
_ops: dict = {}
_names = itertools.count()       # op names are never reused (torch cannot drop an op)
_lock = threading.Lock()


def enable() -> None:
    """Mark every kernel (made so far, and from now on) for Dynamo (idempotent; imports
    ``torch._dynamo``)."""
    from torch._dynamo import allow_in_graph

    with _lock:
        if _state["enabled"]:
            return
        _state["enabled"] = True
    for kernel in known_kernels():
        allow_in_graph(kernel)


def kernel_created(kernel) -> None:
    """A new kernel: marked for Dynamo if the bridge is enabled."""
    if _state["enabled"]:
        from torch._dynamo import allow_in_graph

        allow_in_graph(kernel)


def graph_call(spec, tensor_args: dict, kernel, args: tuple, kwargs: dict):
    """The kernel called on fake tensors while tracing: its custom op, called on them."""
    op = _op_for(spec, tensor_args, kernel, args, kwargs)
    out = op(*(tensor_args[i].original for i in sorted(tensor_args)))
    return None if isinstance(out, tuple) and not out else out


def _op_for(spec, tensor_args: dict, kernel, args: tuple, kwargs: dict):
    """The custom op of ``kernel`` for this argument signature (made on first use)."""
    key = (tuple(signature_of(a) for a in args),
           tuple(sorted((k, signature_of(v)) for k, v in kwargs.items())))
    with _lock:
        ops = _ops.setdefault(kernel, {})
        if key not in ops:
            ops[key] = _make_op(spec, sorted(tensor_args), kernel, args, kwargs)
        return ops[key]


def _make_op(spec, positions: list[int], kernel, args: tuple, kwargs: dict):
    """A custom op ``(t0, t1, ...) -> (Tensor, ...)`` over the call's tensors, the ones the
    kernel writes declared mutated (``Tensor(a1!) t1``), the constants fixed. (A ``Tensor[]``
    result would do for any count, but torch cannot functionalize it next to a mutation.)"""
    core = spec.cores[0]
    written = [tid in core.written_inputs for tid in core.input_ids]
    params = ", ".join(f"Tensor(a{i}!) t{i}" if w else f"Tensor t{i}"
                       for i, w in enumerate(written))
    n_out = len(core.output_ids)
    returns = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    name = f"{NAMESPACE}::{kernel.__name__}_{next(_names)}"

    def call(*tensors: torch.Tensor):
        full = list(args)
        for pos, t in zip(positions, tensors):
            full[pos] = t
        return launch(kernel, *full, **kwargs)     # counted unless fake

    def fake(*tensors: torch.Tensor):
        with describing():
            return call(*tensors)

    def no_backward(ctx, *grads):
        raise RuntimeError(
            f"nki kernel '{kernel.__name__}' has no backward: it was called on tensors that "
            "require grad inside torch.compile, and a bare @nki.jit kernel has no derivative. "
            "Register it as a custom op with nki.torch.nki_op (torch_neuronx.nki_op) and give "
            "it a backward with register_autograd, or call it under torch.no_grad()")

    mutated = [f"t{i}" for i, w in enumerate(written) if w]
    op = torch.library.custom_op(name, call, mutates_args=mutated,
                                 schema=f"({params}) -> {returns}")
    op.register_fake(fake)
    if not mutated:     # torch takes autograd formulas for functional ops only
        op.register_autograd(no_backward)
    return op
