"""Cross-entropy loss over class logits with integer targets, and its gradient.

``cross_entropy(logits, targets) -> (loss, mean)`` for ``logits: [N, C]`` and ``targets:
[N]`` int32 class indices: the per-row loss ``logsumexp(logits[i]) - logits[i, targets[i]]``
``[N]`` and its mean ``[1]``, both fp32 (torch's ``F.cross_entropy`` with
``reduction="none"`` / ``"mean"``). ``cross_entropy_bwd(logits, targets)`` is the gradient of
the mean wrt the logits, ``(softmax(logits) - onehot(targets)) / N``, in the logits' dtype.

Tiling: rows go 128 per tile on the partitions; the class dim streams through SBUF in
chunks of up to 4096 columns, so SBUF use does not grow with the vocabulary. Per row tile
and chunk:

* the chunk's max and an *online* logsumexp: the running max ``m`` and running sum ``l`` are
  rescaled by ``exp(m_old - m_new)`` (``[P, 1]`` work only), and ``exp(x - m_new)`` runs on
  the Scalar engine with the chunk's row sum accumulated by the same instruction;
* the target logit, picked by comparing a constant column-index row (``iota``, built once)
  with the row's target: ``(iota == target - c0) · x`` in one ``scalar_tensor_tensor``,
  plus a row sum.

Then ``loss = log(l) + m - x[target]``. A single-chunk row skips the rescaling. The mean is a
sum over rows, i.e. over partitions: a ones-vector matmul on the Tensor engine accumulates
every tile's ``[P, 1]`` losses into one fp32 PSUM element.

The gradient takes ``m`` and ``l`` from the same pass, then writes per chunk
``exp(x - m - log(N·l)) - onehot/N`` (the division folded into the activation's bias). A
single-chunk row reuses the exponentials of the first pass instead. Targets must lie in
``[0, C)`` (no ``ignore_index``).
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import PMAX, _tiles

CHUNK = 4096
NEG_BIG = -3.0e38        # finite "minus infinity" for the running max


def _iota(C: int):
    """A [128, min(C, CHUNK)] fp32 tile whose every row is 0, 1, 2, ..."""
    w = min(C, CHUNK)
    it = nl.ndarray((PMAX, w), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=it, pattern=[[1, w]], offset=0, channel_multiplier=0)
    f = nl.ndarray((PMAX, w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=f, src=it)
    return f


def _col(P: int):
    return nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)


def _targets(targets, p0: int, p1: int):
    """The row tile's targets as a [P, 1] fp32 column (exact below 2**24 classes)."""
    P = p1 - p0
    ti = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ti, src=targets.reshape((targets.shape[0], 1))[p0:p1, :])
    tf = _col(P)
    nisa.tensor_copy(dst=tf, src=ti)
    return tf


def _shifted(tf, c0: int, P: int):
    """``target - c0`` ([P, 1] fp32): the target's column within the chunk starting at c0."""
    if c0 == 0:
        return tf
    t = _col(P)
    nisa.tensor_scalar(dst=t, data=tf, op0=nl.subtract, operand0=float(c0))
    return t


def _load(logits, p0: int, p1: int, c0: int, c1: int):
    t = nl.ndarray((p1 - p0, c1 - c0), dtype=logits.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=logits[p0:p1, c0:c1])
    return t


def _logsumexp_pass(logits, tf, p0: int, p1: int, iota, want_picked: bool):
    """One pass over a row tile's chunks: running max ``m``, running sum ``l`` of
    ``exp(x - m)``, and (optionally) the target logits. Returns ``(m, l, picked, single)``
    with ``single = (x, e)`` — the loaded logits and ``exp(x - m)`` — for a one-chunk row."""
    P = p1 - p0
    C = logits.shape[1]
    chunks = _tiles(C, CHUNK)
    picked = None
    if want_picked:
        picked = _col(P)
        nisa.memset(dst=picked, value=0.0)
    m, l_sum = None, _col(P)
    single = None
    for j, (c0, c1) in enumerate(chunks):
        w = c1 - c0
        x = _load(logits, p0, p1, c0, c1)
        cmax = _col(P)
        nisa.tensor_reduce(dst=cmax, op=nl.maximum, data=x, axis=1)
        if j == 0:
            m = m_new = cmax
        else:
            m_new = _col(P)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=cmax, op=nl.maximum)
        neg = _col(P)
        nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-1.0)
        e = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)
        s = l_sum if j == 0 else _col(P)
        nisa.activation(dst=e, op=nl.exp, data=x, bias=neg, reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        if j > 0:                          # l = l · exp(m_old - m_new) + s; m = m_new
            alpha = _col(P)
            nisa.activation(dst=alpha, op=nl.exp, data=m, bias=neg)
            nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=alpha,
                                      op1=nl.add, operand1=s)
            nisa.tensor_copy(dst=m, src=m_new)
        if want_picked:
            sel = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=sel, data=iota[0:P, 0:w], op0=nl.equal,
                                      operand0=_shifted(tf, c0, P), op1=nl.multiply,
                                      operand1=x)
            part = _col(P)
            nisa.tensor_reduce(dst=part, op=nl.add, data=sel, axis=1)
            nisa.tensor_tensor(dst=picked, data1=picked, data2=part, op=nl.add)
        if len(chunks) == 1:
            single = (x, e)
    return m, l_sum, picked, single


