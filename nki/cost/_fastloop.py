"""Numba-compiled scheduling loop (tables from nki/cost/fast.py). A line-by-line port of
nki/cost/schedule.py's CoreScheduler for one core without sync points: keep them in step
(tests/cost/test_fast.py compares their timelines). Everything lives in this one file, so
Numba's on-disk cache (keyed by file) can never run stale code.

Speed (what was measured, so it is not undone): every function below ``schedule_loop`` is
compiled without NRT reference counting (``_nrt=False``: none allocates), since Numba's
atomic incref/decref of each array argument of each call were ~2/3 of the loop; array rows
are copied column by column, never by row assignment (Numba's generic slice copy); DMA
engines keep their intervals in a sliding table and remember their back-to-back tail."""

from __future__ import annotations

import numpy as np
from numba import njit

CAP = 24
KEEP = 48
NSLOTS = 16
TENSOR = 0
DMA = 5
# operand table columns
FAM, WRITE, CONST, PITCH, PARTS, EXTENT, LOSHIFT, ISZ, OWNER, BYBYTES, COEF = range(11)


@njit(cache=True, _nrt=False)
def _box(ops, o, env):
    off = ops[o, CONST]
    for s in range(NSLOTS):
        c = ops[o, COEF + s]
        if c != 0:
            off += c * env[s]
    isz = ops[o, ISZ]
    pitch = ops[o, PITCH]
    if pitch != 0:
        p0 = off // pitch
        f = off - p0 * pitch - ops[o, LOSHIFT]
        return p0, p0 + ops[o, PARTS], f * isz, (f + ops[o, EXTENT]) * isz
    off -= ops[o, LOSHIFT]
    return 0, 1, off * isz, (off + ops[o, EXTENT]) * isz


@njit(cache=True, _nrt=False)
def _ready(rec, nrec, fam, p0, p1, b0, b1, inst, write, by_bytes):
    best = 0.0
    who = -1
    # scalar indexing only: a row view per record costs a reference count each (~2x slower)
    for j in range(nrec[fam]):
        if (write or rec[fam, j, 6] != 0.0) and rec[fam, j, 5] > best and \
                rec[fam, j, 0] < p1 and p0 < rec[fam, j, 1] and rec[fam, j, 2] < b1 and \
                b0 < rec[fam, j, 3] and (by_bytes or rec[fam, j, 4] == inst):
            best = rec[fam, j, 5]
            who = int(rec[fam, j, 7])
    return best, who


@njit(cache=True, _nrt=False)
def _move(rec, fam, dst, src):
    """Record ``src`` to row ``dst``, column by column (a row assignment goes through
    Numba's generic slice copy, several times slower)."""
    for k in range(8):
        rec[fam, dst, k] = rec[fam, src, k]


