"""Rooms: the write-time janitor, the registry kept by triggers, merges, moves and the classifier."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from sqlcall import call_one, refused

Db = psycopg.Connection[Any]


def retain(db: Db, text: str, room: str | None = None, bank: str = "b", **kw: Any) -> list[int]:
    """One document of one chunk (no embedding); returns its unit ids."""
    args = {"bank": bank, "content": text, "chunks": [text], "embeddings": None, "room": room, **kw}
    return list(call_one(db, "rcll.retain_chunks", **args)["unit_ids"])


def unit(db: Db, unit_id: int) -> dict[str, Any]:
    row = db.execute("SELECT room, tags, layer, provenance FROM rcll.memory_units WHERE unit_id = %s",
                     (unit_id,)).fetchone()
    assert row is not None
    return {"room": row[0], "tags": row[1], "layer": row[2], "provenance": row[3]}


def rooms(db: Db, bank: str = "b", pattern: str = "*") -> dict[str, dict[str, Any]]:
    cur = db.execute("SELECT * FROM rcll.rooms(%s, %s)", (bank, pattern))
    cols = [c.name for c in cur.description or []]
    return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}


def counts_match(db: Db, bank: str = "b") -> None:
    """The registry's count of every room equals count(*) of its units."""
    actual = dict(db.execute("""SELECT u.room, count(*) FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id)
                               WHERE b.name = %s AND u.room IS NOT NULL GROUP BY 1""", (bank,)).fetchall())
    listed = {n: r["fact_count"] for n, r in rooms(db, bank).items() if r["fact_count"] or n in actual}
    assert listed == actual


def recall_rooms(db: Db, query: str, rooms_: list[str] | None, bank: str = "b") -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in db.execute(
        "SELECT unit_id, room FROM rcll.recall_candidates(query => %s, scope => rcll.recall_scope(%s, rooms => %s)) ORDER BY unit_id",
        (query, bank, rooms_)).fetchall()]


@pytest.fixture
def bank(db: Db) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


@pytest.mark.parametrize("typed", ["deploy", "Deploys", "deploy_ment", "Deployment", "DEPLOYMENTS", "deploy-ment"])
def test_janitor_lands_spellings_in_the_canonical_room(db: Db, bank: str, typed: str) -> None:
    retain(db, "canonical first", room="deployment")
    u = unit(db, retain(db, f"we shipped it ({typed})", room=typed)[0])
    assert u["room"] == "deployment"
    assert f"room-alias:{typed}" in u["tags"]
    assert db.execute("SELECT room, reason FROM rcll.room_aliases WHERE alias = %s", (typed,)).fetchone() \
        == ("deployment", "spelling")


def test_janitor_knows_the_classifier_vocabulary_on_day_one(db: Db, bank: str) -> None:
    u = unit(db, retain(db, "first ever write", room="Deploys")[0])
    assert u["room"] == "deployment" and "room-alias:Deploys" in u["tags"]
    exact = unit(db, retain(db, "second write", room="deployment")[0])
    assert exact["room"] == "deployment" and not [t for t in exact["tags"] if t.startswith("room-")]


def test_new_room_is_kept_as_typed_and_tagged_once(db: Db, bank: str) -> None:
    first = unit(db, retain(db, "campaign copy", room="Marketing-Q3")[0])
    assert first["room"] == "Marketing-Q3" and "room-new:Marketing-Q3" in first["tags"]
    again = unit(db, retain(db, "more campaign copy", room="Marketing-Q3")[0])
    assert again["room"] == "Marketing-Q3" and "room-new:Marketing-Q3" not in again["tags"]
    spelled = unit(db, retain(db, "even more", room="marketing_q3")[0])
    assert spelled["room"] == "Marketing-Q3" and "room-alias:marketing_q3" in spelled["tags"]
    assert rooms(db)["Marketing-Q3"]["created_by"] == "human"


def test_janitor_never_merges_by_meaning_or_ambiguous_prefix(db: Db, bank: str) -> None:
    retain(db, "an agent fact", room="agent")
    u = unit(db, retain(db, "an orchestrator fact", room="orchestrator")[0])
    assert u["room"] == "orchestrator" and "room-new:orchestrator" in u["tags"]
    retain(db, "a lake", room="datalake")
    amb = unit(db, retain(db, "data", room="data")[0])        # prefix of database and of datalake
    assert amb["room"] == "data" and "room-new:data" in amb["tags"]
    short = unit(db, retain(db, "ag", room="ag")[0])           # too short to be a prefix
    assert short["room"] == "ag"


def test_forged_room_tags_are_discarded(db: Db, bank: str) -> None:
    u = unit(db, retain(db, "tagged", room="ui", tags=["room-alias:forged", "room-new:forged", "keep-me"])[0])
    assert u["room"] == "ui"
    assert "keep-me" in u["tags"]
    assert not [t for t in u["tags"] if t.startswith("room-")]


