"""Which scheduling loop ``backend="auto"`` takes (nki/cost/loop_tier.py): the compiled one
only when its machine code is at hand, else Python while one background process compiles it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from nki.cost import loop_tier

ABOVE = loop_tier.FAST_THRESHOLD + 1


@pytest.fixture
def state(monkeypatch):
    """Control what loop_tier sees: the tier, loaded/on disk, and record compile starts."""
    seen = {"starts": 0}

    def setup(tier="auto", loaded=False, on_disk=False):
        monkeypatch.setenv("NKI_TIER", tier)
        monkeypatch.setattr(loop_tier, "loaded", lambda: loaded)
        monkeypatch.setattr(loop_tier, "on_disk", lambda: on_disk)
        monkeypatch.setattr(loop_tier, "start_compile",
                            lambda: seen.__setitem__("starts", seen["starts"] + 1))
        return seen
    return setup


def test_small_programs_schedule_in_python_without_a_compile(state):
    seen = state(loaded=True)
    assert not loop_tier.use_compiled(loop_tier.FAST_THRESHOLD - 1)
    assert seen["starts"] == 0


@pytest.mark.parametrize("loaded, on_disk", [(True, False), (False, True)])
def test_machine_code_at_hand_takes_the_compiled_loop(state, loaded, on_disk):
    seen = state(loaded=loaded, on_disk=on_disk)
    assert loop_tier.use_compiled(ABOVE)
    assert seen["starts"] == 0


def test_cold_auto_schedules_in_python_and_starts_the_compile(state):
    seen = state()
    assert not loop_tier.use_compiled(ABOVE)
    assert seen["starts"] == 1
    # past the break-even the compile is cheaper than the Python loop: take it now
    assert loop_tier.use_compiled(loop_tier.COLD_COMPILE_MIN)


def test_tiers_compiled_and_python(state):
    seen = state(tier="compiled")
    assert loop_tier.use_compiled(ABOVE)
    seen = state(tier="python")
    assert not loop_tier.use_compiled(ABOVE)
    assert seen["starts"] == 0


@pytest.mark.slow
def test_background_compile_holds_the_lock_and_fills_the_cache(tmp_path):
    """A process that starts the compile and exits leaves a child holding the lock at once
    (no window for a second compile); when it is done, a new process finds the machine code
    on disk and takes it, with the same timeline as the Python loop."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "NKI_CACHE_DIR": str(tmp_path / "nki"), "NKI_TIER": "auto"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")

    def run(code: str) -> str:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run("""
        from nki.cost import loop_tier
        before = loop_tier.on_disk()
        loop_tier.start_compile()
        print(before, loop_tier.compiling())
    """) == ["False", "True"]
    assert run("""
        from nki.cost import loop_tier
        loop_tier.wait(240)
        print(loop_tier.compiling(), loop_tier.on_disk(), loop_tier.use_compiled(10**5))
    """) == ["False", "True", "True"]
