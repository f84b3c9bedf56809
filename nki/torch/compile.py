"""``torch.compile(model, backend="nki")``: AOTAutograd graphs whose matmuls are NKI ops.

The backend is named ``nki``; ``"neuron"``, TorchNeuron's name, is ours too unless another
package (AWS's ``torch-neuronx``) provides a backend of that name, which then wins: see
:func:`neuron_backend`. Installed, both names come from the ``torch_dynamo_backends`` entry
points; from a checkout, call :func:`register_backend`. The backend traces
forward and backward with AOTAutograd, then rewrites every ``aten.mm``,
``aten.bmm`` and ``aten.addmm`` node of both graphs into ``nki.matmul`` (``addmm`` becomes
``nki.matmul`` + ``aten.add``), so the NKI kernel is one node of the graph, and runs the graph
eagerly. SDPA on CPU tensors (torch's flash attention for CPU, forward and backward) becomes
``nki.flash_attention`` / ``nki.flash_attention_backward``; on ``neuron`` tensors the SDPA
node is the device's overrideable op, which already runs the NKI kernels through the routing
layer (``nki.torch.routing``).
"""

from __future__ import annotations

import operator
import threading
from collections import Counter

import torch
from torch import fx

from nki.torch import jit_ops, ops

BACKEND = "nki"
NEURON = "neuron"             # TorchNeuron's name, ours only where nobody else has it
aten = torch.ops.aten

_stats: Counter = Counter()
_stats_lock = threading.Lock()
_MATMULS = (aten.mm.default, aten.bmm.default)


def lowering_stats() -> dict[str, int]:
    """How many graphs were compiled and aten nodes rewritten since the last reset."""
    with _stats_lock:
        return dict(_stats)


def reset_lowering_stats() -> None:
    """Forget the counts of :func:`lowering_stats`."""
    with _stats_lock:
        _stats.clear()


def _count(key: str, n: int = 1) -> None:
    with _stats_lock:
        _stats[key] += n


def _nki_can_run(node: fx.Node) -> bool:
    """The node's output and tensor inputs are of one kernel dtype on a device the nki ops
    have an implementation for (fake values from AOTAutograd say which)."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.args
                                     if isinstance(a, fx.Node)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    devices = {v.device.type for v in vals}
    dtypes = {v.dtype for v in vals}
    return (len(dtypes) == 1 and dtypes <= set(ops.KERNEL_DTYPES)
            and devices <= {"cpu", "neuron"})


def _rewrite_addmm(graph: fx.Graph, node: fx.Node) -> None:
    """``addmm(bias, a, b, beta, alpha)`` -> ``beta * bias + alpha * nki.matmul(a, b)``."""
    bias, a, b = node.args[:3]
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    with graph.inserting_before(node):
        prod = graph.call_function(torch.ops.nki.matmul.default, (a, b))
        if alpha != 1:
            prod = graph.call_function(aten.mul.Tensor, (prod, alpha))
        new = prod
        if beta != 0:
            new = graph.call_function(aten.add.Tensor, (prod, bias), {"alpha": beta})
    prod.meta["val"] = node.meta["val"]
    new.meta["val"] = node.meta["val"]
    node.replace_all_uses_with(new)
    graph.erase_node(node)


def rewrite_matmuls(gm: fx.GraphModule) -> int:
    """Rewrite aten mm/bmm/addmm nodes of ``gm`` into ``nki.matmul``; returns how many."""
    graph = gm.graph
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not _nki_can_run(node):
            continue
        if node.target in _MATMULS:
            node.target = torch.ops.nki.matmul.default
            _count("aten.mm/bmm -> nki.matmul")
            done += 1
        elif node.target is aten.addmm.default:
            _rewrite_addmm(graph, node)
            _count("aten.addmm -> nki.matmul + add")
            done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done


# ---------------------------------------------------------------- CPU attention nodes

_FLASH_CPU = aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_CPU_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def restrided(t: torch.Tensor, size: list[int], stride: list[int]) -> torch.Tensor:
    """``t`` copied into a tensor of exactly ``size``/``stride``: a replaced node's outputs
    must keep the layout its meta kernel promised (later views in the graph rely on it)."""
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def _attention_args(node: fx.Node) -> dict | None:
    """The CPU flash attention node's arguments by name, if the NKI kernels can take it."""
    from torch.fx.operator_schemas import normalize_function

    pair = normalize_function(node.target, node.args, node.kwargs,
                              normalize_to_only_use_kwargs=True)
    kw = pair.kwargs if pair else None
    if not kw or kw.get("dropout_p", 0.0) != 0.0:
        return None
    vals = [kw["query"].meta.get("val"), kw["key"].meta.get("val"), *node.meta["val"]]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    if any(isinstance(d, torch.SymInt) for v in vals for d in (*v.shape, *v.stride())):
        return None                                   # dynamic shapes: left to torch
    q, k = vals[0], vals[1]
    ok = (q.dtype in ops.ATTENTION_DTYPES and q.dim() == 4 and q.shape[-1] <= 128
          and k.shape[1] == q.shape[1] and k.shape[-1] == q.shape[-1])
    return kw if ok else None


