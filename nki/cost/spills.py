"""Spills: the SBUF tensors a compiler keeps in HBM scratch cost their store and reload DMAs.

The capacity pass (nki/jit/capacity.py) records a :class:`SpillPlan` on the placed program
(``meta["spills"]``): for each spilled tensor, the instructions after which it is stored and
before which it is reloaded, counted in program order over the unrolled trace. The scheduler
counts executed instructions the same way (a runtime loop's body counts once there, as the
capacity pass saw it) and inserts the DMAs at those points: a store waits for the
instruction before it, the instruction after a reload waits for the reload.
"""

from __future__ import annotations

from nki.cost.facts import CostFacts
from nki.cost.instr import spill_cost
from nki.cost.prep import Prepared, StaticInstr
from nki.ir.nodes import Instr
from nki.ir.ops import Opcode


def add_spills(prep: Prepared, facts: CostFacts) -> Prepared:
    """Attach the spill DMAs of ``prep.program``'s spill plan (if any) to ``prep``."""
    plan = dict(prep.program.meta).get("spills")
    if plan is None:
        return prep
    for spill in plan.spills:
        for store, points in ((True, spill.stores), (False, spill.reloads)):
            verb = "store" if store else "reload"
            for point in points:
                ins = Instr(Opcode.DMA_COPY, (), (), (("spill", verb),), point.loc,
                            f"spill_{verb}_{spill.name}")
                cost = spill_cost(spill.partitions, spill.bytes_per_partition, store, facts)
                sidx = len(prep.instrs)
                prep.instrs.append(StaticInstr(ins, cost, ()))
                table = prep.spill_after if store else prep.spill_before
                table.setdefault(point.instr, []).append((sidx, spill.tensor))
    return prep
