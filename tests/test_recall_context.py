"""The context channel and the cross-encoder's context view: a chunk read with the chunk before it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest

from conftest import pg15_only
from rcll import models
from rcll.db import configure
from rcll.deadline import context_passage, rerank_within
from rcll.recall import Direct, Fact, candidates, recall
from rcll.request import RecallRequest as R

BANK = "c"
CONVERSATION = [
    "alice: Did you finish moving the billing database to Postgres 18?",
    "bob: Yes, last Friday! It took the whole night.",
    "alice: Great. Are you coming to the team lunch tomorrow?",
    "bob: Sure, I'll bring the pizza.",
]
OTHER = [
    "The garden needs watering twice a week in summer.",
    "Our office plants are watered by the cleaning staff.",
]
QUERY = "When did bob finish moving the billing database?"


def seed(conn: psycopg.Connection[Any]) -> list[int]:
    """One conversation (one document, a chunk per turn) in room ops, two unrelated documents."""
    emb = models.get_embedder()
    conn.execute("SELECT rcll.create_bank(%s)", (BANK,))
    row = conn.execute(
        """SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s,
               embeddings => %s::vector[], room => 'ops', occurred_at => '2024-05-10')""",
        (BANK, "\n".join(CONVERSATION), CONVERSATION, list(emb.embed(CONVERSATION)))).fetchone()
    assert row is not None
    for text in OTHER:
        conn.execute("""SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s],
                            embeddings => ARRAY[%s::vector], room => 'garden')""",
                     (BANK, text, text, emb.embed([text])[0]))
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (BANK,))
    return [int(u) for u in row[0]]


def test_preceding_units_give_the_chunk_before_within_scope(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    rows = db.execute("SELECT unit_id, preceding_id, preceding_text FROM rcll.preceding_units(%s, rcll.recall_scope(%s))",
                      (ids, BANK)).fetchall()
    assert {r[0]: (r[1], r[2]) for r in rows} == {
        ids[i]: (ids[i - 1], CONVERSATION[i - 1]) for i in range(1, len(ids))}
    # A predecessor outside the recall's scope is no context: it would leak another room's text.
    db.execute("UPDATE rcll.memory_units SET room = 'secret' WHERE unit_id = %s", (ids[0],))
    rows = db.execute("SELECT unit_id FROM rcll.preceding_units(%s, rcll.recall_scope(%s, rooms => '{ops}'))", (ids, BANK)).fetchall()
    assert ids[1] not in {r[0] for r in rows}
    rows = db.execute("SELECT unit_id FROM rcll.preceding_units(%s, rcll.recall_scope(%s, rooms => '{garden}'))", (ids, BANK)).fetchall()
    assert rows == []


def test_context_channel_finds_the_reply_to_a_matching_question(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    qe = models.get_embedder().embed_query(QUERY)
    dense = [r[0] for r in db.execute("SELECT unit_id FROM rcll.channel_dense(%s, rcll.recall_scope(%s))", (qe, BANK))]
    rows = db.execute("""SELECT unit_id, score, rank FROM rcll.channel_context(
                             %(qe)s, %(seeds)s, rcll.recall_scope(%(bank)s))""", {"qe": qe, "seeds": dense[:1], "bank": BANK}).fetchall()
    # Seeded with the question alone, the channel also returns the reply after it, scored with it.
    assert dense[0] == ids[0]
    assert {r[0] for r in rows} == {ids[0], ids[1]}
    assert [r[2] for r in rows] == [1, 2]
    # The reply's own words ("Yes, last Friday!") hardly match; read with the question they do.
    own = {r[0]: r[1] for r in db.execute("SELECT unit_id, score FROM rcll.channel_dense(%s, rcll.recall_scope(%s))", (qe, BANK))}
    reply = next(r[1] for r in rows if r[0] == ids[1])
    assert reply == pytest.approx((own[ids[0]] + own[ids[1]]) / 2, abs=1e-6)
    assert reply > own[ids[1]]


def test_context_channel_is_filtered_like_every_channel(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    qe = models.get_embedder().embed_query(QUERY)
    sql = "SELECT unit_id, score FROM rcll.channel_context(%(qe)s, %(seeds)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s))"
    assert db.execute(sql, {"qe": qe, "seeds": ids[:1], "bank": BANK, "rooms": ["garden"]}).fetchall() == []
    # The next chunk in another room is not added; a predecessor in another room does not count.
    db.execute("UPDATE rcll.memory_units SET room = 'secret' WHERE unit_id = %s", (ids[2],))
    rows = dict(db.execute(sql, {"qe": qe, "seeds": [ids[1]], "bank": BANK, "rooms": ["ops"]}).fetchall())
    assert set(rows) == {ids[1]}
    rows = dict(db.execute(sql, {"qe": qe, "seeds": [ids[3]], "bank": BANK, "rooms": ["ops"]}).fetchall())
    own = dict(db.execute("SELECT unit_id, score FROM rcll.channel_dense(%s, rcll.recall_scope(%s))", (qe, BANK)).fetchall())
    assert rows[ids[3]] == pytest.approx(own[ids[3]], abs=1e-6)


def test_candidates_carry_context_and_rank_context(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    qe = models.get_embedder().embed_query(QUERY)
    # The context channel is out of the fusion by default (research/locomo/RESEARCH.md, third round); the context
    # view (the chunk before) is always there for the cross-encoder.
    facts = {f.unit_id: f for f in candidates(db, R(query=QUERY, bank=BANK, weights={"context": 1.0}), query_embedding=qe)}
    assert facts[ids[1]].context == CONVERSATION[0]
    assert facts[ids[0]].context is None
    assert facts[ids[1]].rank_context is not None
    assert context_passage(facts[ids[1]]) == f"{CONVERSATION[0]} / {CONVERSATION[1]}"
    assert context_passage(facts[ids[0]]) is None
    no_ctx = {f.unit_id: f for f in candidates(db, R(query=QUERY, bank=BANK), query_embedding=qe)}
    assert all(f.rank_context is None for f in no_ctx.values())
    assert no_ctx[ids[1]].context == CONVERSATION[0]


def test_context_is_the_end_of_the_chunk_before(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    long = " ".join(f"w{i}" for i in range(40))
    db.execute("UPDATE rcll.memory_units SET text = %s WHERE unit_id = %s", (long + "\n ", ids[0]))
    qe = models.get_embedder().embed_query(QUERY)
    facts = {f.unit_id: f for f in candidates(db, R(query=QUERY, bank=BANK), query_embedding=qe)}
    assert facts[ids[1]].context == " ".join(f"w{i}" for i in range(24, 40))
    assert db.execute("SELECT rcll._last_words(E'  a\tb\n c  ', 2), rcll._last_words('a b', 5)").fetchone() == ("b c", "a b")
    # ASCII whitespace of every kind, runs of it, an empty or blank text, NULL
    assert db.execute("SELECT rcll._last_words(E'x\r\ny\vz\fw', 3), rcll._last_words('', 2), rcll._last_words(E' \t ', 2), "
                      "rcll._last_words(NULL, 2), rcll._last_words('a b', NULL)").fetchone() == ("y z w", "", "", None, None)
    # a v is a letter (E'\\v' is no escape: it once turned "move" into "mo e")
    assert db.execute("SELECT rcll._last_words('Did you move to Postgres 18?', 4)").fetchone() == ("move to Postgres 18?",)


class _Scores:
    """A deterministic stand-in for the cross-encoder: a fixed score per passage."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(passages))
        return np.array([self.table[p] for p in passages], dtype=np.float32)


