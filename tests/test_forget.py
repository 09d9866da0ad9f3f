"""Forget: by selector, dry run first, refused when too broad or matching nothing, and everything
derived goes with what is forgotten."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rcll.models import get_embedder
from rcll.retain import Document, retain
from rcll.settings import Settings
from sqlcall import call

T1 = datetime(2026, 8, 1, 9, 0, tzinfo=UTC)
T2 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)


def _counts(db: psycopg.Connection[Any], **kw: Any) -> dict[str, int]:
    return {r["kind"]: r["count"] for r in call(db, "rcll.forget", **kw)}


def scalar(db: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = db.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _refused(db: psycopg.Connection[Any], code: str, column: str, **kw: Any) -> None:
    with pytest.raises(psycopg.Error) as e:
        call(db, "rcll.forget", **kw)
    assert e.value.sqlstate == code, e.value
    assert e.value.diag.column_name == column


def _three_docs(db: psycopg.Connection[Any]) -> list[int]:
    db.execute("SELECT rcll.create_bank('b')")
    ids = []
    for i, (thread, text) in enumerate([("t1", "Alice deployed the billing service to Frankfurt."),
                                        ("t1", "Bob reviewed the Postgres migration for invoices."),
                                        ("t2", "Carol fixed the flaky login test in the CI pipeline.")]):
        r = retain(db, "b", Document(text, thread=thread, room=f"room{i % 2}", tags=[f"tag{i}"], occurred_at=T1))
        ids.append(r.document_id)
    return ids


def test_forget_without_a_selector_is_refused_naming_the_selector(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    _refused(db, "RC007", "selector", bank="b")
    _refused(db, "RC007", "selector", bank="b", dry_run=False)


def test_a_selector_that_matches_nothing_is_refused(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    _refused(db, "RC007", "thread", bank="b", thread="no-such-thread", dry_run=False)
    _refused(db, "RC007", "unit_ids", bank="b", unit_ids=[])
    _refused(db, "RC007", "tag", bank="b", tag=" ")
    _refused(db, "RC007", "selector", bank="b", thread="t2", room="room1")


def test_a_selector_that_matches_everything_needs_everything_by_name(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    _refused(db, "RC007", "retained", bank="b", retained_from=T1, dry_run=False)
    _refused(db, "RC001", "everything", bank="b", everything="other", dry_run=False)
    counts = _counts(db, bank="b", everything="b", dry_run=False)
    assert counts["documents"] == 3
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.documents") == 0


def test_ids_of_another_bank_are_refused_not_skipped(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    db.execute("SELECT rcll.create_bank('other')")
    other = retain(db, "other", Document("Dave owns the other bank's secret.")).unit_ids
    _refused(db, "RC003", "unit_ids", bank="b", unit_ids=other, dry_run=False)
    _refused(db, "RC003", "document_ids", bank="b", document_ids=[10**9], dry_run=False)
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE unit_id = ANY (%s)", other) == len(other)


def test_dry_run_is_the_default_counts_and_changes_nothing(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    before = db.execute("SELECT (SELECT count(*) FROM rcll.memory_units), (SELECT count(*) FROM rcll.unit_lexicon),"
                        " (SELECT count(*) FROM rcll.entities), (SELECT count(*) FROM rcll.forget_log)").fetchone()
    counts = _counts(db, bank="b", thread="t1")
    assert counts["documents"] == 2 and counts["units"] >= 2 and counts["embeddings"] == counts["units"]
    assert counts["lexicon_rows"] == counts["units"]
    after = db.execute("SELECT (SELECT count(*) FROM rcll.memory_units), (SELECT count(*) FROM rcll.unit_lexicon),"
                       " (SELECT count(*) FROM rcll.entities), (SELECT count(*) FROM rcll.forget_log)").fetchone()
    assert before == after


def test_forgetting_a_thread_takes_its_units_lexicon_entities_and_counts(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    db.execute("SELECT rcll.refresh_bank_stats('b')")
    dry = _counts(db, bank="b", thread="t1")
    done = _counts(db, bank="b", thread="t1", dry_run=False, reason="right to erasure")
    assert dry == done
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE thread = 't1'") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.documents WHERE thread = 't1'") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.unit_lexicon l WHERE NOT EXISTS"
                      " (SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = l.unit_id)") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.document_lexicon l WHERE NOT EXISTS"
                      " (SELECT 1 FROM rcll.documents d WHERE d.document_id = l.document_id)") == 0
    # entities only the forgotten thread named are gone; the survivors' counts are exact
    assert scalar(db, "SELECT count(*) FROM rcll.entities WHERE name IN ('Alice', 'Bob', 'Frankfurt')") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.entities e WHERE e.mention_count <>"
                      " (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)") == 0
    # statistics: what a refresh would count now
    kept = db.execute("SELECT unit_count, total_length, document_count FROM rcll.bank_stats").fetchone()
    db.execute("SELECT rcll.refresh_bank_stats('b')")
    assert kept == db.execute("SELECT unit_count, total_length, document_count FROM rcll.bank_stats").fetchone()
    # rooms: room0 held only t1's first document and t2's? room0: docs 0 and 2; room1: doc 1 only
    rooms = {r[0]: r[1] for r in db.execute("SELECT name, fact_count FROM rcll.rooms('b') WHERE fact_count > 0")}
    assert rooms == {"room0": scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE room = 'room0'")}
    assert scalar(db, "SELECT count(*) FROM rcll.rooms WHERE name = 'room1'") == 0
    log = db.execute("SELECT bank_name, action, selector, counts, reason FROM rcll.forget_log").fetchall()
    assert log == [("b", "forget", {"thread": "t1", "everything": False}, done, "right to erasure")]


def test_a_fact_superseded_only_by_a_forgotten_fact_is_current_again(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider="offline")
    db.execute("SELECT rcll.create_bank('b')")
    old = retain(db, "b", Document("We deploy every service with Helm charts.", occurred_at=T1), settings=settings)
    new = retain(db, "b", Document("We switched to Argo CD instead of Helm charts for every service deploy.",
                                   occurred_at=T2), settings=settings)
    closed = scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE unit_id = ANY (%s) AND superseded_by IS NOT NULL",
                    old.unit_ids)
    assert closed == 1, "the offline extractor's change cue superseded the Helm fact"
    counts = _counts(db, bank="b", document_ids=[new.document_id], dry_run=False)
    assert counts["reopened"] == 1
    row = db.execute("SELECT superseded_by, upper_inf(valid), lower(valid) FROM rcll.memory_units"
                     " WHERE unit_id = ANY (%s)", (old.unit_ids,)).fetchone()
    assert row == (None, True, T1)
    assert scalar(db, "SELECT upper_inf(valid) FROM rcll.unit_lexicon WHERE unit_id = %s", old.unit_ids[0]) is True


def test_an_observation_of_a_forgotten_source_goes_and_its_other_sources_are_queued(
        db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    units = [r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units ORDER BY unit_id")]
    emb = get_embedder().embed_query("summary")
    obs = scalar(db, "SELECT rcll.write_observation('b', 'Alice and Bob shipped billing.', %s, %s)", emb, units[:2])
    assert scalar(db, "SELECT count(*) FROM rcll.audit_log WHERE detail ? 'text'") == 1
    counts = _counts(db, bank="b", unit_ids=[units[0]], dry_run=False)
    assert counts["observations_of_forgotten_sources"] == 1 and counts["sources_requeued"] == 1
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE unit_id = %s", obs) == 0
    assert scalar(db, "SELECT consolidation_state FROM rcll.memory_units WHERE unit_id = %s", units[1]) == "pending"
    assert scalar(db, "SELECT count(*) FROM rcll.audit_log WHERE detail ? 'text'") == 0, "the audit row keeps no text"
    assert scalar(db, "SELECT count(*) FROM rcll.audit_log WHERE action = 'consolidate'") == 1


def test_forgetting_one_chunk_redacts_its_document_to_the_rest(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    r = db.execute("SELECT document_id, unit_ids FROM rcll.retain_chunks('b', 'first part. secret part.',"
                   " ARRAY['first part.', 'secret part.'], NULL)").fetchone()
    assert r is not None
    _counts(db, bank="b", unit_ids=[r[1][1]], dry_run=False)
    assert scalar(db, "SELECT content FROM rcll.documents WHERE document_id = %s", r[0]) == "first part."


def test_keyed_state_is_forgotten_by_room_and_key_with_its_history(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    for v in range(3):
        db.execute("SELECT rcll.put_state('b', 'ops', 'spread', %s, %s)", (psycopg.types.json.Jsonb({"v": v}), v))
    db.execute("SELECT rcll.put_state('b', 'ops', 'other', '1', 0)")
    with pytest.raises(psycopg.Error) as e:
        db.execute("SELECT rcll.forget_state('b', 'ops', dry_run => false)")
    assert e.value.sqlstate == "RC007" and e.value.diag.column_name == "key"
    assert scalar(db, "SELECT rcll.forget_state('b', 'ops', 'spread')") == 3
    assert scalar(db, "SELECT rcll.forget_state('b', 'ops', 'spread', dry_run => false)") == 3
    assert scalar(db, "SELECT count(*) FROM rcll.state_history('b', 'ops', 'spread')") == 0
    assert scalar(db, "SELECT count(*) FROM rcll.state_history('b', 'ops', 'other')") == 1


def test_dropping_a_bank_needs_its_name_and_leaves_only_the_log_row(db: psycopg.Connection[Any]) -> None:
    _three_docs(db)
    db.execute("SELECT rcll.create_bank('keep')")
    retain(db, "keep", Document("Kept bank text."))
    with pytest.raises(psycopg.Error) as e:
        call(db, "rcll.drop_bank", bank="b", confirm="B", dry_run=False)
    assert e.value.sqlstate == "RC007" and e.value.diag.column_name == "confirm"
    counts = {r["kind"]: r["count"] for r in call(db, "rcll.drop_bank", bank="b", confirm="b", dry_run=False)}
    assert counts["documents"] == 3 and counts["banks"] == 1
    for table in ("documents", "memory_units", "unit_lexicon", "document_lexicon", "entities", "rooms", "bank_stats"):
        n = db.execute(sql.SQL("SELECT count(*) FROM rcll.{} WHERE bank_id <> rcll._bank_id('keep')").format(
            sql.Identifier(table))).fetchone()
        assert n == (0,), table
    assert scalar(db, "SELECT count(*) FROM rcll.room_count_queue WHERE room IN ('room0', 'room1')") == 0
    assert db.execute("SELECT bank_name, action FROM rcll.forget_log").fetchall() == [("b", "drop_bank")]


def test_an_agent_forgets_from_its_own_bank_and_never_from_another(
        db: psycopg.Connection[Any], login_role: Any) -> None:
    """rcll_agent may call rcll.forget with no other grant; under bank isolation it reaches only the
    banks granted to it, tried as an attacker would: another bank by name, by everything, its unit
    and document ids smuggled into a forget of its own bank, its state - refused, nothing of it goes."""
    _three_docs(db)
    db.execute("SELECT rcll.create_bank('mine')")
    mine = retain(db, "mine", Document("My own note about the garden.")).unit_ids
    retain(db, "mine", Document("A second note, about the shed."))
    db.execute("SELECT rcll.put_state('b', 'deployment', 'spread', '{\"n\": 1}', 0)")
    role = login_role(member_of="rcll_agent")
    db.execute("SELECT rcll.grant_bank(%s, 'mine')", (role.name,))
    db.execute("SELECT rcll.enable_bank_isolation()")
    theirs = [r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id('b')")]
    their_docs = [r[0] for r in db.execute("SELECT document_id FROM rcll.documents WHERE bank_id = rcll._bank_id('b')")]
    try:
        with psycopg.connect(role.dsn, autocommit=True) as attacker:
            for kw in ({"bank": "b", "thread": "t1"}, {"bank": "b", "everything": "b"},
                       {"bank": "b", "unit_ids": theirs[:1], "dry_run": True}):
                with pytest.raises(psycopg.Error) as e:
                    call(attacker, "rcll.forget", **{"dry_run": False, **kw})
                assert e.value.sqlstate == "RC002", "another bank is unknown, whether it exists or not"
            for kw in ({"unit_ids": theirs}, {"document_ids": their_docs}, {"unit_ids": [mine[0], theirs[0]]}):
                with pytest.raises(psycopg.Error) as e:
                    call(attacker, "rcll.forget", bank="mine", dry_run=False, **kw)
                assert e.value.sqlstate == "RC003", "another bank's ids are not this bank's"
            with pytest.raises(psycopg.Error) as e:
                call(attacker, "rcll.forget_state", bank="b", room="deployment", all_keys=True, dry_run=False)
            assert e.value.sqlstate == "RC002"
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                call(attacker, "rcll.drop_bank", bank="mine", confirm="mine", dry_run=False)
            assert _counts(attacker, bank="mine", unit_ids=mine, dry_run=False)["units"] == len(mine)
            assert scalar(attacker, "SELECT count(*) FROM rcll.memory_units WHERE unit_id = ANY (%s)", mine) == 0
    finally:
        db.execute("SELECT rcll.disable_bank_isolation()")
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE unit_id = ANY (%s)", theirs) == len(theirs)
    assert scalar(db, "SELECT count(*) FROM rcll.room_state WHERE bank_id = rcll._bank_id('b')") == 1
    assert db.execute("SELECT bank_name, action FROM rcll.forget_log").fetchall() == [("mine", "forget")]


def test_forget_is_not_executable_by_public_nor_by_a_read_only_role(
        db: psycopg.Connection[Any], login_role: Any) -> None:
    _three_docs(db)
    reader = login_role(member_of="rcll_reader")
    with psycopg.connect(reader.dsn, autocommit=True) as conn:
        for fn, kw in (("rcll.forget", {"bank": "b", "everything": "b"}),
                       ("rcll.drop_bank", {"bank": "b", "confirm": "b"}),
                       ("rcll.forget_state", {"bank": "b", "room": "r", "all_keys": True})):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                call(conn, fn, dry_run=False, **kw)
    # granted EXECUTE by mistake, a role that cannot write is still refused
    db.execute(sql.SQL("GRANT EXECUTE ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text,"
                       " timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text, integer) TO {}").format(
        sql.Identifier(reader.name)))
    with psycopg.connect(reader.dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as e:
        call(conn, "rcll.forget", bank="b", everything="b", dry_run=False)
    assert e.value.sqlstate == "RC006"
    assert scalar(db, "SELECT count(*) FROM rcll.memory_units") > 0


def test_forgetting_in_batches_takes_whole_documents_and_ends_where_one_forget_would(
        db: psycopg.Connection[Any]) -> None:
    """batch => n: each call forgets at most n selected units - a document whole, never split - and
    says how many remain; called until none does, the bank is what one forget leaves."""
    _three_docs(db)
    db.execute("SELECT rcll.create_bank('c')")
    for i, (thread, text) in enumerate([("t1", "Alice deployed the billing service to Frankfurt."),
                                        ("t1", "Bob reviewed the Postgres migration for invoices."),
                                        ("t2", "Carol fixed the flaky login test in the CI pipeline.")]):
        retain(db, "c", Document(text, thread=thread, room=f"room{i % 2}", tags=[f"tag{i}"], occurred_at=T1))
    for bank in ("b", "c"):
        for i in range(4):
            chunks = [f"Dana: note {i} on the release.", f"Dana: it shipped on day {i} to Oslo."]
            db.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => %s, embeddings => NULL,"
                       " thread => 't9', room => 'room9')", (bank, "\n".join(chunks), chunks))
    with pytest.raises(psycopg.Error) as e:
        call(db, "rcll.forget", bank="b", thread="t9", dry_run=False, batch=0)
    assert e.value.sqlstate == "RC001" and e.value.diag.column_name == "batch"
    per_doc = scalar(db, "SELECT count(*) FROM rcll.memory_units WHERE thread = 't9' AND bank_id = rcll._bank_id('b')") // 4
    assert per_doc > 1
    steps = []
    while True:
        got = _counts(db, bank="b", thread="t9", dry_run=False, batch=1)
        steps.append(got)
        assert got["units"] == per_doc and got["documents"] == 1 and got["documents_redacted"] == 0
        if got["remaining"] == 0:
            break
    assert [s["remaining"] for s in steps] == [3 * per_doc, 2 * per_doc, per_doc, 0]
    _counts(db, bank="c", thread="t9", dry_run=False)
    assert scalar(db, "SELECT count(*) FROM rcll.forget_log WHERE bank_name = 'b'") == 4
    for query in ("SELECT text FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s) ORDER BY 1",
                  "SELECT a.alias, e.mention_count FROM rcll.entities e JOIN rcll.entity_aliases a USING (entity_id)"
                  " WHERE e.bank_id = rcll._bank_id(%s) ORDER BY 1",
                  "SELECT name, fact_count FROM rcll.rooms(%s) ORDER BY 1"):
        assert db.execute(query, ("b",)).fetchall() == db.execute(query, ("c",)).fetchall(), query
