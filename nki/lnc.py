"""``nki.lnc``: exchange, reduction and synchronisation between the two physical NeuronCores
of a Logical NeuronCore (NKI 0.8). The ``nki.isa`` spellings are deprecated wrappers.

    import nki.lnc
    nki.lnc.sendrecv_compute(src=part, dst=total, send_to_rank=1 - me,
                             recv_from_rank=1 - me, reduce_op=nl.add)

Rules: ``nki/lang/lnc.py``; how cores meet at run time: ``nki/sim/emit/collectives.py``.
"""

from nki.lang.lnc import core_barrier, sendrecv, sendrecv_compute

__all__ = ["core_barrier", "sendrecv", "sendrecv_compute"]
