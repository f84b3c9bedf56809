"""Differential fuzzing: small random kernels run on both backends and checked against numpy.

Each *skeleton* is a straight-line kernel with a fixed sequence of instructions; a *case*
(drawn by hypothesis) fills in what varies: shapes (1..128 partitions, odd ones included),
dtypes, ALU/activation operators, scalars, views (steps, offsets, transposes) and the data.
Generated source depends only on the instruction sequence (origin comments name lines and
tensors, not shapes or operators), so one skeleton costs one Numba compile however many cases
run: that keeps a CI run short.

Every intermediate is also an output, so each instruction is checked *stepwise* against a
numpy oracle applied to the simulator's own inputs to that step: errors do not compound and a
mismatch names the instruction. Oracles are written here (numpy fp32 IEEE arithmetic,
ml_dtypes round-to-nearest-even), independent of the helpers, except the activation oracle
(``reference_activation``, float64 numpy/scipy) and the row-reduction oracle.

Checks per case: numba and python backends agree bit for bit on every output; data movement,
integer and bitwise results and fp32 add/sub/mul/div/max/min are exact; activations and
summations are within a stated tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.ops import Act
from nki.sim.emit.activation import reference_activation

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
DTYPES = {"fp32": F32, "bf16": BF16, "int32": I32}
NL_DTYPES = {"fp32": nl.float32, "bf16": nl.bfloat16, "int32": nl.int32}
BACKENDS = ("numba", "python")

FLOAT_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
INT_BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "bitwise_and",
              "bitwise_or", "bitwise_xor")
ACTIVATIONS = ("copy", "exp", "tanh", "sigmoid", "relu", "square", "abs", "silu",
               "gelu_apprx_tanh", "sin", "sqrt", "negative")
REDUCE_FLOAT = ("add", "maximum", "minimum")
# valid input ranges (of |z|) of ScalarE functions, spec §4.2; outside them results are invalid
DOMAINS = {"sin": (0.0, np.pi), "sqrt": (2.0 ** -116, 2.0 ** 118)}
REDUCE_INT = ("bitwise_and", "bitwise_or", "bitwise_xor", "maximum", "minimum")


# ----- numpy oracles ----------------------------------------------------------------------------

def cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """What an engine write does: fp32 → dtype, round to nearest even; ints saturate (NaN→0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast(np.asarray(x), dtype)


def _cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == I32:
        if x.dtype.kind in "iu":
            return np.clip(x.astype(np.int64), -2**31, 2**31 - 1).astype(np.int32)
        f = np.nan_to_num(x.astype(np.float64), nan=0.0)
        return np.clip(np.rint(f), -2**31, 2**31 - 1).astype(np.int32)
    return x.astype(F32).astype(dtype)


def f32(x: np.ndarray) -> np.ndarray:
    """Decode to fp32 as an engine reads (ints through fp32, i.e. rounded beyond 2**24)."""
    return np.asarray(x).astype(F32)


def binary_f32(op: str, a, b) -> np.ndarray:
    """IEEE fp32 ``a op b`` (NaN propagates through max/min like np.maximum)."""
    a, b = np.asarray(a, F32), np.asarray(b, F32)
    with np.errstate(all="ignore"):
        return {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                "divide": np.divide, "maximum": np.maximum,
                "minimum": np.minimum}[op](a, b).astype(F32)


def binary_i64(op: str, a, b) -> np.ndarray:
    """Exact integer ``a op b`` (int64; saturated to int32 by :func:`cast` on write)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    return {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
            "maximum": np.maximum, "minimum": np.minimum, "bitwise_and": np.bitwise_and,
            "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}[op](a, b)


def reduce_rows(op: str, x: np.ndarray) -> np.ndarray:
    """Row reduction over the free axis: ints exactly, floats folded in fp32 in order."""
    if op.startswith("bitwise"):
        ufunc = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                 "bitwise_xor": np.bitwise_xor}[op]
        return ufunc.reduce(np.asarray(x, np.int64), axis=1)
    y = f32(x)
    acc = y[:, 0].copy()
    for j in range(1, y.shape[1]):
        acc = binary_f32(op, acc, y[:, j])
    return acc


# ----- comparing -------------------------------------------------------------------------------

class MismatchError(AssertionError):
    """A backend or oracle disagreement, naming the step."""


# NaN payloads are compared bit for bit (the fuzzer once found the backends disagreeing on
# the sign of tensor_reduce(negate=True)'s NaN: ``y * -1.0`` was a sign flip under Numba only;
# now ``-y`` in both). scripts/fuzz --loose-nan compares NaNs as equal whatever their bits.
STRICT_NAN_BITS = True


def _nan_to_canonical(x: np.ndarray) -> np.ndarray:
    if STRICT_NAN_BITS or x.dtype.kind not in "fV" and x.dtype != BF16:
        return x
    x = x.copy()
    x[np.isnan(x.astype(np.float32))] = np.nan
    return x


def same_bits(step: str, x: np.ndarray, y: np.ndarray) -> None:
    """Bit-identical (the two backends); NaN payloads only with STRICT_NAN_BITS."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    x, y = _nan_to_canonical(x), _nan_to_canonical(y)
    if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
        bad = np.flatnonzero(x.view(np.uint8) != y.view(np.uint8))
        raise MismatchError(f"{step}: numba and python backends differ ({len(bad)} bytes), e.g. "
                       f"{x.reshape(-1)[:4]} vs {y.reshape(-1)[:4]}")


def close(step: str, got: np.ndarray, want: np.ndarray, rtol: float = 0.0,
          atol: float = 0.0, zero_sign: bool = True) -> None:
    """Values equal (NaN matches NaN, exact when tolerances are 0; signed zeros must match
    when exact and ``zero_sign``) or within ``atol + rtol*|want|``."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    if g.shape != w.shape:
        raise MismatchError(f"{step}: shape {g.shape} != expected {w.shape}")
    both_nan = np.isnan(g) & np.isnan(w)
    if rtol == 0 and atol == 0:
        ok = both_nan | ((g == w) & ((np.signbit(g) == np.signbit(w)) | (not zero_sign)))
    else:
        with np.errstate(all="ignore"):
            ok = both_nan | (g == w) | (np.abs(g - w) <= atol + rtol * np.abs(w))
    if not ok.all():
        idx = np.argwhere(~ok)[0]
        raise MismatchError(f"{step}: {int((~ok).sum())} of {ok.size} elements differ; first at "
                       f"{tuple(int(i) for i in idx)}: got {g[tuple(idx)]!r}, expected "
                       f"{w[tuple(idx)]!r}")


def tolerance(dtype: np.dtype, rel_fp32: float) -> float:
    """Relative tolerance of a result rounded to ``dtype`` after fp32 error ``rel_fp32``."""
    return rel_fp32 + (2.0 ** -7 if dtype == BF16 else 0.0)


def run_backends(kernel_fn, *args) -> list[np.ndarray]:
    """Run on both backends; they must agree bit for bit. Returns the numba outputs."""
    runs = []
    for backend in BACKENDS:
        out = nki.jit(kernel_fn, backend=backend, cache=False)(*args)
        runs.append([np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))])
    for k, (x, y) in enumerate(zip(*runs)):
        same_bits(f"output {k}", x, y)
    return runs[0]


# ----- data ------------------------------------------------------------------------------------

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1e-30, -2.5,
                     65504.0, 3.0e5], np.float32)   # ±0, bf16 ties, tiny normal, big


def float_data(rng: np.random.Generator, shape, dtype: np.dtype, special: bool) -> np.ndarray:
    x = rng.standard_normal(shape).astype(F32) * np.float32(rng.choice([0.5, 2.0, 30.0]))
    if special:
        mask = rng.random(shape) < 0.3
        x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    return x.astype(dtype)


def int_data(rng: np.random.Generator, shape, bound: int) -> np.ndarray:
    return rng.integers(-bound, bound, size=shape, endpoint=True, dtype=np.int64).astype(I32)


# ----- skeleton 1: a float chain --------------------------------------------------------------

@dataclass(frozen=True)
class FloatCase:
    """dma(view) → tensor_tensor → tensor_scalar → activation → tensor_copy → tensor_reduce."""

    P: int
    F: int
    da: str
    db: str
    view: str            # how ``a`` is read: plain | rowstep | colstep | transposed
    tt_op: str
    d1: str
    op0: str
    s0: float
    rev0: bool
    op1: str | None
    s1: float
    rev1: bool
    d2: str
    act: str
    scale: float
    bias: float | None
    d3: str
    d4: str
    red_op: str
    negate: bool
    d5: str
    seed: int
    special: bool


def _a_view(a, view: str):
    if view == "rowstep":
        return a[1::2, :]
    if view == "colstep":
        return a[:, ::2]
    if view == "transposed":
        return a.permute((1, 0))
    return a


def float_chain(a, b, c: FloatCase):
    P, F = c.P, c.F
    outs = [nl.ndarray((P, F), dtype=NL_DTYPES[d], buffer=nl.shared_hbm)
            for d in (c.d1, c.d2, c.d3, c.d4)]
    o5 = nl.ndarray((P, 1), dtype=NL_DTYPES[c.d5], buffer=nl.shared_hbm)
    ta = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray((P, F), dtype=b.dtype, buffer=nl.sbuf)
    t = [nl.ndarray((P, F), dtype=NL_DTYPES[d], buffer=nl.sbuf) for d in (c.d1, c.d2, c.d3, c.d4)]
    t5 = nl.ndarray((P, 1), dtype=NL_DTYPES[c.d5], buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=_a_view(a, c.view))
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_tensor(dst=t[0], data1=ta, data2=tb, op=getattr(nl, c.tt_op))
    nisa.tensor_scalar(dst=t[1], data=t[0], op0=getattr(nl, c.op0), operand0=c.s0,
                       reverse0=c.rev0, op1=getattr(nl, c.op1) if c.op1 else None,
                       operand1=c.s1 if c.op1 else None, reverse1=c.rev1)
    nisa.activation(dst=t[2], op=getattr(nl, c.act), data=t[1], scale=c.scale, bias=c.bias)
    nisa.tensor_copy(dst=t[3], src=t[2])
    nisa.tensor_reduce(dst=t5, op=getattr(nl, c.red_op), data=t[3], axis=1, negate=c.negate)
    for o, tile in zip(outs, t):
        nisa.dma_copy(dst=o, src=tile)
    nisa.dma_copy(dst=o5, src=t5)
    return (*outs, o5)


def float_inputs(c: FloatCase) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(c.seed)
    shape = {"rowstep": (2 * c.P, c.F), "colstep": (c.P, 2 * c.F),
             "transposed": (c.F, c.P)}.get(c.view, (c.P, c.F))
    a = float_data(rng, shape, DTYPES[c.da], c.special)
    b = float_data(rng, (c.P, c.F), DTYPES[c.db], c.special)
    return a, b


def _host_view(a: np.ndarray, view: str) -> np.ndarray:
    return {"rowstep": lambda: a[1::2, :], "colstep": lambda: a[:, ::2],
            "transposed": lambda: a.T}.get(view, lambda: a)()


def _scalar_step(x, op: str, s: float, reverse: bool) -> np.ndarray:
    return binary_f32(op, s, x) if reverse else binary_f32(op, x, s)


def _signed(*ops: str | None) -> bool:
    """Whether the sign of a zero result is defined: max/min of +0 and -0 may give either."""
    return not any(op in ("maximum", "minimum") for op in ops)


def check_float(c: FloatCase) -> None:
    """Run one float-chain case and check every step."""
    a, b = float_inputs(c)
    o1, o2, o3, o4, o5 = run_backends(float_chain, a, b, c)
    d1, d2, d3, d4, d5 = (DTYPES[d] for d in (c.d1, c.d2, c.d3, c.d4, c.d5))
    close("tensor_tensor", o1, cast(binary_f32(c.tt_op, f32(_host_view(a, c.view)), f32(b)), d1),
          zero_sign=_signed(c.tt_op))
    y = _scalar_step(f32(o1), c.op0, c.s0, c.rev0)
    if c.op1:
        y = _scalar_step(y, c.op1, c.s1, c.rev1)
    close("tensor_scalar", o2, cast(y, d2), zero_sign=_signed(c.op0, c.op1))
    ref = reference_activation(Act[c.act], f32(o2), c.scale, c.bias)
    # at ±inf inputs the oracle's formulas may give NaN (silu: -inf * 0) where the function
    # has a limit; the engine's value there is not specified, so it is not compared
    z = f32(o2) * np.float32(c.scale) + np.float32(c.bias or 0.0)
    lo, hi = DOMAINS.get(c.act, (-np.inf, np.inf))
    outside = (np.abs(z) < lo) | (np.abs(z) > hi)    # "invalid results" there (spec §4.2)
    ref = np.where((np.isinf(z) & np.isnan(ref)) | outside, f32(o3), ref)
    want = cast(ref, d3)
    close(f"activation({c.act})", o3, want, rtol=tolerance(d3, 4e-6), atol=1e-6)
    close("tensor_copy", o4, cast(f32(o3), d4))
    red = reduce_rows(c.red_op, o4)
    red = -red if c.negate else red
    if c.red_op == "add":
        bound = np.abs(f32(o4).astype(np.float64)).sum(axis=1) * c.F * 2.0 ** -24
        close("tensor_reduce(add)", o5[:, 0], cast(red, d5),
              rtol=tolerance(d5, 0.0), atol=float(bound.max()) + 1e-30)
    else:
        close(f"tensor_reduce({c.red_op})", o5[:, 0], cast(red, d5), zero_sign=False)


# ----- skeleton 2: an integer chain -----------------------------------------------------------

@dataclass(frozen=True)
class IntCase:
    """int32: dma → tensor_tensor → tensor_scalar → tensor_copy (cast) → tensor_reduce."""

    P: int
    F: int
    bound: int
    tt_op: str
    op0: str
    s0: int
    op1: str | None
    s1: int
    dcopy: str
    red_op: str
    seed: int


def int_chain(a, b, c: IntCase):
    P, F = c.P, c.F
    o1 = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((P, F), dtype=NL_DTYPES[c.dcopy], buffer=nl.shared_hbm)
    o4 = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    ta = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    tb = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    t1 = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    t2 = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    t3 = nl.ndarray((P, F), dtype=NL_DTYPES[c.dcopy], buffer=nl.sbuf)
    t4 = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_tensor(dst=t1, data1=ta, data2=tb, op=getattr(nl, c.tt_op))
    nisa.tensor_scalar(dst=t2, data=t1, op0=getattr(nl, c.op0), operand0=c.s0,
                       op1=getattr(nl, c.op1) if c.op1 else None,
                       operand1=c.s1 if c.op1 else None)
    nisa.tensor_copy(dst=t3, src=t2)
    nisa.tensor_reduce(dst=t4, op=getattr(nl, c.red_op), data=t2, axis=1)
    for o, tile in ((o1, t1), (o2, t2), (o3, t3), (o4, t4)):
        nisa.dma_copy(dst=o, src=tile)
    return o1, o2, o3, o4


def _int_step(op: str, a, b) -> np.ndarray:
    """One ALU step on int32 data: bit ops and int32 add/sub/mul/max/min exactly (GpSimd
    native ints), wrapping to int32 (two's complement) like the GpSimd integer ALU."""
    return binary_i64(op, a, b).astype(np.int32)


def check_int(c: IntCase) -> None:
    rng = np.random.default_rng(c.seed)
    a, b = int_data(rng, (c.P, c.F), c.bound), int_data(rng, (c.P, c.F), c.bound)
    o1, o2, o3, o4 = run_backends(int_chain, a, b, c)
    close("tensor_tensor(int)", o1, _int_step(c.tt_op, a, b))
    y = _int_step(c.op0, o1, c.s0)
    if c.op1:
        y = _int_step(c.op1, y, c.s1)
    close("tensor_scalar(int)", o2, y)
    close("tensor_copy(int→)", o3, cast(f32(o2), DTYPES[c.dcopy]) if c.dcopy != "int32" else o2)
    if c.red_op.startswith("bitwise"):
        want = cast(reduce_rows(c.red_op, o2), I32)
    else:   # max/min run in fp32: ints beyond 2**24 are rounded on the way in
        want = cast(reduce_rows(c.red_op, o2), I32)
    close(f"tensor_reduce({c.red_op})", o4[:, 0], want)


# ----- skeleton 3: views and data movement ----------------------------------------------------

@dataclass(frozen=True)
class ViewCase:
    """HBM view (offsets, steps, transpose) → SBUF [P, A*B] (dtype cast) → permuted tensor_copy
    → stepped tensor_copy → DMA into a stepped and a transposed HBM view."""

    P: int
    A: int
    B: int
    dx: str
    dt: str
    r0: int
    rs: int
    c0: int
    cs: int
    transposed: bool
    odd: int             # 0 or 1: which half of the stepped copy
    seed: int


def _src_view(x, c: ViewCase):
    F = c.A * c.B
    v = x.permute((1, 0)) if c.transposed else x
    return v[c.r0:c.r0 + (c.P - 1) * c.rs + 1:c.rs, c.c0:c.c0 + (F - 1) * c.cs + 1:c.cs]


def view_moves(x, c: ViewCase):
    P, A, B = c.P, c.A, c.B
    F = A * B
    half = (F - c.odd + 1) // 2
    dt = NL_DTYPES[c.dt]
    o1 = nl.ndarray((P, F), dtype=dt, buffer=nl.shared_hbm)
    o2 = nl.ndarray((P, 2 * half), dtype=dt, buffer=nl.shared_hbm)
    o3 = nl.ndarray((F, P), dtype=dt, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=dt, buffer=nl.sbuf)
    u = nl.ndarray((P, B, A), dtype=dt, buffer=nl.sbuf)
    w = nl.ndarray((P, half), dtype=dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_src_view(x, c))
    nisa.tensor_copy(dst=u, src=t.reshape((P, A, B)).permute((0, 2, 1)))
    nisa.tensor_copy(dst=w, src=u.reshape((P, F))[:, c.odd::2])
    nisa.dma_copy(dst=o1, src=t)
    nisa.dma_copy(dst=o2[:, ::2], src=w)            # odd columns stay unwritten (sentinel)
    nisa.dma_copy(dst=o3.permute((1, 0)), src=u)
    return o1, o2, o3


def view_input(c: ViewCase) -> np.ndarray:
    rng = np.random.default_rng(c.seed)
    F = c.A * c.B
    rows, cols = c.r0 + (c.P - 1) * c.rs + 1, c.c0 + (F - 1) * c.cs + 1
    shape = (cols, rows) if c.transposed else (rows, cols)
    if c.dx == "int32":
        return int_data(rng, shape, 2**20)
    return float_data(rng, shape, DTYPES[c.dx], special=True)


def check_views(c: ViewCase) -> None:
    x = view_input(c)
    o1, o2, o3 = run_backends(view_moves, x, c)
    F = c.A * c.B
    v = x.T if c.transposed else x
    src = v[c.r0:c.r0 + (c.P - 1) * c.rs + 1:c.rs, c.c0:c.c0 + (F - 1) * c.cs + 1:c.cs]
    dt = DTYPES[c.dt]
    t = src if x.dtype == dt else cast(f32(src), dt)
    close("dma_copy(view)", o1, t)
    u = t.reshape(c.P, c.A, c.B).transpose(0, 2, 1)
    w = u.reshape(c.P, F)[:, c.odd::2]
    sentinel = np.full((c.P, 2 * w.shape[1]), 4 if dt == I32 else np.nan)
    sentinel[:, ::2] = w.astype(np.float64)
    close("tensor_copy(permute) + stepped copy + stepped dma", o2, sentinel)
    close("dma_copy(transposed dst)", o3, u.reshape(c.P, F).T)


# ----- hypothesis strategies -------------------------------------------------------------------

PARTITIONS = st.one_of(st.sampled_from([1, 2, 31, 32, 33, 64, 127, 128]),
                       st.integers(1, 128))
FLOATS = st.sampled_from(["fp32", "bf16"])
# -0.0 immediates are left out by default: max/min of two equal zeros may return either sign
# (IEEE leaves it open; the hardware's choice is not documented), and a later divide turns
# that into +-inf. The fuzzer did find encoders turning an explicit -0.0 into +0.0 (fixed
# with nki.sim.emit.imm); scripts/fuzz --signed-zero-imm includes -0.0 again.
SIGNED_ZERO_IMM = False


def _imm(v: float) -> float:
    return v if SIGNED_ZERO_IMM or v != 0.0 else 0.0


SCALARS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1.0 + 2.0**-8]),
                    st.floats(-8.0, 8.0, width=32)).map(_imm)


