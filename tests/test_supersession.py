"""A fact that replaces an older one closes the older one's validity window; nothing is deleted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from rcll import extract
from rcll.models import get_embedder
from rcll.retain import Document, retain
from rcll.settings import Settings
from sqlcall import refused
from test_extract_anthropic import Recorded

T1 = datetime(2026, 8, 1, 9, 0, tzinfo=UTC)
T2 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)


def _recall_ranks(db: psycopg.Connection[Any], query: str) -> list[str]:
    rows = db.execute("SELECT text FROM rcll.recall_candidates(%s, rcll.recall_scope('b'), query_embedding => %s)",
                      (query, get_embedder().embed_query(query))).fetchall()
    return [r[0] for r in rows]


def _check(db: psycopg.Connection[Any], helm_word: str, argo_word: str) -> None:
    helm = db.execute("SELECT unit_id, valid, superseded_by FROM rcll.memory_units WHERE text ILIKE %s"
                      " AND text NOT ILIKE %s", (f"%{helm_word}%", f"%{argo_word}%")).fetchone()
    argo = db.execute("SELECT unit_id, valid, superseded_by FROM rcll.memory_units WHERE text ILIKE %s",
                      (f"%{argo_word}%",)).fetchone()
    assert helm is not None and argo is not None
    assert helm[2] == argo[0], "the Helm fact is superseded by the Argo fact"
    assert helm[1].lower == T1 and helm[1].upper == T2, "its window closes where the new fact starts"
    assert argo[1].lower == T2 and argo[1].upper is None and argo[2] is None
    assert db.execute("SELECT count(*) FROM rcll.links WHERE link_type = 'supersedes'"
                      " AND from_unit = %s AND to_unit = %s", (argo[0], helm[0])).fetchone() == (1,)
    # valid now: only the Argo fact
    now = db.execute("SELECT array_agg(unit_id) FROM rcll.memory_units WHERE valid @> now()").fetchone()
    assert now is not None and helm[0] not in now[0] and argo[0] in now[0]
    # Recall ranks the Argo fact first, and the closed Helm fact not at all (not valid now).
    argo_text = db.execute("SELECT text FROM rcll.memory_units WHERE unit_id = %s", (argo[0],)).fetchone()
    assert argo_text is not None and argo_word in argo_text[0]
    assert _recall_ranks(db, "how do we deploy") == [argo_text[0]]


def test_llm_supersession_closes_the_helm_fact_and_recall_ranks_argo_first(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider="anthropic")
    db.execute("SELECT rcll.create_bank('b')")
    rec = Recorded("helm", "argo")
    extract.set_client(rec.client())
    try:
        retain(db, "b", Document("We deploy every service with Helm.", occurred_at=T1), settings=settings)
        retain(db, "b", Document("We moved deploys to Argo CD; Helm is retired.", occurred_at=T2), settings=settings)
    finally:
        extract.set_client(None)
    _check(db, "Helm", "Argo")
    # the alias the model gave resolves: "ArgoCD" is the same entity
    assert db.execute("SELECT e.name FROM rcll.entity_aliases a JOIN rcll.entities e USING (entity_id)"
                      " WHERE a.alias = 'argocd'").fetchone() == ("Argo CD",)
    assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (2,), "nothing deleted"


def test_offline_supersession_closes_the_helm_fact(db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider="offline")
    db.execute("SELECT rcll.create_bank('b')")
    retain(db, "b", Document("We deploy with Helm.", occurred_at=T1), settings=settings)
    retain(db, "b", Document("We moved deploys to Argo.", occurred_at=T2), settings=settings)
    _check(db, "Helm", "Argo")


def test_supersede_refuses_a_replacement_that_is_not_newer(db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider="offline")
    db.execute("SELECT rcll.create_bank('b')")
    a = retain(db, "b", Document("We deploy with Helm.", occurred_at=T2), settings=settings).unit_ids[0]
    b = retain(db, "b", Document("Our cluster runs in Frankfurt.", occurred_at=T1), settings=settings).unit_ids[0]
    with refused("RC001", "at", "at: .* is not after the start"):
        db.execute("SELECT rcll.supersede(%s, %s)", (a, b))
    assert db.execute("SELECT rcll.supersede(%s, %s)", (b, a)).fetchone() == (True,)
    assert db.execute("SELECT rcll.supersede(%s, %s)", (b, a)).fetchone() == (False,)
