"""rcll on a real Citus cluster (a coordinator and two workers, rcll.citus_cluster): the install
distributes every bank-keyed table by bank, a bank lives whole on one worker, and the coordinator
answers as one node does for the same data."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import Leg
from rcll import Memory, install, models
from rcll.citus import CitusError
from rcll.citus_cluster import CitusCluster
from rcll.db import configure
from rcll.document import Document
from rcll.errors import Code, RcllError
from rcll.export import iter_export
from rcll.extract import offline
from rcll.settings import DEFAULTS

# Tens of seconds (the cluster's start, install and distribution): handed out first by make test.
pytestmark = pytest.mark.slow

DOCS = [
    ("We deploy the API with Argo CD since March.", "deployment"),
    ("Rollbacks use helm rollback to the previous release.", "deployment"),
    ("Carol owns the billing service and its invoices.", "billing"),
    ("The billing service moved from Stripe to Adyen in June.", "billing"),
    ("Dave is on call for the payments gateway this week.", "oncall"),
    ("Postgres backups run nightly with pgBackRest to S3.", "database"),
]
BANKS = [f"team{i}" for i in range(6)]
QUERIES = ["how do we deploy?", "who owns billing?", "how do we roll back a bad release?", "backups"]


@pytest.fixture(scope="module")
def coordinator(citus: CitusCluster) -> str:
    """The coordinator's rcll database, installed (and so distributed) once, six banks made."""
    with psycopg.connect(citus.url()) as conn:
        install.install(conn)
        conn.commit()
    with Memory(citus.url()) as m:
        for bank in BANKS:
            m.create_bank(bank)
        # A bank's worker follows its id, so on the banks other test files made first on this
        # cluster: should all six land on one worker, the last is made again (a new id) until not.
        for _ in range(32):
            if len(_bank_per_worker(citus.url())) == len(citus.workers):
                break
            m.drop_bank(BANKS[-1], confirm=BANKS[-1], dry_run=False)
            m.create_bank(BANKS[-1])
    return citus.url()


@pytest.fixture(scope="module")
def filled(coordinator: str) -> str:
    """The six banks with the same six documents each."""
    with Memory(coordinator) as m:
        for bank in BANKS:
            m.retain_many([text for text, _ in DOCS], bank=bank)
    return coordinator


@pytest.fixture
def one_node(pg18: Leg) -> Iterator[str]:
    """The same six banks on one node (the pg18 leg), for comparison."""
    with pg18.database() as url:
        with Memory(url) as m:
            for bank in BANKS:
                m.create_bank(bank)
                m.retain_many([text for text, _ in DOCS], bank=bank)
        yield url


def _dist(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, int]]:
    return {str(t): (str(kind), int(colocation)) for t, kind, colocation in conn.execute(
        "SELECT logicalrelid::regclass::text, partmethod, colocationid FROM pg_dist_partition "
        "WHERE logicalrelid::regclass::text LIKE 'rcll.%'")}


def test_install_places_every_rcll_table_by_bank_or_on_every_node(citus: CitusCluster, coordinator: str) -> None:
    with psycopg.connect(coordinator, autocommit=True) as conn:
        placed = _dist(conn)
        tables = {str(r[0]) for r in conn.execute(
            "SELECT oid::regclass::text FROM pg_class WHERE relnamespace = 'rcll'::regnamespace AND relkind = 'r'")}
        banked = {str(r[0]) for r in conn.execute("SELECT rcll._citus_bank_tables()::text")}
        again = install.install(conn)                                       # an upgrade: nothing to place again
    assert "already distributed by bank; 13 function(s) delegated" in again
    assert set(placed) == tables
    assert {"rcll.memory_units", "rcll.unit_lexicon", "rcll.documents", "rcll.links", "rcll.entities"} <= banked
    assert {t for t, (kind, _) in placed.items() if kind == "h"} == banked
    assert len({colocation for kind, colocation in placed.values() if kind == "h"}) == 1
    assert {t for t, (kind, _) in placed.items() if kind == "n"} >= {"rcll.banks", "rcll.bank_grants", "rcll.identities"}