@njit(cache=True, _nrt=False)
def _merge(rec, nrec, fam):
    """In place, no allocation: the oldest half of the reads become one bounding record in
    front, the other records keep their order."""
    n = nrec[fam]
    reads = 0
    for j in range(n):
        if rec[fam, j, 6] == 0.0:
            reads += 1
    if reads < 2:
        for j in range(1, n):
            _move(rec, fam, j - 1, j)
        nrec[fam] = n - 1
        return
    half = max(2, reads // 2)   # always shortens: nrec stays <= CAP (schedule._Records)
    lo0, hi1, lo2, hi3, inst, end, who = np.inf, -np.inf, np.inf, -np.inf, 0.0, -np.inf, 0.0
    seen = 0
    out = 0
    for j in range(n):
        if rec[fam, j, 6] == 0.0 and seen < half:
            seen += 1
            lo0, hi1 = min(lo0, rec[fam, j, 0]), max(hi1, rec[fam, j, 1])
            lo2, hi3 = min(lo2, rec[fam, j, 2]), max(hi3, rec[fam, j, 3])
            inst = rec[fam, j, 4]
            if rec[fam, j, 5] > end:
                end, who = rec[fam, j, 5], rec[fam, j, 7]
        else:
            if out != j:
                _move(rec, fam, out, j)
            out += 1
    for j in range(out, 0, -1):
        _move(rec, fam, j, j - 1)
    rec[fam, 0, 0], rec[fam, 0, 1], rec[fam, 0, 2], rec[fam, 0, 3] = lo0, hi1, lo2, hi3
    rec[fam, 0, 4], rec[fam, 0, 5], rec[fam, 0, 6], rec[fam, 0, 7] = inst, end, 0.0, who
    nrec[fam] = out + 1


@njit(cache=True, _nrt=False)
def _add(rec, nrec, fam, p0, p1, b0, b1, inst, write, end, index):
    n = nrec[fam]
    if write:
        out = 0
        for j in range(n):
            if not (rec[fam, j, 4] == inst and p0 <= rec[fam, j, 0] and
                    rec[fam, j, 1] <= p1 and b0 <= rec[fam, j, 2] and rec[fam, j, 3] <= b1):
                if out != j:
                    _move(rec, fam, out, j)
                out += 1
        n = out
    rec[fam, n, 0], rec[fam, n, 1], rec[fam, n, 2], rec[fam, n, 3] = p0, p1, b0, b1
    rec[fam, n, 4], rec[fam, n, 5] = inst, end
    rec[fam, n, 6] = 1.0 if write else 0.0
    rec[fam, n, 7] = index
    nrec[fam] = n + 1
    if n + 1 > CAP:
        _merge(rec, nrec, fam)


QCAP = 2 * (KEEP + 1)   # rows per DMA engine: live intervals slide up, compacted when full


@njit(cache=True)
def _dma_state(nq):
    """Per engine: busy intervals ``(start, end, index)`` in rows ``head..head+n`` of ``dq``
    (sorted by start; dropping the oldest only moves ``head``), ``ptr[q] = (head, n, run)``
    where rows ``run..`` lie back to back (each starts by the end of the one before), the
    floor, and scratch for one placement (each engine's pieces, its end and blocker, the
    engines' order)."""
    return (np.zeros((nq, QCAP, 3)), np.zeros((nq, 3), np.int64), np.zeros(nq),
            np.zeros((nq, KEEP + 2, 2)), np.zeros(nq, np.int64),
            np.empty(nq), np.empty(nq, np.int64), np.empty(nq, np.int64))


@njit(cache=True, _nrt=False)
def _first_after(dq, ptr, q, t):
    """The first row of engine q ending after ``t``. The intervals never overlap, so ends
    rise with starts and the rows ending by ``t`` are a prefix (usually all but a few)."""
    lo, hi = ptr[q, 0], ptr[q, 0] + ptr[q, 1]
    if hi == lo or dq[q, hi - 1, 1] <= t:
        return hi
    hi -= 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if dq[q, mid, 1] <= t:
            lo = mid + 1
        else:
            hi = mid
    return hi


@njit(cache=True, _nrt=False)
def _fill(dq, ptr, floor, pieces, q, ready, dur):
    """Engine q's gaps from ``ready`` on that ``dur`` takes, piece by piece (round-robin
    service, schedule.DmaEngines._fill): writes q's pieces, returns (end, who, count)."""
    t = max(ready, floor[q])
    who = -1
    left = dur
    m = 0
    end = ptr[q, 0] + ptr[q, 1]
    j0 = _first_after(dq, ptr, q, t)    # the rows before it would all be skipped
    if j0 < end and j0 >= ptr[q, 2]:
        # back to back from j0 on: a gap before row j0 at most, then t runs to the last end
        s = dq[q, j0, 0]
        if s > t:
            run = min(s - t, left)
            pieces[q, 0, 0], pieces[q, 0, 1] = t, t + run
            m = 1
            left -= run
        if m == 0 or left > 0:        # the loop below stops only when a gap served it all
            t = dq[q, end - 1, 1]
            k = end - 1          # the row that set t: the first to reach the last end
            while k > j0 and dq[q, k - 1, 1] == t:
                k -= 1
            who = int(dq[q, k, 2])
        j0 = end
    for j in range(j0, end):
        s, e = dq[q, j, 0], dq[q, j, 1]
        if e <= t:
            continue
        if s > t:
            run = min(s - t, left)
            pieces[q, m, 0], pieces[q, m, 1] = t, t + run
            m += 1
            left -= run
            if left <= 0:
                break
        t = max(t, e)
        who = int(dq[q, j, 2])
    if left > 0 or m == 0:
        pieces[q, m, 0], pieces[q, m, 1] = t, t + left
        m += 1
    return pieces[q, m - 1, 1], who, m


@njit(cache=True, _nrt=False)
def _insert(dq, ptr, floor, q, ps, pe, index):
    """Insert a busy interval in start order (after equal starts); past KEEP the oldest
    goes and raises the floor."""
    h, n, run = ptr[q, 0], ptr[q, 1], ptr[q, 2]
    if h + n >= QCAP:                 # slide the live rows back to the front
        for j in range(n):
            dq[q, j, 0], dq[q, j, 1], dq[q, j, 2] = \
                dq[q, h + j, 0], dq[q, h + j, 1], dq[q, h + j, 2]
        run -= h
        h = 0
    end = h + n
    pos = end
    while pos > h and dq[q, pos - 1, 0] > ps:
        pos -= 1
    for m in range(end, pos, -1):
        dq[q, m, 0], dq[q, m, 1], dq[q, m, 2] = dq[q, m - 1, 0], dq[q, m - 1, 1], dq[q, m - 1, 2]
    dq[q, pos, 0], dq[q, pos, 1], dq[q, pos, 2] = ps, pe, index
    n += 1
    if pos == end:
        if n == 1 or ps > dq[q, pos - 1, 1]:
            run = pos
    else:                             # into a gap (rare): find the back-to-back tail again
        run = h + n - 1
        while run > h and dq[q, run, 0] <= dq[q, run - 1, 1]:
            run -= 1
    if n > KEEP:
        floor[q] = max(floor[q], dq[q, h, 1])
        h += 1
        n -= 1
        run = max(run, h)
    ptr[q, 0], ptr[q, 1], ptr[q, 2] = h, n, run


@njit(cache=True, _nrt=False)
def _before(fe, fw, x, y):
    """Whether engine x's (end, who, x) sorts before engine y's."""
    return fe[x] < fe[y] or (fe[x] == fe[y] and (fw[x] < fw[y] or (fw[x] == fw[y] and x < y)))


@njit(cache=True, _nrt=False)
def _place(dma, nq, ready, dur, k, index):
    """Put ``k`` packets on the engines that finish them soonest (DmaEngines.place)."""
    dq, ptr, floor, pieces, npieces, fe, fw, order = dma
    for q in range(nq):
        fe[q], fw[q], npieces[q] = _fill(dq, ptr, floor, pieces, q, ready, dur)
        order[q] = q
    # the k smallest (end, who, q), lexicographically as Python's sorted() orders tuples;
    # only which k and the k-th matter (each engine's pieces go on that engine alone)
    if k == nq:
        top = 0
        for q in range(1, nq):
            if _before(fe, fw, top, q):
                top = q
        order[nq - 1], order[top] = top, nq - 1
    else:
        for a in range(k):
            for b in range(a + 1, nq):
                x, y = order[a], order[b]
                if _before(fe, fw, y, x):
                    order[a], order[b] = y, x
    mask = 0
    start = np.inf
    for j in range(k):
        q = order[j]
        # q's pieces from the pass above still hold: placing on other engines leaves q as is
        start = min(start, pieces[q, 0, 0])
        for i in range(npieces[q]):
            _insert(dq, ptr, floor, q, pieces[q, i, 0], pieces[q, i, 1], index)
        mask |= 1 << q
    last = order[k - 1]
    return start, fe[last], mask, fw[last]


@njit(cache=True, _nrt=False)
def _operands_ready(ops, lo, nops, env, iters, depth, rec, nrec, boxes, ready, who):
    """The latest of ``ready`` and the times an instruction's operands ``lo..lo+nops`` become
    usable, with the instruction that decided it; each operand's box lands in ``boxes``."""
    for j in range(nops):
        o = lo + j
        p0, p1, b0, b1 = _box(ops, o, env)
        owner = ops[o, OWNER]
        inst = iters[owner] % depth if owner >= 0 else 0
        boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3], boxes[j, 4] = p0, p1, b0, b1, inst
        t, w = _ready(rec, nrec, ops[o, FAM], p0, p1, b0, b1, inst, ops[o, WRITE] != 0,
                      ops[o, BYBYTES] != 0)
        if t > ready:
            ready, who = t, w
    return ready, who