def test_registry_counts_are_exact_before_and_after_fold(db: Db, bank: str) -> None:
    ids = [retain(db, f"fact {i}", room=["ui", "api", "Deploys"][i % 3])[0] for i in range(9)]
    db.execute("""SELECT rcll.retain_chunks('b', 'doc of three', ARRAY['one', 'two', 'three'], NULL, room => 'ui')""")
    counts_match(db)
    assert rooms(db)["ui"]["fact_count"] == 6
    db.execute("DELETE FROM rcll.memory_units WHERE unit_id = ANY (%s)", (ids[:2],))
    counts_match(db)
    assert db.execute("SELECT rcll.fold_room_counts()").fetchone()[0] > 0  # type: ignore[index]
    assert db.execute("SELECT count(*) FROM rcll.room_count_queue").fetchone() == (0,)
    counts_match(db)
    db.execute("SELECT rcll.move_units('b', %s, 'api', 'test')", (ids[2:5],))
    counts_match(db)
    db.execute("SELECT rcll.fold_room_counts()")
    counts_match(db)
    r = rooms(db)["api"]
    assert r["first_used"] is not None and r["last_used"] >= r["first_used"]


def test_rooms_listing_takes_wildcards_and_shows_aliases(db: Db, bank: str) -> None:
    retain(db, "a", room="deployment")
    retain(db, "b", room="Deploys")
    retain(db, "c", room="ui")
    dep = rooms(db, pattern="dep*")
    assert list(dep) == ["deployment"] and dep["deployment"]["aliases"] == ["Deploys"]
    assert dep["deployment"]["fact_count"] == 2
    assert "ui" in rooms(db, pattern="u?")
    assert list(rooms(db, pattern="Deploy?")) == ["deployment"]          # matched through its alias
    everything = rooms(db)
    assert {"deployment", "ui", "schema", "agent"} <= set(everything)    # vocabulary listed on day one
    assert everything["schema"]["fact_count"] == 0


def test_wrong_room_scores_zero(db: Db, bank: str) -> None:
    dep = retain(db, "the canary deploy to production failed on the database migration", room="deployment")[0]
    retain(db, "the login button is misaligned on the settings page", room="ui")
    hits = recall_rooms(db, "canary deploy production migration", ["ui"])
    assert all(room == "ui" for _, room in hits)
    assert dep not in [u for u, _ in hits]
    assert recall_rooms(db, "canary deploy production migration", ["security"]) == []
    right = recall_rooms(db, "canary deploy production migration", ["deployment"])
    assert [room for _, room in right] == ["deployment"]


def test_alias_stays_readable_after_merge(db: Db, bank: str) -> None:
    a = retain(db, "the planner agent retries tool calls three times", room="agent")[0]
    retain(db, "the orchestrator schedules planner runs", room="orchestrator")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'one subject in this fleet')")
    assert db.execute("SELECT rcll.approve_room_merge('b', 'agent')").fetchone() == (1,)
    assert unit(db, a)["room"] == "orchestrator"
    b_id = db.execute("SELECT bank_id FROM rcll.banks WHERE name = 'b'").fetchone()[0]  # type: ignore[index]
    assert "orchestrator" in db.execute("SELECT rcll._expand_rooms(%s, '{agent}')", (b_id,)).fetchone()[0]  # type: ignore[index]
    # A prompt written last month still names the old room and still gets the facts.
    assert a in [u for u, _ in recall_rooms(db, "planner agent retries tool calls", ["agent"])]
    # A write naming the old room lands in the merged room, its typed name kept.
    later = unit(db, retain(db, "another agent fact", room="agent")[0])
    assert later["room"] == "orchestrator" and "room-alias:agent" in later["tags"]
    listed = rooms(db)
    assert listed["agent"]["status"] == "merged" and listed["agent"]["merged_into"] == "orchestrator"
    assert "agent" in listed["orchestrator"]["aliases"]
    counts_match(db)


def test_semantic_merge_needs_approval(db: Db, bank: str) -> None:
    a = retain(db, "the planner agent retries tool calls", room="agent")[0]
    retain(db, "the orchestrator schedules runs", room="orchestrator")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'same subject?')")
    listed = rooms(db)
    assert listed["agent"]["status"] == "provisional" and listed["agent"]["proposed_into"] == "orchestrator"
    # Nothing moved and nothing reads across: a proposal is not a merge.
    assert unit(db, a)["room"] == "agent"
    assert a not in [u for u, _ in recall_rooms(db, "planner agent retries tool calls", ["orchestrator"])]
    # An agent cannot approve (here: the server set rcll.agent for this session).
    db.execute("SET rcll.agent = 'planner'")
    with refused("RC006", "agent", 'agent "planner" cannot approve'):
        db.execute("SELECT rcll.approve_room_merge('b', 'agent')")
    db.execute("RESET rcll.agent")
    db.execute("SELECT rcll.reject_room_merge('b', 'agent', 'they are different jobs')")
    assert rooms(db)["agent"]["status"] == "live" and unit(db, a)["room"] == "agent"
    with refused("RC003", "from_room", "no pending merge proposal"):
        db.execute("SELECT rcll.approve_room_merge('b', 'agent')")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'yes, same subject')")
    assert db.execute("SELECT rcll.approve_room_merge('b', 'agent')").fetchone() == (1,)
    assert unit(db, a)["room"] == "orchestrator"
    actions = [r[0] for r in db.execute("SELECT action FROM rcll.audit_log ORDER BY audit_id")]
    assert actions == ["room_merge_propose", "room_merge_reject", "room_merge_propose", "room_merge_approve"]


