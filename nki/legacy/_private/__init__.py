"""``neuronxcc.nki._private``: the names of AWS's private legacy namespace that public kernels
import and whose meaning their use makes plain (see :mod:`.private_api`)."""