@njit(cache=True, _nrt=False)
def _on_engine(e, s, ready, who, index, prev_matmul, free, pfree, last, ports, ns, fixed,
               dep_ns, ls):
    """Place instruction ``s`` on compute engine ``e`` (in program order, after its shared
    ports): (start, end, the instruction that delayed it, whether a dependency did, and
    whether TensorE's last instruction was a matmul)."""
    fr = free[e]
    if ports[s, 0]:
        fr = max(fr, pfree[0])
    if ports[s, 1]:
        fr = max(fr, pfree[1])
    dep = ready > fr
    # the arch guide's static overhead also applies to an instruction that reads the result
    # of the one just before it on the same engine (ready == engine free); not on TensorE,
    # whose accumulating matmuls pipeline
    chained = (not dep) and who >= 0 and ready == fr and e != TENSOR
    start = ready + dep_ns[s] if (dep or chained) else fr
    d = ns[s] + fixed[s]
    if e == TENSOR and ls[s] != 0.0:
        d = max(d, ls[s]) if (prev_matmul and not dep) else d + ls[s]
    if e == TENSOR:
        prev_matmul = ls[s] != 0.0
    end = start + d
    free[e] = end
    if ports[s, 0]:
        pfree[0] = end
    if ports[s, 1]:
        pfree[1] = end
    pred = who if dep else last[e]
    last[e] = index
    return start, end, pred, dep, prev_matmul


