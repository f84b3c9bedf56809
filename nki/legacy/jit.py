"""Legacy launch: ``nki.jit`` (AWS's keywords accepted), SPMD grids of any rank
(``kernel[4, 2](...)``), ``simulate_kernel``, ``baremetal``, ``benchmark``, ``profile`` and
``trace`` (spec §1.4, §2).

The programs of a grid are independent, so they are traced one after another into one
program, each grid dim a recorded affine loop whose iteration sets ``nl.program_id``; the
reroll pass folds identical programs back into a loop. ``shared_hbm`` tensors are created by
the first program and shared by the others. Kernel parameters become legacy tiles.
"""

from __future__ import annotations

import functools

from nki.cost.benchmark import benchmark as cost_benchmark
from nki.ir.ops import LoopKind
from nki.jit.kernel import Kernel
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import active, current, user_loc, validation
from nki.legacy.early_exit import replay_loop_exits
from nki.legacy.loops import check_abandoned
from nki.legacy.pending import state
from nki.legacy.tile import as_legacy


def _programs(fn, grid: tuple[int, ...], args, kwargs):
    """Run ``fn`` once per grid point inside nested recorded loops; the last result."""
    trace = current("kernel launch")
    st = state()
    st.grid = grid
    trace.meta["spmd_grid"] = tuple((int(g), getattr(g, "cores", 1)) for g in grid)

    def level(d: int, point: tuple[int, ...]):
        if d == len(grid):
            st.program, st.num_outputs = point, 0
            return fn(*args, **kwargs)
        rec = trace.begin_loop(LoopKind.AFFINE, user_loc())
        rec.spmd_axis = d
        try:
            result = None
            for i in range(grid[d]):
                trace.begin_iteration(rec)
                result = level(d + 1, point + (i,))
            return result
        finally:
            trace.end_loop(rec)

    return level(0, ())


def _hbm_results(result):
    """NKI 0.1's simulator returned on-chip tiles too (AWS's ``range_select`` example
    returns its SBUF result): each becomes a shared_hbm output the tile is stored into."""
    from nki.legacy.nl_base import ndarray, shared_hbm, store
    from nki.legacy.pending import Pending, value

    def out(r):
        if isinstance(r, Pending):
            r = value(r)
        if isinstance(r, NkiTensor) and r.buffer.on_chip:
            hbm = ndarray(r.shape, r.dtype, buffer=shared_hbm)
            store(hbm, r)
            return hbm
        return r

    if isinstance(result, (tuple, list)):
        return type(result)(out(r) for r in result)
    return out(result)


def _runner(user_fn, grid: tuple[int, ...]):
    """The traced function of a legacy kernel: legacy tiles in, the grid around the
    user's function (recompiled per trace where NKI 0.1's loop exits need it)."""

    @functools.wraps(user_fn)
    def legacy_kernel(*args, **kwargs):
        args = tuple(as_legacy(a) if isinstance(a, NkiTensor) else a for a in args)
        kwargs = {k: as_legacy(v) if isinstance(v, NkiTensor) else v for k, v in kwargs.items()}
        fn = replay_loop_exits(user_fn)          # NKI 0.1's return/break inside loops
        if not grid or all(g == 1 for g in grid):
            st = state()
            st.grid, st.program = grid, (0,) * len(grid)
            result = fn(*args, **kwargs)
        else:
            result = _programs(fn, grid, args, kwargs)
        check_abandoned(state().loops)
        return _hbm_results(result)

    return legacy_kernel


class LegacyKernel(Kernel):
    """A ``neuronxcc.nki.jit`` kernel: ``kernel(*arrays)`` or ``kernel[g0, g1, ...](...)``.

    Example:
        >>> @nki.jit                                  # doctest: +SKIP
        ... def add(a, b): ...
        >>> out = add[2, 3](a, b)                     # doctest: +SKIP
    """

    # neuronxcc.nki kernels take keyword-only tensors (AWS's flash_paged_attn_varlen)
    keyword_only_dropped_in = None

    def __init__(self, fn, grid: tuple[int, ...] = (), **options):
        super().__init__(_runner(fn, grid), **options)
        self.user_fn, self.grid = fn, grid
        # the disk cache re-checks the user's function by name: point it at the user's code
        self.__wrapped__ = fn
        self._grids: dict = {}

    def __getitem__(self, grid) -> LegacyKernel:
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        for g in grid:
            if not isinstance(g, int) or isinstance(g, bool) or g < 1:
                raise validation("nki_invalid_argument", f"kernel[{grid}]: grid dims must be "
                                 "positive ints")
        key = tuple((int(g), getattr(g, "cores", 1)) for g in grid)   # nl.nc(2) is not 2
        found = self._grids.get(key)
        if found is None:
            found = self._grids[key] = LegacyKernel(self.user_fn, grid, **self.options)
        return found

    def __call__(self, *args, **kwargs):
        if active() is not None:           # a sub-kernel called from a kernel: inline it
            if self.grid:
                raise validation("err_nested_kernel_with_spmd_grid", "a kernel with a launch "
                                 "grid cannot be called from a kernel")
            return replay_loop_exits(self.user_fn)(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def jit(func=None, mode: str = "auto", **kwargs):
    """``neuronxcc.nki.jit``: every mode runs on the simulator; AWS's other keywords are
    accepted and ignored.

    Example:
        >>> @nki.jit                                  # doctest: +SKIP
        ... def kernel(x): ...
    """
    if func is None:
        return lambda f: LegacyKernel(f, **kwargs)
    return LegacyKernel(func, **kwargs)


def _as_kernel(kernel) -> Kernel:
    return kernel if isinstance(kernel, Kernel) else LegacyKernel(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    """Run ``kernel`` (gridded or not) on the simulator with numpy arrays; numpy out.

    Example:
        >>> out = nki.simulate_kernel(add[2, 2], a, b)   # doctest: +SKIP
    """
    return _as_kernel(kernel)(*args, **kwargs)


def baremetal(kernel=None, **kwargs):
    """Decorator: the kernel runs on the simulator (no device needed)."""
    if kernel is None:
        return lambda k: _as_kernel(k)
    return _as_kernel(kernel)


def benchmark(kernel=None, **kwargs):
    """Decorator: the cost model's latency (µs) in AWS's result shape; the kernel also runs on
    the simulator (its outputs are returned, its host wall time is
    ``benchmark_result.host_wall_time_us``). See ``nki.cost.benchmark``.

    Example:
        >>> k = nki.benchmark(warmup=2, iters=5)(kernel)   # doctest: +SKIP
        >>> k(a); k.benchmark_result.nc_latency.get_latency_percentile(50)  # doctest: +SKIP
    """
    kwargs.setdefault("run", True)
    return cost_benchmark(kernel, as_kernel=_as_kernel, **kwargs)


profile = baremetal


def trace(func=None, **kwargs):
    """``@trace(...)``: a sub-kernel inlined into the calling kernel."""
    if func is None:
        return lambda f: LegacyKernel(f)
    return LegacyKernel(func)
