"""Differential fuzzing in CI: random small kernels from three fixed skeletons (see
``programs.py``), each run on the numba and python backends and checked step by step against
numpy. Derandomized and bounded so a run stays well under a minute once the three programs are
compiled; ``scripts/fuzz --examples 2000`` runs many more."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(__file__))
import programs  # noqa: E402

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

CI = settings(max_examples=25, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@CI
@given(programs.float_cases())
def test_float_chain(case):
    programs.check_float(case)


@CI
@given(programs.int_cases())
def test_int_chain(case):
    programs.check_int(case)


@CI
@given(programs.view_cases())
def test_views_and_data_movement(case):
    programs.check_views(case)


def test_oracle_catches_a_wrong_result(monkeypatch):
    """The harness is not vacuous: a perturbed oracle must fail."""
    case = programs.IntCase(P=3, F=4, bound=7, tt_op="add", op0="add", s0=1, op1=None, s1=0,
                            dcopy="int32", red_op="maximum", seed=1)
    monkeypatch.setattr(programs, "binary_i64", lambda op, a, b: (a.astype("int64") + b + 1))
    with pytest.raises(programs.MismatchError, match="tensor_tensor"):
        programs.check_int(case)
