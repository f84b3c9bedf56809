"""The legacy ``neuronxcc.nki`` dialect (NKI 0.1 / "Beta 1"), a second surface over the same
tracer, rules and IR as the current dialect (spec §0, §1.7, §1.9, §3 and §4 "old" columns).

Modules, one concern each: ``index`` (``nl.arange``/``nl.mgrid`` index expressions and
predicates), ``mask`` (``mask=`` as a rectangle of the iteration space), ``tile`` (the legacy
tile handle: index-expression indexing, block dims, assignment and operators), ``pending``
(deferred instruction results), ``language`` / ``math`` (``nl``), ``isa`` (``nisa``), ``jit``
(launch grids, ``simulate_kernel``). The public import paths live in the top-level
``neuronxcc`` package; nothing in ``nki`` imports this package.
"""
