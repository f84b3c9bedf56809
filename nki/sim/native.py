"""The one piece of LLVM we write: an indirect call from a generated program to a helper.

``run_instr(ADDR, H, S, PS, IT, FT, k, L)`` looks up helper ``IT[k, 0]`` in the address table
``ADDR`` and calls it on row ``k``. The call goes through a pointer, so LLVM cannot inline the
helper into the generated program; that keeps a program's compile time proportional to its
number of instructions with a small constant (measured: ~4 ms per instruction vs ~1 s when
helpers were linked in). The address table is an argument, so generated programs contain no
absolute addresses and Numba can cache them on disk.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from nki.sim.layout import NF, ROW


@intrinsic
def run_instr(typingctx, addr_table, h, s, p, it, ft, k, lv):
    """Call the helper of instruction ``k``; returns its int64 status (0 = ok)."""

    def codegen(context, builder, signature, args):
        addr_v, h_v, s_v, p_v, it_v, ft_v, k_v, lv_v = args
        sig_args = signature.args
        arrays = [context.make_array(t)(context, builder, v)
                  for t, v in zip(sig_args[:6], (addr_v, h_v, s_v, p_v, it_v, ft_v))]
        lv = context.make_array(sig_args[7])(context, builder, lv_v)
        i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
        i64p, f64p = i64.as_pointer(), ir.DoubleType().as_pointer()
        irow = builder.gep(builder.bitcast(arrays[4].data, i64p),
                           [builder.mul(k_v, ir.Constant(i64, ROW))])
        frow = builder.gep(builder.bitcast(arrays[5].data, f64p),
                           [builder.mul(k_v, ir.Constant(i64, NF))])
        hid = builder.load(irow)
        addr = builder.load(builder.gep(builder.bitcast(arrays[0].data, i64p), [hid]))
        fnty = ir.FunctionType(i64, [i8p, i64, i8p, i64, i8p, i64, i64p, f64p, i64p])
        fn = builder.inttoptr(addr, fnty.as_pointer())
        call_args = []
        for arr in arrays[1:4]:
            call_args += [builder.bitcast(arr.data, i8p), builder.extract_value(arr.shape, 0)]
        call_args += [irow, frow, builder.bitcast(lv.data, i64p)]
        return builder.call(fn, call_args)

    sig = types.int64(addr_table, h, s, p, it, ft, k, lv)
    return sig, codegen
