"""pytest plugin for NKI kernel tests. Enable it in your ``conftest.py``::

    pytest_plugins = ["nki.testing.pytest_plugin"]

Fixtures:

* ``nki_backend`` — ``"numba"`` and ``"python"``: a test using it runs once per backend
  (ids ``[numba]``, ``[python]``); ``--nki-backends=numba`` narrows the list.
* ``nki_rng`` — a ``numpy.random.Generator`` seeded from ``--nki-seed`` (default 0) and the
  test's id, so every test draws its own reproducible stream, independent of test order.
* ``nki_check`` — :func:`nki.testing.check_kernel` restricted to the selected backends.

A kernel test then reads::

    from nki.testing import parametrize_dtypes, parametrize_shapes, randn

    @parametrize_shapes("shape", [(256, 512), (100, 70)])
    @parametrize_dtypes("dtype", ["float32", "bfloat16"])
    def test_softmax(nki_check, nki_rng, shape, dtype):
        nki_check(softmax_rows, lambda x: scipy.special.softmax(x, -1),
                  randn(shape, dtype, seed=nki_rng))
"""

from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest

from nki.testing.kernel import BACKENDS, check_kernel


def pytest_addoption(parser) -> None:
    group = parser.getgroup("nki", "NKI kernel tests (nki.testing)")
    group.addoption("--nki-seed", type=int, default=0,
                    help="base seed of the nki_rng fixture (default 0)")
    group.addoption("--nki-backends", default=",".join(BACKENDS),
                    help="comma-separated backends for nki_backend/nki_check "
                         "(default: numba,python)")


def _backends(config) -> list[str]:
    chosen = [b.strip() for b in config.getoption("--nki-backends").split(",") if b.strip()]
    unknown = set(chosen) - set(BACKENDS)
    if unknown or not chosen:
        raise pytest.UsageError(f"--nki-backends: choose from {', '.join(BACKENDS)}")
    return chosen


def pytest_report_header(config) -> str:
    return (f"nki.testing: seed {config.getoption('--nki-seed')}, backends "
            f"{','.join(_backends(config))}")


def pytest_generate_tests(metafunc) -> None:
    # parametrised here rather than with fixture params so --nki-backends can narrow the list
    if "nki_backend" in metafunc.fixturenames:
        chosen = _backends(metafunc.config)
        metafunc.parametrize("nki_backend", chosen, ids=chosen, indirect=True)


@pytest.fixture
def nki_backend(request) -> str:
    """The execution backend for this test instance: ``"numba"`` or ``"python"``."""
    return request.param


@pytest.fixture
def nki_rng(request) -> np.random.Generator:
    """A generator seeded by ``--nki-seed`` and the test id (stable across runs and order)."""
    seed = request.config.getoption("--nki-seed")
    return np.random.default_rng([seed, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture
def nki_check(request):
    """:func:`nki.testing.check_kernel` with ``backends=`` preset from ``--nki-backends``."""
    return functools.partial(check_kernel, backends=tuple(_backends(request.config)))
