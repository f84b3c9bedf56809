"""The sensitivity table: every undocumented constant gets a row; moving a constant moves
the estimate the way its meaning says (fewer rotating buffers never make a kernel faster,
a costlier descriptor never makes DMAs faster)."""

from __future__ import annotations

import numpy as np
from test_schedule import scale_tiles

import nki
from nki.cost.facts import SENSITIVITY
from nki.cost.sensitivity import sensitivity, sensitivity_text


def test_one_row_per_assumed_constant_with_the_right_signs():
    spec = nki.jit(scale_tiles, target="trn2").specialize(np.ones((1024, 256), np.float32))
    rows = {r.constant: r for r in sensitivity(spec, "trn2")}
    assert set(rows) == {name for name, _, _ in SENSITIVITY}
    assert rows["rotation_depth"].low == 1 and rows["rotation_depth"].latency_low_pct >= 0
    d = rows["dma_latency_ns"]
    assert d.latency_low_pct <= 0 <= d.latency_high_pct
    assert "rotation_depth" in sensitivity_text(list(rows.values()))
