# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 08 — testing your kernel against numpy/torch with nki.testing and pytest.

``nki.testing`` gives you four things:

* **inputs**: ``rand``/``randn``/``randint``/``rand_like`` — seeded, and exactly
  representable in the dtype you ask for (bf16/fp8 come back as ml_dtypes arrays, or torch
  tensors with ``as_torch=True``), so kernel and reference see the same numbers;
* **comparison**: ``assert_close`` with tolerances from one table keyed by dtype (a few ulps
  of the result's dtype; see ``nki/testing/tolerance.py`` for the reasoning) and a report
  that says where and how a result is wrong;
* **one-call checks**: ``check_kernel`` runs a kernel on both backends (compiled Numba and
  plain Python), demands bit-identical results, and compares with your reference;
* **pytest**: ``pytest_plugins = ["nki.testing.pytest_plugin"]`` brings the ``nki_backend``,
  ``nki_rng`` and ``nki_check`` fixtures; ``parametrize_shapes``/``parametrize_dtypes`` give
  readable test ids.

Run: ``python tutorials/08_testing.py``
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, check_kernel, rand, randint, randn


@nki.jit
def scale_rows_buggy(x, factor):
    """``x * factor`` — with a classic edge-tile bug: the last tile stops one row short."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((N + 127) // 128):
        p0 = i * 128
        p1 = min(N - 1, p0 + 128)          # BUG: should be min(N, p0 + 128)
        t = nl.ndarray((p1 - p0, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
        nisa.dma_copy(dst=out[p0:p1, :], src=t)
    return out


@nki.jit
def scale_rows(x, factor):
    """``x * factor``, fixed."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((N + 127) // 128):
        p0, p1 = i * 128, min(N, i * 128 + 128)
        t = nl.ndarray((p1 - p0, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
        nisa.dma_copy(dst=out[p0:p1, :], src=t)
    return out


def show_factories() -> None:
    x = randn((2, 4), "bf16", seed=0)
    print(f"randn((2, 4), 'bf16', seed=0) -> {x.dtype}:\n{x}")
    assert np.array_equal(x, randn((2, 4), "bf16", seed=0)), "same seed, same values"
    print(f"rand(4, 'fp8e4m3', low=-1, high=1): {rand(4, 'fp8e4m3', seed=1, low=-1, high=1)}")
    print(f"randint((1, 6), 0, 100): {randint((1, 6), 0, 100, seed=2)}")


def show_report() -> None:
    """The buggy kernel never writes the last row: nki fills unwritten outputs with NaN,
    and assert_close's report points straight at it."""
    x = randn((200, 64), seed=3)
    try:
        assert_close(scale_rows_buggy(x, 2.0), 2.0 * x.astype(np.float64), msg="scale_rows")
    except AssertionError as e:
        print(f"the buggy kernel fails, as it should:\n{e}")
    else:
        raise AssertionError("the buggy kernel passed")


def show_check_kernel() -> None:
    """Both backends, bit for bit, then the reference — torch when installed."""
    x = randn((300, 96), "bf16", seed=4)
    try:
        import torch  # noqa: F401
        check_kernel(scale_rows, lambda x, f: x * f, x, 0.5, reference_as="torch")
        print("check_kernel: numba == python bit for bit, and both match torch")
    except ImportError:
        check_kernel(scale_rows, lambda x, f: x * f, x, 0.5)
        print("check_kernel: numba == python bit for bit, and both match numpy")


TEST_FILE = '''
import numpy as np
from nki.kernels.softmax import softmax_rows
from nki.testing import parametrize_dtypes, parametrize_shapes, randn


def softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@parametrize_shapes("shape", [(128, 256), (200, 70)])
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
def test_softmax(nki_check, nki_rng, shape, dtype):
    x = randn(shape, dtype, seed=nki_rng, std=3.0)
    nki_check(softmax_rows, softmax_ref, x)      # both backends + the reference
'''


def run_pytest_example() -> int:
    """Write a conftest and a test file to a temporary folder and run pytest on them."""
    folder = tempfile.mkdtemp(prefix="nki_tutorial_08_")
    with open(os.path.join(folder, "conftest.py"), "w") as f:
        f.write('pytest_plugins = ["nki.testing.pytest_plugin"]\n')
    with open(os.path.join(folder, "test_softmax.py"), "w") as f:
        f.write(TEST_FILE)
    print("conftest.py:  pytest_plugins = [\"nki.testing.pytest_plugin\"]")
    print("test_softmax.py:" + textwrap.indent(TEST_FILE, "    "))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                           folder], capture_output=True, text=True, cwd=folder, timeout=600)
    print("\n".join(line for line in proc.stdout.splitlines() if "::" in line or "passed" in line))
    return proc.returncode


def main() -> int:
    show_factories()
    show_report()
    show_check_kernel()
    if run_pytest_example() != 0:
        raise AssertionError("the example pytest run failed")
    print("tutorial 08 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
