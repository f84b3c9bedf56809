"""``neuronxcc``: AWS's import root of the legacy NKI dialect, answered by ``nki.legacy``.

``import neuronxcc.nki as nki`` gives the module ``nki.legacy`` itself (and its ``language``,
``isa``, ``typing``, ``compiler`` namespaces). This folder sits behind any real ``neuronxcc``
on ``sys.path`` (see ``nki.compat``).
"""

import nki.legacy as _legacy
from nki.compat import alias_modules

nki = alias_modules("neuronxcc.nki", "nki.legacy", _legacy.PUBLIC_MODULES)
