"""Where the SQL lives and how it is assembled: run-once migrations, then re-runnable functions.

The same sequence builds extension/rcll--X.Y.Z.sql (for CREATE EXTENSION) and is applied by
`rcll install` (for databases without extension privileges), so both produce the same objects.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class SqlFile:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _root() -> Path:
    packaged = Path(__file__).parent
    if (packaged / "sql").is_dir():
        return packaged
    repo = Path(__file__).resolve().parents[2]
    if (repo / "sql").is_dir():
        return repo
    raise FileNotFoundError("rcll: SQL sources not found (expected sql/ next to the package or the repo root)")


def sql_dir() -> Path:
    return _root() / "sql"


def extension_dir() -> Path:
    return _root() / "extension"


@cache
def extension_version() -> str:
    control = (extension_dir() / "rcll.control").read_text()
    m = re.search(r"default_version\s*=\s*'([^']+)'", control)
    if not m:
        raise ValueError("extension/rcll.control has no default_version")
    return m.group(1)


def _files(kind: str) -> list[SqlFile]:
    return [SqlFile(p.name, p.read_text()) for p in sorted((sql_dir() / kind).glob("*.sql"))]


def migrations() -> list[SqlFile]:
    return _files("migrations")


def functions() -> list[SqlFile]:
    return _files("functions")


def record_migration(m: SqlFile) -> str:
    return f"INSERT INTO rcll.migrations (name, sha256) VALUES ('{m.name}', '{m.sha256}');\n"


def extension_script() -> str:
    """The install script for CREATE EXTENSION rcll (what `make extension` writes)."""
    parts = [
        "-- Generated from sql/ by `make extension`; do not edit.\n",
        '\\echo Use "CREATE EXTENSION rcll CASCADE" to load this file. \\quit\n',
    ]
    for m in migrations():
        parts += [f"\n-- migration {m.name}\n", m.text, "\n", record_migration(m)]
    for f in functions():
        parts += [f"\n-- functions {f.name}\n", f.text, "\n"]
    return "".join(parts)