def test_move_is_reversible(db: Db, bank: str) -> None:
    ids = [retain(db, f"fact {i}", room=r)[0] for i, r in enumerate(["deployment", "ui", "deployment"])]
    move = db.execute("SELECT rcll.move_units('b', %s, 'Infra', 'they are about hosts')", (ids,)).fetchone()[0]  # type: ignore[index]
    assert [unit(db, i)["room"] for i in ids] == ["infrastructure"] * 3
    audit = db.execute("SELECT action, target, detail FROM rcll.audit_log WHERE audit_id = %s", (move,)).fetchone()
    assert audit is not None and audit[0] == "room_move" and audit[1]["to_room"] == "infrastructure"
    assert audit[2]["reason"] == "they are about hosts"
    counts_match(db)
    assert db.execute("SELECT rcll.undo_move('b', %s)", (move,)).fetchone() == (3,)
    assert [unit(db, i)["room"] for i in ids] == ["deployment", "ui", "deployment"]
    counts_match(db)
    with refused("RC004", "move_id", "already undone"):
        db.execute("SELECT rcll.undo_move('b', %s)", (move,))
    # A unit moved again after a move blocks undoing the earlier one.
    m1 = db.execute("SELECT rcll.move_units('b', %s, 'api', 'r1')", (ids[:1],)).fetchone()[0]  # type: ignore[index]
    m2 = db.execute("SELECT rcll.move_units('b', %s, 'schema', 'r2')", (ids[:1],)).fetchone()[0]  # type: ignore[index]
    with refused("RC004", "move_id", "moved again"):
        db.execute("SELECT rcll.undo_move('b', %s)", (m1,))
    db.execute("SELECT rcll.undo_move('b', %s)", (m2,))
    db.execute("SELECT rcll.undo_move('b', %s)", (m1,))
    assert unit(db, ids[0])["room"] == "deployment"
    with refused("RC003", "unit_ids", 'not in bank "b"'):
        db.execute("SELECT rcll.move_units('b', ARRAY[999999]::bigint[], 'ui', 'nope')")


def test_classifier_files_deploys_under_deployment(db: Db) -> None:
    def classify(text: str) -> str | None:
        return db.execute("SELECT rcll.classify_room(%s)", (text,)).fetchone()[0]  # type: ignore[index]
    assert classify("We deploy the pipeline every Friday") == "deployment"
    assert classify("the CI pipeline build is red") == "pipeline"
    assert classify("the login token expired") == "auth"
    assert classify("added a column to the units table in a migration") == "schema"
    assert classify("the planner agent") == "agent"
    assert classify("lunch was good") is None


def test_chunks_get_a_room_from_the_classifier_only_when_asked(db: Db, bank: str) -> None:
    plain = unit(db, retain(db, "we deploy on Fridays")[0])
    assert plain["room"] is None
    db.execute("SET rcll.classify_rooms = on")
    asked = unit(db, retain(db, "we deploy on Mondays too")[0])
    assert asked["room"] == "deployment" and asked["provenance"]["room_source"] == "classifier"
    assert rooms(db)["deployment"]["created_by"] == "system"
    db.execute("RESET rcll.classify_rooms")
    db.execute("""UPDATE rcll.banks SET settings = settings || '{"classify_rooms": true}' WHERE name = 'b'""")
    assert unit(db, retain(db, "the login page broke")[0])["room"] == "auth"


def test_layer_defaults_from_the_hall(db: Db, bank: str) -> None:
    rows = db.execute("""
        INSERT INTO rcll.memory_units (bank_id, text, hall, provenance)
        SELECT bank_id, h, h, '{"via": "test"}' FROM rcll.banks, unnest(ARRAY['rule', 'decision', 'event']) h
        WHERE name = 'b' RETURNING hall, layer""").fetchall()
    assert dict(rows) == {"rule": "L0", "decision": "L1", "event": "L2"}
    explicit = db.execute("""
        INSERT INTO rcll.memory_units (bank_id, text, hall, layer, provenance)
        SELECT bank_id, 'x', 'rule', 'L2', '{"via": "test"}' FROM rcll.banks WHERE name = 'b' RETURNING layer""").fetchone()
    assert explicit == ("L2",)
