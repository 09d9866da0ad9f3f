"""Extension scripts: the released ones are committed and frozen, the version under development's
are built from sql/ (`make`, the wheel's build hook) and never committed, and the build is
deterministic: what `make` left in extension/ is exactly what the sources build."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rcll import build_extension
from rcll.sqlsource import extension_dir, extension_version, generated_scripts, released_versions

ROOT = Path(__file__).resolve().parents[1]

# The sha256 of every released install script. Releasing X.Y.Z freezes extension/rcll--X.Y.Z.sql:
# commit it, add its hash here, and move the version's line in .gitignore to the next version.
RELEASED = {
    "0.1.0": "85af796d1f302b6b7d0a3ac67db7a323ee9bb9b88907b3f08bf155f09b804c69",
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """What the sources build: file name in extension/ -> content (a second or two of parsing)."""
    return generated_scripts()


def test_released_scripts_are_frozen() -> None:
    assert released_versions() == sorted(RELEASED), "every released script has its hash recorded here"
    for version, sha in RELEASED.items():
        assert _sha256(extension_dir() / f"rcll--{version}.sql") == sha, f"rcll--{version}.sql changed after release"
    assert extension_version() not in RELEASED


def test_built_scripts_are_what_the_sources_build(built: dict[str, str]) -> None:
    # `make test` built them (extension/Makefile): a source edited since then, or a dependency
    # missing from that Makefile's rule, leaves one stale.
    assert build_extension.stale(extension_dir(), built) == [], "run `make extension`"


def test_the_build_is_deterministic(built: dict[str, str]) -> None:
    # Two processes with different hash seeds (set and dict order, pglast's parse) build the same bytes.
    script = textwrap.dedent("""
        import hashlib, json
        from rcll.sqlsource import generated_scripts
        print(json.dumps({n: hashlib.sha256(t.encode()).hexdigest() for n, t in generated_scripts().items()}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT / "python")})
             for seed in ("1", "2")]
    builds = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    here = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in built.items()}
    assert builds[0] == builds[1] == here
    assert set(here) == {f"rcll--{extension_version()}.sql", "catalog.json",
                         *(f"rcll--{v}--{extension_version()}.sql" for v in RELEASED)}


def test_built_scripts_are_not_committed_and_released_ones_are(built: dict[str, str]) -> None:
    names = sorted(f"extension/{name}" for name in built)
    tracked = subprocess.run(["git", "ls-files", "extension"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert set(names).isdisjoint(tracked)
    assert {f"extension/rcll--{v}.sql" for v in RELEASED} <= set(tracked)
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert ignored == names, "every built script is in .gitignore"
