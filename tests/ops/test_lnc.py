"""``nki.lnc`` (NKI 0.8): core_barrier, sendrecv without pipe_id, sendrecv_compute (exchange
+ reduce), priority=, and the ``nki.isa`` spellings as deprecated wrappers. LNC-2 launches,
both backends, against numpy references; errors assert code, words and file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.lnc
from nki.errors import NkiRuntimeError, NkiValidationError


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_lnc\.py:\d+"


def _sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _reduce_halves(x, op, buffer):
    """Core c holds rows [c*h, (c+1)*h); both end with op(own half, peer half)."""
    me, half = nl.program_id(0), x.shape[0] // 2
    out = nl.ndarray((2 * half, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    mine = _sbuf(x[me * half:(me + 1) * half, :])
    src = mine
    if buffer == "hbm":
        src = nl.ndarray(mine.shape, dtype=x.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(dst=src, src=mine)
    dst = nl.ndarray(mine.shape, dtype=x.dtype,
                     buffer=nl.sbuf if buffer == "sbuf" else nl.private_hbm)
    nki.lnc.sendrecv_compute(src=src, dst=dst, send_to_rank=1 - me, recv_from_rank=1 - me,
                             reduce_op=op, priority=1)
    nisa.dma_copy(dst=out[me * half:(me + 1) * half, :], src=dst)
    return out


@pytest.mark.parametrize("op,ref", [(nl.add, np.add), (nl.maximum, np.maximum),
                                    (nl.minimum, np.minimum)], ids=["add", "max", "min"])
@pytest.mark.parametrize("buffer", ["sbuf", "hbm"])
def test_sendrecv_compute_reduces_both_halves(backend, op, ref, buffer):
    x = np.random.default_rng(3).standard_normal((128, 32)).astype(np.float32)
    y = _jit(_reduce_halves, backend=backend)[2](x, op, buffer)
    both = ref(x[:64], x[64:])
    np.testing.assert_array_equal(y, np.concatenate([both, both]))


def test_sendrecv_compute_bf16_rounds_once(backend):
    x = np.random.default_rng(4).standard_normal((128, 16)).astype(ml_dtypes.bfloat16)
    y = _jit(_reduce_halves, backend=backend)[2](x, nl.add, "sbuf")
    a, b = x[:64].astype(np.float32), x[64:].astype(np.float32)
    both = (a + b).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16), np.concatenate([both, both]).view(np.uint16))


def _lnc_exchange(x):
    """nki.lnc.sendrecv (no pipe_id) then nki.lnc.core_barrier."""
    me, half = nl.program_id(0), x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    mine = _sbuf(x[me * half:(me + 1) * half, :])
    theirs = nl.ndarray(mine.shape, dtype=x.dtype, buffer=nl.sbuf)
    nki.lnc.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me,
                     priority=0)
    nisa.dma_copy(dst=out[(1 - me) * half:(2 - me) * half, :], src=theirs)
    nki.lnc.core_barrier(data=out, cores=(0, 1))
    return out


def test_lnc_sendrecv_and_barrier(backend):
    x = np.random.default_rng(5).standard_normal((64, 8)).astype(np.float32)
    np.testing.assert_array_equal(_jit(_lnc_exchange, backend=backend)[2](x), x)


def _isa_spellings(x):
    me, half = nl.program_id(0), x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    mine = _sbuf(x[me * half:(me + 1) * half, :])
    total = nl.ndarray(mine.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv_compute(src=mine, dst=total, send_to_rank=1 - me, recv_from_rank=1 - me,
                          reduce_op=nl.add)
    got = nl.ndarray(mine.shape, dtype=x.dtype, buffer=nl.sbuf)
    # pipe_id is ignored: messages pair in program order whatever the pipes say
    nisa.sendrecv(src=total, dst=got, send_to_rank=1 - me, recv_from_rank=1 - me,
                  pipe_id=me)
    nisa.dma_copy(dst=out[me * half:(me + 1) * half, :], src=got)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


def test_isa_spellings_warn_and_still_work(backend):
    x = np.random.default_rng(6).standard_normal((64, 8)).astype(np.float32)
    with pytest.warns(DeprecationWarning, match=r"nki\.isa\.sendrecv_compute is deprecated.*"
                      r"nki\.lnc\.sendrecv_compute") as record:
        y = _jit(_isa_spellings, backend=backend)[2](x)
    np.testing.assert_array_equal(y, np.concatenate([x[:32] + x[32:]] * 2))
    texts = {str(w.message).split(" is ")[0] for w in record}
    assert texts >= {"nki.isa.sendrecv", "nki.isa.sendrecv_compute", "nki.isa.core_barrier"}
    assert all(w.filename == __file__ for w in record if w.category is DeprecationWarning)


def _compute_vs_plain(x):
    me = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = _sbuf(x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    if me == 0:
        nki.lnc.sendrecv_compute(src=t, dst=r, send_to_rank=1, recv_from_rank=1,
                                 reduce_op=nl.add)
    else:
        nki.lnc.sendrecv(src=t, dst=r, send_to_rank=0, recv_from_rank=0)
    nisa.dma_copy(dst=out[me * 2:(me + 1) * 2, :], src=r[me * 2:(me + 1) * 2, :])
    return out


def test_compute_never_pairs_with_plain_sendrecv(backend):
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_deadlock",
                                                   "nisa.sendrecv at test_lnc")):
        _jit(_compute_vs_plain, backend=backend)[2](np.ones((4, 4), np.float32))


def _bad(kind):
    def kernel(x):
        me = nl.program_id(0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = _sbuf(x)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        if kind == "op":
            nki.lnc.sendrecv_compute(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me,
                                     reduce_op=nl.multiply)
        elif kind == "priority":
            nki.lnc.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me,
                             priority=4)
        elif kind == "gpsimd":
            nki.lnc.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me,
                             dma_engine=nisa.dma_engine.gpsimd_dma, priority=0)
        elif kind == "shared":
            nki.lnc.sendrecv_compute(src=x, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me,
                                     reduce_op=nl.add)
        nisa.dma_copy(dst=out, src=r)
        return out
    return kernel


@pytest.mark.parametrize("kind,code,words", [
    ("op", "nki_invalid_argument", ("reduce_op=multiply", "nl.add, nl.maximum or nl.minimum")),
    ("priority", "nki_invalid_argument", ("priority=4", "0 \\(highest\\) to 3")),
    ("gpsimd", "nki_invalid_argument", ("priority=None", "gpsimd_dma")),
    ("shared", "err_unsupported_memory", ("src", "shared_hbm")),
])
def test_lnc_rules(kind, code, words):
    with pytest.raises(NkiValidationError, match=_err(code, *words)):
        _jit(_bad(kind))[2](np.ones((4, 4), np.float32))


def test_lnc_needs_two_cores_and_trn2():
    with pytest.raises(NkiValidationError, match=_err("nki_lnc_degree", "kernel\\[2\\]")):
        _jit(_lnc_exchange)(np.ones((4, 4), np.float32))
    with pytest.raises(NkiValidationError, match=_err("nki_unsupported_on_target",
                                                      "NeuronCore-v3", "trn1")):
        _jit(_lnc_exchange, target="trn1")[2](np.ones((4, 4), np.float32))
