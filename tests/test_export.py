"""Export and import: the whole memory leaves, comes back exactly, and its PAM view validates."""

from __future__ import annotations

import filecmp
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import Leg
from rcll import models
from rcll.db import configure
from rcll.errors import RcllError
from rcll.export import export_bank, import_bank, read_manifest, validate_pam
from rcll.recall import Direct, candidates, recall
from rcll.request import RecallRequest as R
from sqlcall import refused
from test_recall_seed import BANK, seed


def _rich(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The recall seed (entities, aliases, links, rooms, tags) plus everything else a bank holds:
    supersession, room state versions, a merge proposal, aliases, a move in the audit log, the LLM
    ledger, a grant, folded and unfolded room counts, colon tags, NULL embeddings."""
    ids = seed(conn)
    conn.execute("SELECT rcll.fold_room_counts()")
    r = conn.execute("""SELECT * FROM rcll.retain_chunks(bank => %s, content => 'Deploys now go through Argo CD.',
                        chunks => ARRAY['Deploys now go through Argo CD.'], embeddings => NULL, room => 'Deploys',
                        tags => ARRAY['ops', 'ticket:OPS-12', 'Mixed Case'], hall => 'decision',
                        occurred_at => '2024-06-01 09:00+00', metadata => '{"k": [1, 2.5, null]}')""",
                     (BANK,)).fetchone()
    assert r is not None
    newer = r[1][0]
    conn.execute("SELECT rcll.supersede(%s, %s)", (ids["helm"], newer))
    conn.execute("""INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight, provenance)
                    VALUES (rcll._bank_id(%s), %s, %s, 'supersedes', 0.3333333, '{"by": "test"}')
                    ON CONFLICT DO NOTHING""", (BANK, newer, ids["helm"]))
    for v, value in enumerate([{"spread": 1}, {"spread": 2, "note": "ünïcode ✓"}, [1, "two", None]]):
        conn.execute("SELECT rcll.put_state(%s, 'deployment', 'spread', %s, %s)", (BANK, Jsonb(value), v))
    conn.execute("SELECT rcll.propose_room_merge(%s, 'social', 'database', 'test merge')", (BANK,))
    conn.execute("SELECT rcll.move_units(%s, ARRAY[%s]::bigint[], 'database', 'misfiled')", (BANK, ids["lunch"]))
    conn.execute("SELECT rcll.record_llm_calls(%s, %s)", (BANK, Jsonb([
        {"purpose": "extract", "provider": "anthropic", "model": "m", "input_tokens": 10,
         "output_tokens": 5, "outcome": "ok"}])))
    conn.execute("SELECT rcll.grant_bank('pg_monitor', %s)", (BANK,))
    # Rows past the last fold: the import must carry the queue, not recount it.
    conn.execute("""SELECT rcll.retain_chunks(bank => %s, content => 'A late unfolded note on schema.',
                    chunks => ARRAY['A late unfolded note on schema.'], embeddings => NULL, room => 'schema')""",
                 (BANK,))
    conn.execute("SELECT rcll.refresh_bank_stats(%s)", (BANK,))
    ids["newer"] = newer
    return ids


def _connect(url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    configure(conn)
    return conn


def _same_tree(a: Path, b: Path) -> list[str]:
    diffs: list[str] = []
    cmp = filecmp.dircmp(a, b)
    stack = [cmp]
    while stack:
        c = stack.pop()
        diffs += [f"only in one: {n}" for n in c.left_only + c.right_only]
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        diffs += mismatch + errors
        stack += list(c.subdirs.values())
    return diffs


def test_round_trip_is_byte_identical_and_recalls_the_same(leg: Leg, db: psycopg.Connection[Any],
                                                           tmp_path: Path) -> None:
    ids = _rich(db)
    first, second = tmp_path / "first", tmp_path / "second"
    summary = export_bank(db, BANK, first)
    assert summary.tables["memory_units"] == db.execute(
        "SELECT count(*) FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)", (BANK,)).fetchone()[0]
    for table in ("links", "entities", "entity_aliases", "unit_entities", "rooms", "room_aliases", "room_state",
                  "room_merge_proposals", "audit_log", "llm_calls", "bank_grants", "room_count_queue", "documents"):
        assert summary.tables[table] > 0, table

    clean = leg.new_database()
    try:
        with _connect(leg.url(clean)) as fresh:
            res = import_bank(fresh, first, restore=True)
            assert res.fresh and res.rows["memory_units"] == summary.tables["memory_units"]
            export_bank(fresh, BANK, second)
            assert _same_tree(first, second) == []

            q = "how do we deploy with helm"
            qe = models.get_embedder().embed_query(q)
            ask = R(query=q, bank=BANK, reference_time="2024-06-15", as_of="2024-06-15")
            before = candidates(db, ask, query_embedding=qe)
            after = candidates(fresh, ask, query_embedding=qe)
            assert before and [(f.unit_id, f.text, f.rank_dense, f.rank_lexical, f.rank_graph, f.rank_temporal)
                               for f in before] == \
                   [(f.unit_id, f.text, f.rank_dense, f.rank_lexical, f.rank_graph, f.rank_temporal)
                    for f in after]
            r1 = recall(Direct(db), R(query=q, bank=BANK, rooms=["deployment"]))
            r2 = recall(Direct(fresh), R(query=q, bank=BANK, rooms=["deployment"]))
            assert [f.unit_id for f in r1.facts] == [f.unit_id for f in r2.facts]
            # Supersession, state versions and the merge proposal came back as they were.
            assert fresh.execute("SELECT superseded_by FROM rcll.memory_units WHERE unit_id = %s",
                                 (ids["helm"],)).fetchone() == (ids["newer"],)
            assert fresh.execute("SELECT version FROM rcll.get_state(%s, 'deployment', 'spread')",
                                 (BANK,)).fetchone() == (3,)
            # New writes after an import get new ids (sequences moved past the imported ones).
            r = fresh.execute("SELECT * FROM rcll.retain_chunks(bank => %s, content => 'after import', "
                              "chunks => ARRAY['after import'], embeddings => NULL)", (BANK,)).fetchone()
            assert r is not None and r[1][0] > max(ids.values())
    finally:
        leg.drop_database(clean)


def test_renumbered_import_keeps_every_reference(leg: Leg, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    _rich(db)
    export_bank(db, BANK, tmp_path / "a")
    target = leg.new_database()
    try:
        with _connect(leg.url(target)) as other:
            other.execute("SELECT rcll.create_bank('squatter')")
            for i in range(40):
                other.execute("SELECT rcll.retain_chunks(bank => 'squatter', content => %s, chunks => ARRAY[%s], "
                              "embeddings => NULL)", (f"squatter {i}", f"squatter {i}"))
            import_bank(other, tmp_path / "a")
            export_bank(other, BANK, tmp_path / "b")
        a = [json.loads(x) for x in (tmp_path / "a/rcll/links.jsonl").read_text().splitlines()]
        b = [json.loads(x) for x in (tmp_path / "b/rcll/links.jsonl").read_text().splitlines()]
        ta = {json.loads(x)["unit_id"]: json.loads(x)["text"] for x in (tmp_path / "a/rcll/memory_units.jsonl").read_text().splitlines()}
        tb = {json.loads(x)["unit_id"]: json.loads(x)["text"] for x in (tmp_path / "b/rcll/memory_units.jsonl").read_text().splitlines()}
        assert set(ta) != set(tb)  # the squatter held the ids: renumbered
        assert sorted((ta[x["from_unit"]], ta[x["to_unit"]], x["link_type"], x["weight"]) for x in a) == \
               sorted((tb[x["from_unit"]], tb[x["to_unit"]], x["link_type"], x["weight"]) for x in b)
    finally:
        leg.drop_database(target)


def test_pam_view_validates_against_the_sdk_schema(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    _rich(db)
    s = export_bank(db, BANK, tmp_path / "x")
    assert validate_pam(tmp_path / "x") == []
    data = json.loads((tmp_path / "x/pam/memory-store.json").read_text())
    assert len(data["memories"]) == s.tables["memory_units"] and len(data["relations"]) == s.tables["links"]
    superseded = [m for m in data["memories"] if m["status"] == "superseded"]
    assert superseded and all(m["temporal"]["superseded_by"] for m in superseded)
    # What PAM cannot carry natively rides in metadata (and in full in the sidecar).
    assert {m["metadata"]["rcll"]["room"] for m in data["memories"]} >= {"deployment", "database"}


def test_every_bank_table_is_exported(db: psycopg.Connection[Any]) -> None:
    bank_tables = {r[0] for r in db.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'bank_id' "
        "WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p')")}
    exported = {r[0] for r in db.execute("SELECT table_name FROM rcll.export_tables()")}
    # written by triggers as units are imported: a copy of memory_units columns, and document lengths from it
    derived = {"unit_lexicon", "document_lexicon"}
    assert bank_tables - derived <= exported, f"not exported: {bank_tables - derived - exported}"


def test_psql_can_export_a_table(db: psycopg.Connection[Any]) -> None:
    _rich(db)
    rows = db.execute("SELECT rcll.export_rows('b', 'rooms')").fetchall()
    assert rows and all("bank_id" not in r[0] for r in rows)
    with refused("RC001", "table_name", "is not an exported table"):
        db.execute("SELECT rcll.export_rows('b', 'pg_authid')")


def test_the_one_call_export_prints_with_export_rows_settings(db: psycopg.Connection[Any]) -> None:
    # rcll.export_stream (the delegated export) spells rcll.export_rows' print settings again: held equal.
    settings = {str(f): list(c) for f, c in db.execute(
        "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p "
        "WHERE p.oid IN ('rcll.export_rows(text, text)'::regprocedure, 'rcll.export_stream(text)'::regprocedure)")}
    assert settings["rcll.export_stream(text)"] == settings["rcll.export_rows(text,text)"]
    assert "TimeZone=UTC" in settings["rcll.export_rows(text,text)"]


def test_import_into_existing_bank_needs_a_conflict_policy(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    _rich(db)
    export_bank(db, BANK, tmp_path / "x")
    units = db.execute("SELECT count(*) FROM rcll.memory_units").fetchone()
    with pytest.raises(RcllError) as e:
        import_bank(db, tmp_path / "x")
    assert e.value.field == "bank"
    for policy in ("skip", "replace"):
        res = import_bank(db, tmp_path / "x", on_conflict=policy)
        assert not res.fresh
        assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == units
    rooms = dict(db.execute("SELECT name, fact_count FROM rcll.rooms(%s)", (BANK,)).fetchall())
    actual = dict(db.execute("SELECT room, count(*) FROM rcll.memory_units WHERE room IS NOT NULL "
                             "GROUP BY room").fetchall())
    assert {k: v for k, v in rooms.items() if k in actual} == actual


def test_a_damaged_export_is_refused_by_name(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    _rich(db)
    export_bank(db, BANK, tmp_path / "x")
    f = tmp_path / "x/rcll/links.jsonl"
    f.write_text(f.read_text()[:-40] + "\n")
    db.execute("SELECT rcll.create_bank('other')")
    with pytest.raises(RcllError) as e:
        import_bank(db, tmp_path / "x", on_conflict="skip")
    assert e.value.field == "rcll/links.jsonl"
    assert read_manifest(tmp_path / "x")["bank"] == BANK


def test_only_the_tables_owner_may_restore(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                           login_role: Any) -> None:
    from rcll.auth import Caller
    from rcll.memory import Memory

    _rich(db)
    export_bank(db, BANK, tmp_path / "x")
    with Memory(dsn) as m:
        scoped = m.as_caller(Caller("agent", (BANK,), frozenset({"import", "read"})))
        with pytest.raises(RcllError) as refused:
            scoped.import_(tmp_path / "x", on_conflict="skip", restore=True)
        assert refused.value.field == "restore"
        stream = b"".join(m.export_lines(bank=BANK))
        # the owner's unscoped Memory restores a stream (here: every row already there, kept)
        assert m.import_lines(stream.splitlines(keepends=True), on_conflict="skip", restore=True).bank == BANK
    db.execute("SELECT rcll.create_bank('elsewhere')")
    agent = login_role("SELECT", "INSERT", "UPDATE", "DELETE")
    with _connect(agent.dsn) as conn:
        with pytest.raises(RcllError) as e:
            import_bank(conn, tmp_path / "x", on_conflict="skip", restore=True)
        assert e.value.field == "restore" and "owner" in e.value.message
    with pytest.raises(psycopg.Error) as raw, _connect(agent.dsn) as conn:
        conn.execute("SELECT rcll.restore_begin(bank_row => '{\"name\": \"b2\"}', on_conflict => 'error')")
    assert raw.value.sqlstate == "RC006"


def _renamed(path: Path, name: str) -> None:
    """An export directory edited to name another bank (as if from another database)."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["bank"] = name
    banks_file = path / "rcll/banks.jsonl"
    row = json.loads(banks_file.read_text())
    row["name"] = name
    banks_file.write_text(json.dumps(row) + "\n")
    for t in manifest["tables"]:
        if t["name"] == "banks":
            t["sha256"] = hashlib.sha256(banks_file.read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_an_imported_copy_gets_new_ids_and_keeps_every_row(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    """A same-named bank from another database: no id of the stream is kept, none collides."""
    _rich(db)
    export_bank(db, BANK, tmp_path / "x")
    _renamed(tmp_path / "x", "copy")
    before = {r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units")}
    res = import_bank(db, tmp_path / "x")
    new = {r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id('copy')")}
    assert len(new) == res.rows["memory_units"] == len(before) and not new & before
    assert res.not_imported.get("bank_grants") == 1 and res.not_imported.get("audit_log", 0) > 0


def test_every_exported_table_has_an_import_rule(db: psycopg.Connection[Any]) -> None:
    """An import writes a table (new ids, references mapped) or counts it only - never by default."""
    exported = [r[0] for r in db.execute("SELECT table_name FROM rcll.export_tables() ORDER BY 1")]
    ruled = [r[0] for r in db.execute("SELECT table_name FROM rcll.import_tables() ORDER BY 1")]
    assert ruled == exported
    counted = {r[0] for r in db.execute("SELECT table_name FROM rcll.import_tables() WHERE NOT written")}
    assert counted == {"banks", "bank_stats", "bank_grants", "room_count_queue", "audit_log", "forget_log"}


def test_an_import_keeps_corrections_and_retention_policies(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    """Export then import is lossless for a unit's history and the bank's policies: the copy lists
    the same versions, the same policies, and its units expire when the original's do - also
    after a policy is removed, which gives a unit back its own expiry, not the policy's."""
    ids = seed(db)
    first, second = models.get_embedder().embed(["Deploys go through Argo CD since Marhc.",
                                                 "Deploys go through Argo CD since March."])
    db.execute("SELECT rcll.correct(%s, %s, 'Deploys go through Argo CD since Marhc.', %s::vector, 'moved off Helm')",
               (BANK, ids["helm"], first))
    db.execute("SELECT rcll.correct(%s, %s, 'Deploys go through Argo CD since March.', %s::vector, 'typo')",
               (BANK, ids["helm"], second))
    own = (datetime.now(UTC) + timedelta(days=45)).replace(microsecond=0)
    db.execute("SELECT set_config('rcll.expires_at', %s, false)", (own.isoformat(),))   # what a retain's ttl sets
    db.execute("""SELECT rcll.retain_chunks(bank => %s, content => 'A note that lapses.', chunks => ARRAY['A note that lapses.'],
                  embeddings => NULL, room => 'schema')""", (BANK,))
    db.execute("SELECT set_config('rcll.expires_at', '', false)")
    db.execute("SELECT rcll.set_retention(%s, '90 days', layer => 'L2')", (BANK,))
    db.execute("SELECT rcll.set_retention(%s, '30 days', room => 'schema')", (BANK,))
    export_bank(db, BANK, tmp_path / "x")
    _renamed(tmp_path / "x", "copy")
    res = import_bank(db, tmp_path / "x")
    assert res.rows["unit_versions"] == 2 and res.rows["retention_policies"] == 2
    assert "unit_versions" not in res.not_imported and "retention_policies" not in res.not_imported

    def history(bank: str) -> list[tuple[Any, ...]]:
        unit = db.execute("SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s) AND text LIKE "
                          "'Deploys go through Argo CD since March.'", (bank,)).fetchone()
        assert unit is not None
        return db.execute("SELECT version, text, current, reason, replaced_by FROM rcll.unit_history(%s, %s)",
                          (bank, unit[0])).fetchall()

    def policies(bank: str) -> list[tuple[Any, ...]]:
        return db.execute("SELECT room, hall, layer, keep, units, created_by FROM rcll.retention_policies(%s)",
                          (bank,)).fetchall()

    def expiry(bank: str) -> list[tuple[Any, ...]]:
        return db.execute("SELECT text, expires_at FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s) "
                          "ORDER BY text, unit_id", (bank,)).fetchall()

    assert len(history(BANK)) == 3 and history("copy") == history(BANK)
    assert len(policies(BANK)) == 2 and policies("copy") == policies(BANK)
    assert expiry("copy") == expiry(BANK)
    assert any(e is not None for _, e in expiry("copy"))
    for bank in (BANK, "copy"):
        db.execute("SELECT rcll.set_retention(%s, NULL, room => 'schema')", (bank,))
    assert expiry("copy") == expiry(BANK)
    assert ("A note that lapses.", own) in expiry("copy")      # its own 45 days, no longer the room's 30
