"""Compiled helpers the generated programs call (see registry)."""
