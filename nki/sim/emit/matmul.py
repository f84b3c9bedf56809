"""Helpers, encoders and references for the matmul instruction family (being written)."""
