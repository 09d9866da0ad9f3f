"""Hatch build hook: before the wheel (or an editable install) takes extension/, build the scripts
of the version under development there from sql/, as extension/Makefile does; they are not
committed. Runs rcll.build_extension from this tree in a child process, with the build
environment's pglast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ExtensionScripts(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        # pip's isolated build environment drops PYTHONPATH's entries from sys.path (its
        # sitecustomize keeps only the build environment's own), so this tree's python/ is put
        # first on sys.path by the child itself: this tree's rcll wins over any installed one.
        run = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); "
               "runpy.run_module('rcll.build_extension', run_name='__main__')")
        subprocess.run([sys.executable, "-c", run, str(root / "python")], cwd=root, check=True, env=os.environ.copy())
