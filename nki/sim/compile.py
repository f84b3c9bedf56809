"""Compiling generated sources to machine code, and keeping it.

The source is written to a file in the program folder, so tracebacks through ``linecache``
show the generated lines. A generated program is loops, integer stores into ``L`` and the
register file, and helper calls through addresses, so it is translated straight from its
Python syntax tree to LLVM IR (``_Translator``): Numba's front end costs 25-50 ms per call
site (flash attention's 100 call sites: ~10 s), LLVM on the direct IR well under a second.
A source using anything else is compiled by Numba as before: imported, with a C entry point
(a ``cfunc`` over raw pointers) next to the generated function. Either way the object code is
kept on disk (``nki.sim.objcache``), so a later process runs the program without compiling or
even initialising Numba's compiler, and calls it through ctypes (which releases the GIL, so
the cores of an LNC launch still run in parallel).
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import json
import linecache
import os
import threading
from collections.abc import Callable

from llvmlite import binding as ll
from llvmlite import ir

from nki.sim import objcache
from nki.sim.codegen import STOP_SLOT
from nki.sim.emit.control import register_file_source
from nki.sim.helpers.registry import NLOOPVARS
from nki.sim.layout import NF, ROW
from nki.sim.modules import import_module, source_dir, write_module

_HEADER = """from numba import carray, cfunc, njit, types

from nki.sim.native import run_instr

"""

_ENTRY = f"""

_P8, _P64, _PF = (types.CPointer(types.uint8), types.CPointer(types.int64),
                  types.CPointer(types.float64))


@cfunc(types.int64(_P64, types.int64, _P8, types.int64, _P8, types.int64, _P8, types.int64,
                   _P64, types.int64, _PF, _P64), nogil=True)
def entry(addr, na, h, hn, s, sn, p, pn, it, rows, ft, lv):
    return _program(carray(addr, (na,)), carray(h, (hn,)), carray(s, (sn,)),
                    carray(p, (pn,)), carray(it, (rows, {ROW})), carray(ft, (rows, {NF})),
                    carray(lv, ({NLOOPVARS},)))
"""

_C_PROGRAM = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


def compile_source(name: str, source: str) -> Callable:
    """A callable ``run(ADDR, H, S, PS, IT, FT, L) -> int`` for the generated function
    ``name`` in ``source``: loaded machine code when this program was compiled before,
    else compiled now with Numba (``nogil``) and kept."""
    text = (_HEADER + source + f"\n\n_program = njit(nogil=True)({name})\n" + _ENTRY)
    modname = "nki_prog_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    folder = source_dir()
    path = write_module(folder, modname, text)
    linecache.checkcache(path)
    address = objcache.load(folder, modname)
    if address is None:
        address = _compile_direct(folder, modname, name, source)
    if address is None:
        entry = import_module(modname, path).entry
        objcache.save(folder, modname, entry)
        address = entry.address
    return _caller(address)


def _caller(address: int) -> Callable:
    fn = _C_PROGRAM(address)

    def run(ADDR, H, S, PS, IT, FT, L) -> int:
        return fn(ADDR.ctypes.data, ADDR.size, H.ctypes.data, H.size, S.ctypes.data, S.size,
                  PS.ctypes.data, PS.size, IT.ctypes.data, IT.shape[0], FT.ctypes.data,
                  L.ctypes.data)

    return run


# ----- generated source → LLVM IR, without Numba ---------------------------------------------
# The C signature of ``entry`` above: (ADDR, len, H, len, S, len, PS, len, IT, rows, FT, L).
_I64, _I8P = ir.IntType(64), ir.IntType(8).as_pointer()
_I64P, _F64P = _I64.as_pointer(), ir.DoubleType().as_pointer()
_ENTRY_TYPE = ir.FunctionType(_I64, [_I64P, _I64, _I8P, _I64, _I8P, _I64, _I8P, _I64, _I64P,
                                     _I64, _F64P, _I64P])
_HELPER_TYPE = ir.FunctionType(_I64, [_I8P, _I64, _I8P, _I64, _I8P, _I64, _I64P, _F64P, _I64P])
_ARGS = ("ADDR", "H", "S", "PS", "IT", "FT", "L")
_LLVM_LOCK = threading.Lock()   # one LLVM compile at a time (cores compile from threads)


class _UnsupportedError(Exception):
    """The source uses Python the translator does not handle: Numba compiles it."""


def _compile_direct(folder: str, modname: str, name: str, source: str) -> int | None:
    """Translate the generated function ``name`` to LLVM IR, keep its object code like
    Numba's and load it; None when the source is outside the translated subset."""
    try:
        llvm_ir = _Translator.module_ir(ast.parse(source), name, "nki_entry_" + modname)
    except _UnsupportedError:
        return None
    with _LLVM_LOCK:
        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        module = ll.parse_assembly(llvm_ir)
        module.verify()
        # loop counters into registers, then LLVM's fast instruction selection: -O2 took
        # ~1 s on flash attention (unrolling short row loops) for code whose time is all
        # in the helpers it calls; this takes ~0.1 s
        machine = ll.Target.from_default_triple().create_target_machine(opt=0)
        passes = ll.create_new_module_pass_manager()
        passes.add_sroa_pass()
        passes.add_simplify_cfg_pass()
        passes.run(module, ll.create_pass_builder(machine, ll.create_pipeline_tuning_options(0)))
        data = machine.emit_object(module)
    _keep_object(folder, modname, data, "nki_entry_" + modname)
    return objcache.load(folder, modname)