@njit(cache=True, _nrt=False)
def _loop_step(code, trips, pc, sp, env, iters, st_begin, st_i, st_trip):
    """A loop row of the flattened program: enter a loop (kind 1: its trip count from the
    slot values, skipped when empty) or end an iteration (kind 2: back to the body or out).
    Returns the next row and the loop stack's depth."""
    if code[pc, 0] == 1:
        row = code[pc, 3]
        trip = trips[row, 0]
        for slot in range(NSLOTS):
            trip += trips[row, 1 + slot] * env[slot]
        if trip <= 0:
            return code[pc, 4] + 1, sp
        st_begin[sp], st_i[sp], st_trip[sp] = pc, 0, trip
        if code[pc, 2] >= 0:
            env[code[pc, 2]] = 0
        iters[code[pc, 1]] += 1
        return pc + 1, sp + 1
    top = sp - 1
    st_i[top] += 1
    if st_i[top] < st_trip[top]:
        b = st_begin[top]
        if code[b, 2] >= 0:
            env[code[b, 2]] = st_i[top]
        iters[code[b, 1]] += 1
        return b + 1, sp
    return pc + 1, sp - 1


@njit(cache=True, _nrt=False)
def _on_dma(s, ready, who, index, dma, nq, ns, packets, lat, fixed):
    """Place DMA instruction ``s`` on the queues: (start, end, the instruction that delayed
    it, whether a dependency did, the queues it used)."""
    start, end0, mask, blocker = _place(dma, nq, ready, ns[s], packets[s], index)
    dep = blocker < 0
    end = max(end0, ready + lat[s]) + fixed[s]
    return start, end, who if dep else blocker, dep, mask


@njit(cache=True)
def schedule_loop(code, trips, eng, ns, fixed, lat, ls, dep_ns, packets, op_lo, op_hi, ports, ops,
                  nfam, spills, params, out_s, out_f, out_p, out_d, out_q):
    """The loop's state allocated, then :func:`_run`: returns the executed instructions."""
    nq, nloops, ntensors = params[1], params[2], params[3]
    state = (np.zeros((nfam, CAP + 1, 8)), np.zeros(nfam, np.int64), _dma_state(nq),
             np.zeros(6), np.full(6, -1, np.int64), np.zeros(2), np.zeros(nloops, np.int64),
             np.zeros(NSLOTS, np.int64), np.zeros(ntensors), np.full(ntensors, -1, np.int64),
             np.zeros((64, 5), np.int64), np.zeros(64, np.int64), np.zeros(64, np.int64),
             np.zeros(64, np.int64))
    return _run(code, trips, eng, ns, fixed, lat, ls, dep_ns, packets, op_lo, op_hi, ports, ops,
                spills, params, out_s, out_f, out_p, out_d, out_q, state)


