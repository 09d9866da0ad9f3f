"""The connection pool survives the database: kill -9 of PostgreSQL, a restart, and the next request works."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import Leg
from rcll.db import retried_once
from rcll.memory import Memory


def kill_postgres(leg: Leg) -> None:
    """kill -9 of the postmaster and every process it started (as a crash or the OOM killer would)."""
    pid = int((leg.cluster.datadir / "postmaster.pid").read_text().split()[0])
    children = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                if _ppid(p) == pid]
    for p in [pid, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in [pid, *children]):
        time.sleep(0.05)


def _ppid(stat: Path) -> int:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_after_kill_9_and_a_restart_the_next_request_succeeds(pg18: Leg) -> None:
    name = pg18.new_database()
    with pg18.admin() as admin:   # the test legs run with synchronous_commit off; a crash would lose commits
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
    try:
        with Memory(pg18.url(name), bank="ops", pool_size=3) as memory:
            memory.create_bank("ops")
            memory.retain("The pager rotation moved to Mondays.", room="oncall")
            # Every pooled connection is in use once, so all of them will be stale after the crash.
            for _ in range(3):
                assert memory.rooms("oncall")[0].fact_count == 1
            kill_postgres(pg18)
            pg18.cluster.start()
            # No request was in flight: none fails. Stale connections are checked out of the pool.
            assert memory.rooms("oncall")[0].fact_count == 1
            assert memory.stats().totals
            assert memory.recall("when is the pager rotation?").facts[0].text.startswith("The pager rotation")
            memory.retain("Written after the restart.", room="oncall")
            assert memory.rooms("oncall")[0].fact_count == 2
    finally:
        pg18.cluster.start()
        pg18.drop_database(name)


def test_a_read_whose_connection_breaks_under_it_is_retried_once(dsn: str) -> None:
    attempts: list[int] = []

    @retried_once
    def read() -> Any:
        with psycopg.connect(dsn, autocommit=True) as conn:
            attempts.append(1)
            if len(attempts) == 1:   # the database ends this connection (as a restart would) mid-request
                with psycopg.connect(dsn, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            return conn.execute("SELECT count(*) FROM rcll.banks").fetchone()

    assert read() is not None and len(attempts) == 2


def test_a_write_is_not_retried(dsn: str) -> None:
    attempts: list[int] = []

    def write() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            attempts.append(1)
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            conn.execute("SELECT rcll.create_bank('never')")

    with pytest.raises(psycopg.OperationalError):
        write()
    assert len(attempts) == 1