def test_every_node_has_every_rcll_function(citus: CitusCluster, coordinator: str) -> None:
    listed = "SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace"
    functions = []
    for node in citus.nodes:
        with citus.connect(node) as conn:
            functions.append(conn.execute(listed).fetchone())
    assert functions[1] == functions[0] and functions[2] == functions[0]


def test_install_asked_for_citus_refuses_a_database_without_it(pg18: Leg) -> None:
    with pg18.database() as url, psycopg.connect(url) as conn, pytest.raises(CitusError) as refused:
        install.install(conn, citus=True)
    assert refused.value.code == Code.UNAVAILABLE and refused.value.field == "dsn"


def test_a_bank_lives_whole_on_one_worker(citus: CitusCluster, coordinator: str) -> None:
    with psycopg.connect(coordinator, autocommit=True) as conn:
        where = conn.execute(
            "SELECT b.name, array_agg(DISTINCT s.nodeport) FROM rcll.banks b "
            "CROSS JOIN LATERAL unnest(ARRAY(SELECT rcll._citus_bank_tables())) t "
            "JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column(t, b.bank_id) "
            "WHERE b.name LIKE 'team%' GROUP BY b.name ORDER BY b.name").fetchall()
    assert [name for name, _ in where] == BANKS
    assert all(len(ports) == 1 for _, ports in where)                 # every table of a bank: one worker
    assert {ports[0] for _, ports in where} == {w.port for w in citus.workers}   # six banks use both


FIELDS = ("text", "fused_score", "rerank_score", "rank_dense", "rank_lexical", "rank_graph", "rank_temporal",
          "rank_entity", "rank_session", "rank_context")


def _facts(url: str, bank: str, query: str, **filters: Any) -> list[tuple[object, ...]]:
    """A default recall's facts by content: text, scores and every channel's rank (ids differ)."""
    with Memory(url, bank=bank) as m:
        return [tuple(getattr(f, k) for k in FIELDS) for f in m.recall(query, budget=None, **filters).facts]


