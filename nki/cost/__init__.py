"""What a kernel would cost on Trainium: per-engine costs, scheduling, estimates, traces.

A peer of ``nki.sim``: it reads only the IR of a specialized program, the records on it
(spills) and per-generation cost facts (``nki.cost.facts``); it never imports ``nki.sim``
or ``nki.lang`` and never runs the kernel.

    est = nki.estimate(kernel, target="trn2")(q, k, v)
    print(est); print(est.by_line()); est.save_trace("k.json.gz")
"""

from nki.cost.estimate import MODEL_VERSION, Estimate, estimate, estimate_spec
from nki.cost.facts import SENSITIVITY, cost_facts

__all__ = ["estimate", "estimate_spec", "Estimate", "MODEL_VERSION", "cost_facts",
           "SENSITIVITY"]