@njit(cache=True, _nrt=False)
def _run(code, trips, eng, ns, fixed, lat, ls, dep_ns, packets, op_lo, op_hi, ports, ops,
         spills, params, out_s, out_f, out_p, out_d, out_q, state):
    """The scheduling loop over the flattened program. Compiled without Numba's reference
    counts, as every function it calls: they allocate nothing, and the atomic count updates
    on each array argument of each call were ~2/3 of the loop's time."""
    depth, nq = params[0], params[1]
    rec, nrec, dma, free, last, pfree, iters, env, spill_end, spill_idx, boxes, st_begin, \
        st_i, st_trip = state
    sp = 0
    n = 0
    count = 0
    sptr = 0
    prev_matmul = False
    pc = 0
    ncode = code.shape[0]
    while pc < ncode:
        if code[pc, 0] != 0:
            pc, sp = _loop_step(code, trips, pc, sp, env, iters, st_begin, st_i, st_trip)
            continue
        s = code[pc, 1]
        pc += 1
        c = count
        count += 1
        e = eng[s]
        if e < 0:
            while sptr < spills.shape[0] and spills[sptr, 0] <= c:
                sptr += 1          # the spills of a free instruction are skipped, as in Python
            continue
        ready = 0.0
        who = -1
        while sptr < spills.shape[0] and spills[sptr, 0] < c:
            sptr += 1
        while sptr < spills.shape[0] and spills[sptr, 0] == c and spills[sptr, 1] == 0:
            t, w, n = _spill(spills[sptr, 2], spills[sptr, 3], 0.0, -1, spill_end, spill_idx,
                             dma, nq, ns, fixed, lat, packets, n, out_s, out_f,
                             out_p, out_d, out_q)
            if t > ready:
                ready, who = t, w
            sptr += 1
        nops = op_hi[s] - op_lo[s]
        ready, who = _operands_ready(ops, op_lo[s], nops, env, iters, depth, rec, nrec, boxes,
                                     ready, who)
        index = n
        if e == DMA:
            start, end, pred, dep, mask = _on_dma(s, ready, who, index, dma, nq, ns,
                                                  packets, lat, fixed)
        else:
            mask = 0
            start, end, pred, dep, prev_matmul = _on_engine(
                e, s, ready, who, index, prev_matmul, free, pfree, last, ports, ns, fixed,
                dep_ns, ls)
        out_s[n], out_f[n, 0], out_f[n, 1], out_p[n], out_d[n], out_q[n] = \
            s, start, end, pred, dep, mask
        n += 1
        for j in range(nops):
            o = op_lo[s] + j
            _add(rec, nrec, ops[o, FAM], boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3],
                 boxes[j, 4], ops[o, WRITE] != 0, end, index)
        while sptr < spills.shape[0] and spills[sptr, 0] == c:
            if spills[sptr, 1] == 1:
                _, _, n = _spill(spills[sptr, 2], spills[sptr, 3], end, index, spill_end,
                                 spill_idx, dma, nq, ns, fixed, lat, packets, n,
                                 out_s, out_f, out_p, out_d, out_q)
            sptr += 1
    return n


@njit(cache=True, _nrt=False)
def _spill(s, tensor, ready, who, spill_end, spill_idx, dma, nq, ns, fixed, lat,
           packets, n, out_s, out_f, out_p, out_d, out_q):
    if spill_end[tensor] > ready:
        ready, who = spill_end[tensor], spill_idx[tensor]
    start, end0, mask, blocker = _place(dma, nq, ready, ns[s], packets[s], n)
    dep = blocker < 0
    end = max(end0, ready + lat[s]) + fixed[s]
    out_s[n], out_f[n, 0], out_f[n, 1] = s, start, end
    out_p[n], out_d[n], out_q[n] = (who if dep else blocker), dep, mask
    spill_end[tensor], spill_idx[tensor] = end, n
    return end, n, n + 1
