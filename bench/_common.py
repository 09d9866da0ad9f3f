"""Shared benchmark plumbing: a throwaway embedded cluster and a fresh rcll database."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rcll import cluster, install
from rcll.db import configure


@contextmanager
def fresh_database(name: str = "bench", port: int = 55490) -> Iterator[str]:
    """A fresh embedded PG 18 cluster (in /tmp) with rcll installed; yields the DSN."""
    keep = os.environ.get("RCLL_BENCH_DSN")
    if keep:
        yield keep
        return
    root = Path(tempfile.mkdtemp(prefix="rcllb-", dir="/tmp"))
    c = cluster.embedded(root / "pg18", port=port)
    try:
        c.start()
        with psycopg.connect(c.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(c.url(name)) as conn:
            install.install(conn)
            conn.commit()
        yield c.url(name)
    finally:
        c.destroy()
        shutil.rmtree(root, ignore_errors=True)


def connect(dsn: str, **kw: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, **kw)
    configure(conn)
    return conn


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])])
