"""``python -m nki.torch.build``: compile the torch bridge's C++ extensions now.

CI runs it once during setup, so that no test process pays the (about a minute per
extension, on 2 cores) first build; later processes load the cached libraries.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Build every extension not built yet; print where each lives."""
    from nki.torch import _build

    try:
        spent = _build.build_all()
    except _build.BuildError as e:
        print(e, file=sys.stderr)
        return 1
    for kind, seconds in spent.items():
        how = f"compiled in {seconds:.0f} s" if seconds else "already built"
        print(f"{kind}: {how}  {_build.build_dir(kind)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
