"""Build the scripts of the version under development into extension/ from sql/ (`make`, through
extension/Makefile; the wheel's build hook runs it too): rcll--X.Y.Z.sql, the update script from
every released version, catalog.json. They are not committed. --check fails if any is missing or
differs from what the sources build. Needs only the standard library and pglast."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from rcll.sqlsource import extension_dir, generated_scripts


def write(directory: Path, scripts: dict[str, str]) -> list[str]:
    """Write each script whose content differs, through a temporary file and a rename: a server
    installing from the directory, or a test reading it, never sees half a file. An unchanged file
    is only touched, so make sees it current. Returns the names written."""
    written = []
    for name, text in scripts.items():
        target = directory / name
        if target.exists() and target.read_text() == text:
            os.utime(target)
            continue
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        written.append(name)
    return written


def stale(directory: Path, scripts: dict[str, str]) -> list[str]:
    """The scripts missing from directory or differing from what the sources build."""
    return [name for name, text in scripts.items()
            if not (directory / name).exists() or (directory / name).read_text() != text]


def main() -> int:
    try:
        scripts = generated_scripts()
    except ModuleNotFoundError as e:
        print(f"building extension/'s scripts needs {e.name}: run scripts/bootstrap "
              f"(or pip install 'rcll[build]')", file=sys.stderr)
        return 2
    directory = extension_dir()
    if "--check" in sys.argv:
        for name in stale(directory, scripts):
            print(f"{directory / name} is missing or stale: run `make`", file=sys.stderr)
        return 1 if stale(directory, scripts) else 0
    for name in write(directory, scripts):
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
