"""Build hook: everything else is in pyproject.toml.

The wheel carries one file outside the ``nki`` package: ``nki-foreign-names.pth``, which
appends ``nki/foreign-names`` to ``sys.path`` at interpreter start-up (why: ``nki/compat.py``).
It locates that folder through ``nki``'s import spec, so it serves regular and editable
installs alike, and it imports nothing.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "nki-foreign-names.pth"
PTH_LINE = ("import importlib.util as u, os, sys; s = u.find_spec('nki'); "
            "d = s and os.path.join(os.path.dirname(s.origin), 'foreign-names'); "
            "d and os.path.isdir(d) and d not in sys.path and sys.path.append(d)\n")


class BuildPyWithPth(build_py):
    """build_py that also writes the ``.pth`` file at the root of the build."""

    def run(self):
        super().run()
        # an editable wheel is assembled from the install command's folder, not build_lib
        root = (self.distribution.get_command_obj("install").install_lib
                if getattr(self, "editable_mode", False) else self.build_lib)
        with open(os.path.join(root, PTH_NAME), "w", encoding="utf-8") as f:
            f.write(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH_NAME)]


setup(cmdclass={"build_py": BuildPyWithPth})
