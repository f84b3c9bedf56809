"""Legacy ``nl.constants`` (``neuronxcc.nki.language.constants``): ``sizeinbytes``."""

from nki.legacy.constants import sizeinbytes

__all__ = ["sizeinbytes"]