@nki.jit
def cross_entropy(logits, targets):
    """Per-row cross-entropy ``[N]`` and its mean ``[1]`` (fp32) for ``logits: [N, C]`` and
    int32 ``targets: [N]``.

    Example:
        >>> loss, mean = cross_entropy(logits, targets)   # doctest: +SKIP
    """
    N, C = logits.shape
    loss = nl.ndarray((N,), dtype=nl.float32, buffer=nl.shared_hbm)
    mean = nl.ndarray((1,), dtype=nl.float32, buffer=nl.shared_hbm)
    iota = _iota(C)
    ones = nl.ndarray((min(N, PMAX), 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.psum)
    rows = _tiles(N, PMAX)
    for t in nl.sequential_range(len(rows)):
        p0, p1 = rows[t]
        P = p1 - p0
        tf = _targets(targets, p0, p1)
        m, l_sum, picked, _ = _logsumexp_pass(logits, tf, p0, p1, iota, want_picked=True)
        lse = _col(P)
        nisa.activation(dst=lse, op=nl.log, data=l_sum)
        li = _col(P)                                      # (log(l) + m) - x[target]
        nisa.scalar_tensor_tensor(dst=li, data=lse, op0=nl.add, operand0=m,
                                  op1=nl.subtract, operand1=picked)
        nisa.dma_copy(dst=loss.reshape((N, 1))[p0:p1, :], src=li)
        nisa.nc_matmul(dst=acc, stationary=ones[0:P, :], moving=li, accumulate=t > 0)
    res = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, operand0=1.0 / N)
    nisa.dma_copy(dst=mean.reshape((1, 1)), src=res)
    return loss, mean


@nki.jit
def cross_entropy_bwd(logits, targets):
    """Gradient of the mean cross-entropy wrt ``logits``: ``(softmax - onehot) / N``, in the
    logits' dtype.

    Example:
        >>> dlogits = cross_entropy_bwd(logits, targets)   # doctest: +SKIP
    """
    N, C = logits.shape
    grad = nl.ndarray((N, C), dtype=logits.dtype, buffer=nl.shared_hbm)
    iota = _iota(C)
    rows = _tiles(N, PMAX)
    chunks = _tiles(C, CHUNK)
    for t in nl.affine_range(len(rows)):
        p0, p1 = rows[t]
        P = p1 - p0
        tf = _targets(targets, p0, p1)
        m, l_sum, _, single = _logsumexp_pass(logits, tf, p0, p1, iota, want_picked=False)
        if single is not None:
            scale = _col(P)                                    # 1 / (N · l)
            nisa.tensor_scalar(dst=scale, data=l_sum, op0=nl.multiply, operand0=float(N))
            nisa.reciprocal(dst=scale, data=scale)
        else:
            bias = _col(P)                                     # -m - log(N · l)
            nisa.activation(dst=bias, op=nl.log, data=l_sum, scale=float(N))
            nisa.tensor_tensor(dst=bias, data1=bias, data2=m, op=nl.add)
            nisa.tensor_scalar(dst=bias, data=bias, op0=nl.multiply, operand0=-1.0)
        for c0, c1 in chunks:
            w = c1 - c0
            onehot = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)   # onehot / N
            nisa.tensor_scalar(dst=onehot, data=iota[0:P, 0:w], op0=nl.equal,
                               operand0=_shifted(tf, c0, P), op1=nl.multiply,
                               operand1=1.0 / N)
            res = nl.ndarray((P, w), dtype=logits.dtype, buffer=nl.sbuf)
            if single is not None:
                nisa.scalar_tensor_tensor(dst=res, data=single[1], op0=nl.multiply,
                                          operand0=scale, op1=nl.subtract, operand1=onehot)
            else:
                x = _load(logits, p0, p1, c0, c1)
                p = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)   # softmax / N
                nisa.activation(dst=p, op=nl.exp, data=x, bias=bias)
                nisa.tensor_tensor(dst=res, data1=p, data2=onehot, op=nl.subtract)
            nisa.dma_copy(dst=grad[p0:p1, c0:c1], src=res)
    return grad


def cross_entropy_torch(logits, targets):
    """torch reference in float64: ``(per-row loss, mean)``."""
    import torch.nn.functional as F

    loss = F.cross_entropy(logits.double(), targets.long(), reduction="none")
    return loss, loss.mean().reshape(1)
