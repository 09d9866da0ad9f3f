"""pg_dump keeps every memory: a dump restored into a fresh database holds the same rows, continues
the same identities and answers the same recall - for CREATE EXTENSION and for `rcll install`."""

from __future__ import annotations

import math
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import Leg
from rcll import install

BANKS = ("fleet", "ops", "personal")
DIM = 384


def vec(seed: str) -> str:
    """A deterministic unit vector (pgvector text) standing in for an embedding."""
    rnd = random.Random(seed)
    v = [rnd.gauss(0, 1) for _ in range(DIM)]
    n = math.sqrt(sum(x * x for x in v))
    return "[" + ",".join(f"{x / n:.6f}" for x in v) + "]"


def install_extension_files(leg: Leg) -> None:
    """`make install` of extension/ into the leg's server (every rcll--*.sql, upgrades included)."""
    leg.install_extension_files()


def run(leg: Leg, tool: str, *args: str, stdin: bytes | None = None) -> bytes:
    """Run one of the leg's own client programs (pg_dump, pg_restore, psql); stdout."""
    proc = subprocess.run([str(leg.cluster.bindir / tool), *args], input=stdin, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def restore_plain(leg: Leg, dump: bytes, db: str) -> None:
    """psql < dump.sql, stopping at the first error."""
    run(leg, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", leg.url(db), "-f", "-", stdin=dump)


def fill(conn: psycopg.Connection[Any], prefix: str = "") -> None:
    """Everything a store holds, written through the SQL API: several banks of chunks and facts
    (entities, aliases, causal/entity/semantic links, a supersession), server-resolved and
    self-declared authors, room state versions, an approved and a rejected merge, a move (audit
    rows), the LLM ledger, a grant, an identity, a user room rule and layer rule, folded and
    unfolded room counts and BM25 statistics."""
    x = conn.execute
    for b in BANKS:
        x("SELECT rcll.create_bank(%s, description => %s)", (prefix + b, f"the {b} bank"))
    x("INSERT INTO rcll.identities (role_name, agent) VALUES (%s, 'agent-7') ON CONFLICT DO NOTHING",
      (prefix + "ci_runner",))
    x("INSERT INTO rcll.room_rules (priority, pattern, room) VALUES (5, '\\mbackups?\\M', 'backups')")
    x("INSERT INTO rcll.layer_rules (hall, layer) VALUES ('incident', 'L1') ON CONFLICT DO NOTHING")
    texts = {
        "fleet": ["We moved deploys from Helm to Argo CD in March.", "The API runs on Kubernetes in eu-west.",
                  "Nightly backups go to S3 with pg_dump.", "Carol owns the database migrations."],
        "ops": ["The pager rotation changes every Monday.", "Grafana alerts on p95 latency over 300 ms.",
                "Postgres 18 with pgvector stores the embeddings."],
        "personal": ["Team lunch on Friday was pizza with Carol.", "Carol moved to the Berlin office in May."],
    }
    for b, chunks in texts.items():
        for i, t in enumerate(chunks):
            # Half written as a server-resolved agent (superusers may set rcll.agent), half self-declared.
            with conn.transaction():
                if i % 2 == 0:
                    x("SET LOCAL rcll.agent = 'agent-7'")
                x("""SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s],
                                                embeddings => ARRAY[%s::vector], author => %s, tags => %s,
                                                thread => %s, occurred_at => %s::timestamptz)""",
                  (prefix + b, t, t, vec(t), "bob" if i % 2 else None, ["ops", f"n:{i}"],
                   "T1" if i == 1 else None, f"2024-05-{10 + i:02d} 10:00+00"))
    facts: list[dict[str, Any]] = [
        {"text": "The deploy pipeline uses Argo CD since March.", "hall": "decision",
         "entities": [{"name": "Argo CD", "type": "service", "aliases": ["argocd"]},
                      {"name": "Carol", "type": "person"}],
         "supersedes": ["We deploy with Helm"]},
        {"text": "Rollbacks are a git revert in the deploy repo.", "hall": "procedure", "caused_by": [0],
         "entities": [{"name": "Argo CD", "type": "service"}]},
        {"text": "An incident on 3 May took the API down for 20 minutes.", "hall": "incident",
         "occurred_start": "2024-05-03T09:00:00Z", "entities": [{"name": "Kubernetes", "type": "service"}]},
    ]
    content = "Deploy notes from the March retro."
    x("""SELECT rcll.retain_facts(bank => %s, content => %s, facts => %s,
                                   embeddings => %s::vector[], aux_texts => %s, aux_embeddings => %s::vector[],
                                   llm_calls => %s, room => 'deployment', author => 'alice')""",
      (prefix + "fleet", content, Jsonb(facts), [vec(f["text"]) for f in facts],
       ["Argo CD", "Carol", "We deploy with Helm"],
       [vec("Argo CD"), vec("Carol"), vec("We moved deploys from Helm to Argo CD in March.")],
       Jsonb([{"purpose": "extract", "provider": "anthropic", "model": "m", "input_tokens": 120,
               "output_tokens": 40, "outcome": "ok"}])))
    for v, value in enumerate([{"spread": 1}, {"spread": 2, "note": "ünïcode ✓"}]):
        x("SELECT rcll.put_state(%s, 'deployment', 'spread', %s, %s)", (prefix + "fleet", Jsonb(value), v))
    x("""SELECT rcll.retain_chunks(bank => %s, content => 'Agents share one orchestrator.',
                                    chunks => ARRAY['Agents share one orchestrator.'], embeddings => NULL,
                                    room => 'agent')""", (prefix + "ops",))
    x("""SELECT rcll.retain_chunks(bank => %s, content => 'The orchestrator retries twice.',
                                    chunks => ARRAY['The orchestrator retries twice.'], embeddings => NULL,
                                    room => 'orchestrator')""", (prefix + "ops",))
    x("SELECT rcll.propose_room_merge(%s, 'agent', 'orchestrator', 'same subject')", (prefix + "ops",))
    x("SELECT rcll.approve_room_merge(%s, 'agent')", (prefix + "ops",))
    x("""SELECT rcll.retain_chunks(bank => %s, content => 'Lunch is at noon.', chunks => ARRAY['Lunch is at noon.'],
                                    embeddings => NULL, room => 'social')""", (prefix + "personal",))
    x("""SELECT rcll.retain_chunks(bank => %s, content => 'Dinner plans for Friday.',
                                    chunks => ARRAY['Dinner plans for Friday.'], embeddings => NULL,
                                    room => 'food')""", (prefix + "personal",))
    x("SELECT rcll.propose_room_merge(%s, 'social', 'food', 'test')", (prefix + "personal",))
    x("SELECT rcll.reject_room_merge(%s, 'social', 'not the same')", (prefix + "personal",))
    moved = x("SELECT min(unit_id) FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)",
              (prefix + "personal",)).fetchone()
    assert moved is not None
    x("SELECT rcll.move_units(%s, ARRAY[%s]::bigint[], 'social', 'misfiled')", (prefix + "personal", moved[0]))
    x("SELECT rcll.grant_bank('pg_monitor', %s)", (prefix + "fleet",))
    x("SELECT rcll.fold_room_counts()")
    # Rows past the last fold: the queue must come back as it was, not counted twice.
    x("""SELECT rcll.retain_chunks(bank => %s, content => 'A late note on the schema.',
                                    chunks => ARRAY['A late note on the schema.'], embeddings => NULL,
                                    room => 'schema')""", (prefix + "fleet",))
    for b in BANKS:
        x("SELECT rcll.refresh_bank_stats(%s)", (prefix + b,))


def tables(conn: psycopg.Connection[Any]) -> list[str]:
    return [str(r[0]) for r in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
        "AND c.relkind IN ('r', 'p') ORDER BY 1")]


def columns(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Every rcll table's columns, in order (quoted): what snapshot(only=...) reads of a table after
    an upgrade that added columns."""
    return {t: [str(r[0]) for r in conn.execute(
        "SELECT quote_ident(a.attname) FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY a.attnum", (t,))] for t in tables(conn)}


def snapshot(conn: psycopg.Connection[Any], only: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Every row of every rcll table (as text, sorted) and every sequence's position. applied_at of
    rcll.migrations is left out: CREATE EXTENSION writes those rows, it does not restore them.
    With `only` (columns() of an older version): those columns of each table, as its row then."""
    rows: dict[str, list[str]] = {}
    for t in tables(conn):
        if t == "rcll.migrations":
            query = "SELECT name || ' ' || sha256 FROM rcll.migrations ORDER BY 1"
        elif only is not None and t in only:
            query = f"SELECT row({', '.join('r.' + c for c in only[t])})::text FROM {t} r ORDER BY 1"
        else:
            query = f"SELECT r::text FROM {t} r ORDER BY 1"  # t: a catalog regclass, already quoted
        rows[t] = [str(r[0]) for r in conn.execute(query)]
    for (s,) in conn.execute("SELECT c.oid::regclass::text FROM pg_class c "
                             "WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind = 'S' ORDER BY 1"):
        rows[str(s)] = [str(conn.execute(f"SELECT last_value || ' ' || is_called FROM {s}").fetchone())]
    return rows


QUERIES = [("fleet", "How do we deploy now?"), ("ops", "latency alerts"), ("personal", "Where is Carol?")]


RECALL = """SELECT row(c.unit_id, c.text, round(c.fused_score::numeric, 9), c.rank_dense, c.rank_lexical,
                        c.rank_graph, c.rank_temporal)::text
             FROM rcll.recall_candidates(query => %(q)s, scope => rcll.recall_scope(%(bank)s),
                                         query_embedding => %(v)s::vector) c
             ORDER BY c.fused_score DESC, c.unit_id"""
# The same call before rcll.recall_scope existed (0.1.0: the bank and filters were parameters).
RECALL_0_1 = """SELECT row(c.unit_id, c.text, round(c.fused_score::numeric, 9), c.rank_dense, c.rank_lexical,
                           c.rank_graph, c.rank_temporal)::text
                FROM rcll.recall_candidates(query => %(q)s, bank => %(bank)s, query_embedding => %(v)s::vector) c
                ORDER BY c.fused_score DESC, c.unit_id"""


def recalls(conn: psycopg.Connection[Any], prefix: str = "") -> list[list[str]]:
    """The same recalls, channel ranks and fused scores included (with either version's API)."""
    scoped = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'recall_scope' "
                          "AND pronamespace = 'rcll'::regnamespace)").fetchone()
    query = RECALL if scoped and scoped[0] else RECALL_0_1
    return [[str(r[0]) for r in conn.execute(query, {"q": q, "bank": prefix + bank, "v": vec(q)})]
            for bank, q in QUERIES]


def retain_after(conn: psycopg.Connection[Any], prefix: str = "") -> list[int]:
    """A new bank and new units after a restore: identities continue past every restored row."""
    before = conn.execute("SELECT max(unit_id), max(bank_id) FROM rcll.memory_units").fetchone()
    assert before is not None
    conn.execute("SELECT rcll.create_bank(%s)", (prefix + "after",))
    r = conn.execute("""SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => 'After the restore.',
                                                                chunks => ARRAY['After the restore.'],
                                                                embeddings => ARRAY[%s::vector])""",
                     (prefix + "fleet", vec("after"))).fetchone()
    assert r is not None and r[0][0] > before[0]
    bank = conn.execute("SELECT rcll._bank_id(%s)", (prefix + "after",)).fetchone()
    assert bank is not None and bank[0] > before[1]
    return list(r[0])


@pytest.fixture
def databases(leg: Leg) -> Iterator[tuple[str, str]]:
    """An empty source database and an empty target database (no rcll, no extensions)."""
    source, target = leg.new_database("template0"), leg.new_database("template0")
    yield source, target
    leg.drop_database(source)
    leg.drop_database(target)


def _filled(leg: Leg, db: str, use_extension: bool) -> tuple[dict[str, list[str]], list[list[str]]]:
    with psycopg.connect(leg.url(db), autocommit=True) as conn:
        install.install(conn, use_extension=use_extension)
        fill(conn)
        return snapshot(conn), recalls(conn)


def _restored(leg: Leg, db: str) -> tuple[dict[str, list[str]], list[list[str]]]:
    with psycopg.connect(leg.url(db), autocommit=True) as conn:
        return snapshot(conn), recalls(conn)


def _assert_same(before: tuple[dict[str, list[str]], list[list[str]]],
                 after: tuple[dict[str, list[str]], list[list[str]]]) -> None:
    rows, recalled = before
    assert sorted(after[0]) == sorted(rows)
    for t in rows:
        assert after[0][t] == rows[t], f"{t} differs after the restore"
    assert all(recalled) and after[1] == recalled


@pytest.mark.parametrize("rows_as", ["copy", "inserts"])
def test_extension_install_survives_pg_dump_and_psql(leg: Leg, databases: tuple[str, str], rows_as: str) -> None:
    install_extension_files(leg)
    source, target = databases
    before = _filled(leg, source, use_extension=True)
    assert len(before[0]["rcll.memory_units"]) > 10 and before[0]["rcll.audit_log"]
    dump = run(leg, "pg_dump", "--no-owner", *(["--column-inserts"] if rows_as == "inserts" else []),
               "-d", leg.url(source))
    restore_plain(leg, dump, target)
    _assert_same(before, _restored(leg, target))
    with psycopg.connect(leg.url(target), autocommit=True) as conn:
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'rcll'").fetchone() is not None
        retain_after(conn)


def test_extension_install_survives_custom_format_and_pg_restore(leg: Leg, databases: tuple[str, str],
                                                                 tmp_path: Path) -> None:
    install_extension_files(leg)
    source, target = databases
    before = _filled(leg, source, use_extension=True)
    archive = tmp_path / "rcll.dump"
    archive.write_bytes(run(leg, "pg_dump", "--format=custom", "-d", leg.url(source)))
    run(leg, "pg_restore", "--exit-on-error", "-d", leg.url(target), str(archive))
    _assert_same(before, _restored(leg, target))
    with psycopg.connect(leg.url(target), autocommit=True) as conn:
        retain_after(conn)


def test_rcll_install_survives_pg_dump_and_psql(leg: Leg, databases: tuple[str, str]) -> None:
    source, target = databases
    before = _filled(leg, source, use_extension=False)
    dump = run(leg, "pg_dump", "-d", leg.url(source))
    restore_plain(leg, dump, target)
    _assert_same(before, _restored(leg, target))
    with psycopg.connect(leg.url(target), autocommit=True) as conn:
        retain_after(conn)


def test_every_table_and_sequence_of_the_extension_is_dumped(leg: Leg, databases: tuple[str, str]) -> None:
    """A table or identity added by a later migration must be marked too, or pg_dump loses it."""
    install_extension_files(leg)
    source, _ = databases
    with psycopg.connect(leg.url(source), autocommit=True) as conn:
        install.install(conn, use_extension=True)
        unmarked = conn.execute("""
            SELECT c.oid::regclass::text FROM pg_class c, pg_extension e
            WHERE e.extname = 'rcll' AND c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p', 'S')
              AND c.relname <> 'migrations' AND NOT c.oid = ANY (coalesce(e.extconfig, '{}'))
            ORDER BY 1""").fetchall()
        assert unmarked == []


def test_a_restore_does_not_duplicate_the_seeded_rules(leg: Leg, databases: tuple[str, str]) -> None:
    install_extension_files(leg)
    source, target = databases
    with psycopg.connect(leg.url(source), autocommit=True) as conn:
        install.install(conn, use_extension=True)
        seeded = conn.execute("SELECT count(*) FROM rcll.room_rules").fetchone()
        conn.execute("INSERT INTO rcll.room_rules (priority, pattern, room) VALUES (5, 'runbook', 'ops')")
    restore_plain(leg, run(leg, "pg_dump", "-d", leg.url(source)), target)
    with psycopg.connect(leg.url(target), autocommit=True) as conn:
        restored = conn.execute("SELECT count(*), count(*) FILTER (WHERE room = 'ops') FROM rcll.room_rules").fetchone()
        assert seeded is not None and restored == (seeded[0] + 1, 1)


@pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "rcll_install"])
def test_isolation_survives_pg_dump_and_restore(leg: Leg, databases: tuple[str, str], use_extension: bool) -> None:
    """A restored store is isolated again with no step by hand: an agent's login sees only the bank
    granted to it, in plain and custom-format dumps. `rcll install`: row-level security and its
    policies are in the dump. CREATE EXTENSION: pg_dump dumps neither for an extension's tables,
    but it keeps rcll.bank_isolation_state's row, and restoring that row switches isolation on."""
    if use_extension:
        install_extension_files(leg)
    source, target = databases
    isolation = """SELECT c.relname, c.relrowsecurity, count(p.polname) FROM pg_class c
                   LEFT JOIN pg_policy p ON p.polrelid = c.oid AND p.polname = 'bank_isolation'
                   WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind = 'r' GROUP BY 1, 2 ORDER BY 1"""
    role = f"rcll_t_restore_{source}"
    with psycopg.connect(leg.url(source), autocommit=True) as conn:
        install.install(conn, use_extension=use_extension)
        fill(conn)
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE rcll_agent")
        try:
            conn.execute("SELECT rcll.grant_bank(%s, 'ops')", (role,))
            covered = conn.execute("SELECT rcll.enable_bank_isolation()").fetchone()
            rows, isolated = snapshot(conn), conn.execute(isolation).fetchall()
            assert covered is not None and sum(1 for _, on, n in isolated if on and n == 1) == covered[0] > 10
            dump = run(leg, "pg_dump", "-d", leg.url(source))
            restore_plain(leg, dump, target)
            for db in (source, target):
                with psycopg.connect(leg.url(db).replace("postgres@", f"{role}@", 1), autocommit=True) as agent:
                    assert agent.execute("SELECT name FROM rcll.banks").fetchall() == [("ops",)]
                    assert {r[0] for r in agent.execute("SELECT DISTINCT bank_id FROM rcll.memory_units")} == \
                        {r[0] for r in conn.execute("SELECT rcll._bank_id('ops')")}
            with psycopg.connect(leg.url(target), autocommit=True) as restored:
                assert snapshot(restored) == rows
                assert restored.execute(isolation).fetchall() == isolated
        finally:
            for db in (source, target):
                with psycopg.connect(leg.url(db), autocommit=True) as c:
                    c.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_only_the_tables_owner_loads_rows_past_the_triggers(leg: Leg) -> None:
    """A writer that copies rows in the way a restore does still gets its author resolved."""
    name = leg.new_database()
    try:
        with psycopg.connect(leg.url(name), autocommit=True) as conn:
            conn.execute("SELECT rcll.create_bank('b')")
            conn.execute("DROP ROLE IF EXISTS backup_test_writer")
            conn.execute("CREATE ROLE backup_test_writer LOGIN")
            conn.execute("GRANT rcll_agent TO backup_test_writer")
        url = leg.url(name).replace("postgres@", "backup_test_writer@", 1)
        with psycopg.connect(url, autocommit=True) as writer:
            writer.execute("SET row_security = off")
            with writer.cursor().copy("COPY rcll.memory_units (bank_id, text, author, author_source, tags, provenance) "
                                      "FROM STDIN") as copy:
                copy.write_row((1, "Forged by a copy.", "ceo", "server", ["room-new:x"], '{"via": "copy"}'))
        with psycopg.connect(leg.url(name), autocommit=True) as conn:
            row = conn.execute("SELECT author, author_source, tags FROM rcll.memory_units").fetchone()
            assert row == ("ceo", "self_declared", ["author:ceo", "author-source:self_declared"])
            conn.execute("DROP OWNED BY backup_test_writer")
            conn.execute("DROP ROLE backup_test_writer")
    finally:
        leg.drop_database(name)


@pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "rcll_install"])
def test_own_graphs_after_a_restore(leg: Leg, databases: tuple[str, str], use_extension: bool) -> None:
    """Big banks' own HNSW graphs (rcll graphs) are indexes added to rcll.memory_units. `rcll
    install`: in the dump like every index. CREATE EXTENSION: pg_dump dumps no index of an
    extension's table, so the restore has the extension's one global graph again (docs/backup.md);
    recall returns the same rows either way, and the plan says what to run again."""
    from rcll import dense_indexes
    if use_extension:
        install_extension_files(leg)
    source, target = databases
    with psycopg.connect(leg.url(source), autocommit=True) as conn:
        install.install(conn, use_extension=use_extension)
        fill(conn)
        dense_indexes.apply(leg.url(source), min_units=1, max_share=1.0)
        layout = sorted((g.index_name, g.kind, g.excluded_banks) for g in dense_indexes.indexes(conn))
        rows, recalled = snapshot(conn), recalls(conn)
    assert [k for _, k, _ in layout].count("bank") >= 2
    restore_plain(leg, run(leg, "pg_dump", "-d", leg.url(source)), target)
    with psycopg.connect(leg.url(target), autocommit=True) as conn:
        assert snapshot(conn) == rows and recalls(conn) == recalled
        restored = sorted((g.index_name, g.kind, g.excluded_banks) for g in dense_indexes.indexes(conn))
        if use_extension:
            assert restored == [("memory_units_embedding_hnsw", "global", [])]
            dense_indexes.apply(leg.url(target), min_units=1, max_share=1.0)
            restored = sorted((g.index_name, g.kind, g.excluded_banks) for g in dense_indexes.indexes(conn))
        assert restored == layout
        assert dense_indexes.plan(conn, min_units=1, max_share=1.0) == []
