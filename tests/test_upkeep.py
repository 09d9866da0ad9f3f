"""The store's periodic jobs (rcll.upkeep): Memory.upkeep() recounts the BM25 corpus statistics
recall reads and folds the room counts; `rcll serve` runs it when it starts and every
RCLL_UPKEEP_SECONDS; `rcll upkeep` runs it once. A bank nobody refreshed is counted on every recall
(0.7-3 s in a bank of 333,333 units: docs/scaling.md), so a server that is never told to refresh
must do it itself."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rcll import upkeep
from rcll.auth import Caller
from rcll.cli import main as cli
from rcll.errors import RcllError
from rcll.http import create_app
from rcll.memory import Memory
from rcll.settings import Settings

STATS = """SELECT s.unit_count, s.document_count FROM rcll.bank_stats s JOIN rcll.banks b USING (bank_id)
           WHERE b.name = %s"""


def _fill(m: Memory, bank: str, docs: int) -> int:
    m.create_bank(bank)
    for i in range(docs):
        m.retain(f"Note {i}: the deploy pipeline for service {i} moved to Argo CD.", bank=bank, room="deployment")
    with m._tx() as conn:   # the units the retains wrote (chunking decides how many)
        row = conn.execute("SELECT count(*) FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)", (bank,)).fetchone()
    assert row is not None
    return int(row[0])


def test_upkeep_recounts_what_recall_reads(dsn: str) -> None:
    with Memory(dsn) as m:
        units = _fill(m, "kept", 3)
        with m._tx() as conn:
            assert conn.execute(STATS, ("kept",)).fetchone() == (0, None)    # never refreshed
        done = m.upkeep()
        assert done.banks >= 1 and done.room_deltas >= 1 and done.seconds >= 0
        with m._tx() as conn:
            assert conn.execute(STATS, ("kept",)).fetchone() == (units, 3)
            # the room counts were folded: no pending deltas are left
            assert conn.execute("SELECT count(*) FROM rcll.room_count_queue").fetchone() == (0,)
        assert m.upkeep().room_deltas == 0


def test_upkeep_is_the_whole_store_s_and_refused_when_scoped_or_read_only(dsn: str, login_role: Any) -> None:
    with Memory(dsn) as m:
        with pytest.raises(RcllError, match="scoped or read-only") as e:
            m.as_caller(Caller("agent", banks=("default",))).upkeep()
        assert e.value.field == "upkeep"
    with Memory(login_role(member_of="rcll_reader").dsn, read_only=True) as ro, \
            pytest.raises(RcllError, match="scoped or read-only"):
        ro.upkeep()


def test_the_server_runs_upkeep_when_it_starts_and_then_every_interval(dsn: str) -> None:
    with Memory(dsn) as m:
        units = _fill(m, "served", 2)
        app = create_app(service=m, upkeep_seconds=0.2)
        with TestClient(app) as client:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with m._tx() as conn:
                    if conn.execute(STATS, ("served",)).fetchone() == (units, 2):
                        break
                time.sleep(0.05)
            with m._tx() as conn:
                assert conn.execute(STATS, ("served",)).fetchone() == (units, 2)
            m.retain("One more note about the rollback plan.", bank="served", room="deployment")
            keeper = app.state.upkeep
            rounds = keeper.rounds
            while time.monotonic() < deadline and keeper.rounds < rounds + 2:
                time.sleep(0.05)
            assert keeper.rounds >= rounds + 2
            with m._tx() as conn:
                counted = conn.execute(STATS, ("served",)).fetchone()
            assert counted is not None and counted[0] > units and counted[1] == 3
            seen = client.get("/health").json()["upkeep"]
            assert seen["every_seconds"] == 0.2 and seen["rounds"] >= 2 and seen["last_run"] and seen["last_error"] is None
        assert not keeper._thread.is_alive()            # stopped with the app
        # A read-only or scoped service runs none; neither does an app asked for none.
        assert create_app(service=m).state.memory is m
        with TestClient(create_app(service=m, upkeep_seconds=0)) as c:
            assert c.app.state.upkeep is None                                   # type: ignore[attr-defined]
            assert c.get("/health").json()["upkeep"] == {"every_seconds": 0}
        with TestClient(create_app(service=m.as_caller(Caller("agent", banks=("served",))), upkeep_seconds=1)) as c:
            assert c.app.state.upkeep is None                                   # type: ignore[attr-defined]


def test_the_interval_is_checked_and_the_cli_runs_it_once(dsn: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert Settings.from_env({}).upkeep_seconds == 300
    assert Settings.from_env({upkeep.ENV: "0"}).upkeep_seconds == 0
    for bad in ("soon", "-5", "1e9"):
        with pytest.raises(RcllError) as e:
            Settings.from_env({upkeep.ENV: bad})
        assert e.value.field == upkeep.ENV and "0 to 86400" in e.value.message
    # `rcll serve` refuses it before it opens the database, one line, exit 2
    monkeypatch.setenv(upkeep.ENV, "soon")
    assert cli(["serve", "--dsn", "postgresql:///nowhere?host=/nonexistent"]) == 2
    assert upkeep.ENV in capsys.readouterr().err
    monkeypatch.delenv(upkeep.ENV)
    with Memory(dsn) as m:
        _fill(m, "cron", 1)
    assert cli(["upkeep", "--dsn", dsn]) == 0
    assert "bank(s) recounted" in capsys.readouterr().out
    assert cli(["upkeep", "--dsn", dsn, "--json"]) == 0
    assert '"banks"' in capsys.readouterr().out


def test_a_failed_round_is_reported_and_the_next_comes_as_planned(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    m = Memory(dsn)
    m.close()                                  # every round fails: this Memory is closed
    keeper = upkeep.Upkeeper(m, 0.05).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "closed" not in (keeper.last_error or ""):
        time.sleep(0.02)
    time.sleep(0.2)                            # more rounds come, each failing the same way
    keeper.stop()
    status = keeper.status()
    assert status["rounds"] == 0 and status["last_run"] is None and "closed" in status["last_error"]
    assert capsys.readouterr().err.count("rcll upkeep: ") >= 2
