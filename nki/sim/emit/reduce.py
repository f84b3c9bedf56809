"""Helpers, encoders and references for the reduce instruction family (being written)."""
