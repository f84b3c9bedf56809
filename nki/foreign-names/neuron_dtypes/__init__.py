"""``neuron_dtypes``: AWS's host dtypes package, answered by ``nki.host_dtypes`` (the same
module object). This folder sits behind any real ``neuron_dtypes`` on ``sys.path`` (see
``nki.compat``)."""

from nki.compat import alias_modules

alias_modules(__name__, "nki.host_dtypes")
