"""Tags with counts and wildcards (the author roster), thread namespaces, and session start."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from sqlcall import call_one

Db = psycopg.Connection[Any]


def retain(db: Db, text: str, bank: str = "b", **kw: Any) -> int:
    args = {"bank": bank, "content": text, "chunks": [text], "embeddings": kw.pop("embeddings", None), **kw}
    return int(call_one(db, "rcll.retain_chunks", **args)["unit_ids"][0])


def as_agent(db: Db, agent: str | None) -> None:
    db.execute("SELECT set_config('rcll.agent', %s, false)", (agent or "",))


@pytest.fixture
def bank(db: Db) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


def test_tags_roster_lists_every_writer_with_counts(db: Db, bank: str) -> None:
    for agent, text in [("alice", "one"), ("alice", "two"), ("bob", "three"), (None, "four")]:
        as_agent(db, agent)
        retain(db, text, tags=["team:core"] if agent == "alice" else [])
    as_agent(db, None)
    roster = db.execute("SELECT tag, unit_count FROM rcll.tags('b', 'author:*')").fetchall()
    assert roster == [("author:alice", 2), ("author:bob", 1)]
    assert db.execute("SELECT tag FROM rcll.tags('b', 'author:?ob')").fetchall() == [("author:bob",)]
    assert db.execute("SELECT * FROM rcll.tags('b', 'team:*')").fetchall() == [("team:core", 2)]
    assert db.execute("SELECT count(*) FROM rcll.tags('b')").fetchone() == (3,)
    assert db.execute("SELECT * FROM rcll.tags('b', '%')").fetchall() == []      # % is literal, not LIKE's


def test_thread_b_never_sees_thread_a(db: Db, bank: str) -> None:
    rng = np.random.default_rng(7)
    v = rng.standard_normal(384).astype(np.float32)
    v /= np.linalg.norm(v)
    text = "the staging database password rotates every Monday"
    a = retain(db, text, thread="A", embeddings=[v], room="auth", hall="rule", layer="L0")
    b = retain(db, "thread B chatter about lunch", thread="B", embeddings=[-v])
    # Every channel gets every reason to return A's unit: same words, same embedding, same room.
    rows = db.execute("""SELECT unit_id, thread, rank_dense, rank_lexical FROM rcll.recall_candidates(
                             query => %s, scope => rcll.recall_scope('b', thread => 'B'), query_embedding => %s)""", (text, v)).fetchall()
    assert a not in [r[0] for r in rows]
    assert all(r[1] == "B" for r in rows) and b in [r[0] for r in rows]
    in_a = db.execute("""SELECT unit_id FROM rcll.recall_candidates(
                             query => %s, scope => rcll.recall_scope('b', thread => 'A'), query_embedding => %s)""", (text, v)).fetchall()
    assert (a,) in in_a and (b,) not in in_a
    # Nor at session start: a thread's rules are that thread's.
    assert a not in [r[0] for r in db.execute("SELECT unit_id FROM rcll.session_start('b', thread => 'B')")]
    assert a in [r[0] for r in db.execute("SELECT unit_id FROM rcll.session_start('b', thread => 'A')")]


def test_session_start_returns_current_rules_then_procedures(db: Db, bank: str) -> None:
    proc = retain(db, "to deploy: tag, build, canary, promote", hall="procedure", room="deployment")
    rule = retain(db, "never deploy on Fridays", hall="rule", room="deployment")
    general = retain(db, "always write the reason into the commit", hall="rule")
    ui_rule = retain(db, "buttons use the design tokens", hall="rule", room="ui")
    old = retain(db, "deploys need two approvals", hall="rule", room="deployment")
    retain(db, "we decided to use canaries", hall="decision", room="deployment")      # L1: not loaded
    db.execute("UPDATE rcll.memory_units SET valid = tstzrange(lower(valid), now()) WHERE unit_id = %s", (old,))
    everything = [r[0] for r in db.execute("SELECT unit_id FROM rcll.session_start('b')")]
    assert everything == [general, rule, ui_rule, proc]
    scoped = [r[0] for r in db.execute("SELECT unit_id FROM rcll.session_start('b', rooms => '{Deploys}')")]
    assert scoped == [general, rule, proc]


def test_provenance_is_stored_on_every_write_and_returned(db: Db, bank: str) -> None:
    uid = retain(db, "the build cache lives on the runner", source="notes.md", via="mcp", author="carol")
    prov = db.execute("SELECT provenance FROM rcll.memory_units WHERE unit_id = %s", (uid,)).fetchone()[0]  # type: ignore[index]
    assert prov["via"] == "mcp" and prov["who"] == "carol" and prov["source"] == "notes.md"
    assert prov["document_id"] is not None and prov["at"]
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("""INSERT INTO rcll.memory_units (bank_id, text, provenance)
                      SELECT bank_id, 'no via', '{}' FROM rcll.banks WHERE name = 'b'""")
    returned = db.execute("""SELECT provenance FROM rcll.recall_candidates(query => 'build cache runner', scope => rcll.recall_scope('b'))
                             WHERE unit_id = %s""", (uid,)).fetchone()
    assert returned is not None and returned[0]["via"] == "mcp"
