"""Cross-entropy loss over class logits with integer targets, and its gradient.

``cross_entropy(logits, targets, ignore_index=-100) -> (loss, mean)`` for ``logits: [N, C]``
and ``targets: [N]`` int32 class indices: the per-row loss ``logsumexp(logits[i]) -
logits[i, targets[i]]`` ``[N]`` and its mean ``[1]``, both fp32 (torch's ``F.cross_entropy``
with ``reduction="none"`` / ``"mean"``). Rows whose target is ``ignore_index`` have loss 0
and are left out of the mean, which divides by the number of kept rows (NaN if none is
kept, as torch). ``cross_entropy_bwd(logits, targets, ignore_index=-100, reduction="mean")``
is the gradient of the mean (or of the sum) wrt the logits, ``valid · (softmax(logits) -
onehot(targets)) / n_valid`` (``/ 1`` for the sum), in the logits' dtype; ignored rows get 0.

Tiling: rows go 128 per tile on the partitions; the class dim streams through SBUF in
chunks of up to 4096 columns, so SBUF use does not grow with the vocabulary. Per row tile
and chunk:

* the chunk's max and an *online* logsumexp: the running max ``m`` and running sum ``l`` are
  rescaled by ``exp(m_old - m_new)`` (``[P, 1]`` work only), and ``exp(x - m_new)`` runs on
  the Scalar engine with the chunk's row sum accumulated by the same instruction;
* the target logit, gathered: one indirect DMA per row tile reads element ``r * C +
  target[r]`` of the flattened logits into a ``[P, 1]`` column (the index built in int32 from
  an ``iota`` of ``r * C`` and the target clamped into ``[0, C)``, exact on GpSimd's native
  integers), not a one-hot product and a row sum over every chunk: two passes over the
  logits fewer, on the Vector engine and here.

Then ``loss = valid · (log(l) + m - x[target])`` with ``valid = (target != ignore_index)``.
A single-chunk row skips the rescaling. The mean is a sum over rows, i.e. over partitions: a
ones-vector matmul on the Tensor engine accumulates every tile's ``[P, 2]`` columns
``(loss, valid)`` into two fp32 PSUM elements, and their quotient is the mean.

The gradient first counts the kept rows the same way, but with a ``[P, 128]`` ones matrix as
the stationary operand, so the count arrives broadcast on all 128 partitions; each row's
factor is ``f = valid / max(count, 1)`` (all rows ignored: gradient 0, as torch). It takes
``m`` and ``l`` from the same pass as the forward, then writes per chunk ``exp(x - m) ·
(f / l) - onehot · f``. A single-chunk row reuses the exponentials of the first pass. Targets
other than ``ignore_index`` must lie in ``[0, C)``.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import PMAX, _tiles

CHUNK = 4096
NEG_BIG = -3.0e38        # finite "minus infinity" for the running max
_INT_EXACT = 1 << 31     # int32: the gather's row-major index r * C + target stays below


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


def _target_ints(targets, p0: int, p1: int):
    """The row tile's targets as a [P, 1] int32 column."""
    ti = nl.ndarray((p1 - p0, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ti, src=targets.reshape((targets.shape[0], 1))[p0:p1, :])
    return ti


def _as_float(ti):
    """An int32 column as fp32 (exact below 2**24 classes)."""
    tf = _col(ti.shape[0])
    nisa.tensor_copy(dst=tf, src=ti)
    return tf


def _targets(targets, p0: int, p1: int):
    """The row tile's targets as a [P, 1] fp32 column (exact below 2**24 classes)."""
    return _as_float(_target_ints(targets, p0, p1))


def _row_starts(C: int):
    """``r * C`` on partition r ([128, 1] int32): where each row of a tile starts in the
    flattened logits (the same for every row tile; built once)."""
    starts = nl.ndarray((PMAX, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=starts, pattern=[[0, 1]], offset=0, channel_multiplier=C)
    return starts


def _picked(logits, ti, starts, p0: int, p1: int):
    """``logits[r, targets[r]]`` for the row tile as a [P, 1] fp32 column: one indirect DMA
    of one element per row from the flattened logits. The target is clamped into
    ``[0, C)`` first, so an ``ignore_index`` row reads an element of its own row (its loss is
    zeroed by ``valid`` afterwards) and no index leaves the tile's rows."""
    P = p1 - p0
    N, C = logits.shape
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)           # r * C + target
    nisa.tensor_scalar(dst=idx, data=ti, op0=nl.maximum, operand0=0, op1=nl.minimum,
                       operand1=C - 1)
    nisa.tensor_tensor(dst=idx, data1=idx, data2=starts[0:P, :], op=nl.add)   # int32: exact
    picked = _col(P)
    row_major = logits.reshape((N * C, 1))
    nisa.dma_copy(dst=picked, src=row_major.ap([[1, P], [1, 1]], p0 * C, vector_offset=idx,
                                               indirect_dim=0))
    return picked


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


def _logsumexp_pass(logits, p0: int, p1: int):
    """One pass over a row tile's chunks: running max ``m`` and running sum ``l`` of
    ``exp(x - m)``. Returns ``(m, l, single)`` with ``single = (x, e)`` — the loaded logits
    and ``exp(x - m)`` — for a one-chunk row."""
    P = p1 - p0
    C = logits.shape[1]
    chunks = _tiles(C, CHUNK)
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
        if len(chunks) == 1:
            single = (x, e)
    return m, l_sum, single


def _valid(tf, P: int, ignore_index: int):
    """``1.0`` where the row's target is not ``ignore_index``, else ``0.0`` ([P, 1] fp32)."""
    v = _col(P)
    nisa.tensor_scalar(dst=v, data=tf, op0=nl.not_equal, operand0=float(ignore_index))
    return v


@nki.jit
def cross_entropy(logits, targets, ignore_index=-100):
    """Per-row cross-entropy ``[N]`` and its mean over the kept rows ``[1]`` (fp32) for
    ``logits: [N, C]`` and int32 ``targets: [N]``; rows targeting ``ignore_index`` count 0.

    Example:
        >>> loss, mean = cross_entropy(logits, targets)   # doctest: +SKIP
    """
    N, C = logits.shape
    if C >= _INT_EXACT // PMAX:
        raise ValueError(f"cross_entropy: {C} classes; the gather's int32 index r * C + "
                         f"target needs C < {_INT_EXACT // PMAX}")
    loss = nl.ndarray((N,), dtype=nl.float32, buffer=nl.shared_hbm)
    mean = nl.ndarray((1,), dtype=nl.float32, buffer=nl.shared_hbm)
    ones = nl.ndarray((min(N, PMAX), 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    acc = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.psum)      # (sum of losses, kept)
    starts = _row_starts(C)
    rows = _tiles(N, PMAX)
    for t in nl.sequential_range(len(rows)):
        p0, p1 = rows[t]
        P = p1 - p0
        ti = _target_ints(targets, p0, p1)
        picked = _picked(logits, ti, starts, p0, p1)
        m, l_sum, _ = _logsumexp_pass(logits, p0, p1)
        lse = _col(P)
        nisa.activation(dst=lse, op=nl.log, data=l_sum)
        li = _col(P)                                      # (log(l) + m) - x[target]
        nisa.scalar_tensor_tensor(dst=li, data=lse, op0=nl.add, operand0=m,
                                  op1=nl.subtract, operand1=picked)
        lv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)   # (loss · valid, valid)
        nisa.tensor_scalar(dst=lv[:, 1:2], data=ti, op0=nl.not_equal,
                           operand0=float(ignore_index))    # the int targets, exact
        nisa.tensor_tensor(dst=lv[:, 0:1], data1=li, data2=lv[:, 1:2], op=nl.multiply)
        nisa.dma_copy(dst=loss.reshape((N, 1))[p0:p1, :], src=lv[:, 0:1])
        nisa.nc_matmul(dst=acc, stationary=ones[0:P, :], moving=lv, accumulate=t > 0)
    tot = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=tot, src=acc)
    res = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)     # 0 / 0 = NaN as torch
    nisa.tensor_tensor(dst=res, data1=tot[:, 0:1], data2=tot[:, 1:2], op=nl.divide)
    nisa.dma_copy(dst=mean.reshape((1, 1)), src=res)
    return loss, mean


