"""Readable text for IR programs, instructions and operands.

    tensor exp_t: sbuf float32[128, 512] @ (0, 2048)   # softmax.py:9
    for i0 in range(8):                                  # softmax.py:5 affine_range
      tensor_tensor dst=exp_t[p0+128, 512*i0 ...] data1=... op=add   # softmax.py:12
"""

from __future__ import annotations

import enum

from nki.ir.affine import Affine
from nki.ir.nodes import Access, DynFor, DynWhile, Instr, Loop, Placed, Program, RecordedLoop


def _offset(a: Affine) -> str:
    """An offset; register terms (negative slots) print as ``r<k>``."""
    regs = [f"r{-1 - s}" if c == 1 else f"{c}*r{-1 - s}" for s, c in a.terms if s < 0]
    rest = Affine(a.const, tuple(t for t in a.terms if t[0] >= 0))
    if regs and rest == Affine(0):
        return " + ".join(regs)
    return " + ".join([str(rest)] + regs)


def format_operand(op, program: Program | None) -> str:
    name = f"t{op.tensor}"
    if program is not None:
        try:
            name = program.tensor(op.tensor).name
        except KeyError:
            pass
    dims = ",".join(f"{s}:{c}" for s, c in op.dims)
    if isinstance(op, Access):
        where = f"p{op.partition}+" if program and program.tensor(op.tensor).memory.on_chip \
            else ""
        return f"{name}[{where}{_offset(op.offset)}|{dims}]{op.dtype.name}"
    if isinstance(op, Placed):
        if isinstance(op.instance, Affine):   # a new instance per iteration: t3, t3+3, ...
            name += f"{{+{Affine(0, op.instance.terms)}}}"
        elif op.instance is not None:         # new per value of these slots
            name += "{new per " + ",".join(f"i{s}" for s in op.instance.slots) + "}"
        return f"{name}@{op.space.value}[{_offset(op.offset)}|{dims}]{op.dtype.name}"
    return repr(op)


def _fmt_attr(v) -> str:
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v)


def format_instr(ins: Instr, program: Program | None = None) -> str:
    ops = " ".join(f"{role}={format_operand(a, program)}" for role, a, _ in ins.accesses())
    attrs = " ".join(f"{k}={_fmt_attr(v)}" for k, v in ins.attrs)
    text = f"{ins.opcode.name.lower()} {ops} {attrs}".rstrip() + _hints(ins)
    return f"{text}   # {ins.loc.short}" if ins.loc else text


def _hints(ins: Instr) -> str:
    """How it runs, apart from what it computes: `` {engine=gpsimd name='mm'}``. The public
    API every instruction records is left out (it is in the source line)."""
    shown = [f"{k}={_fmt_attr(v)}" for k, v in ins.hints if k != "api"]
    if ins.name:
        shown.insert(0, f"name={ins.name!r}")
    return f" {{{' '.join(shown)}}}" if shown else ""


def format_instr_short(ins: Instr, program: Program | None = None) -> str:
    """One-line origin for generated-code comments and runtime errors."""
    names = []
    for role, a, _ in ins.accesses():
        n = f"t{a.tensor}"
        if program is not None:
            n = program.tensor(a.tensor).name
        names.append(f"{role}={n}")
    if ins.attr("reg") is not None:          # register instructions name their register
        names.append(f"reg=r{ins.attr('reg')}")
    where = f"{ins.loc.short} " if ins.loc else ""
    return f"{where}{ins.opcode.name.lower()}({', '.join(names)})"


def format_program(program: Program, every_instance: bool = False) -> str:
    """The program as text. Tensors allocated at one site (a tile made in a loop body is a
    new instance every iteration) print as one line naming their instances, unless
    ``every_instance``; the instances stay apart in ``program.tensors`` (and in the
    operands' ``Placed.instance``)."""
    lines = [f"program {program.name} (core {program.core}/{program.num_cores}, "
             f"{program.target})"]
    groups = [[t] for t in program.tensors] if every_instance else _by_site(program.tensors)
    for group in groups:
        t = group[0]
        shape = ", ".join(map(str, t.shape))
        loc = f"   # {t.loc.short}" if t.loc else ""
        lines.append(f"  tensor {_names(group)}: {t.role} {t.memory.value} "
                     f"{t.dtype.name}[{shape}]{_addresses(group)}{loc}")
    _body(program.body, program, "  ", lines)
    return "\n".join(lines)


def _by_site(tensors) -> list[list]:
    """Tensors grouped by allocation site and form, in order of first appearance."""
    groups: dict = {}
    for t in tensors:
        key = (t.site, t.role, t.memory, t.shape, t.dtype) if t.site else ("id", t.id)
        groups.setdefault(key, []).append(t)
    return list(groups.values())


def _names(group) -> str:
    if len(group) == 1:
        return group[0].name
    ids = [t.id for t in group]
    step = ids[1] - ids[0]
    if all(b - a == step for a, b in zip(ids, ids[1:])):
        which = f"t{ids[0]}..t{ids[-1]}" + (f" step {step}" if step != 1 else "")
    else:
        which = ", ".join(f"t{i}" for i in ids[:3]) + ", ..."
    return f"{group[0].name} x{len(group)} ({which})"


def _addresses(group) -> str:
    placed = [t.address for t in group if t.address is not None]
    if not placed:
        return ""
    if all(a == placed[0] for a in placed):
        return f" @ {placed[0]}"
    return f" @ {placed[0]} .. {placed[-1]}"


def _body(stmts, program, indent, lines) -> None:
    for s in stmts:
        if isinstance(s, Instr):
            lines.append(indent + format_instr(s, program))
        elif isinstance(s, Loop):
            where = f"   # {s.loc.short} {s.kind.value}" if s.loc else ""
            if s.spmd_axis is not None:
                where += f" (spmd grid dim {s.spmd_axis})"
            lines.append(f"{indent}for i{s.slot} in range({s.trip}):{where}")
            _body(s.body, program, indent + "  ", lines)
        elif isinstance(s, DynFor):
            where = f"   # {s.loc.short} {s.api}" if s.loc else ""
            bounds = ", ".join(str(v) for v in (s.start, s.stop, s.step))
            lines.append(f"{indent}for {s.var} in runtime_range({bounds}):{where}")
            _body(s.body, program, indent + "  ", lines)
        elif isinstance(s, DynWhile):
            where = f"   # {s.loc.short} {s.api}" if s.loc else ""
            var = f" as {s.var}" if s.var is not None else ""
            lines.append(f"{indent}while {s.cond}{var} (next {s.next_cond}):{where}")
            _body(s.body, program, indent + "  ", lines)
        elif isinstance(s, RecordedLoop):
            lines.append(f"{indent}recorded {s.kind.value} x{len(s.iterations)}:")
            for k, it in enumerate(s.iterations):
                lines.append(f"{indent}  iteration {k}:")
                _body(it, program, indent + "    ", lines)