def _replace_multi(graph: fx.Graph, node: fx.Node, target, args: tuple) -> None:
    """Replace a multi-output node by ``target(*args)``, each output re-strided as before."""
    with graph.inserting_before(node):
        new = graph.call_function(target, args)
        fixed = []
        for i, val in enumerate(node.meta["val"]):
            item = graph.call_function(operator.getitem, (new, i))
            fixed.append(graph.call_function(restrided, (item, list(val.shape),
                                                         list(val.stride()))))
            fixed[-1].meta["val"] = val
    for user in list(node.users):
        if user.target is not operator.getitem:
            raise RuntimeError(f"unexpected use of {node}: {user.format_node()}")
        user.replace_all_uses_with(fixed[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)


def rewrite_attention(gm: fx.GraphModule) -> int:
    """Rewrite CPU flash-attention nodes (forward and backward) into ``nki.flash_attention``
    and ``nki.flash_attention_backward``; returns how many. On neuron, SDPA nodes are the
    device's overrideable op, which the routing layer already runs on NKI."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (_FLASH_CPU, _FLASH_CPU_BWD):
            continue
        kw = _attention_args(node)
        if kw is None:
            continue
        qkv = (kw["query"], kw["key"], kw["value"])
        extra = (kw.get("attn_mask"), kw.get("is_causal", False), kw.get("scale"))
        if node.target is _FLASH_CPU:
            _replace_multi(gm.graph, node, torch.ops.nki.flash_attention.default, qkv + extra)
            _count("aten.sdpa(cpu) -> nki.flash_attention")
        else:
            args = (kw["grad_out"], *qkv, kw["out"], kw["logsumexp"], None, *extra)
            _replace_multi(gm.graph, node, torch.ops.nki.flash_attention_backward.default, args)
            _count("aten.sdpa_backward(cpu) -> nki.flash_attention_backward")
        done += 1
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def _compile_graph(gm: fx.GraphModule, example_inputs):
    """fw/bw compiler of the backend: the rewrites, then eager execution of the graph."""
    from torch._functorch.aot_autograd import make_boxed_func

    rewrite_matmuls(gm)
    rewrite_attention(gm)
    _count("graphs")
    return make_boxed_func(gm.forward)


def nki_backend(gm: fx.GraphModule, example_inputs, **kwargs):
    """The ``backend="nki"`` compiler: AOTAutograd with the NKI rewrites on both graphs."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph)
    return backend(gm, example_inputs, **kwargs)


def foreign_neuron_entry_point():
    """Another distribution's ``torch_dynamo_backends`` entry point named ``neuron`` (AWS's
    torch-neuronx), or None. Reading entry points imports nothing."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="torch_dynamo_backends"):
        if ep.name == NEURON and not ep.value.startswith("nki."):
            return ep
    return None


def neuron_backend(gm: fx.GraphModule, example_inputs, **kwargs):
    """The ``backend="neuron"`` entry: another package's ``neuron`` backend when one is
    installed (two distributions may declare the name and torch keeps either), else ours."""
    theirs = foreign_neuron_entry_point()
    compiler = theirs.load() if theirs is not None else nki_backend
    return compiler(gm, example_inputs, **kwargs)


def register_backend() -> None:
    """Make ``torch.compile(..., backend="nki")`` available, and ``"neuron"`` when no other
    backend has that name (idempotent).

    Importing this module does not register anything: ``torch._dynamo`` costs ~2 s to
    import, and the ``torch_dynamo_backends`` entry points naming :func:`nki_backend` and
    :func:`neuron_backend` let dynamo load the backend itself on first use.
    """
    from torch._dynamo.backends.registry import _COMPILER_FNS, list_backends
    from torch._dynamo.backends.registry import register_backend as register

    list_backends()                 # loads every entry point's name first
    if _COMPILER_FNS.get(BACKEND) is not nki_backend:
        _COMPILER_FNS.pop(BACKEND, None)    # a stale registration (e.g. a reloaded module)
        register(nki_backend, name=BACKEND)
    current = _COMPILER_FNS.get(NEURON)
    if current is None and foreign_neuron_entry_point() is None:
        register(neuron_backend, name=NEURON)
    elif getattr(current, "__module__", None) == __name__ and current is not neuron_backend:
        _COMPILER_FNS.pop(NEURON)           # ours, from a reloaded module
        register(neuron_backend, name=NEURON)


# This module is imported when torch.compile looks up the nki/neuron backend (entry points) or
# by register_backend: from then on @nki.jit calls in compiled code are graph nodes.
jit_ops.enable()
