"""A throwaway embedded cluster with one rcll database, for a harness's long run (the tests pass
their own DSN instead)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from rcll import cluster, install
from rcll.settings import Settings


@contextmanager
def fresh_database(name: str, port: int) -> Iterator[str]:
    """Yields the DSN of a new database with rcll installed on a cluster started in a new directory
    under /tmp, destroyed afterwards. RCLL_BENCH_DSN reuses an existing database instead."""
    reuse = os.environ.get("RCLL_BENCH_DSN")
    if reuse:
        yield reuse
        return
    root = Path(tempfile.mkdtemp(prefix="rcllh-", dir="/tmp"))
    c = cluster.embedded(root / "pg18", port=port, config=Settings.from_env())
    try:
        c.start()
        with psycopg.connect(c.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(c.url(name)) as conn:
            install.install(conn)
            conn.commit()
        yield c.url(name)
    finally:
        c.destroy()
        shutil.rmtree(root, ignore_errors=True)