@st.composite
def float_cases(draw) -> FloatCase:
    op1 = draw(st.one_of(st.none(), st.sampled_from(FLOAT_BINARY)))
    act = draw(st.sampled_from(ACTIVATIONS))
    return FloatCase(
        P=draw(PARTITIONS), F=draw(st.integers(1, 40)), da=draw(FLOATS), db=draw(FLOATS),
        view=draw(st.sampled_from(["plain", "rowstep", "colstep", "transposed"])),
        tt_op=draw(st.sampled_from(FLOAT_BINARY)), d1=draw(FLOATS),
        op0=draw(st.sampled_from(FLOAT_BINARY)), s0=draw(SCALARS), rev0=draw(st.booleans()),
        op1=op1, s1=draw(SCALARS), rev1=draw(st.booleans()), d2=draw(FLOATS), act=act,
        scale=draw(st.sampled_from([1.0, 0.5, -1.5, 0.125])),
        bias=draw(st.sampled_from([None, 0.0, 0.25, -1.0])), d3=draw(FLOATS), d4=draw(FLOATS),
        red_op=draw(st.sampled_from(REDUCE_FLOAT)), negate=draw(st.booleans()),
        d5=draw(FLOATS), seed=draw(st.integers(0, 2**31)), special=draw(st.booleans()))


