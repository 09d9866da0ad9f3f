"""Dense indexes: a big bank's own HNSW index beside the global one (sql/functions/112-dense-indexes.sql).

The SQL side says what to run (`rcll.dense_index_plan`); this module runs it, statement by
statement on an autocommit connection, because CREATE INDEX CONCURRENTLY refuses a transaction.
It builds no SQL of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from rcll.errors import Code, RcllError
from rcll.results import Renders


@dataclass(frozen=True)
class DenseIndex(Renders):
    index_name: str
    kind: str                      # global, bank (a bank's own index) or other
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


@dataclass(frozen=True)
class Build(Renders):
    """An index build under way on rcll.memory_units (rcll.dense_index_builds)."""

    pid: int
    index_name: str | None
    bank_id: int | None
    phase: str
    blocks_done: int | None
    blocks_total: int | None
    tuples_done: int | None
    tuples_total: int | None
    started: datetime | None


class BuildUnderWay(RcllError):
    """Another session is applying the plan (it holds rcll.dense_index_build_lock)."""

    def __init__(self) -> None:
        super().__init__("indexes", "another run is building the indexes (a server's periodic jobs, or rcll dense-indexes --apply)",
                         "wait for it to finish: `rcll dense-indexes` shows the builds under way", code=Code.CONFLICT)


@dataclass(frozen=True)
class Progress(Renders):
    """Where a run of the plan is: its step (1-based) of steps, what that step does, when the run
    started; step 0 before the plan is read."""

    step: int
    steps: int
    why: str | None
    started: datetime


class Tracker:
    """The progress of this process's runs of the plan, for /health and the console: the run under
    way (None when idle), and when the last one ended, what it ran and how it failed, if it did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: Progress | None = None
        self.last_end: datetime | None = None
        self.last_steps: list[str] = []
        self.last_error: str | None = None

    def begin(self) -> None:
        with self._lock:
            self.current = Progress(0, 0, None, datetime.now(UTC))

    def at(self, step: int, steps: int, why: str) -> None:
        with self._lock:
            if self.current is not None:
                self.current = replace(self.current, step=step, steps=steps, why=why)

    def end(self, steps: list[Step] | None, error: str | None = None) -> None:
        with self._lock:
            self.current, self.last_end, self.last_error = None, datetime.now(UTC), error
            if steps is not None:
                self.last_steps = [s.why for s in steps]

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"building": self.current.as_dict() if self.current else None,
                    "last_end": self.last_end.isoformat() if self.last_end else None,
                    "last_steps": list(self.last_steps), "last_error": self.last_error}


def builds(conn: psycopg.Connection[Any]) -> list[Build]:
    """The index builds under way on rcll.memory_units (rcll.dense_index_builds), this process's or not."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [Build.from_row(r) for r in cur.execute("SELECT * FROM rcll.dense_index_builds()")]


def indexes(conn: psycopg.Connection[Any]) -> list[DenseIndex]:
    """The HNSW indexes of rcll.memory_units (rcll.dense_indexes)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [DenseIndex.from_row(r) for r in cur.execute("SELECT * FROM rcll.dense_indexes()")]


def plan(conn: psycopg.Connection[Any], min_units: int | None = None, max_share: float | None = None,
         m: int | None = None, ef_construction: int | None = None) -> list[Step]:
    """What rcll.dense_index_plan(min_units, max_share, m, ef_construction) says to run, in order
    (None: its default for that argument); nothing is run."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM rcll.dense_index_plan(min_units => %s, max_share => %s, m => %s, "
                           "ef_construction => %s) ORDER BY step",
                           (min_units, max_share, m, ef_construction)).fetchall()
    return [Step.from_row(r) for r in rows]


def apply(dsn: str, min_units: int | None = None, progress: Callable[[Step, float], None] | None = None,
          max_share: float | None = None, maintenance_work_mem: str | None = None,
          m: int | None = None, ef_construction: int | None = None, tracker: Tracker | None = None) -> list[Step]:
    """Run the plan's statements one by one (each its own transaction: the builds are CONCURRENTLY,
    so retains and recalls go on meanwhile; the swaps are renames). An interrupted run leaves at
    worst an invalid index, which the next plan drops first. The run holds
    rcll.dense_index_build_lock throughout: BuildUnderWay when another session holds it. maintenance_work_mem
    (e.g. '3GB') for these builds: an HNSW build is much faster when its index fits (~2 kB a unit);
    default the server's. tracker: told each step as it starts. Returns the steps run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rcll.dense_index_build_lock()").fetchone()
        if not (row and row[0]):
            raise BuildUnderWay()
        try:
            steps = plan(conn, min_units, max_share, m, ef_construction)
            if maintenance_work_mem:
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
            for s in steps:
                if tracker:
                    tracker.at(s.step, len(steps), s.why)
                t = time.perf_counter()
                conn.execute(s.statement.encode())       # the statement rcll.dense_index_plan wrote
                if progress:
                    progress(s, time.perf_counter() - t)
        finally:
            # Released now, not as the session ends: a backend lets its locks go after its client
            # has hung up, and the next run could find this one's still held (BuildUnderWay).
            if not (conn.closed or conn.broken):
                conn.execute("SELECT rcll.dense_index_build_unlock()")
    return steps
