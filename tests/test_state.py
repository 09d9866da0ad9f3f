"""Keyed room state: exact key, every version kept with provenance, compare-and-set on the version."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from rcll.db import configure
from sqlcall import refused, scalar

Db = psycopg.Connection[Any]


def put(db: Db, room: str, key: str, value: Any, expected: int | None, **kw: Any) -> int:
    args = {"bank": "b", "room": room, "key": key, "value": Jsonb(value), "expected_version": expected, **kw}
    return int(scalar(db, "rcll.put_state", **args))


def get(db: Db, room: str, key: str) -> tuple[Any, int] | None:
    row = db.execute("SELECT value, version FROM rcll.get_state('b', %s, %s)", (room, key)).fetchone()
    return (row[0], row[1]) if row else None


@pytest.fixture
def bank(db: Db) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


def test_state_round_trips_by_exact_key_and_keeps_every_version(db: Db, bank: str) -> None:
    assert put(db, "deployment", "cross", {"card": 1}, 0) == 1
    assert put(db, "deployment", "cross", {"card": 2}, 1, via="mcp", source="session-7") == 2
    assert get(db, "deployment", "cross") == ({"card": 2}, 2)
    old = db.execute("SELECT value FROM rcll.get_state('b', 'deployment', 'cross', at_version => 1)").fetchone()
    assert old == ({"card": 1},)
    history = db.execute("SELECT version, value, provenance FROM rcll.state_history('b', 'deployment', 'cross')").fetchall()
    assert [(v, val) for v, val, _ in history] == [(2, {"card": 2}), (1, {"card": 1})]
    assert history[0][2]["via"] == "mcp" and history[0][2]["source"] == "session-7"
    assert history[1][2]["via"] == "sql" and "at" in history[1][2]


def test_unknown_state_key_is_not_nearest(db: Db, bank: str) -> None:
    put(db, "deployment", "cross", {"lens": "deploy"}, None)
    put(db, "ui", "cross", {"lens": "ui"}, None)
    # Near misses of the room or key return nothing - never the closest room's state.
    for room, key in [("deploymen", "cross"), ("Deployment", "cross"), ("deployment", "cros"),
                      ("deployment ", "cross"), ("infrastructure", "cross"), ("deployment", "Cross")]:
        assert get(db, room, key) is None, (room, key)
    assert get(db, "deployment", "cross") == ({"lens": "deploy"}, 1)


def test_stale_put_fails_cleanly_naming_both_versions(db: Db, bank: str) -> None:
    put(db, "r", "k", 1, 0)
    put(db, "r", "k", 2, 1)
    with refused("RC005", "expected_version") as e:
        put(db, "r", "k", 3, 1)
    assert "expected version 1, current version is 2" in str(e.value)
    with refused("RC005", "expected_version", "expected version 0, current version is 2"):
        put(db, "r", "k", 3, None)                  # "no state yet" is stale too
    assert get(db, "r", "k") == (2, 2)


def test_concurrent_puts_with_one_version_one_wins(db: Db, bank: str, dsn: str) -> None:
    put(db, "r", "k", "v1", 0)
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        configure(a)
        configure(b)
        assert put(a, "r", "k", "from a", 1) == 2                   # a holds its new version, uncommitted

        def loser() -> None:
            try:
                put(b, "r", "k", "from b", 1)                        # waits for a, then fails cleanly
                b.commit()
            except psycopg.Error as exc:
                errors.append(exc)
                b.rollback()
        t = threading.Thread(target=loser)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the second put should wait for the first"
        a.commit()
        t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], psycopg.Error)
    assert (errors[0].sqlstate, errors[0].diag.column_name) == ("RC005", "expected_version")
    assert "current version is 2" in str(errors[0])
    assert get(db, "r", "k") == ("from a", 2)


def test_state_provenance_names_the_server_resolved_writer(db: Db, bank: str) -> None:
    db.execute("SET rcll.agent = 'alice'")
    put(db, "r", "k", 1, 0, author="mallory")
    prov = db.execute("SELECT provenance FROM rcll.get_state('b', 'r', 'k')").fetchone()[0]  # type: ignore[index]
    assert prov["who"] == "alice" and prov["author_source"] == "server" and prov["via"] == "sql"
