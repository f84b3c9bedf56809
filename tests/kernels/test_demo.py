"""The README's demo command runs the showcase; it must pass its own checks."""

from __future__ import annotations

from nki import demo


def test_demo_showcase_matches_references(capsys):
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "flash attention" in out and "all results match their references" in out
