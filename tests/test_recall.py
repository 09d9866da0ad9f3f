"""Recall end to end: fusion, scoping, the rerank and the budget cut, from Python and from psql."""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg
import pytest

from conftest import Leg, pg15_only
from rcll import models
from rcll.budget import cut_to_budget
from rcll.db import configure
from rcll.recall import Direct, candidates, recall
from rcll.request import RecallRequest as R
from test_recall_seed import seed

CHANNEL_SQL = {
    "dense": "SELECT count(*) FROM rcll.channel_dense(%(qe)s, rcll.recall_scope('b', rooms => %(rooms)s))",
    "lexical": "SELECT count(*) FROM rcll.channel_lexical(%(q)s, rcll.recall_scope('b', rooms => %(rooms)s))",
    "graph": "SELECT count(*) FROM rcll.channel_graph(%(q)s, rcll.recall_scope('b', rooms => %(rooms)s))",
    "temporal": "SELECT count(*) FROM rcll.channel_temporal(%(q)s, rcll.recall_scope('b', rooms => %(rooms)s), reference_time => '2024-05-15')",
    # Seeded with every unit of the bank: the filter alone must empty it.
    "context": """SELECT count(*) FROM rcll.channel_context(%(qe)s,
                      (SELECT array_agg(unit_id) FROM rcll.memory_units), rcll.recall_scope('b', rooms => %(rooms)s))""",
}


def test_wrong_room_scores_zero(db: psycopg.Connection[Any]) -> None:
    seed(db)
    q = "how do we deploy with helm and kubernetes last week"
    qe = models.get_embedder().embed_query(q)
    for channel, sql in CHANNEL_SQL.items():
        assert db.execute(sql, {"q": q, "qe": qe, "rooms": None}).fetchone() != (0,), channel
        assert db.execute(sql, {"q": q, "qe": qe, "rooms": ["kitchen"]}).fetchone() == (0,), channel
    facts = candidates(db, R(query=q, bank="b", rooms=["kitchen"], reference_time="2024-05-15"), query_embedding=qe)
    assert facts == []
    # A named room that exists reads only that room, in every channel and fused.
    facts = candidates(db, R(query=q, bank="b", rooms=["social"], reference_time="2024-05-15"), query_embedding=qe)
    assert facts and {f.room for f in facts} == {"social"}