def _bank_per_worker(url: str) -> dict[int, str]:
    """One of BANKS on each worker (by the port of the worker holding its memory_units shard)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT s.nodeport, min(b.name) FROM rcll.banks b "
                            "JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('rcll.memory_units', b.bank_id) "
                            "WHERE b.name = ANY (%s) GROUP BY s.nodeport", (BANKS,)).fetchall()
    return {int(port): str(bank) for port, bank in rows}


def test_recall_through_the_coordinator_equals_one_node(citus: CitusCluster, filled: str, one_node: str) -> None:
    banks = _bank_per_worker(filled)
    assert set(banks) == {w.port for w in citus.workers}
    for bank in banks.values():
        for query in QUERIES:
            assert _facts(filled, bank, query) == _facts(one_node, bank, query), (bank, query)


def test_recall_with_a_room_filter_through_the_coordinator_equals_one_node(citus: CitusCluster, filled: str,
                                                                          one_node: str) -> None:
    # The scope expands the rooms by reading rooms and room_aliases: on a cluster that ran inside the
    # statement sent to the bank's shard and was refused there (found by bench.recall --fleet --citus).
    for bank in _bank_per_worker(filled).values():
        for rooms in (["deployment"], ["general", "billing"]):
            got = _facts(filled, bank, "how do we deploy?", rooms=rooms)
            assert got == _facts(one_node, bank, "how do we deploy?", rooms=rooms), (bank, rooms)


def _sql_recall(conn: psycopg.Connection[Any], bank: str) -> list[list[tuple[Any, ...]]]:
    """rcll.recall_in_bank for each query, the scope resolved first: rows without their ids."""
    scope, bank_id = conn.execute("SELECT s::text, (s).bank_id FROM rcll.recall_scope(%s) s", (bank,)).fetchone() or (None, None)
    return [[row[1:] for row in conn.execute(
        "SELECT unit_id, text, rank_lexical, rank_entity FROM rcll.recall_in_bank(%s, %s, %s::rcll.recall_scope)",
        (bank_id, q, scope)).fetchall()] for q in QUERIES]


def test_sql_recall_in_bank_runs_on_the_worker_and_equals_one_node(filled: str, one_node: str) -> None:
    # No model service here: the SQL recall runs its lexical, entity, graph and temporal channels.
    sent: list[str] = []
    with psycopg.connect(filled, autocommit=True) as conn:
        configure(conn)
        conn.execute("SET citus.log_remote_commands = on")
        conn.add_notice_handler(lambda d: sent.append(d.message_primary or ""))
        on_cluster = _sql_recall(conn, BANKS[1])
    with psycopg.connect(one_node, autocommit=True) as conn:
        configure(conn)
        on_one_node = _sql_recall(conn, BANKS[1])
    assert on_cluster == on_one_node and on_cluster[0]
    issued = [m for m in sent if m.startswith("issuing") and "recall_in_bank" in m]
    assert len(issued) == len(QUERIES), sent          # one command to one worker a query: the whole call


def _texts(url: str, bank: str) -> list[str]:
    with Memory(url, bank=bank) as m:
        return sorted(u.text for u in m.units(limit=100).units)


def test_forget_cascades_on_the_worker_and_leaves_other_banks(filled: str) -> None:
    with Memory(filled, bank=BANKS[5]) as m:
        unit = next(u for u in m.units().units if "helm rollback" in u.text)
        assert m.forget(unit_ids=[unit.unit_id], dry_run=False, reason="test")
    with psycopg.connect(filled, autocommit=True) as conn:
        bank = conn.execute("SELECT rcll._bank_id(%s)", (BANKS[5],)).fetchone()
        left = [conn.execute(f"SELECT count(*) FROM rcll.{table} WHERE bank_id = %s AND unit_id = %s",
                             (bank[0] if bank else None, unit.unit_id)).fetchone()
                for table in ("memory_units", "unit_lexicon", "unit_entities")]
    assert left == [(0,), (0,), (0,)]
    assert _texts(filled, BANKS[5]) == sorted(text for text, _ in DOCS if "helm rollback" not in text)
    assert _texts(filled, BANKS[4]) == sorted(text for text, _ in DOCS)


def test_export_then_import_after_dropping_the_bank_brings_every_unit_back(filled: str) -> None:
    bank = BANKS[2]
    before = _texts(filled, bank)
    with Memory(filled, bank=bank) as m:
        out = io.BytesIO()
        m.export(out)
        m.drop_bank(bank, confirm=bank, dry_run=False, reason="test")
    with Memory(filled, bank=bank) as m:
        m.import_(io.BytesIO(out.getvalue()))
    assert _texts(filled, bank) == before == sorted(text for text, _ in DOCS)


def test_retain_and_forget_run_whole_on_the_banks_worker_as_the_agent(coordinator: str) -> None:
    bank = "delegated"
    with Memory(coordinator, bank=bank, agent="alice") as m:
        m.create_bank(bank)
        written = m.retain("Erin runs the quarterly load test.", ttl=timedelta(days=3), room="testing")
        m.retain_many(["Frank reviews the load test results."])
        # The transaction's agent and expiry reach the worker as the twin's arguments: through
        # the coordinator's routing they were lost there (author self-declared, no expiry).
        with psycopg.connect(coordinator, autocommit=True) as conn:
            rows = conn.execute("SELECT text, author, author_source, expires_at IS NOT NULL FROM rcll.memory_units "
                                "WHERE bank_id = rcll._bank_id(%s) ORDER BY unit_id", (bank,)).fetchall()
        assert rows == [("Erin runs the quarterly load test.", "alice", "server", True),
                        ("Frank reviews the load test results.", "alice", "server", False)]
        # One command to one worker: the whole call.
        with psycopg.connect(coordinator, autocommit=True) as conn:
            configure(conn)
            sent: list[str] = []
            conn.add_notice_handler(lambda d: sent.append(d.message_primary or ""))
            conn.execute("SET citus.log_remote_commands = on")
            bank_id = conn.execute("SELECT rcll._bank_id(%s)", (bank,)).fetchone()
            sent.clear()
            counted = conn.execute("SELECT kind, count FROM rcll.forget_in_bank(%s, %s, unit_ids => %s)",
                                   (bank_id[0] if bank_id else None, bank, written.unit_ids)).fetchall()
            assert [m for m in sent if m.startswith("issuing")] == [m for m in sent if "forget_in_bank" in m]
            assert len(sent) == 1 and ("units", 1) in counted, sent
            with pytest.raises(psycopg.Error) as refused:       # an id that is not the bank's
                conn.execute("SELECT * FROM rcll.forget_in_bank(%s, %s, unit_ids => %s)",
                             ((bank_id[0] if bank_id else 0) + 1000, bank, written.unit_ids))
            # Raised on the worker, it comes back without COLUMN: Citus relays the code, the text
            # and the hint only (so Memory tells a stale id by the code and the ids).
            assert refused.value.sqlstate == "RC001" and refused.value.diag.column_name is None
            assert refused.value.diag.message_hint == "Pass the id of the bank you name: SELECT rcll._bank_id(<bank>)."
        assert m.forget(unit_ids=written.unit_ids, dry_run=False, reason="test").counts["units"] == 1
        # A bank dropped and made again under its name has a new id: the Memory looks it up again.
        m.drop_bank(bank, confirm=bank, dry_run=False, reason="test")
        m.create_bank(bank)
        again = m.retain("Erin runs the quarterly load test.")
        assert again.created and m.recall("load test").facts[0].text == "Erin runs the quarterly load test."


# A bank's reads and a forget, each as its caller sends it. Each must reach the worker holding the
# bank and no other: then it answers while another worker is down (python -m bench.citus_worker_down
# kills one; this shared cluster keeps both). Each is called seven times on one connection, past the
# five custom plans after which PostgreSQL may cache a generic one.
BANK_READS = [
    "SELECT * FROM rcll.get_state(%(bank)s, 'ops', 'freeze')",
    "SELECT * FROM rcll.state_history(%(bank)s, 'ops', 'freeze')",
    "SELECT * FROM rcll.get_states(%(bank)s, ARRAY['ops'], ARRAY['freeze'])",
    "SELECT * FROM rcll.state_keys(%(bank)s)",
    "SELECT * FROM rcll.tags(%(bank)s)",
    "SELECT * FROM rcll.units(%(bank)s)",
    "SELECT * FROM rcll.units(%(bank)s, rooms => ARRAY['deployment'])",
    "SELECT * FROM rcll.find_document(%(bank)s, 'Carol owns the billing service and its invoices.')",
    "SELECT * FROM rcll.retention_policies(%(bank)s)",
    "SELECT * FROM rcll.merge_proposals(%(bank)s, true)",
    "SELECT * FROM rcll.floor_plan(%(bank)s)",
    "SELECT * FROM rcll.session_start(%(bank)s, rooms => ARRAY['deployment'])",
    "SELECT * FROM rcll.forget(%(bank)s, room => 'deployment')",                       # a dry run
]


def test_a_banks_reads_and_forget_reach_only_its_worker(citus: CitusCluster, coordinator: str) -> None:
    bank = "reads"
    with Memory(coordinator, bank=bank) as m:
        m.create_bank(bank)
        m.retain_many([Document(text, room=room, tags=[room]) for text, room in DOCS]
                      + [Document("Always deploy through Argo CD.", room="deployment", hall="rule", layer="L0")])
        m.put_state("ops", "freeze", {"until": "friday"}, expected_version=0)
        m.set_retention(timedelta(days=30), room="billing")
        rooms = sorted(r.name for r in m.rooms() if r.fact_count)
        gone = next(u.unit_id for u in m.units().units if "helm rollback" in u.text)
    with psycopg.connect(coordinator, autocommit=True) as conn:
        configure(conn)
        port = conn.execute("SELECT s.nodeport FROM citus_shards s WHERE s.shardid = "
                            "get_shard_id_for_distribution_column('rcll.memory_units', rcll._bank_id(%s))", (bank,)).fetchone()
        conn.execute("SELECT rcll.propose_room_merge(%s, %s, %s, 'test')", (bank, rooms[0], rooms[1]))
        sent: list[tuple[str, str]] = []
        conn.add_notice_handler(lambda d: sent.append((d.message_primary or "", d.message_detail or "")))
        conn.execute("SET citus.log_remote_commands = on")
        for read in BANK_READS:
            answers = [conn.execute(read, {"bank": bank}).fetchall() for _ in range(7)]
            assert answers[0] and answers[-1] == answers[0], read
        conn.execute("SELECT * FROM rcll.forget(%s, unit_ids => %s, dry_run => false, reason => 'test')", (bank, [gone]))
    reached = {detail.split("@")[-1].split()[0] for said, detail in sent if said.startswith("issuing")}
    assert port is not None and reached == {f"127.0.0.1:{port[0]}"}, sent[:5]
    with Memory(coordinator, bank=bank) as m:
        assert [u for u in m.units().units if u.unit_id == gone] == []
        m.drop_bank(bank, confirm=bank, dry_run=False, reason="test")


def test_bm25_pruning_reads_the_statistics_of_the_banks_shard_on_its_worker(citus: CitusCluster, coordinator: str) -> None:
    # On a worker rcll.unit_lexicon is an empty shell that ANALYZE never fills: the most common
    # lexemes BM25's pruning reads are in the statistics of the bank's shard (rcll._shard_table).
    # Read from the shell, no term was ever pruned on a cluster: every candidate of a big bank was
    # scored exactly (bench.recall --fleet 1000000 --citus: its SQL phase 1.75x one node's).
    bank = "common-words"
    with Memory(coordinator) as m:
        m.create_bank(bank)
    chunks = [f"deploy step number {i}" for i in range(1500)]
    with psycopg.connect(coordinator, autocommit=True) as conn:
        bank_id = conn.execute("SELECT rcll._bank_id(%s)", (bank,)).fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(bank_id => %s, bank => %s, content => %s, chunks => %s, "
                     "embeddings => NULL)", (bank_id, bank, "\n".join(chunks), chunks))
        conn.execute("SELECT run_command_on_shards('rcll.unit_lexicon', 'ANALYZE %s')")
        shard, port = conn.execute(
            "SELECT 'unit_lexicon_' || s.shardid, s.nodeport FROM citus_shards s "
            "WHERE s.shardid = get_shard_id_for_distribution_column('rcll.unit_lexicon', %s)", (bank_id,)).fetchone()  # type: ignore[misc]
        assert conn.execute("SELECT rcll._shard_table('rcll.unit_lexicon', %s)", (bank_id,)).fetchone() == (shard,)
        common = {}
        for table_name in (shard, "unit_lexicon"):
            common[table_name] = dict(conn.execute(
                "SELECT nodeport, result FROM run_command_on_workers(format("
                "$$SELECT coalesce((rcll._bm25_pruned_terms(ARRAY['deploy', 'step'], 1500, 0.05, %%L)).common::text, 'none')$$, "
                "%s::text))", (table_name,)).fetchall())
    assert sorted(common[shard][port].strip("{}").split(",")) == ["deploy", "step"]   # pruned, by the shard's statistics
    assert common["unit_lexicon"][port] == "none"        # the shell's: nothing


# Every *_in_bank twin (sql/functions/616-citus-delegated-verbs.sql) as a client sends it: its own
# statement, outside a transaction block. Each must reach the coordinator's workers as one command,
# the call itself, sent to the worker holding the bank - the whole verb runs there.
TWIN_CALLS = [
    "SELECT rcll.put_state_in_bank(%(id)s, %(bank)s, 'ops', 'freeze', '{\"until\": \"friday\"}', 0, agent => 'alice')",
    "SELECT * FROM rcll.get_state_in_bank(%(id)s, %(bank)s, 'ops', 'freeze')",
    "SELECT * FROM rcll.get_states_in_bank(%(id)s, %(bank)s, ARRAY['ops'], ARRAY['freeze'])",
    "SELECT * FROM rcll.state_history_in_bank(%(id)s, %(bank)s, 'ops', 'freeze')",
    "SELECT * FROM rcll.state_keys_in_bank(%(id)s, %(bank)s)",
    "SELECT rcll.forget_state_in_bank(%(id)s, %(bank)s, 'ops', 'freeze', dry_run => true)",
    "SELECT * FROM rcll.retain_facts_in_bank(%(id)s, %(bank)s, %(content)s, %(facts)s, %(vectors)s::vector[], "
    "extraction => 'offline', agent => 'alice')",
    "SELECT rcll.record_llm_calls_in_bank(%(id)s, %(bank)s, '[]')",
    "SELECT * FROM rcll.export_stream_in_bank(%(id)s, %(bank)s)",
    "SELECT * FROM rcll.forget_in_bank(%(id)s, %(bank)s, unit_ids => ARRAY[%(unit)s], dry_run => true)",
]


def test_every_bank_verb_is_one_call_on_the_banks_worker(citus: CitusCluster, coordinator: str) -> None:
    bank = "verbs"
    with Memory(coordinator, bank=bank) as m:
        m.create_bank(bank)
        m.retain_many([text for text, _ in DOCS])
        unit = m.units().units[0]
    content = "Carol moved to the billing team in May 2024."
    facts = offline.extract(content, None)
    embedder = models.get_embedder()
    params = {"bank": bank, "unit": unit.unit_id, "content": content,
              "facts": Jsonb([f.as_json() for f in facts]), "vectors": list(embedder.embed([f.text for f in facts]))}
    with psycopg.connect(coordinator, autocommit=True) as conn:
        configure(conn)
        params["id"], port = conn.execute(
            "SELECT rcll._bank_id(%s), s.nodeport FROM citus_shards s WHERE s.shardid = "
            "get_shard_id_for_distribution_column('rcll.memory_units', rcll._bank_id(%s))", (bank, bank)).fetchone()  # type: ignore[misc]
        sent: list[tuple[str, str]] = []
        conn.add_notice_handler(lambda d: sent.append((d.message_primary or "", d.message_detail or "")))
        conn.execute("SET citus.log_remote_commands = on")
        for call in TWIN_CALLS:
            sent.clear()
            assert conn.execute(call, params).fetchall(), call
            issued = [(said, detail) for said, detail in sent if said.startswith("issuing")]
            twin = call.split("rcll.")[1].split("(")[0]
            assert len(issued) == 1 and twin in issued[0][0], (call, sent)
            assert issued[0][1].split("@")[-1].split()[0] == f"127.0.0.1:{port}", (call, issued)


def _verbs(url: str) -> tuple[object, ...]:
    """The same verbs through Memory on one store: keyed state, an extraction-mode retain, a
    correction, a forgotten key; what each answers, without ids or times."""
    offline_mode = DEFAULTS.replace(llm_provider="offline")
    bank = "verbs-memory"
    with Memory(url, bank=bank, agent="alice", settings=offline_mode) as m:
        m.create_bank(bank)
        written = m.retain("Carol moved to the billing team in May 2024. Dave owns the payments gateway.",
                           room="people", occurred_at="2024-06-01T00:00:00Z")
        again = m.retain("Carol moved to the billing team in May 2024. Dave owns the payments gateway.",
                         room="people", occurred_at="2024-06-01T00:00:00Z")
        put = [m.put_state("ops", "freeze", {"until": day}, expected_version=v) for v, day in enumerate(["mon", "fri"])]
        got = m.get_state("ops", "freeze")
        old = m.get_state("ops", "freeze", version=1)
        many = m.get_states([("ops", "freeze"), ("ops", "none")])
        keys = m.state_keys()
        history = m.state_history("ops", "freeze")
        unit = next(u for u in m.units().units if u.text.startswith("Dave"))
        versions = m.correct(unit.unit_id, "Dave owns the payments gateway and its alerts.", reason="a test")
        gone = m.forget_state("ops", "freeze", dry_run=False, reason="a test")
        # Refusals carry the same code and hint as on one node. (Not the field: Citus relays an error
        # raised on a worker without its COLUMN, so there RcllError.field is empty and the text keeps
        # its "<field>: " - docs/scaling.md, "Where each verb runs".)
        refusals = []
        for refused in (lambda: m.put_state("ops", "freeze", {}, expected_version=7),
                        lambda: m.correct(unit.unit_id, "Dave owns the payments gateway and its alerts.", reason="again"),
                        lambda: m.forget_state("ops", None)):
            with pytest.raises(RcllError) as e:
                refused()
            refusals.append((e.value.code, e.value.hint))
        units = sorted((u.text, u.kind, u.room, u.author) for u in m.units().units)
        stats = m.stats()
    assert got is not None and old is not None
    return (written.mode, len(written.unit_ids), again.created, [p.version for p in put], got.value, got.version,
            old.value, [(s.room, s.key, s.version, s.value) for s in many], [(k.key, k.version) for k in keys],
            [(h.version, h.value, h.provenance["who"]) for h in history],
            [(v.version, v.text, v.current, v.replaced_by, v.reason) for v in versions],
            gone.counts, refusals, units, stats.kind, stats.link_type, stats.totals)


def test_state_facts_and_correct_through_the_coordinator_equal_one_node(coordinator: str, pg18: Leg) -> None:
    with pg18.database() as url:
        assert _verbs(coordinator) == _verbs(url)


def test_export_is_one_call_byte_identical_to_the_routed_export_and_to_one_nodes(filled: str, pg18: Leg) -> None:
    bank = BANKS[1]
    with Memory(filled, bank=bank) as m:
        m.put_state("ops", "freeze", {"until": "friday"}, expected_version=0)
        delegated = b"".join(m.export_lines())
    with psycopg.connect(filled) as conn:
        configure(conn)
        routed = b"".join(iter_export(conn, bank))        # table by table, through the coordinator
    assert delegated == routed and b'"table":"room_state"' in delegated
    # Restored (ids, times and authors as exported) on one node, the bank exports the same bytes.
    with pg18.database() as url, Memory(url) as one:
        one.import_lines(delegated.splitlines(keepends=True), restore=True)
        assert b"".join(one.export_lines(bank=bank)) == delegated
    # Restored on the cluster itself after a drop: the same rows, ids and all, but for the record of
    # the drop (forget_log keeps it, under the bank's id, which the restore takes again).
    with Memory(filled, bank=bank) as m:
        m.drop_bank(bank, confirm=bank, dry_run=False, reason="test")
        m.import_lines(delegated.splitlines(keepends=True), restore=True)
        again = b"".join(m.export_lines())
        # The ids it kept are past every node's sequence: writes after it take new ones (its audit rows
        # came from this bank's worker, whose own copy of the sequence draws the next).
        for i in range(2):
            unit = m.units().units[0]
            m.correct(unit.unit_id, f"{unit.text} ({i})", reason="after the restore")
            m.put_state("ops", "after", {"n": i}, expected_version=i)
    assert _but_the_forget_log(again) == _but_the_forget_log(delegated)
    assert b'"table":"forget_log"' in again and b'"table":"forget_log"' not in delegated


def _but_the_forget_log(stream: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """An export stream's header and row lines, without forget_log's rows and largest id (and the trailer, which counts them)."""
    lines = stream.splitlines()
    head = json.loads(lines[0])
    head["max_ids"].pop("forget_log")
    return head, [line for line in lines[1:-1] if not line.startswith(b'{"table":"forget_log"')]


def test_memory_sends_each_delegated_verb_as_its_twin_to_the_banks_worker(citus: CitusCluster, coordinator: str) -> None:
    # What is sent between the nodes while Memory runs the verbs, read from the coordinator's log
    # (citus.log_remote_commands for the new sessions of the database on every node, at NOTICE;
    # the worker's notices come back through the coordinator's session): each verb's twin, and
    # every command to the bank's worker alone. Then correct, which is not delegated (its audit
    # row goes to every node: rcll._in_bank_twins says why): its row is on every node.
    bank = "routed"
    with Memory(coordinator, bank=bank) as m:
        m.create_bank(bank)
        m.retain_many([text for text, _ in DOCS])
    with psycopg.connect(coordinator, autocommit=True) as conn:
        port = conn.execute("SELECT s.nodeport FROM citus_shards s WHERE s.shardid = "
                            "get_shard_id_for_distribution_column('rcll.memory_units', rcll._bank_id(%s))",
                            (bank,)).fetchone()
        conn.execute("ALTER DATABASE rcll SET citus.log_remote_commands = on")
        conn.execute("ALTER DATABASE rcll SET log_min_messages = notice")
    start = citus.coordinator.log.stat().st_size
    try:
        with Memory(coordinator, bank=bank, agent="alice", settings=DEFAULTS.replace(llm_provider="offline")) as m:
            m.put_state("ops", "freeze", {"until": "friday"}, expected_version=0)
            m.get_state("ops", "freeze")
            m.get_states([("ops", "freeze")])
            m.state_history("ops", "freeze")
            m.state_keys()
            m.forget_state("ops", "freeze", dry_run=False, reason="a test")
            m.retain("Carol moved to the billing team in May 2024.")
            b"".join(m.export_lines())
        end = citus.coordinator.log.stat().st_size
    finally:
        with psycopg.connect(coordinator, autocommit=True) as conn:
            conn.execute("ALTER DATABASE rcll RESET citus.log_remote_commands")
            conn.execute("ALTER DATABASE rcll RESET log_min_messages")
    with citus.coordinator.log.open("rb") as f:
        f.seek(start)
        lines = f.read(end - start).decode(errors="replace").splitlines()
    issued = [(line.split("issuing ", 1)[1], lines[i + 1]) for i, line in enumerate(lines[:-1]) if "NOTICE:  issuing " in line]
    twins = {said.split("rcll.", 1)[1].split("(", 1)[0] for said, _ in issued if "_in_bank(" in said}
    assert twins == {"put_state_in_bank", "get_state_in_bank", "get_states_in_bank", "state_history_in_bank",
                     "state_keys_in_bank", "forget_state_in_bank", "retain_facts_in_bank",
                     "export_stream_in_bank"}, twins
    assert port is not None and issued
    assert all(f"@127.0.0.1:{port[0]} " in detail for _, detail in issued), [(c[:200], d) for c, d in issued if str(port[0]) not in d][:6]
    with Memory(coordinator, bank=bank, agent="alice") as m:
        unit = m.units().units[0]
        m.correct(unit.unit_id, unit.text + " (corrected)", reason="a test")
    with psycopg.connect(coordinator, autocommit=True) as conn:
        counts = conn.execute("SELECT result FROM run_command_on_all_nodes(format("
                              "'SELECT count(*) FROM rcll.audit_log WHERE bank_id = %%s AND action = ''correct'' "
                              "AND actor = ''alice''', rcll._bank_id(%s)))", (bank,)).fetchall()
    assert counts == [("1",)] * 3


def test_a_unit_of_work_runs_the_state_verbs_through_the_coordinator(coordinator: str) -> None:
    # In Memory.transaction() nothing is delegated (Citus delegates a call outside a transaction
    # block only): the functions themselves, each statement sent to the bank's worker, one commit.
    bank = "unit-of-work"
    with Memory(coordinator, bank=bank, agent="alice") as m:
        m.create_bank(bank)
        m.put_state("ops", "spread", {"n": 0}, expected_version=0)
        with m.transaction() as tx:
            (current,) = tx.lock_states([("ops", "spread")])
            tx.put_state("ops", "spread", {"n": 1}, expected_version=current.version)
            assert tx.get_state("ops", "spread").value == {"n": 1}              # type: ignore[union-attr]
            tx.retain("Written in the same unit of work.")
        with pytest.raises(RuntimeError), m.transaction() as tx:
            tx.put_state("ops", "spread", {"n": 2}, expected_version=2)
            raise RuntimeError("rolled back")
        assert [s.value for s in m.state_history("ops", "spread")] == [{"n": 1}, {"n": 0}]
        assert [u.text for u in m.units().units] == ["Written in the same unit of work."]
