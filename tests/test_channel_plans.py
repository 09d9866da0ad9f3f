"""The dense channel's route, read from the plans PostgreSQL actually ran (pgvector's regression tests
are the model): a small filtered set is scanned exactly, a large one through the HNSW index.

The ranking query runs inside PL/pgSQL (rcll.channel_dense), where EXPLAIN cannot reach it, so
auto_explain logs every nested statement's plan as a NOTICE, which reaches this client. As in
pgvector's tests, sequential and bitmap scans are discouraged (enable_seqscan, enable_bitmapscan = off):
on a test-sized table reading every row would otherwise beat any index (on a real bank the planner
picks HNSW by itself), and the point is which route the channel leaves open - the exact route must
not reach the HNSW index even then."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import Leg, connected

BANK = "plans"
BIG = 6000          # units in the big room: above exact_below, and big enough that HNSW beats reading the bank
EXACT_BELOW = 1000


def _scans(node: dict[str, Any]) -> list[str]:
    """The plan's scan nodes, outermost first, as EXPLAIN (COSTS OFF) names them."""
    out: list[str] = []
    if "Relation Name" in node or "CTE Name" in node:
        using = f" using {node['Index Name']}" if "Index Name" in node else ""
        on = node.get("Relation Name", node.get("CTE Name"))
        out.append(f"{node['Node Type']}{using} on {on}")
    for child in node.get("Plans", []):
        out += _scans(child)
    return out


def _chunks(db: psycopg.Connection[Any], bank: str, room: str, texts: list[str]) -> None:
    """One document of these chunks in room, each with a random vector (from the session's seed).
    Each vector is an array subquery of 384 draws, run once per chunk (it names g.i, so it is not an
    InitPlan run once for all): the same draws on every server, a third of the time of grouping
    n x 384 draws by chunk (whose join order, so which draws make a vector, was the planner's)."""
    db.execute("""SELECT * FROM rcll.retain_chunks(bank => %(bank)s, content => %(room)s || ' room', room => %(room)s,
                      chunks => %(texts)s, embeddings => ARRAY(
                          SELECT ARRAY(SELECT random() - 0.5 FROM generate_series(1, 384) WHERE g.i > 0)::real[]::vector
                          FROM generate_series(1, %(n)s) g(i) ORDER BY g.i))""",
               {"bank": bank, "room": room, "texts": texts, "n": len(texts)})


def _store(db: psycopg.Connection[Any]) -> None:
    # The HNSW graph is dropped for the load and built again from its installed definition after
    # it: one build of BIG vectors costs a fraction of as many inserts into a growing graph.
    graph = db.execute("SELECT pg_get_indexdef('rcll.memory_units_embedding_hnsw'::regclass)").fetchone()
    assert graph is not None
    db.execute("DROP INDEX rcll.memory_units_embedding_hnsw")
    db.execute("SELECT rcll.create_bank(%s)", (BANK,))
    db.execute("SELECT setseed(0.5)")
    for room, n in (("tiny", 3), ("big", BIG)):
        _chunks(db, BANK, room, [f"{room} unit {i}" for i in range(1, n + 1)])
    db.execute(graph[0])
    db.execute("ANALYZE rcll.memory_units")


