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
        # Prepended: pip's isolated build environment reaches its packages through PYTHONPATH too,
        # and this tree's rcll must win over any installed one.
        path = os.pathsep.join(p for p in (str(root / "python"), os.environ.get("PYTHONPATH", "")) if p)
        subprocess.run([sys.executable, "-m", "rcll.build_extension"], cwd=root, check=True,
                       env={**os.environ, "PYTHONPATH": path})
