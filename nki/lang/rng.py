"""Random-number rules: ``nisa.rng``, ``rand2``, ``set_rng_seed``, ``rand_set_state``,
``rand_get_state`` and ``nl.rand`` / ``nl.random_seed`` (spec §3.2, §4.1), and the
instruction of ``nisa.dropout`` / ``nl.dropout`` (its rule is in ``nki/lang/select.py``).

One opcode (``RNG``) with a ``kind``; the generator (XORWOW per engine and lane, seeded per
core) is documented in ``nki/sim/emit/rng.py``. Dropout draws from the Vector engine's
stream, so seeding and state calls make its masks reproducible.
"""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Engine, Opcode
from nki.ir.types import FLOAT32, Memory
from nki.lang.common import Call, acc
from nki.lang.tensor import NkiTensor

RNG, RAND2, SET_SEED, SET_STATE, GET_STATE, DROPOUT = range(6)
STATE_WORDS = 6
_ENGINES = (Engine.vector, Engine.gpsimd, Engine.unknown)


def _engine(call: Call, engine) -> Engine:
    eng = Engine(int(engine)) if engine is not None else Engine.vector
    if eng not in _ENGINES:
        raise call.error("nki_invalid_argument", f"engine={eng.name}: random numbers come from "
                         "the vector or gpsimd engine")
    return Engine.vector if eng is Engine.unknown else eng


def _emit(call: Call, kind: int, writes, reads, lanes: int, engine=Engine.vector, lo=None,
          hi=None, name: str = ""):
    attrs = (("kind", kind), ("engine", engine), ("lanes", lanes), ("min", lo), ("max", hi))
    ins = Instr(Opcode.RNG, tuple(writes), tuple(reads), attrs, call.loc, name)
    return call.trace.emit(ins, api=call.api)


def rng(dst, engine=Engine.vector, name=""):
    """Fill ``dst`` with raw 32-bit random words (integer dst; narrower ints keep the low
    bits).

    Example:
        >>> nisa.rng(dst=bits)  # doctest: +SKIP
    """
    call = Call("nisa.rng")
    d = call.tile(dst, "dst")
    if not d.dtype.is_int and d.dtype.itemsize != 4:
        raise call.error("nki_dtype_mismatch", f"dst receives raw bits: it must be an integer "
                         f"or 32-bit tile, got {d.dtype.name}")
    return _emit(call, RNG, [("dst", acc(d))], [], d.shape[0], _engine(call, engine),
                 name=name)


def emit_dropout(call: Call, d: NkiTensor, reads: list, prob: float | None,
                 name: str = "") -> Instr:
    """Emit ``nisa.dropout`` once its rule passed: ``reads`` holds ``("data", ...)`` and,
    for a [P, 1] probability tile, ``("prob", ...)``; ``prob`` is the scalar otherwise.
    Element ``j`` of partition ``p`` takes lane ``p``'s next Vector-engine draw (row-major
    order) and is dropped when ``(bits >> 8) * 2**-24 < prob``, the uniform ``nl.rand``
    would return for the same draw.

    Example:
        >>> emit_dropout(call, d, [("data", acc(x))], 0.1)              # doctest: +SKIP
    """
    return _emit(call, DROPOUT, [("dst", acc(d))], reads, d.shape[0], Engine.vector, prob,
                 name=name)


def rand2(dst, min=0.0, max=1.0, name=""):  # noqa: A002 - NKI's parameter names
    """Uniform floats in ``[min, max)`` (fp32 math, rounded to dst's dtype); ``min``/``max``
    are numbers or [P, 1] tiles.

    Example:
        >>> nisa.rand2(dst=u, min=-1.0, max=1.0)  # doctest: +SKIP
    """
    call = Call("nisa.rand2")
    d = call.tile(dst, "dst")
    if not d.dtype.is_float:
        raise call.error("nki_dtype_mismatch", f"rand2 writes floats, dst is {d.dtype.name}")
    reads, bounds = [], []
    for value, role in ((min, "min"), (max, "max")):
        v = call.scalar_vector(value, role, d.shape[0])
        if isinstance(v, NkiTensor):
            reads.append((role, acc(v)))
            bounds.append(None)
        else:
            bounds.append(float(v))
    return _emit(call, RAND2, [("dst", acc(d))], reads, d.shape[0], Engine.vector, *bounds,
                 name=name)


def _seeds(call: Call, value, role: str) -> NkiTensor:
    t = call.tile(value, role)
    if t.size // t.shape[0] != 1 or not t.dtype.is_int and t.dtype.itemsize != 4:
        raise call.error("nki_shape_mismatch", f"{role!r} must be a [P, 1] tile of 32-bit "
                         f"seeds, got {t.shape} {t.dtype.name}")
    return t


def set_rng_seed(src_seeds, name=""):
    """Seed the Vector and GpSimd generators: lane ``p`` from ``src_seeds[p]`` (a [1, 1]
    seed seeds every lane; lanes and cores still draw distinct streams).

    Example:
        >>> nisa.set_rng_seed(src_seeds=seed)  # doctest: +SKIP
    """
    call = Call("nisa.set_rng_seed")
    s = _seeds(call, src_seeds, "src_seeds")
    return _emit(call, SET_SEED, [], [("src", acc(s))], s.shape[0], name=name)


def _state_tile(call: Call, value, role: str) -> NkiTensor:
    t = call.tile(value, role)
    if t.size // t.shape[0] != STATE_WORDS or t.dtype.itemsize != 4:
        raise call.error("nki_shape_mismatch", f"{role!r} holds the XORWOW state: a "
                         f"[P, {STATE_WORDS}] tile of 32-bit words, got {t.shape} "
                         f"{t.dtype.name}")
    return t


def rand_set_state(src_seeds, engine=Engine.vector, name=""):
    """Load the generator state of lanes ``0..P-1`` from a [P, 6] tile (x0..x4, d words).

    Example:
        >>> nisa.rand_set_state(src_seeds=state)  # doctest: +SKIP
    """
    call = Call("nisa.rand_set_state")
    s = _state_tile(call, src_seeds, "src_seeds")
    return _emit(call, SET_STATE, [], [("src", acc(s))], s.shape[0], _engine(call, engine),
                 name=name)


def rand_get_state(dst, engine=Engine.vector, name=""):
    """Store the generator state of lanes ``0..P-1`` into a [P, 6] tile.

    Example:
        >>> nisa.rand_get_state(dst=state)  # doctest: +SKIP
    """
    call = Call("nisa.rand_get_state")
    d = _state_tile(call, dst, "dst")
    return _emit(call, GET_STATE, [("dst", acc(d))], [], d.shape[0], _engine(call, engine),
                 name=name)


def rand(shape, dtype=FLOAT32, buffer=Memory.SBUF, name=""):
    """A new tile of uniform random floats in [0, 1).

    Example:
        >>> u = nl.rand((128, 64), dtype=nl.float32)  # doctest: +SKIP
    """
    from nki.lang.creation import value_result

    call = Call("nl.rand")
    t = value_result(shape, dtype, buffer=buffer, name=name)
    d = call.tile(t, "dst")
    _emit(call, RAND2, [("dst", acc(d))], [], d.shape[0], Engine.vector, 0.0, 1.0)
    return t


def random_seed(seed):
    """Seed the generators from a [1, 1] on-chip tensor (see ``nisa.set_rng_seed``).

    Example:
        >>> nl.random_seed(seed_tile)  # doctest: +SKIP
    """
    call = Call("nl.random_seed")
    s = _seeds(call, seed, "seed")
    return _emit(call, SET_SEED, [], [("src", acc(s))], s.shape[0])
