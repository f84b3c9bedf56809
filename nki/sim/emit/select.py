"""Helpers, encoders and references for the select instruction family (being written)."""
