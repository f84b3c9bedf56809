"""``nki.collectives``: collective communication between the cores (ranks) of an LNC launch.

    import nki.collectives as ncc

    ncc.all_reduce(srcs=[part], dsts=[total], replica_group=ncc.ReplicaGroup([[0, 1]]),
                   op=nl.add)

Ranks are the simulated cores of one ``kernel[2](...)`` launch; see
``nki/lang/collectives.py`` for the rules and ``nki/sim/emit/collectives.py`` for how cores
meet (and how a deadlock is reported instead of hanging).
"""

from nki.lang.collectives import (
    ReplicaGroup,
    all_gather,
    all_gather_v,
    all_gather_v_prepare,
    all_gather_v_trigger,
    all_reduce,
    all_to_all,
    all_to_all_v,
    all_to_all_v_prepare,
    all_to_all_v_trigger,
    collective_permute,
    collective_permute_implicit,
    collective_permute_implicit_current_processing_rank_id,
    collective_permute_implicit_reduce,
    rank_id,
    reduce_scatter,
    rg_partition_op,
)

__all__ = ["ReplicaGroup", "rg_partition_op", "all_reduce", "all_gather", "all_gather_v",
           "all_gather_v_prepare", "all_gather_v_trigger", "all_to_all_v_prepare",
           "all_to_all_v_trigger",
           "reduce_scatter", "all_to_all", "all_to_all_v", "collective_permute",
           "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "rank_id"]
