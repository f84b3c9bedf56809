"""The on-disk program cache: warm processes do not trace; stale or corrupt entries rebuild."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

KERNEL = textwrap.dedent('''
    import sys
    import numpy as np
    import nki, nki.language as nl, nki.isa as nisa

    FACTOR = {factor}

    def scale(tile):
        print("TRACED", file=sys.stderr)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=FACTOR)

    @nki.jit
    def kern(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        scale(t)
        nisa.dma_copy(dst=out, src=t)
        return out

    print(float(kern(np.ones((128, 4), np.float32))[0, 0]))
''')


def _run(tmp: Path, factor: float) -> tuple[str, str]:
    (tmp / "kmod.py").write_text(KERNEL.format(factor=factor))
    env = {**os.environ, "NKI_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(tmp)}
    r = subprocess.run([sys.executable, str(tmp / "kmod.py")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


def test_warm_process_loads_without_tracing(tmp_path):
    out, err = _run(tmp_path, 3.0)
    assert out == "3.0" and "TRACED" in err
    out, err = _run(tmp_path, 3.0)
    assert out == "3.0" and "TRACED" not in err


def test_changed_global_makes_entry_stale(tmp_path):
    _run(tmp_path, 3.0)
    out, err = _run(tmp_path, 5.0)     # FACTOR changed: the key alone cannot see it
    assert out == "5.0" and "TRACED" in err


def test_corrupt_entry_is_rebuilt(tmp_path):
    _run(tmp_path, 2.0)
    for entry in (tmp_path / "cache" / "specs").glob("*.pkl"):
        entry.write_bytes(b"not a pickle")
    out, err = _run(tmp_path, 2.0)
    assert out == "2.0" and "TRACED" in err


def test_cache_dir_is_private(tmp_path):
    _run(tmp_path, 1.0)
    mode = (tmp_path / "cache" / "specs").stat().st_mode & 0o777
    assert mode & 0o077 == 0


def _adder(n, cache_dir):
    import nki
    import nki.isa as nisa
    import nki.language as nl

    def body(t, n=n):          # the same code object for every n: only the default differs
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(n))

    def kern(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        body(t)
        nisa.dma_copy(dst=out, src=t)
        return out

    return nki.jit(kern, cache_dir=cache_dir)


def test_default_values_of_helpers_are_part_of_the_key(tmp_path):
    import numpy as np

    x = np.zeros((4, 4), np.float32)
    assert _adder(1, str(tmp_path))(x)[0, 0] == 1.0
    assert _adder(2, str(tmp_path))(x)[0, 0] == 2.0


def _helper_for_recorder(x):
    return x + 1


def _caster(dtype, cache_dir):
    import nki
    import nki.isa as nisa
    import nki.language as nl

    def kern(x):                # one code object: only the closure's dtype class differs
        out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    return nki.jit(kern, cache_dir=cache_dir)


def test_dtype_classes_in_a_closure_are_part_of_the_key(tmp_path):
    """np.float32 and ml_dtypes.bfloat16 are classes; hashed as "ignored", the second kernel
    would load the first one's program and return fp32 where bf16 was asked for."""
    import ml_dtypes
    import numpy as np

    x = np.linspace(-2, 2, 128 * 8, dtype=np.float32).reshape(128, 8) + np.float32(1e-3)
    a = _caster(np.float32, tmp_path)(x)
    b = _caster(ml_dtypes.bfloat16, tmp_path)(x)
    assert a.dtype == np.float32 and b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.bfloat16))


def test_recorder_sees_user_functions_and_leaves_an_installed_tracer_alone():
    from nki.jit.cache import DependencyRecorder

    outer = sys.gettrace()                  # None unless the tests run under coverage
    with DependencyRecorder() as deps:      # no tracer installed: recorded by sys.settrace
        _helper_for_recorder(1)
    assert any(q == "_helper_for_recorder" for _, q in deps.functions) and deps.cacheable
    assert sys.gettrace() is outer

    seen = []

    def tracer(frame, event, arg):
        seen.append(frame.f_code.co_name)

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with DependencyRecorder() as deps:  # a debugger or coverage: a profile hook instead
            _helper_for_recorder(1)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    assert "_helper_for_recorder" in seen and deps.cacheable
    assert any(q == "_helper_for_recorder" for _, q in deps.functions)


def test_tracer_installed_while_recording_makes_the_trace_uncacheable():
    from nki.jit.cache import DependencyRecorder

    previous = sys.gettrace()
    try:
        with DependencyRecorder() as deps:   # as breakpoint() would: ours is replaced
            sys.settrace(lambda *a: None)
        assert not deps.cacheable
    finally:
        sys.settrace(previous)


MOVED = textwrap.dedent('''
    import numpy as np
    import nki, nki.language as nl, nki.isa as nisa
    {padding}
    @nki.jit
    def kern(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    spec = kern.specialize(np.ones((128, 4), np.float32))
    print(min(t.loc.lineno for t in spec.cores[0].program.tensors if t.loc is not None))
''')


def test_code_moved_within_its_file_reports_its_new_lines(tmp_path):
    """A cached trace names source lines; the same code three lines lower must not reuse it."""
    env = {**os.environ, "NKI_CACHE_DIR": str(tmp_path / "cache")}
    lines = []
    for padding in ("", "\n\n\n"):
        (tmp_path / "moved.py").write_text(MOVED.format(padding=padding))
        r = subprocess.run([sys.executable, str(tmp_path / "moved.py")], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        lines.append(int(r.stdout.split()[-1]))
    source = MOVED.format(padding="\n\n\n").splitlines()
    first_tensor = next(i for i, s in enumerate(source, 1) if "nl.ndarray" in s)
    assert lines == [first_tensor - 3, first_tensor]