def _fact(uid: int, text: str, context: str | None = None) -> Fact:
    return Fact(unit_id=uid, text=text, room=None, hall=None, layer=None, author=None, thread=None, tags=[],
                valid=None, occurred_start=None, mentioned_at=None, document_id=None, provenance={},
                fused_score=1.0 / uid, rank_dense=None, rank_lexical=None, rank_graph=None, rank_temporal=None,
                context=context)


def test_rerank_reads_the_head_again_with_its_context_and_averages() -> None:
    pool = [_fact(1, "a"), _fact(2, "b", "q"), _fact(3, "c"), _fact(4, "d", "p"), _fact(5, "e")]
    scorer = _Scores({"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5, "q / b": 6.0, "p / d": 9.0})
    out = rerank_within("query", pool, scorer, depth=4, context_depth=2)[0]
    # First view over the top 4; the second only over its top 2 (a has no context): b -> (2+6)/2.
    assert scorer.calls == [["a", "b", "c", "d"], ["q / b"]]
    assert [f.unit_id for f in out] == [2, 1, 3, 4, 5]
    assert [f.rerank_score for f in out[:4]] == [4.0, 3.0, 1.0, 0.5]
    assert out[4].rerank_score is None
    assert [f.unit_id for f in rerank_within("query", pool, scorer, depth=4, context_depth=0)[0]] == [1, 2, 3, 4, 5]


def test_recall_ranks_the_reply_first_with_the_context_view(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    with_view = recall(Direct(db), R(query=QUERY, bank=BANK, budget=None))
    assert with_view.facts[0].unit_id in (ids[0], ids[1])
    assert ids[1] in [f.unit_id for f in with_view.facts[:2]]


@pg15_only
def test_in_database_two_view_rerank_agrees_with_the_client(models_dsn: str) -> None:
    with psycopg.connect(models_dsn, autocommit=True) as db:
        configure(db)
        seed(db)
        sql_rows = db.execute("""SELECT unit_id, rerank_score, rank_context FROM rcll.recall(
                                     %s, scope => rcll.recall_scope(%s), budget => NULL)""", (QUERY, BANK)).fetchall()
        client = recall(Direct(db), R(query=QUERY, bank=BANK, budget=None))
        assert [r[0] for r in sql_rows] == [f.unit_id for f in client.facts]
        for (_, score, _), f in zip(sql_rows, client.facts, strict=True):
            assert (score is None) == (f.rerank_score is None)
            if score is not None:
                assert score == pytest.approx(f.rerank_score, abs=0.5)
        assert all(r[2] is None for r in sql_rows)          # the context channel is out of the fusion by default
