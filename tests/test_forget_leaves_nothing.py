"""Nothing of it left: text planted in forgotten documents appears in no text or jsonb column of any
rcll table (found from the catalog, so a table added later is scanned too), audit and history
included, and in no later export."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rcll import Memory
from rcll.models import get_embedder
from rcll.retain import Document, retain
from rcll.settings import Settings
from sqlcall import call


def _columns(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(t, c) for t, c in db.execute(
        "SELECT c.relname, a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped"
        " AND a.atttypid IN ('text'::regtype, 'jsonb'::regtype, 'tsvector'::regtype, 'text[]'::regtype,"
        " 'bytea'::regtype, 'name'::regtype)")]


def _where(db: psycopg.Connection[Any], marker: str) -> list[str]:
    found = []
    for table, column in _columns(db):
        q = sql.SQL("SELECT count(*) FROM rcll.{} WHERE strpos(lower({}::text), %s) > 0").format(
            sql.Identifier(table), sql.Identifier(column))
        row = db.execute(q, (marker.lower(),)).fetchone()
        if row and row[0]:
            found.append(f"{table}.{column}")
    return found


@pytest.mark.parametrize("mode", ["none", "offline"])
def test_forgotten_text_is_in_no_table_and_no_later_export(
        db: psycopg.Connection[Any], dsn: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider=mode)
    db.execute("SELECT rcll.create_bank('b')")
    secret = "zq" + uuid.uuid4().hex[:10]        # one token: its lexeme is the marker too
    name = "Xylo" + uuid.uuid4().hex[:6]         # a name: entity, alias and keyless link
    room = "room" + uuid.uuid4().hex[:6]
    keep = retain(db, "b", Document("Alice keeps the kitchen tidy and waters the plants.", thread="t"), settings=settings)
    gone = retain(db, "b", Document(f"{name}: the vault password is {secret}. {name} moved to Lisbon instead of Porto.",
                                    thread="t", room=room, tags=["secret"]), settings=settings)
    db.execute("SELECT rcll.put_state('b', %s, 'k', %s, 0)", (room, psycopg.types.json.Jsonb({"v": secret})))
    # consolidation: an observation over a forgotten and a kept unit, its text in the audit row
    obs_text = f"Summary: {name} and Alice; {secret}."
    db.execute("SELECT rcll.write_observation('b', %s, %s, %s)",
               (obs_text, get_embedder().embed_query(obs_text), [keep.unit_ids[0], gone.unit_ids[0]]))
    db.execute("SELECT rcll.refresh_bank_stats('b')")
    db.execute("SELECT rcll.fold_room_counts()")
    assert _where(db, secret), "the marker was planted"

    call(db, "rcll.forget", bank="b", document_ids=[gone.document_id], dry_run=False)
    call(db, "rcll.forget_state", bank="b", room=room, key="k", dry_run=False)
    for marker in (secret, name):
        assert _where(db, marker) == [], marker
    # A room is a label the caller chose, not content: the forget log keeps it as the state
    # forget's selector, the consolidation audit row as the room its observation went to
    # (docs/forgetting.md); the room itself is gone from the registry.
    assert _where(db, room) == ["audit_log.detail", "forget_log.selector"]
    assert db.execute("SELECT count(*) FROM rcll.rooms WHERE name = %s", (room,)).fetchone() == (0,)

    with Memory(dsn, bank="b") as m:
        exported = b"".join(m.export_lines(bank="b"))
    for marker in (secret, name):
        assert marker.lower().encode() not in exported.lower(), marker
    assert keep.unit_ids[0] in [r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units")]