@pytest.fixture
def store(leg: Leg) -> Iterator[psycopg.Connection[Any]]:
    """A bank with a tiny room (3 units) and a big one (BIG units), random unit vectors, analysed:
    a copy, for each test, of a database built once per leg."""
    with leg.database(leg.template("channel_plans_store", _store)) as url, connected(url) as conn:
        yield conn


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan, outermost first."""
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def _nested_plans(db: psycopg.Connection[Any], statement: str, params: tuple[Any, ...],
                  discourage_scans: bool = True, bitmaps: bool = False) -> tuple[Any, list[dict[str, Any]]]:
    """(the statement's one-row result, the plans of the statements it ran inside PL/pgSQL);
    sequential and bitmap scans discouraged unless discourage_scans is false (bitmap scans
    allowed with bitmaps: a GIN index serves no other kind)."""
    plans: list[dict[str, Any]] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if (d.message_primary or "").startswith("duration:"):
            plans.append(json.loads((d.message_primary or "").split("plan:", 1)[1]))

    db.add_notice_handler(keep)
    db.execute("LOAD 'auto_explain'")
    db.execute(f"SET enable_seqscan = {'off' if discourage_scans else 'on'}")
    db.execute(f"SET enable_bitmapscan = {'off' if discourage_scans and not bitmaps else 'on'}")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice", "log_format = json"):
        db.execute(f"SET auto_explain.{setting}")
    plans.clear()
    row = db.execute(statement, params).fetchone()
    db.execute("SET auto_explain.log_min_duration = -1")
    db.remove_notice_handler(keep)
    return row, plans


def _ranking_plan(db: psycopg.Connection[Any], room: str) -> tuple[int, list[str], str]:
    """(rows returned, scan nodes of the channel's ranking statement, that plan as JSON) for a dense
    recall in room."""
    query = db.execute("SELECT embedding FROM rcll.memory_units WHERE room = 'big' ORDER BY unit_id LIMIT 1").fetchone()
    assert query is not None
    row, plans = _nested_plans(db, """SELECT count(*) FROM rcll.channel_dense(%s, rcll.recall_scope(%s, rooms => ARRAY[%s]),
                                                                          "limit" => 300, exact_below => %s)""",
                               (query[0], BANK, room, EXACT_BELOW))
    ranking = [p for p in plans if "OPERATOR(public.<=>)" in p["Query Text"]]
    assert len(ranking) == 1, [p["Query Text"][:80] for p in plans]
    assert row is not None
    return int(row[0]), _scans(ranking[0]["Plan"]), json.dumps(ranking[0]["Plan"])


@pytest.mark.slow          # the first to build the store (once per leg)
def test_a_tiny_room_is_scanned_exactly_without_the_hnsw_index(store: psycopg.Connection[Any]) -> None:
    rows, scans, plan = _ranking_plan(store, "tiny")
    assert rows == 3
    # The scope reaches the plan as constants (a custom plan folds (scope).rooms to the literal).
    assert "'{tiny}'::text[]" in plan
    # The room's rows come from its (bank_id, room) index into the MATERIALIZED set f, which is
    # sorted by distance: no HNSW scan anywhere.
    assert scans == ["Index Scan using memory_units_bank_room on memory_units", "CTE Scan on f"]


def test_a_room_above_exact_below_is_searched_through_the_hnsw_index(store: psycopg.Connection[Any]) -> None:
    rows, scans, _ = _ranking_plan(store, "big")
    assert rows == 300
    assert scans == ["Index Scan using memory_units_embedding_hnsw on memory_units"]


def test_the_temporal_channel_inlines_its_time_test(store: psycopg.Connection[Any]) -> None:
    # rcll._in_time_range is inlined: the planner sees the unit's columns against the range's
    # constants (which the time indexes can serve), not a function call per unit.
    row, plans = _nested_plans(store, """SELECT count(*) FROM rcll.channel_temporal('what happened',
                                             rcll.recall_scope(%s), time_range => tstzrange(now() - interval '1 day', now()),
                                             "limit" => 10)""",
                               (BANK,))
    assert row is not None and row[0] == 10
    ranking = [p for p in plans if "rcll._in_time_range" in p["Query Text"]]
    assert len(ranking) == 1, [p["Query Text"][:80] for p in plans]
    plan = json.dumps(ranking[0]["Plan"])
    assert "COALESCE(occurred_start, mentioned_at, lower(valid)) >=" in plan
    assert "_in_time_range" not in plan and "_in_scope" not in plan


def test_the_bm25_channels_inline_the_okapi_term(store: psycopg.Connection[Any]) -> None:
    # rcll._bm25_term is the Okapi formula written once for the lexical and session channels; the
    # planner inlines it, so the plan holds its arithmetic (with k1 + 1 folded), not a call.
    row, plans = _nested_plans(store, "SELECT count(*) FROM rcll._bm25_channels('big unit', rcll.recall_scope(%s))",
                               (BANK,))
    assert row is not None and row[0] > 0
    scoring = [p for p in plans if "rcll._bm25_term" in p["Query Text"]]
    assert len(scoring) == 1, [p["Query Text"][:80] for p in plans]
    plan = json.dumps(scoring[0]["Plan"])
    assert "_bm25_term" not in plan and "_in_scope" not in plan
    assert "'2.2'::double precision" in plan     # idf * tf * (k1 + 1) with the default k1 = 1.2


def test_the_fusion_inlines_the_end_of_the_chunk_before(store: psycopg.Connection[Any]) -> None:
    # rcll._last_words (the context view's 16 words) runs for each of the 100 rows a recall returns;
    # inlined, the plan holds its expression, not a call with a SET clause (~20 us each).
    store.execute("LOAD 'auto_explain'")
    store.execute("SET auto_explain.log_verbose = on")
    row, plans = _nested_plans(store, "SELECT count(*) FROM rcll.recall_candidates('big unit', rcll.recall_scope(%s))",
                               (BANK,), discourage_scans=False)
    assert row is not None and row[0] > 0
    fusion = [p for p in plans if "rcll._last_words" in p["Query Text"]]
    assert len(fusion) == 1, [p["Query Text"][:80] for p in plans]
    plan = json.dumps(fusion[0]["Plan"])
    assert "_last_words" not in plan and "string_to_array" in plan
    # Each hit's channel weight is read from the weights' array, made once (inlined, not a call per row).
    assert "_weight_array" not in plan and "array_position" in plan


def test_the_hnsw_searches_keep_a_candidate_list_longer_than_the_default_limit(db: psycopg.Connection[Any]) -> None:
    # pgvector keeps ef_search candidates per pass: below the LIMIT, the iterative scan restarts
    # from a worse frontier (at 100k units, recall@10 vs exact in a big room 0.84 at 100, 0.975 at 400).
    rows = db.execute("""
        SELECT p.proname, (SELECT split_part(c, '=', 2)::integer FROM unnest(p.proconfig) c
                           WHERE c LIKE 'hnsw.ef_search=%%'), (rcll.recall_defaults()).channel_limit
        FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace
          AND p.proname IN ('channel_dense', 'channel_temporal') ORDER BY 1""").fetchall()
    assert [r[0] for r in rows] == ["channel_dense", "channel_temporal"]
    for name, ef, limit in rows:
        assert ef is not None and ef >= limit + limit // 3, name


def test_a_bank_reads_its_own_posting_lists_for_bm25(db: psycopg.Connection[Any]) -> None:
    # The candidates' GIN index is keyed by (bank, lexeme) (migration 016): in a store of many
    # banks a query term's posting list holds this bank's units alone, so the scan neither reads
    # other banks' postings nor ANDs in the bank index. The same candidates beside a bigger bank
    # as alone, so the same rankings and scores.
    db.execute("SELECT setseed(0.25)")
    words = ["deploy", "rollback", "helm", "argo", "canary", "pager", "incident", "budget", "latency", "cache"]
    db.execute("SELECT rcll.create_bank('small')")
    _chunks(db, "small", "ops", [f"{words[i % 10]} {words[(i * 3) % 10]} note {i} on {words[(i * 7) % 10]}"
                                 for i in range(40)])
    db.execute("ANALYZE rcll.unit_lexicon")
    query = "SELECT channel, unit_id, round(score::numeric, 9), rank FROM rcll._bm25_channels(%s, rcll.recall_scope('small')) ORDER BY 1, 4"
    alone = [db.execute(query, (q,)).fetchall() for q in ("helm rollback", "canary latency cache", "incident")]
    assert all(alone)
    db.execute("SELECT rcll.create_bank('big')")                 # now the small bank is a tenth of the store
    _chunks(db, "big", "ops", [f"{words[i % 10]} big bank note {i}" for i in range(400)])
    db.execute("ANALYZE rcll.unit_lexicon")
    beside = [db.execute(query, (q,)).fetchall() for q in ("helm rollback", "canary latency cache", "incident")]
    assert beside == alone
    # Sequential scans discouraged (a test-sized table would otherwise be read whole), not bitmap ones.
    row, plans = _nested_plans(db, "SELECT count(*) FROM rcll._bm25_channels('helm rollback', rcll.recall_scope('small'))",
                               (), bitmaps=True)
    assert row is not None and row[0] > 0
    (candidates,) = [p for p in plans if "WITH hits AS" in p["Query Text"]]
    used = {str(n.get("Index Name")) for n in _nodes(candidates["Plan"]) if n["Node Type"] == "Bitmap Index Scan"}
    assert {u for u in used if u.startswith("unit_lexicon")} == {"unit_lexicon_bank_lexemes"}, used
    anded = [c.get("Index Name") for n in _nodes(candidates["Plan"]) if n["Node Type"] == "BitmapAnd" for c in n["Plans"]]
    assert "unit_lexicon_bank_lexemes" not in anded, anded
