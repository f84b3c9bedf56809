"""``neuronxcc.nki.language`` (``nl``): the legacy language namespace."""

from nki.legacy.nl import *  # noqa: F403
from nki.legacy.nl import __all__  # noqa: F401
