"""Consolidation compacts related L2 units into observations, off the recall path: sources stay
linked, every observation has a room, and every observation is audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from rcll.consolidate import consolidate
from rcll.errors import RcllError
from rcll.retain import Document, retain
from rcll.settings import Settings

T = datetime(2026, 8, 20, 9, 0, tzinfo=UTC)
OFFLINE = Settings(llm_provider="offline")      # consolidation needs an extraction mode


def test_consolidation_writes_roomed_audited_observations_linked_to_their_sources(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    for i, text in enumerate(["Caroline went hiking with Melanie near the lake.",
                              "Caroline got a rescue dog named Biscuit.",
                              "Caroline started a pottery class on Tuesdays.",
                              "Zed repainted the garage door blue."]):
        retain(db, "b", Document(text, occurred_at=T + timedelta(days=i)), settings=OFFLINE)
    obs = consolidate(db, "b", settings=OFFLINE)
    assert len(obs) == 1 and len(obs[0].sources) == 3
    rows = db.execute("SELECT kind, room, layer, text FROM rcll.memory_units WHERE kind = 'observation'").fetchall()
    assert len(rows) == 1 and rows[0][1] is not None and rows[0][2] == "L2"
    assert rows[0][3].startswith("Caroline: ") and "Biscuit" in rows[0][3]
    assert db.execute("SELECT count(*) FROM rcll.memory_units WHERE kind = 'observation' AND room IS NULL"
                      ).fetchone() == (0,)
    assert db.execute("SELECT array_agg(to_unit ORDER BY to_unit) FROM rcll.links WHERE link_type = 'consolidates'"
                      ).fetchone() == (sorted(obs[0].sources),)
    states = dict(db.execute("SELECT consolidation_state, count(*) FROM rcll.memory_units WHERE kind = 'fact'"
                             " GROUP BY 1").fetchall())
    assert states == {"consolidated": 3, "pending": 1}
    audit = db.execute("SELECT actor, action, target, detail FROM rcll.audit_log").fetchall()
    assert len(audit) == 1 and audit[0][:2] == ("system:consolidate", "consolidate")
    assert audit[0][2]["observation"] == obs[0].unit_id and audit[0][3]["room"] == rows[0][1]
    # a second run finds nothing left to fold
    assert consolidate(db, "b", settings=OFFLINE) == []


def test_an_observation_inherits_the_majority_room_of_its_sources(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    for i, room in enumerate(["kitchen", "kitchen", "garden"]):
        retain(db, "b", Document(f"Biscuit the dog chewed item number {i} today.", occurred_at=T + timedelta(hours=i),
                                 room=room), settings=OFFLINE)
    consolidate(db, "b", settings=OFFLINE)
    assert db.execute("SELECT room FROM rcll.memory_units WHERE kind = 'observation'").fetchone() == ("kitchen",)
    assert db.execute("SELECT detail ->> 'room_by' FROM rcll.audit_log").fetchone() == ("majority",)


def test_an_observation_matching_no_rule_and_no_source_room_lands_in_general(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    for i in range(2):
        retain(db, "b", Document(f"Zorblax hummed tune number {i} quietly.", occurred_at=T + timedelta(hours=i)), settings=OFFLINE)
    db.execute("UPDATE rcll.memory_units SET room = NULL")
    consolidate(db, "b", settings=OFFLINE)
    row = db.execute("SELECT room FROM rcll.memory_units WHERE kind = 'observation'").fetchone()
    assert row is not None and row[0] is not None


def test_consolidation_is_disabled_in_chunk_mode(db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    with pytest.raises(RcllError, match="LLM_PROVIDER"):
        consolidate(db, "b", settings=Settings(llm_provider="none"))
