"""Shared benchmark plumbing: a throwaway embedded cluster (or Citus cluster), fresh rcll databases, Markdown tables.

The benchmarks run as modules from the repository root (`.venv/bin/python -m bench.recall`), with
the rcll package imported from the venv (scripts/bootstrap installs it editable).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from rcll import citus_cluster, cluster, install
from rcll.db import configure
from rcll.settings import Settings


@contextmanager
def embedded_cluster(port: int, prefix: str = "rcllb-", keep: bool = False, leg: str = "pg18") -> Iterator[cluster.Cluster]:
    """A started cluster in a new directory under /tmp - the embedded PG 18, or with leg="pg15"
    Debian's PostgreSQL 15 (the tests' second leg); destroyed afterwards unless `keep` (then its
    URL is printed, for EXPLAIN)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    c = cluster.debian15(root / "pg15", port=port) if leg == "pg15" else cluster.embedded(root / "pg18", port=port, config=Settings.from_env())
    try:
        c.start()
        yield c
    finally:
        if keep:
            print(f"cluster kept: {c.url()}")
        else:
            c.destroy()
            shutil.rmtree(root, ignore_errors=True)


def create_database(c: cluster.Cluster, name: str) -> str:
    """A new database on `c` with rcll installed; returns its DSN."""
    with psycopg.connect(c.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(c.url(name)) as conn:
        install.install(conn)
        conn.commit()
    return c.url(name)


@contextmanager
def fresh_database(name: str = "bench", port: int = 55490) -> Iterator[str]:
    """A fresh embedded cluster with one rcll database; yields the DSN. RCLL_BENCH_DSN reuses
    an existing database instead."""
    reuse = os.environ.get("RCLL_BENCH_DSN")
    if reuse:
        yield reuse
        return
    with embedded_cluster(port) as c:
        yield create_database(c, name)


@contextmanager
def citus_store(first_port: int, workers: int = 2) -> Iterator[citus_cluster.CitusCluster]:
    """A throwaway Citus cluster on loopback (rcll.citus_cluster.throwaway: a coordinator on
    first_port, the workers after it) with rcll installed on the coordinator, and so distributed by
    bank; stopped and removed afterwards. Citus must be built in (citus_missing)."""
    with citus_cluster.throwaway(workers, first_port) as cl:
        with psycopg.connect(cl.url()) as conn:
            install.install(conn)
            conn.commit()
        yield cl


def connect(dsn: str, **kw: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, **kw)
    configure(conn)
    return conn


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])])


def retain_chunks(conn: psycopg.Connection[Any], bank: str, chunks: Sequence[str], vectors: Sequence[Any],
                  occurred_at: Any, source: str, author: str) -> list[int]:
    """One document of pre-embedded chunks (rcll.retain_chunks, keyless chunk mode: the content
    is the chunks joined by newlines); returns the unit ids in chunk order."""
    row = conn.execute(
        """SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s,
               embeddings => %s::vector[], occurred_at => %s, source => %s, author => %s)""",
        (bank, "\n".join(chunks), list(chunks), list(vectors), occurred_at, source,
         author)).fetchone()
    assert row is not None
    return [int(u) for u in row[0]]


def cpu_ns(pid: int) -> int:
    """Nanoseconds a process has spent on a CPU (/proc/<pid>/schedstat): unlike wall time, this
    does not grow when other work on the machine competes for the cores."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def query_params(q: dict[str, Any], bank: str) -> dict[str, Any]:
    """A drawn query (text, embedding, filters) as the named parameters the benches' SQL uses:
    q, qe, bank, rooms, authors (a statement takes the ones it names)."""
    return {"q": q["text"], "qe": q["qe"], "bank": bank, "rooms": q["filters"].get("rooms"),
            "authors": q["filters"].get("authors")}


def vacuum_analyze(conn: psycopg.Connection[Any]) -> None:
    """Leave a freshly loaded store as autovacuum leaves one that has lived a while: the tables
    recall reads by index-only scans vacuumed (visibility map set, so they skip the heap), and
    every table analysed."""
    for table_name in ("memory_units", "unit_lexicon", "document_lexicon"):
        conn.execute(f"VACUUM (ANALYZE) rcll.{table_name}")
    conn.execute("ANALYZE")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


def drop_indexes(conn: psycopg.Connection[Any], names: Sequence[str]) -> dict[str, str]:
    """Drop these rcll indexes before a bulk load; returns each one's definition as the install
    built it (pg_get_indexdef), to run again after the load - so a bench carries no copy of a
    migration's DDL. An index that is not there is left out."""
    defs: dict[str, str] = {}
    for name in names:
        row = conn.execute("SELECT pg_get_indexdef(i) FROM to_regclass(%s) i WHERE i IS NOT NULL",
                           (f"rcll.{name}",)).fetchone()
        if row is not None:
            defs[name] = str(row[0])
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier("rcll", name)))
    return defs