@st.composite
def int_cases(draw) -> IntCase:
    op1 = draw(st.one_of(st.none(), st.sampled_from(INT_BINARY)))
    # bit operators pair only with bit operators in one tensor_scalar
    op0 = draw(st.sampled_from(INT_BINARY))
    if op1 is not None and op0.startswith("bitwise") != op1.startswith("bitwise"):
        op1 = None
    return IntCase(
        P=draw(PARTITIONS), F=draw(st.integers(1, 40)),
        bound=draw(st.sampled_from([7, 1000, 2**20, 2**31 - 1])),
        tt_op=draw(st.sampled_from(INT_BINARY)), op0=op0,
        s0=draw(st.integers(-1000, 1000)), op1=op1, s1=draw(st.integers(-1000, 1000)),
        dcopy=draw(st.sampled_from(["int32", "fp32", "bf16"])),
        red_op=draw(st.sampled_from(REDUCE_INT)), seed=draw(st.integers(0, 2**31)))


@st.composite
def view_cases(draw) -> ViewCase:
    A, B = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    return ViewCase(
        P=draw(PARTITIONS), A=A, B=B,
        dx=draw(st.sampled_from(["fp32", "bf16", "int32"])),
        dt=draw(st.sampled_from(["fp32", "bf16", "int32"])), r0=draw(st.integers(0, 3)),
        rs=draw(st.integers(1, 3)), c0=draw(st.integers(0, 3)), cs=draw(st.integers(1, 3)),
        transposed=draw(st.booleans()), odd=draw(st.integers(0, 1)) if A * B > 1 else 0,
        seed=draw(st.integers(0, 2**31)))


SKELETONS = {"float": (float_cases, check_float), "int": (int_cases, check_int),
             "views": (view_cases, check_views)}
