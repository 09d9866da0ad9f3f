"""The package's type hints are checked, not decorative: mypy in strict mode over `rcll` (the
settings in pyproject.toml) and ruff over the code, run by `make test` so CI fails on either."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_mypy_strict_passes_on_the_package() -> None:
    done = _run(str(BIN / "mypy"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_passes() -> None:
    done = _run(str(BIN / "ruff"), "check", "python", "tests", "bench", "research")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_uses_nothing_mypy_skips() -> None:
    # pyproject.toml lets mypy skip parts of dependencies that rcll never imports; were rcll to
    # use one, its names would read as Any and strict mode would check nothing there.
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    skipped = [m.removesuffix(".*") for o in overrides if o.get("follow_imports") == "skip" for m in o["module"]]
    assert skipped
    used: set[str] = set()
    beta = []                                      # anthropic's client.beta: its types are skipped
    for path in (ROOT / "python" / "rcll").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                used |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                used |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Attribute) and node.attr == "beta":
                beta.append(f"{path.name}:{node.lineno}")
    assert "anthropic" in used                     # the check reads the imports at all
    reached = sorted(u for u in used for m in skipped if u == m or u.startswith(m + "."))
    assert not reached, f"rcll imports what mypy skips: {reached}"
    assert not beta, f"rcll reads anthropic's beta API, whose types mypy skips: {beta}"
