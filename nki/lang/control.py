"""Runtime control flow: virtual registers and loops the machine runs (spec §1.5).

Python loops in a kernel are unrolled while tracing; ``nl.fori_loop``, ``nl.while_loop`` (and
the deprecated ``nl.dynamic_range`` / ``while reg:``) are not: their body is traced **once**
into a :class:`~nki.ir.nodes.DynFor` / :class:`~nki.ir.nodes.DynWhile` node and the generated
program loops over register values at run time. Tiles the body allocates are allocated once
and stay live for the whole loop.

A register may also move an access at run time: ``nl.ds(reg, n)``, ``t[reg]``,
``t.select(d, reg)`` and ``.ap(..., scalar_offset=reg)`` put a term ``coef * reg`` into the
operand's offset. In the IR such a term is an :class:`~nki.ir.affine.Affine` term on a
*negative* slot (``reg_slot``), so placement and rerolling carry it like a loop variable;
code generation loads the register into a free loop slot right before the instruction and
checks the value against the bounds :func:`dynamic_checks` computed here, at trace time,
where the rest of the access is concrete.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

from nki.errors import NkiUninitializedRegisterWarning, fail
from nki.ir.affine import Affine
from nki.ir.nodes import Access, DynFor, DynWhile, Instr, Reg
from nki.ir.ops import OobMode, Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import Trace, current, user_loc, validation

# the simulator's register file (nki.sim.emit.control.NUM_REGS, 4096) less the 256 top
# slots that hold the run record (nki.sim.record.RECORD_REGS): the most registers live at
# once (nki/jit/registers.py numbers them by live range; a kernel may allocate any number)
MAX_REGISTERS = 4096 - 256
_REG_MEMS = (Memory.SBUF, Memory.SHARED_HBM, Memory.PRIVATE_HBM)
_INT32 = (-(2 ** 31), 2 ** 32 - 1)   # a 32-bit register holds either signedness


def reg_slot(reg_id: int) -> int:
    """The affine slot standing for register ``reg_id`` (negative: never a loop slot)."""
    return -1 - reg_id


def slot_reg(slot: int) -> int:
    return -1 - slot


def register_terms(a: Affine) -> tuple[tuple[int, int], ...]:
    """``(register id, coefficient)`` of every register term of an offset."""
    return tuple((slot_reg(s), c) for s, c in a.terms if s < 0)


class RegExpr:
    """``scale * register + const``: a register-valued index for views (not a register)."""

    __slots__ = ("reg", "scale", "const")

    def __init__(self, reg: int, scale: int = 1, const: int = 0):
        self.reg, self.scale, self.const = reg, scale, const

    def nki_affine(self) -> Affine:
        return Affine(self.const, ((reg_slot(self.reg), self.scale),) if self.scale else ())

    def __mul__(self, k: int) -> RegExpr:
        k = _static_int(k, "multiply a register by")
        return RegExpr(self.reg, self.scale * k, self.const * k)

    __rmul__ = __mul__

    def __add__(self, k: int) -> RegExpr:
        return RegExpr(self.reg, self.scale, self.const + _static_int(k, "add to a register"))

    __radd__ = __add__

    def __sub__(self, k: int) -> RegExpr:
        return self + (-_static_int(k, "subtract from a register"))

    def __int__(self):
        raise validation("err_dynamic_control_flow_not_supported",
                         f"{self!r} holds a run-time value; it cannot be used as a Python int")

    __index__ = __int__

    def __repr__(self) -> str:
        return f"{self.scale}*r{self.reg} + {self.const}"


class VirtualRegister(RegExpr):
    """A 32-bit register of an engine sequencer (``nisa.register_alloc``).

    Registers bound runtime loops and move accesses at run time; arithmetic on them
    (``reg * 128 + 4``) builds an index expression for views, not a new register.

    Example:
        >>> n = nisa.register_alloc(4)                               # doctest: +SKIP
        >>> nl.fori_loop(0, n, lambda i: nisa.dma_copy(dst=t, src=x[i]))  # doctest: +SKIP
    """

    __slots__ = ()

    def __init__(self, reg: int):
        super().__init__(reg, 1, 0)

    @property
    def id(self) -> int:
        return self.reg

    def __repr__(self) -> str:
        return f"VirtualRegister(r{self.reg})"

    def __bool__(self) -> bool:
        """The deprecated ``while reg:`` loop: the first test opens a runtime loop whose body
        is traced once; the test after the body (same line) closes it."""
        return _while_test(self)


def _static_int(k, what: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise validation("nki_invalid_argument", f"can only {what} a Python int, got {k!r}")
    return k


def _new_register(call: Call) -> VirtualRegister:
    trace = call.trace
    rid = trace.num_registers          # virtual: numbered by live range after tracing
    trace.num_registers += 1
    trace.register_sites[rid] = call.loc
    return VirtualRegister(rid)


# ----- registers read before anything writes them ------------------------------------------
def _written(trace: Trace, reg: int) -> None:
    """Register ``reg`` is written by the instruction (or loop) being traced. A write inside a
    runtime loop body counts although the loop may run zero times: the check is of program
    order, so it stays quiet rather than guess trip counts."""
    trace.written_registers.add(reg)


def check_register_read(trace: Trace, reg: int, what: str, loc) -> None:
    """``what`` reads register ``reg``: warn (or, with check_uninit, raise) when nothing traced
    before it wrote the register. A register allocated without a value holds 0 here and
    whatever its physical register held before on hardware."""
    if reg in trace.written_registers:
        return
    site = trace.register_sites.get(reg)
    made = f" (nisa.register_alloc() at {site.short} gave it no value)" if site else ""
    detail = (f"{what} reads register r{reg}{made} before any instruction wrote it "
              "(undefined on hardware; 0 here); pass a value to nisa.register_alloc or "
              "nisa.register_move / nisa.register_load into it first")
    if trace.check_uninit:
        raise fail("nki_uninitialized_register", detail, loc)
    trace.written_registers.add(reg)     # one warning per register: the first read names it
    msg = f"[nki_uninitialized_register] {detail}" + (f" at {loc.short}" if loc else "")
    if loc is None:
        warnings.warn(msg, NkiUninitializedRegisterWarning, stacklevel=3)
    else:
        warnings.warn_explicit(msg, NkiUninitializedRegisterWarning, loc.filename, loc.lineno)


def _reg(call: Call, value, role: str) -> VirtualRegister:
    if not isinstance(value, VirtualRegister):
        raise call.error("nki_invalid_argument", f"{role} must be a VirtualRegister from "
                         f"nisa.register_alloc, got {value!r}")
    return value


def _scalar_tile(call: Call, value, role: str) -> NkiTensor:
    t = call.tensor(value, role, _REG_MEMS)
    if t.size != 1:
        raise call.error("nki_shape_mismatch", f"{role!r} must hold exactly one element, got "
                         f"shape {t.shape}")
    if not t.dtype.is_int:
        raise call.error("nki_dtype_mismatch", f"{role!r} must be an integer tensor (registers "
                         f"hold 32-bit integers), got {t.dtype.name}")
    return t


def _emit_move(call: Call, dst: VirtualRegister, src) -> Instr:
    if isinstance(src, VirtualRegister):
        check_register_read(call.trace, src.id, call.api, call.loc)
        attrs = (("reg", dst.id), ("src_reg", src.id), ("imm", 0))
    else:
        imm = _static_int(src, "move into a register")
        if not _INT32[0] <= imm <= _INT32[1]:
            raise call.error("nki_invalid_argument", f"{imm} does not fit a 32-bit register")
        attrs = (("reg", dst.id), ("src_reg", -1), ("imm", imm))
    _written(call.trace, dst.id)
    return call.trace.emit(Instr(Opcode.REGISTER_MOVE, (), (), attrs, call.loc), api=call.api)


def _emit_load(call: Call, dst: VirtualRegister, src) -> Instr:
    t = _scalar_tile(call, src, "src")
    ins = Instr(Opcode.REGISTER_LOAD, (), (("src", acc(t)),), (("reg", dst.id),), call.loc)
    _written(call.trace, dst.id)
    return call.trace.emit(ins, api=call.api)


def register_alloc(x=None) -> VirtualRegister:
    """Allocate a virtual register, optionally initialised with an int, another register or
    the value of a one-element integer tensor.

    Example:
        >>> n = nisa.register_alloc(8)                               # doctest: +SKIP
    """
    call = Call("nisa.register_alloc")
    reg = _new_register(call)
    if isinstance(x, NkiTensor):
        _emit_load(call, reg, x)
    elif x is not None:
        _emit_move(call, reg, x)
    return reg


def register_move(dst, src) -> Instr:
    """``dst = src`` for a compile-time int or another register.

    Example:
        >>> nisa.register_move(n, 10)                                # doctest: +SKIP
    """
    call = Call("nisa.register_move")
    return _emit_move(call, _reg(call, dst, "dst"), src)


def register_load(dst, src) -> Instr:
    """Load the one element of an integer SBUF/HBM tensor into register ``dst``.

    Example:
        >>> nisa.register_load(n, count_sb)                          # doctest: +SKIP
    """
    call = Call("nisa.register_load")
    return _emit_load(call, _reg(call, dst, "dst"), src)


def register_store(dst, src) -> Instr:
    """Store register ``src`` into the one element of an integer SBUF/HBM tensor ``dst``.

    Example:
        >>> nisa.register_store(count_sb, n)                         # doctest: +SKIP
    """
    call = Call("nisa.register_store")
    reg = _reg(call, src, "src")
    t = _scalar_tile(call, dst, "dst")
    check_register_read(call.trace, reg.id, call.api, call.loc)
    ins = Instr(Opcode.REGISTER_STORE, (("dst", acc(t)),), (), (("reg", reg.id),), call.loc)
    return call.trace.emit(ins, api=call.api)


def scalar_register(call: Call, value) -> VirtualRegister:
    """A register holding ``value``: itself, or one loaded from a 1-element tile (the one
    loaded before from the same tile, unwritten since, once a kernel has used half the
    register file: see ``_reused_load``)."""
    if isinstance(value, VirtualRegister):
        return value
    reused = _reused_load(call.trace, value)
    if reused is not None:
        return reused
    reg = _new_register(call)
    ins = _emit_load(call, reg, value)
    if call.trace.num_registers >= _REUSE_LOADS_AFTER and isinstance(value, NkiTensor):
        key, src = value.access(), ins.reads[0][1]
        if not register_terms(key.offset) and not register_terms(src.offset):
            body = call.trace._stack[-1]
            call.trace.__dict__.setdefault("_register_loads", {})[key] = \
                [reg, body, len(body), {key.tensor, src.tensor}]
    return reg


# Kernels like nki-library's MoE ones pass one tile as ``.ap(scalar_offset=tile)`` thousands
# of times; a register per call would fill the register file. Past half of it, a load is
# reused while nothing since wrote the tile (checked on the straight-line statements of the
# same body; any nested loop between counts as a write). Below that, each call keeps its own
# load, so loop bodies stay identical per iteration for rerolling.
_REUSE_LOADS_AFTER = MAX_REGISTERS // 2


def _reused_load(trace: Trace, value) -> VirtualRegister | None:
    loads = trace.__dict__.get("_register_loads")
    if not loads or not isinstance(value, NkiTensor):
        return None
    key = value.access()
    entry = loads.get(key)
    if entry is None:
        return None
    reg, body, checked, tensors = entry
    if body is not trace._stack[-1] or any(
            not isinstance(st, Instr) or
            any(getattr(a, "tensor", None) in tensors for _, a in st.writes)
            for st in body[checked:]):
        del loads[key]
        return None
    entry[2] = len(body)
    return reg


# ----- loops ---------------------------------------------------------------------------------
def _bound(call: Call, value, role: str) -> int | Reg:
    if isinstance(value, VirtualRegister):
        check_register_read(call.trace, value.id, f"{call.api} ({role} bound)", call.loc)
        return Reg(value.id)
    if isinstance(value, RegExpr):
        raise call.error("nki_invalid_argument", f"{role} must be an int or a register, not an "
                         f"expression {value!r}; compute it into a register first")
    return _static_int(value, f"use as the {role} bound")


def _traced_body(trace: Trace, fn, *args):
    """Run ``fn(*args)`` with its instructions collected into a fresh statement list."""
    body = trace.begin_dyn()
    try:
        result = fn(*args)
    finally:
        trace.end_dyn(body)
    return tuple(body), result


def fori_loop(lower, upper, body_fun, step: int = 1) -> None:
    """A loop the machine runs: ``for i in range(lower, upper, step): body_fun(i)``, with
    ``i`` a register; bounds are ints or registers, ``step`` a positive int. The body is traced
    once; carry loop state through SBUF/HBM.

    Example:
        >>> nl.fori_loop(0, n_reg, lambda i: nisa.dma_copy(dst=t, src=x[i]))  # doctest: +SKIP
    """
    call = Call("nl.fori_loop")
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise call.error("nki_invalid_argument", f"step must be a positive compile-time int, "
                         f"got {step!r}")
    start, stop = _bound(call, lower, "lower"), _bound(call, upper, "upper")
    if not callable(body_fun):
        raise call.error("nki_invalid_argument", "body_fun must be a function of the "
                         "iteration register")
    var = _new_register(call)
    _written(call.trace, var.id)
    body, _ = _traced_body(call.trace, body_fun, var)
    call.trace.append(DynFor(Reg(var.id), start, stop, step, body, call.loc, call.api))


def while_loop(init, body_fun) -> None:
    """A loop the machine runs while a register is nonzero: ``r = init; while r: r =
    body_fun(r)``; the body returns the register holding the next condition.

    Example:
        >>> nl.while_loop(flag, lambda r: next_flag)                 # doctest: +SKIP
    """
    call = Call("nl.while_loop")
    cond = _reg(call, init, "init")
    check_register_read(call.trace, cond.id, f"{call.api} (init condition)", call.loc)
    var = _new_register(call)
    _written(call.trace, var.id)
    body, nxt = _traced_body(call.trace, body_fun, var)
    if not isinstance(nxt, VirtualRegister):
        raise call.error("nki_invalid_argument", "body_fun must return the VirtualRegister "
                         f"holding the next loop condition, got {nxt!r}")
    check_register_read(call.trace, nxt.id, f"{call.api} (next condition)", call.loc)
    call.trace.append(DynWhile(Reg(cond.id), Reg(nxt.id), Reg(var.id), body, call.loc,
                               call.api))


def _deprecated(what: str, instead: str) -> None:
    loc = user_loc()
    msg = f"{what} is deprecated since NKI 0.6.0; use {instead}"
    if loc is None:
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
    else:
        warnings.warn_explicit(msg, DeprecationWarning, loc.filename, loc.lineno)


def dynamic_range(start, stop=None, step: int = 1):
    """Deprecated runtime loop: ``for i in nl.dynamic_range(n):`` (use ``nl.fori_loop``).
    The body runs once while tracing with ``i`` a register.

    Example:
        >>> for i in nl.dynamic_range(n_reg):                        # doctest: +SKIP
        ...     nisa.dma_copy(dst=t, src=x[i])
    """
    call = Call("nl.dynamic_range")
    _deprecated("nl.dynamic_range", "nl.fori_loop(lower, upper, body_fun, step)")
    if stop is None:
        start, stop = 0, start
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise call.error("nki_invalid_argument", f"step must be a positive compile-time int, "
                         f"got {step!r}")
    lo, hi = _bound(call, start, "start"), _bound(call, stop, "stop")
    var = _new_register(call)
    _written(call.trace, var.id)
    return _dynamic_range_iter(call, var, lo, hi, step)


def _dynamic_range_iter(call: Call, var: VirtualRegister, lo, hi, step: int):
    """Trace the ``for`` body once (between the two ``next`` calls). A ``break``/``return``
    closes the generator at the ``yield`` instead: the body is then not whole, and the end
    of the trace raises for it (an error raised here, in ``close()``, would be lost)."""
    body = call.trace.begin_dyn((call.loc, call.api))
    whole = False
    try:
        yield var
        whole = True
    finally:
        call.trace.end_dyn(body, whole)
    call.trace.append(DynFor(Reg(var.id), lo, hi, step, tuple(body), call.loc, call.api))


def _while_test(reg: VirtualRegister) -> bool:
    trace = current("while reg")
    loc = user_loc()
    open_ = trace.open_while
    if open_ and open_[-1][0] == reg.id:
        _, body, start_loc = open_[-1]
        if loc is None or start_loc is None or loc.lineno != start_loc.lineno or \
                loc.filename != start_loc.filename:
            raise validation("err_dynamic_control_flow_not_supported",
                             f"the truth value of register r{reg.id} was tested inside its own "
                             "'while' loop; a register's truth value only drives 'while reg:'",
                             loc)
        open_.pop()
        trace.end_dyn(body)
        trace.append(DynWhile(Reg(reg.id), Reg(reg.id), None, tuple(body), start_loc,
                              "while reg"))
        return False
    _deprecated("'while reg:'", "nl.while_loop(init, body_fun)")
    check_register_read(trace, reg.id, "'while reg:'", loc)
    # a break/return out of the loop never tests it again: the body stays open (left)
    open_.append((reg.id, trace.begin_dyn((loc, "while reg")), loc))
    return True


# ----- trace-time bounds of dynamic accesses ------------------------------------------------
def extent(dims) -> tuple[int, int]:
    """Smallest and largest element offset a strided window touches, relative to its start."""
    lo = hi = 0
    for s, c in dims:
        span = s * (c - 1)
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi


def allowed_range(base: int, dims, coef: int, size: int) -> tuple[int, int]:
    """The values ``r`` keeping ``base + coef*r + [extent of dims]`` inside ``[0, size)``."""
    dmin, dmax = extent(dims)
    lo_need, hi_need = -(base + dmin), size - 1 - (base + dmax)   # coef*r in [lo_need, hi_need]
    if coef < 0:
        coef, lo_need, hi_need = -coef, -hi_need, -lo_need
    return -(-lo_need // coef), hi_need // coef


def _elements(trace: Trace, a: Access) -> tuple[int, tuple]:
    """(elements a view may address, its dims that move within them) of a tensor."""
    decl = trace.tensors[a.tensor]
    isz = a.dtype.itemsize
    if decl.memory.on_chip:
        return decl.bytes_per_partition // isz, a.dims[1:]
    return decl.free_size * decl.dtype.itemsize // isz, a.dims


def dynamic_checks(trace: Trace, instr: Instr) -> Instr:
    """Attach ``dyn_checks = ((role, register, lo, hi), ...)``: the register values that keep
    each dynamically offset operand inside its tensor (checked before the instruction runs;
    out of range faults, or skips the instruction under ``oob_mode=skip``)."""
    if instr.attr("dyn_checks") is not None:
        return instr
    checks = []
    for role, a, _ in instr.accesses():
        terms = register_terms(a.offset)
        if not terms:
            continue
        if len(terms) > 1 or register_terms(a.partition):
            raise validation("nki_invalid_view", f"operand {role!r} is moved by more than one "
                             "register (or on the partition dim); NKI allows one dynamic "
                             "offset per access", instr.loc)
        reg, coef = terms[0]
        check_register_read(trace, reg, f"operand {role!r} (moved by the register)", instr.loc)
        size, dims = _elements(trace, a)
        lo, hi = allowed_range(a.offset.const, dims, coef, size)
        checks.append((role, reg, lo, hi))
    if not checks:
        return instr
    return replace(instr, attrs=instr.attrs + (("dyn_checks", tuple(checks)),))


def oob_mode_of(call: Call, oob_mode) -> OobMode:
    if oob_mode is None:
        return OobMode.error
    try:
        return OobMode(int(oob_mode))
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", f"oob_mode must be nisa.oob_mode.error or "
                         f".skip, got {oob_mode!r}") from None
