"""Dense graphs: a big bank's own HNSW graph beside the global one (sql/functions/112-dense-graphs.sql).

The SQL side says what to run (`rcll.dense_graph_plan`); this module runs it, statement by
statement on an autocommit connection, because CREATE INDEX CONCURRENTLY refuses a transaction.
It builds no SQL of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from rcll.results import Renders


@dataclass(frozen=True)
class Graph(Renders):
    index_name: str
    kind: str                      # global, bank (a bank's own graph) or other
    bank: str | None
    bank_id: int | None
    excluded_banks: list[int] | None
    valid: bool
    bytes: int
    build_options: list[str]       # e.g. ['m=32', 'ef_construction=128']; empty: pgvector's defaults


@dataclass(frozen=True)
class Step(Renders):
    step: int
    statement: str
    why: str


def graphs(conn: psycopg.Connection[Any]) -> list[Graph]:
    """The HNSW graphs of rcll.memory_units (rcll.dense_graphs)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [Graph.from_row(r) for r in cur.execute("SELECT * FROM rcll.dense_graphs()")]


def plan(conn: psycopg.Connection[Any], min_units: int | None = None, max_share: float | None = None,
         m: int | None = None, ef_construction: int | None = None) -> list[Step]:
    """What rcll.dense_graph_plan(min_units, max_share, m, ef_construction) says to run, in order
    (None: its default for that argument); nothing is run."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM rcll.dense_graph_plan(min_units => %s, max_share => %s, m => %s, "
                           "ef_construction => %s) ORDER BY step",
                           (min_units, max_share, m, ef_construction)).fetchall()
    return [Step.from_row(r) for r in rows]


def apply(dsn: str, min_units: int | None = None, progress: Callable[[Step, float], None] | None = None,
          max_share: float | None = None, maintenance_work_mem: str | None = None,
          m: int | None = None, ef_construction: int | None = None) -> list[Step]:
    """Run the plan's statements one by one (each its own transaction: the builds are CONCURRENTLY,
    so retains and recalls go on meanwhile). An interrupted run leaves at worst an invalid index,
    which the next plan drops first. maintenance_work_mem (e.g. '3GB') for these builds: an HNSW
    build is much faster when its graph fits (~2 kB a unit); default the server's. Returns the
    steps run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        steps = plan(conn, min_units, max_share, m, ef_construction)
        if maintenance_work_mem:
            conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
        for s in steps:
            t = time.perf_counter()
            conn.execute(s.statement.encode())       # the statement rcll.dense_graph_plan wrote
            if progress:
                progress(s, time.perf_counter() - t)
    return steps