def _keep_object(folder: str, name: str, data: bytes, symbol: str) -> None:
    """Write object code and its metadata where ``objcache.load`` finds them (atomically).
    The translated program calls helpers only through addresses: no external symbols."""
    obj_path, meta_path = objcache._paths(folder, name)
    os.makedirs(os.path.dirname(obj_path), mode=0o700, exist_ok=True)
    meta = json.dumps({"symbol": symbol, "externals": []})
    for path, payload, mode in ((obj_path, data, "wb"), (meta_path, meta, "w")):
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, mode) as f:
            f.write(payload)
        os.replace(tmp, path)


class _Translator:
    """The generated function's statements as LLVM IR, with Python's meaning: ``for`` over
    ``range`` (bounds read once, constant step), ``while``, ``if``/``else``, ``return``,
    stores and loads of ``L[c]`` and of the register file ``R[c]``, int64 ``+ - *``,
    comparisons (chained), ``and``/``or``/``not`` of call-free operands, and
    ``run_instr(ADDR, H, S, PS, IT, FT, k, L)`` exactly as ``nki.sim.native`` calls a helper.
    Anything else raises ``_UnsupportedError``."""

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.args = dict(zip(("ADDR", "_", "H", "HN", "S", "SN", "PS", "PN", "IT", "_",
                              "FT", "L"), fn.args))
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.locals: dict[str, ir.AllocaInstr] = {}
        self.regs = None            # i64* of the register file, once ``R = ...`` ran

    @classmethod
    def module_ir(cls, tree: ast.Module, name: str, symbol: str) -> str:
        fdef = tree.body[0] if len(tree.body) == 1 else None
        if not (isinstance(fdef, ast.FunctionDef) and fdef.name == name
                and not fdef.decorator_list and [a.arg for a in fdef.args.args] == list(_ARGS)
                and not (fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs
                         or fdef.args.posonlyargs or fdef.args.defaults)
                and isinstance(fdef.body[-1], ast.Return)):
            raise _UnsupportedError
        module = ir.Module(name=symbol)
        fn = ir.Function(module, _ENTRY_TYPE, name=symbol)
        t = cls(fn)
        t.block(fdef.body)
        if not t.b.block.is_terminated:       # after the final return: dead code
            t.b.unreachable()
        ir.IRBuilder(t.entry).branch(fn.blocks[1])
        return str(module)

    # ----- statements -------------------------------------------------------------------
    def block(self, stmts) -> None:
        for st in stmts:
            if self.b.block.is_terminated:      # statements after a return never run
                self.b.position_at_end(self.fn.append_basic_block("dead"))
            self.stmt(st)

    def stmt(self, st) -> None:
        if isinstance(st, ast.Pass):
            return
        if isinstance(st, ast.Return) and st.value is not None:
            self.b.ret(self.expr(st.value))
        elif isinstance(st, ast.Assign) and len(st.targets) == 1:
            self.assign(st.targets[0], st.value)
        elif isinstance(st, ast.If):
            self.if_(st)
        elif isinstance(st, ast.For) and not st.orelse:
            self.for_(st)
        elif isinstance(st, ast.While) and not st.orelse:
            self.while_(st)
        else:
            raise _UnsupportedError

    def assign(self, target, value) -> None:
        if isinstance(target, ast.Name) and target.id == "R":
            self.regs = self.register_file(value)
        elif isinstance(target, ast.Name) and target.id not in _ARGS:
            self.store_local(target.id, self.expr(value))
        elif isinstance(target, ast.Subscript):
            self.b.store(self.expr(value), self.element(target))
        else:
            raise _UnsupportedError

    def register_file(self, value) -> ir.Value:
        """``R = PS[PS.size - c:...].view(L.dtype)``: int64 slots from byte ``size - c``."""
        if ast.unparse(value) != ast.unparse(ast.parse(register_file_source()).body[0].value):
            raise _UnsupportedError
        start = self.b.sub(self.args["PN"], ir.Constant(_I64, value.func.value.slice.lower
                                                         .right.value))
        return self.b.bitcast(self.b.gep(self.args["PS"], [start]), _I64P)

    def if_(self, st: ast.If) -> None:
        then, other, done = (self.fn.append_basic_block(n) for n in ("then", "else", "endif"))
        self.b.cbranch(self.cond(st.test), then, other)
        for blk, body in ((then, st.body), (other, st.orelse)):
            self.b.position_at_end(blk)
            self.block(body)
            if not self.b.block.is_terminated:
                self.b.branch(done)
        self.b.position_at_end(done)

    def for_(self, st: ast.For) -> None:
        """``for v in range(...)``: Python reads the bounds once and the iterator, not
        ``v``, drives the loop; the step is a literal."""
        call = st.iter
        if not (isinstance(st.target, ast.Name) and isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name) and call.func.id == "range"
                and 1 <= len(call.args) <= 3 and not call.keywords):
            raise _UnsupportedError
        args = [self.expr(a) for a in call.args[:2]]
        start, stop = (ir.Constant(_I64, 0), args[0]) if len(args) == 1 else args
        step = _literal(call.args[2]) if len(call.args) == 3 else 1
        if step == 0:
            raise _UnsupportedError
        counter = ir.IRBuilder(self.entry).alloca(_I64)   # entry block: mem2reg promotes it
        self.b.store(start, counter)
        head, body, done = (self.fn.append_basic_block(n) for n in ("for", "do", "endfor"))
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.load(counter)
        self.b.cbranch(self.b.icmp_signed("<" if step > 0 else ">", i, stop), body, done)
        self.b.position_at_end(body)
        self.store_local(st.target.id, i)
        self.block(st.body)
        if not self.b.block.is_terminated:
            self.b.store(self.b.add(i, ir.Constant(_I64, step)), counter)
            self.b.branch(head)
        self.b.position_at_end(done)

    def while_(self, st: ast.While) -> None:
        head, body, done = (self.fn.append_basic_block(n) for n in ("while", "loop", "endw"))
        self.b.branch(head)
        self.b.position_at_end(head)
        self.b.cbranch(self.cond(st.test), body, done)
        self.b.position_at_end(body)
        self.block(st.body)
        if not self.b.block.is_terminated:
            self.b.branch(head)
        self.b.position_at_end(done)

    def store_local(self, name: str, value: ir.Value) -> None:
        if name == "R" or name in _ARGS:
            raise _UnsupportedError
        if name not in self.locals:
            self.locals[name] = ir.IRBuilder(self.entry).alloca(_I64, name=name)
        self.b.store(value, self.locals[name])

    # ----- expressions ------------------------------------------------------------------
    def expr(self, e) -> ir.Value:
        """An int64 value."""
        if isinstance(e, ast.Constant):
            return ir.Constant(_I64, _literal(e))
        if isinstance(e, ast.Name) and e.id in self.locals:
            return self.b.load(self.locals[e.id])
        if isinstance(e, ast.Subscript):
            if _is_stop_word(e):   # written by another thread: a relaxed atomic load,
                return self.b.load_atomic(self.element(e), "monotonic", 8)   # never hoisted
            return self.b.load(self.element(e))
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return self.b.neg(self.expr(e.operand))
        if isinstance(e, ast.BinOp) and type(e.op) in _BINOPS:
            return getattr(self.b, _BINOPS[type(e.op)])(self.expr(e.left), self.expr(e.right))
        if isinstance(e, ast.Call):
            return self.run_instr(e)
        raise _UnsupportedError

    def cond(self, e) -> ir.Value:
        """An i1: Python's truth of ``e``."""
        if isinstance(e, ast.Compare):
            _pure(e)
            values = [self.expr(x) for x in (e.left, *e.comparators)]
            out = None
            for op, a, c in zip(e.ops, values, values[1:]):
                if type(op) not in _COMPARE:
                    raise _UnsupportedError
                one = self.b.icmp_signed(_COMPARE[type(op)], a, c)
                out = one if out is None else self.b.and_(out, one)
            return out
        if isinstance(e, ast.BoolOp):
            _pure(e)
            parts = [self.cond(v) for v in e.values]
            join = self.b.and_ if isinstance(e.op, ast.And) else self.b.or_
            out = parts[0]
            for p in parts[1:]:
                out = join(out, p)
            return out
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return self.b.not_(self.cond(e.operand))
        return self.b.icmp_signed("!=", self.expr(e), ir.Constant(_I64, 0))

    def element(self, e: ast.Subscript) -> ir.Value:
        """Pointer to ``L[c]`` or ``R[c]`` (literal, non-negative ``c``: no wrap-around)."""
        index = _literal(e.slice)
        base = (self.args["L"] if isinstance(e.value, ast.Name) and e.value.id == "L" else
                self.regs if isinstance(e.value, ast.Name) and e.value.id == "R" else None)
        if base is None or index < 0:
            raise _UnsupportedError
        return self.b.gep(base, [ir.Constant(_I64, index)])

    def run_instr(self, call: ast.Call) -> ir.Value:
        """Row ``k``: helper ``IT[k, 0]`` of the address table, called on its rows."""
        names = [a.id if isinstance(a, ast.Name) else None for a in call.args]
        if not (isinstance(call.func, ast.Name) and call.func.id == "run_instr"
                and not call.keywords and len(names) == 8
                and names[:6] + names[7:] == list(_ARGS[:6]) + ["L"]):
            raise _UnsupportedError
        a, b = self.args, self.b
        k = self.expr(call.args[6])
        irow = b.gep(a["IT"], [b.mul(k, ir.Constant(_I64, ROW))])
        frow = b.gep(a["FT"], [b.mul(k, ir.Constant(_I64, NF))])
        helper = b.inttoptr(b.load(b.gep(a["ADDR"], [b.load(irow)])), _HELPER_TYPE.as_pointer())
        return b.call(helper, [a["H"], a["HN"], a["S"], a["SN"], a["PS"], a["PN"], irow,
                               frow, a["L"]])


def _is_stop_word(e: ast.Subscript) -> bool:
    return (isinstance(e.value, ast.Name) and e.value.id == "L"
            and isinstance(e.slice, ast.Constant) and e.slice.value == STOP_SLOT)


_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!="}


def _literal(node) -> int:
    """A literal int (``-3`` included), else ``_UnsupportedError``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    raise _UnsupportedError


def _pure(node) -> None:
    """Comparisons and ``and``/``or`` are evaluated eagerly: only call-free operands, so
    skipping Python's short circuit changes nothing."""
    if any(isinstance(n, ast.Call) for n in ast.walk(node)):
        raise _UnsupportedError
