"""What one Memory.recall costs in database round trips, counted on the wire (libpq's trace of every
pooled connection: one ReadyForQuery per round trip), so a redundant statement cannot creep back in.

One connection free: the entity text (the pool's check, one statement outside a transaction),
then the candidates (the check, BEGIN, set_config of the agent, recall_candidates, COMMIT) = 7.
A spare connection free too: the channels side by side add the spare's check, BEGIN, set_config
and its channels, and the fusion is a statement of its own = 13.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from rcll.memory import Memory
from test_recall_seed import seed

Q = "how do we roll back a bad release?"


@contextmanager
def counted(dsn: str, pool_size: int) -> Iterator[tuple[Memory, list[Path]]]:
    """A Memory whose pooled connections each trace the protocol to a file of their own."""
    files: list[Path] = []
    memory = Memory(dsn=dsn, bank="b", pool_size=pool_size, open=False)
    configure = memory._shared.configure

    def traced(conn: psycopg.Connection[Any]) -> None:
        configure(conn)
        fd, name = tempfile.mkstemp(prefix="rcll-trace-")
        files.append(Path(name))
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    memory._shared.configure = traced
    try:
        with memory:
            yield memory, files
    finally:
        for f in files:
            f.unlink(missing_ok=True)


def round_trips(files: list[Path]) -> int:
    """Round trips so far: the server's ReadyForQuery messages on every traced connection."""
    return sum(line.split("\t")[2] == "ReadyForQuery" for f in files
               for line in f.read_text().splitlines() if line.startswith("B\t"))


def recall_cost(dsn: str, pool_size: int) -> int:
    """Round trips of one recall on a warm pool (the recalls before it grew it to its size)."""
    with counted(dsn, pool_size) as (memory, files):
        for _ in range(3):
            memory.recall(Q, rerank_depth=0)
        before = round_trips(files)
        memory.recall(Q, rerank_depth=0)
        return round_trips(files) - before


@pytest.fixture
def seeded(dsn: str, db: psycopg.Connection[Any]) -> str:
    seed(db)
    return dsn


@pytest.mark.skipif(not hasattr(pq.PGconn, "trace") or os.name != "posix", reason="needs libpq's trace")
def test_a_recall_on_one_connection_costs_seven_round_trips(seeded: str) -> None:
    assert recall_cost(seeded, pool_size=1) == 7


@pytest.mark.skipif(not hasattr(pq.PGconn, "trace") or os.name != "posix", reason="needs libpq's trace")
def test_a_recall_side_by_side_costs_thirteen_round_trips(seeded: str) -> None:
    assert recall_cost(seeded, pool_size=4) == 13