def test_room_alias_reads_the_canonical_room(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    db.execute("INSERT INTO rcll.room_aliases (bank_id, alias, room, reason) VALUES (rcll._bank_id('b'), 'deploys', 'deployment', 'spelling')")
    facts = candidates(db, R(query="helm rollback", bank="b", rooms=["deploys"], weights={"dense": 0}))
    assert facts and {f.room for f in facts} == {"deployment"}
    assert facts[0].unit_id == ids["rollback"]


def test_fused_score_is_a_weighted_sum_of_channel_z_scores(db: psycopg.Connection[Any]) -> None:
    seed(db)
    q = "helm deploy kubernetes last week"
    qe = models.get_embedder().embed_query(q)
    one = {f.unit_id: f for f in candidates(db, R(query=q, bank="b", reference_time="2024-05-15"), query_embedding=qe, limit=1000)}
    two = {f.unit_id: f for f in candidates(db, R(query=q, bank="b", reference_time="2024-05-15", weights={"lexical": 2.0}), query_embedding=qe, limit=1000)}
    # Doubling the lexical weight adds the lexical z-score once more: z = (score - mean) / sd over
    # the channel's own list, a unit it did not return at its lowest z.
    lex = dict(db.execute("SELECT unit_id, score FROM rcll.channel_lexical(%s, rcll.recall_scope('b'))", (q,)).fetchall())
    mu = sum(lex.values()) / len(lex)
    sd = (sum((x - mu) ** 2 for x in lex.values()) / len(lex)) ** 0.5
    z = {u: (s - mu) / sd for u, s in lex.items()}
    assert one.keys() == two.keys()
    for u, f in one.items():
        assert two[u].fused_score - f.fused_score == pytest.approx(z.get(u, min(z.values())))
    facts = list(two.values())
    assert [f.fused_score for f in facts] == sorted((f.fused_score for f in facts), reverse=True)
    assert any(f.rank_dense and f.rank_lexical and f.rank_graph and f.rank_temporal for f in facts)


def test_recall_reranks_and_times_every_phase(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    result = recall(Direct(db), R(query="how do we roll back a bad release?", bank="b"))
    assert result.facts[0].unit_id == ids["rollback"]
    scored = [f.rerank_score for f in result.facts if f.rerank_score is not None]
    assert scored == sorted(scored, reverse=True) and len(scored) == len(result.facts)
    t = result.timings
    assert t.embed > 0 and t.sql > 0 and t.rerank > 0 and t.cut > 0 and t.queue >= 0
    assert t.total == pytest.approx(t.queue + t.embed + t.sql + t.rerank + t.cut)


def test_budget_cut_skips_what_does_not_fit_and_keeps_filling() -> None:
    assert cut_to_budget([5, 10, 3, 2], budget=9) == [0, 2]
    assert cut_to_budget([5, 10, 3, 1], budget=9) == [0, 2, 3]
    assert cut_to_budget([5, 5, 5], budget=None, limit=2) == [0, 1]
    assert cut_to_budget([], budget=10) == []


def test_recall_fills_the_token_budget(db: psycopg.Connection[Any]) -> None:
    seed(db)
    full = recall(Direct(db), R(query="deploy", bank="b", budget=None))
    budget = sum(f.tokens for f in full.facts[:2]) + 1
    cut = recall(Direct(db), R(query="deploy", bank="b", budget=budget))
    assert sum(f.tokens for f in cut.facts) <= budget
    assert [f.unit_id for f in cut.facts[:2]] == [f.unit_id for f in full.facts[:2]]


def test_recall_in_sql_without_models_skips_dense_and_rerank_with_a_notice(pg18: Leg) -> None:
    name = pg18.new_database()
    try:
        with psycopg.connect(pg18.url(name), autocommit=True) as db:
            configure(db)
            ids = seed(db)
            notices: list[str] = []
            db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            rows = db.execute("SELECT unit_id, rank_dense, rerank_score FROM rcll.recall('helm rollback', scope => rcll.recall_scope('b'))").fetchall()
            assert rows[0][0] == ids["rollback"]
            assert all(r[1] is None and r[2] is None for r in rows)
            assert any("dense channel skipped" in n for n in notices)
            assert any("in-database models are not enabled" in n for n in notices)
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="plpython3u"):
                db.execute("SELECT rcll.enable_in_database_models(ARRAY['/nowhere'])")
    finally:
        pg18.drop_database(name)


@pg15_only
def test_recall_from_psql_on_pg15_returns_reranked_rows(leg: Leg, models_dsn: str) -> None:
    with psycopg.connect(models_dsn, autocommit=True) as db:
        configure(db)
        ids = seed(db)
    psql = str(leg.cluster.bindir / "psql")
    out = subprocess.run(
        [psql, models_dsn, "-X", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c",
         "SELECT unit_id, rerank_score, rank_dense FROM rcll.recall('how do we roll back a bad release?', scope => rcll.recall_scope('b'))"],
        capture_output=True, text=True, check=True)
    rows = [line.split("|") for line in out.stdout.strip().splitlines()]
    assert int(rows[0][0]) == ids["rollback"]
    scores = [float(r[1]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert any(r[2] for r in rows)             # the dense channel ran: embedded in the database
    assert "NOTICE" not in out.stderr


@pg15_only
def test_in_database_rerank_agrees_with_the_client(models_dsn: str) -> None:
    with psycopg.connect(models_dsn, autocommit=True) as db:
        configure(db)
        seed(db)
        q = "where does carol work now?"
        sql_rows = db.execute("SELECT unit_id, rerank_score FROM rcll.recall(%s, scope => rcll.recall_scope('b'), budget => NULL)", (q,)).fetchall()
        client = recall(Direct(db), R(query=q, bank="b", budget=None))
        assert [r[0] for r in sql_rows][:3] == [f.unit_id for f in client.facts][:3]
        for (_uid, score), f in zip(sql_rows, client.facts, strict=False):
            assert score == pytest.approx(f.rerank_score, abs=0.5)
        emb = db.execute("SELECT rcll._model_embed_query(%s)", (q,)).fetchone()
        assert emb is not None
        assert float(emb[0].to_numpy() @ models.get_embedder().embed_query(q)) > 0.995


@pg15_only
def test_in_database_models_read_long_facts_as_the_client_does(models_dsn: str) -> None:
    """rcll._model_windows: the in-database first view is rcll.passages.first_view, the client's."""
    from test_model_service import LONG_Q, _seed_long

    with psycopg.connect(models_dsn, autocommit=True) as db:
        configure(db)
        _seed_long(db)
        sql_rows = db.execute("SELECT unit_id, rerank_score FROM rcll.recall(%s, scope => rcll.recall_scope('long'))",
                              (LONG_Q,)).fetchall()
        client = recall(Direct(db), R(query=LONG_Q, bank="long"))
    assert client.rerank_depth_reached < 40, "the budget of words cut the first view"
    assert sum(r[1] is not None for r in sql_rows) == sum(f.rerank_score is not None for f in client.facts)
    assert [r[0] for r in sql_rows] == [f.unit_id for f in client.facts]
