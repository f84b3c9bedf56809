"""``torch_neuronx``: AWS's TorchNeuron package, answered by ``nki.torch.neuronx`` (the same
module object: ``nki_op``, ``wrap_nki``, ``register_autograd``, ``__version__``). Importing it
enables the simulated ``neuron`` device and the ``neuron`` distributed backend. This folder
sits behind any real ``torch_neuronx`` on ``sys.path`` (see ``nki.compat``)."""

from nki.compat import alias_modules

alias_modules(__name__, "nki.torch.neuronx")
