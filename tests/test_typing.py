"""The package's type hints are checked, not decorative: mypy in strict mode over `rcll` (the
settings in pyproject.toml) and ruff over the code, run by `make test` so CI fails on either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_strict_passes_on_the_package() -> None:
    done = _run(str(BIN / "mypy"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_passes() -> None:
    done = _run(str(BIN / "ruff"), "check", "python", "tests", "bench", "research")
    assert done.returncode == 0, done.stdout + done.stderr
