"""``nki.multi_rank_simulate``: one kernel on several ranks in one process, collectives
across them (NKI 0.7).

Each rank is a simulated device of its own: its own HBM, SBUF and PSUM, its own trace
(``ncc.rank_id()`` is the rank, ``ReplicaGroup`` ranks are world ranks). The ranks run
concurrently as threads of one launch (``nki.sim.runtime.run_cores``), so they meet in
every ``nki.collectives`` call exactly as the cores of an LNC launch do, deadlock reports
included. Each rank runs ``kernel[lnc]``'s LNC cores on its own HBM; in a collective, LNC
core c of every rank meets LNC core c of the others (each LNC core issues its own call, as
nki-library's LNC2 collective kernels are written), and ``nki.lnc`` calls stay within a rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from nki.errors import NkiTypeError, NkiValueError
from nki.ir.target import get_target
from nki.jit.args import to_tensor_arg
from nki.jit.kernel import Kernel, finish_call, prepare_call
from nki.jit.torch_values import is_torch_tensor
from nki.lang.tracer import user_loc
from nki.sim.runtime import run_cores


def multi_rank_simulate(kernel, *, world_size: int, per_rank_inputs) -> list:
    """Run ``kernel`` on ``world_size`` ranks; rank ``r`` calls ``kernel(*args, **kwargs)``
    with its ``(args, kwargs)`` pair. Returns the ranks' results in rank order.

    ``per_rank_inputs`` is a sequence of pairs in rank order, or a mapping with one key per
    rank ``0..world_size-1``. Tensor arguments (numpy arrays) may differ in contents but
    must have one shape and dtype on every rank; every other argument must be equal on
    every rank (all ranks run one specialization on AWS's hardware).

    Example:
        >>> outs = nki.multi_rank_simulate(all_reduce_kernel, world_size=2,
        ...     per_rank_inputs=[((np.full((4, 8), r, np.float32), rg), {})
        ...                      for r in range(2)])        # doctest: +SKIP
    """
    loc = user_loc()
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise NkiValueError("nki_invalid_argument", f"world_size must be a positive int, got "
                            f"{world_size!r}", loc)
    pairs = _rank_pairs(per_rank_inputs, world_size, loc)
    bound = [kernel._positional(args, kwargs) for args, kwargs in pairs]
    _check_agreement(kernel, bound, loc)
    calls = []
    for rank, (args, kwargs) in enumerate(bound):
        tensors = kernel._tensor_args(args)
        spec = kernel._specialize(args, kwargs, tensors, rank=(rank, world_size))
        calls.append(prepare_call(spec, tensors))
    exes = [e for c in calls for e in c.exes]
    views = [c.view for c in calls for _ in c.exes]
    run_cores(exes, views, get_target(calls[0].spec.settings.target),
              calls[0].spec.settings.check_uninit, cores_per_rank=kernel._lnc)
    return [finish_call(c) for c in calls]


def _rank_pairs(per_rank_inputs, world_size: int, loc) -> list[tuple[tuple, dict]]:
    """The ``(args, kwargs)`` of every rank, in rank order."""
    if isinstance(per_rank_inputs, Mapping):
        keys = sorted(per_rank_inputs, key=repr)
        if set(per_rank_inputs) != set(range(world_size)):
            raise NkiValueError("nki_invalid_argument", "per_rank_inputs as a mapping needs "
                                f"one key per rank 0..{world_size - 1}, got keys {keys}", loc)
        items = [per_rank_inputs[r] for r in range(world_size)]
    elif isinstance(per_rank_inputs, Sequence) and not isinstance(per_rank_inputs, str):
        items = list(per_rank_inputs)
        if len(items) != world_size:
            raise NkiValueError("nki_invalid_argument", f"per_rank_inputs has {len(items)} "
                                f"entries for world_size={world_size}", loc)
    else:
        raise NkiTypeError("nki_invalid_argument", "per_rank_inputs must be a sequence or a "
                           f"mapping of (args, kwargs) pairs, got {type(per_rank_inputs)}", loc)
    for r, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and isinstance(item[0], (tuple, list)) and isinstance(item[1], Mapping)):
            raise NkiTypeError("nki_invalid_argument", f"per_rank_inputs[{r}] must be an "
                               f"(args tuple, kwargs dict) pair, got {item!r}", loc)
    return [(tuple(a), dict(k)) for a, k in items]


def _check_agreement(kernel: Kernel, bound: list[tuple[tuple, dict]], loc) -> None:
    """Tensors of one shape and dtype on every rank; every other argument equal."""
    names = list(kernel._signature.parameters)
    args0, kwargs0 = bound[0]
    for r, (args, kwargs) in enumerate(bound[1:], start=1):
        values = [(names[i] if i < len(names) else f"arg{i}", a0, a)
                  for i, (a0, a) in enumerate(zip(args0, args))]
        values += [(k, kwargs0[k], kwargs[k]) for k in kwargs0]
        for name, first, mine in values:
            problem = _disagreement(first, mine)
            if problem:
                raise NkiValueError("nki_rank_inputs_mismatch", f"argument {name!r} of rank "
                                    f"{r} {problem} rank 0's", loc)


def _is_tensor(value) -> bool:
    return isinstance(value, np.ndarray) or is_torch_tensor(value)


def _disagreement(first, mine) -> str:
    """Why rank r's argument cannot share rank 0's specialization ('' when it can)."""
    if _is_tensor(first) != _is_tensor(mine):
        return "is a tensor where" if _is_tensor(mine) else "is not a tensor where it is in"
    if _is_tensor(first):
        a, b = to_tensor_arg(0, "a", first, None), to_tensor_arg(0, "b", mine, None)
        if a.array.shape != b.array.shape or a.dtype != b.dtype:
            return (f"is a {b.dtype.name} tensor of shape {b.array.shape}, unlike the "
                    f"{a.dtype.name} {a.array.shape} of")
        return ""
    try:
        same = bool(first == mine)
    except Exception:  # noqa: BLE001 - values that cannot be compared cannot agree
        same = False
    return "" if same else f"is {mine!r}, not equal to {first!r} of"


def multi_rank_execute(kernel, *, world_size: int, per_rank_inputs) -> list:
    """AWS's hardware twin of :func:`multi_rank_simulate`. There is no Neuron device here,
    so it runs the ranks on the simulator (the same call, the same results).

    Example:
        >>> outs = nki.multi_rank_execute(k, world_size=2, per_rank_inputs=pairs)  # doctest: +SKIP
    """
    return multi_rank_simulate(kernel, world_size=world_size, per_rank_inputs=per_rank_inputs)