def _row_factors(targets, rows, ignore_index: int, mean: bool):
    """Per row tile ``(targets as fp32, f)`` with ``f = valid / max(kept rows, 1)`` (the mean)
    or ``f = valid`` (the sum), [P, 1] each. The count is a ones-matrix matmul: its
    [128, 1] result holds the total on every partition."""
    tfs = [_targets(targets, p0, p1) for p0, p1 in rows]
    valid = [_valid(tf, p1 - p0, ignore_index) for tf, (p0, p1) in zip(tfs, rows)]
    if not mean:
        return tfs, valid
    ones = nl.ndarray((min(targets.shape[0], PMAX), PMAX), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    cnt = nl.ndarray((PMAX, 1), dtype=nl.float32, buffer=nl.psum)
    for t, (p0, p1) in enumerate(rows):
        nisa.nc_matmul(dst=cnt, stationary=ones[0:p1 - p0, :], moving=valid[t],
                       accumulate=t > 0)
    inv = _col(PMAX)                                       # 1 / max(count, 1)
    nisa.tensor_scalar(dst=inv, data=cnt, op0=nl.maximum, operand0=1.0)
    nisa.reciprocal(dst=inv, data=inv)
    facs = []
    for v, (p0, p1) in zip(valid, rows):
        f = _col(p1 - p0)
        nisa.tensor_tensor(dst=f, data1=v, data2=inv[0:p1 - p0, :], op=nl.multiply)
        facs.append(f)
    return tfs, facs


@nki.jit
def cross_entropy_bwd(logits, targets, ignore_index=-100, reduction="mean"):
    """Gradient of the mean (``reduction="mean"``, over the kept rows) or the sum
    (``"sum"``) of the cross-entropy wrt ``logits``: ``f · (softmax - onehot)`` per row, in
    the logits' dtype; rows targeting ``ignore_index`` get 0.

    Example:
        >>> dlogits = cross_entropy_bwd(logits, targets)   # doctest: +SKIP
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"cross_entropy_bwd: reduction must be 'mean' or 'sum', "
                         f"got {reduction!r}")
    N, C = logits.shape
    grad = nl.ndarray((N, C), dtype=logits.dtype, buffer=nl.shared_hbm)
    iota = _iota(C)
    rows = _tiles(N, PMAX)
    chunks = _tiles(C, CHUNK)
    tfs, facs = _row_factors(targets, rows, ignore_index, reduction == "mean")
    for t in nl.affine_range(len(rows)):
        p0, p1 = rows[t]
        P = p1 - p0
        tf, f = tfs[t], facs[t]
        m, l_sum, single = _logsumexp_pass(logits, p0, p1)
        scale = _col(P)                                        # f / l
        nisa.tensor_tensor(dst=scale, data1=f, data2=l_sum, op=nl.divide)
        neg = None
        if single is None:
            neg = _col(P)
            nisa.tensor_scalar(dst=neg, data=m, op0=nl.multiply, operand0=-1.0)
        for c0, c1 in chunks:
            w = c1 - c0
            onehot = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)   # onehot · f
            nisa.tensor_scalar(dst=onehot, data=iota[0:P, 0:w], op0=nl.equal,
                               operand0=_shifted(tf, c0, P), op1=nl.multiply, operand1=f)
            if single is not None:
                e = single[1]
            else:
                x = _load(logits, p0, p1, c0, c1)
                e = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)   # exp(x - m)
                nisa.activation(dst=e, op=nl.exp, data=x, bias=neg)
            res = nl.ndarray((P, w), dtype=logits.dtype, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=res, data=e, op0=nl.multiply, operand0=scale,
                                      op1=nl.subtract, operand1=onehot)
            nisa.dma_copy(dst=grad[p0:p1, c0:c1], src=res)
    return grad


def cross_entropy_torch(logits, targets, ignore_index=-100):
    """torch reference in float64: ``(per-row loss, mean over the kept rows)``."""
    import torch.nn.functional as F

    x, t = logits.double(), targets.long()
    loss = F.cross_entropy(x, t, ignore_index=ignore_index, reduction="none")
    mean = F.cross_entropy(x, t, ignore_index=ignore_index, reduction="mean")
    return loss, mean.reshape(1)
