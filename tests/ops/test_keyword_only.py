"""Keyword-only kernel parameters (``def kernel(x, *, y, out)``): tensors among them are
kernel tensors (inputs, outputs written in place), constants stay trace-time constants, in
both dialects. NKI 0.3.0 dropped the ``*`` separator from the current dialect, so there a
kernel using it runs with a DeprecationWarning naming that release."""

from __future__ import annotations

import neuronxcc.nki as legacy_nki
import neuronxcc.nki.language as lnl
import neuronxcc.nki.typing as lnt
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.errors import NkiError


def _axpy(x, *, y, scale=2.0, out=None):
    """``scale * x + y``, returned, or written into ``out`` when one is passed."""
    tx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ty = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tx, src=x)
    nisa.dma_copy(dst=ty, src=y)
    nisa.scalar_tensor_tensor(dst=tx, data=tx, op0=nl.multiply, operand0=scale,
                              op1=nl.add, operand1=ty)
    if out is not None:
        nisa.dma_copy(dst=out, src=tx)
        return None
    result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=tx)
    return result


def _jit(fn, **options):
    with pytest.warns(DeprecationWarning, match=r"keyword-only separator.*NKI 0\.3\.0"):
        return nki.jit(fn, **options)


def test_keyword_only_input_and_output(backend, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((128, 64)).astype(np.float32)
    k = _jit(_axpy, backend=backend)
    np.testing.assert_allclose(k(x, y=y), 2.0 * x + y, rtol=1e-6)
    out = np.full_like(x, np.nan)
    assert k(x, y=y, out=out) is None               # written in place, copied back
    np.testing.assert_allclose(out, 2.0 * x + y, rtol=1e-6)


def test_keyword_only_constant_stays_a_constant(backend, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    y = rng.standard_normal((128, 16)).astype(np.float32)
    k = _jit(_axpy, backend=backend)
    for scale in (3.0, -0.5):
        np.testing.assert_allclose(k(x, y=y, scale=scale), scale * x + y, rtol=1e-6)
    assert len(k._cache) == 2                       # one specialization per constant value
    ir = k.specialize(x, y=y, scale=3.0).ir          # the value is in the program
    assert "operand0_value=3 " in ir and "tensor scale" not in ir


def test_keyword_only_tensors_keep_their_names(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    k = _jit(_axpy)
    prog = k.specialize(x, y=x, out=x.copy()).cores[0].program
    assert [prog.tensor(i).name for i in prog.inputs] == ["x", "y", "out"]
    with pytest.raises(NkiError, match=r"(?s)nki_unsupported_dtype.*'y'.*float64"):
        k(x, y=x.astype(np.float64))


def test_keyword_only_placeholder_specializes():
    k = _jit(_axpy)
    spec = k.specialize(nt.tensor[[128, 8], nl.float32], y=nt.tensor[[128, 8], nl.float32])
    assert spec.num_instructions > 0
    with pytest.raises(NkiError, match="nki_shape_only_argument.*'y'"):
        k(np.zeros((128, 8), np.float32), y=nt.tensor[[128, 8], nl.float32])


def test_keyword_only_torch_tensors(backend):
    torch = pytest.importorskip("torch")
    x = torch.randn(128, 32)
    y = torch.randn(128, 32)
    out = torch.zeros(128, 32)
    k = _jit(_axpy, backend=backend)
    got = k(x, y=y)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, 2.0 * x + y)
    k(x, y=y, out=out)
    torch.testing.assert_close(out, 2.0 * x + y)


def test_tensor_through_var_keyword_is_refused():
    def kernel(x, **extra):
        return _axpy(x, y=x)

    with pytest.raises(NkiError, match=r"(?s)nki_invalid_argument.*'z'.*\*\*kwargs.*"
                                       r"test_keyword_only.py:\d+"):
        nki.jit(kernel)(np.ones((128, 8), np.float32), z=np.ones((128, 8), np.float32))


def test_kernel_without_keyword_only_does_not_warn(recwarn):
    nki.jit(lambda x, y: None)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


# ----- the legacy dialect (neuronxcc.nki), where AWS's kernels use keyword-only tensors -----

def _legacy_mix(a, *, b, bias=None, scale=1.0, out: lnt.mutable_tensor = None):
    """``scale * a + b (+ bias)``: into ``out`` when one is passed, else returned."""
    i_p, i_f = lnl.mgrid[0:a.shape[0], 0:a.shape[1]]
    t = lnl.load(a[i_p, i_f]) * scale + lnl.load(b[i_p, i_f])
    if bias is not None:
        t = t + lnl.load(bias[i_p, i_f])
    if out is not None:
        lnl.store(out[i_p, i_f], value=t)
        return None
    result = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    lnl.store(result[i_p, i_f], value=t)
    return result


def test_legacy_keyword_only_inputs_outputs_and_constants(backend, rng, recwarn):
    a, b, bias = (rng.standard_normal((128, 32)).astype(np.float32) for _ in range(3))
    k = legacy_nki.jit(_legacy_mix, backend=backend)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    np.testing.assert_allclose(k(a, b=b), a + b, rtol=1e-6)
    np.testing.assert_allclose(k(a, b=b, bias=bias, scale=0.5), 0.5 * a + b + bias,
                               rtol=1e-6)
    out = np.zeros_like(a)
    assert k(a=a, b=b, out=out, scale=-2.0) is None
    np.testing.assert_allclose(out, -2.0 * a + b, rtol=1e-6)


def test_legacy_keyword_only_only_and_grid(backend, rng):
    def only_keywords(*, a, b):
        return _legacy_mix(a, b=b, scale=3.0)

    a, b = (rng.standard_normal((128, 16)).astype(np.float32) for _ in range(2))
    k = legacy_nki.jit(only_keywords, backend=backend)
    np.testing.assert_allclose(k[1, 1](a=a, b=b), 3.0 * a + b, rtol=1e-6)
    np.testing.assert_allclose(legacy_nki.simulate_kernel(k, a=a, b=b), 3.0 * a + b,
                               rtol=1e-6)


def test_keyword_only_tensor_after_var_positional_is_refused():
    def kernel(x, *rest, y):
        return _axpy(x, y=y)

    with pytest.raises(NkiError, match=r"(?s)nki_invalid_argument.*'y'.*after \*args"):
        _jit(kernel)(np.ones((128, 8), np.float32), y=np.ones((128, 8), np.float32))


def test_keyword_only_tensors_under_torch_compile():
    """Inside torch.compile the call is one graph node, which calls the kernel again with the
    call's positional form (keyword-only tensors positional)."""
    torch = pytest.importorskip("torch")
    from nki.torch import compile as ncompile

    ncompile.register_backend()
    k = _jit(_axpy)
    x, y = torch.randn(128, 16), torch.randn(128, 16)
    fn = torch.compile(lambda a, b: k(a * 2, y=b, scale=0.5) + 1, backend="neuron",
                       fullgraph=True)
    torch.testing.assert_close(fn(x, y), 0.5 * (x * 2) + y + 1)
    assert k._flat_view() is k._flat_view()        # one graph op per kernel and launch
