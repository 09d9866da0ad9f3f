"""Recall's deadline: the cross-encoder reads fused candidates while time is left, says how deep it read,
and a deadline it can meet changes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest

from conftest import Leg, connected, pg15_only, python_path
from rcll import models, passages
from rcll.budget import approx_tokens, cut_to_budget
from rcll.db import configure
from rcll.deadline import Deadline, DeadlinePassed, Depth, call_tokens, pair_cost, rerank_within
from rcll.defaults import CHANNELS
from rcll.recall import Direct, Fact, recall
from rcll.request import RecallRequest as R
from rcll.retain import Document, retain_many
from rcll.workqueue import WRITE, Busy, WorkQueue

BANK = "dl"
TOPICS = ("deploys", "backups", "billing", "incidents", "hiring", "roadmap")


def store(db: psycopg.Connection[Any], n: int = 30) -> None:
    """n documents of two or three chunks each: more candidates than the default rerank depth, and
    chunks with a chunk before them (the context view)."""
    db.execute("SELECT rcll.create_bank(%s)", (BANK,))
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        paras = [f"Note {i} on {topic}: the {topic} team changed step {j} of the {topic} process "
                 f"after review {i * 7 + j}; see the {topic} runbook section {j}." for j in range(2 + i % 2)]
        docs.append(Document(content="\n\n".join(" ".join([p] * 6) for p in paras), room=topic))
    retain_many(db, BANK, docs)


@pytest.fixture
def stored_dsn(leg: Leg) -> Iterator[str]:
    """A copy, for each test, of the bank store() fills once per leg: retaining it embeds its 75
    chunks through the model, which the tests that read it need done only once."""
    with leg.database(leg.template("recall_deadline_store", store)) as url:
        yield url


@pytest.fixture
def stored(stored_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with connected(stored_dsn) as conn:
        yield conn


def ranked(result: Any) -> list[tuple[int, float | None]]:
    return [(f.unit_id, f.rerank_score) for f in result.facts]


@pytest.mark.slow
def test_a_generous_deadline_returns_exactly_the_undeadlined_result(stored: psycopg.Connection[Any],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = stored
    q = "what changed in the deploys process after review?"
    # These chunks are long (~130 words): under the first view's budget of words (rcll.passages) fewer
    # than 40 are read, the same number with a deadline as without.
    plain = recall(Direct(db), R(query=q, bank=BANK))
    timed = recall(Direct(db), R(query=q, bank=BANK, deadline_ms=600_000))
    assert ranked(timed) == ranked(plain)
    assert (timed.rerank_depth_reached, timed.context_depth_reached, timed.deadline_cut) == (
        plain.rerank_depth_reached, 15, False)
    assert passages.MIN_DEPTH <= plain.rerank_depth_reached < 40
    # With a budget that holds the whole depth, both read all 40 and the top 15 again.
    monkeypatch.setattr(passages, "FIRST_VIEW_WORDS", 100_000)
    plain = recall(Direct(db), R(query=q, bank=BANK))
    timed = recall(Direct(db), R(query=q, bank=BANK, deadline_ms=600_000))
    assert plain.candidates > 40
    assert ranked(timed) == ranked(plain)
    assert (timed.rerank_depth_reached, timed.context_depth_reached, timed.deadline_cut) == (40, 15, False)
    assert (plain.rerank_depth_reached, plain.context_depth_reached, plain.deadline_cut) == (40, 15, False)


def test_a_one_millisecond_deadline_still_returns_fused_results_flagged(stored: psycopg.Connection[Any]) -> None:
    db = stored
    q = "billing runbook"
    # The deadline is spent before the channels: only the lexical channel runs (it always does),
    # fused as it would be alone, no rerank; the budget cut estimates the tokens (rcll.budget:
    # counting would only take longer past the deadline), as SQL's recall does.
    lexical = {c: 0.0 for c in CHANNELS if c != "lexical"}
    full = recall(Direct(db), R(query=q, bank=BANK, rerank_depth=0, weights=lexical))
    cut = recall(Direct(db), R(query=q, bank=BANK, deadline_ms=1))
    assert cut.facts and cut.deadline_cut
    assert (cut.rerank_depth_reached, cut.context_depth_reached) == (0, 0)
    assert [f.unit_id for f in cut.ranked] == [f.unit_id for f in full.ranked]
    estimated = cut_to_budget([approx_tokens(f.text) for f in full.ranked], R(query=q, bank=BANK).budget)
    assert [f.unit_id for f in cut.facts] == [full.ranked[i].unit_id for i in estimated]
    assert all(f.rerank_score is None for f in cut.facts)
    assert all(f.rank_dense is None and f.rank_session is None for f in cut.facts)


class SlowScores:
    """A stand-in cross-encoder: score = -fused position, `per_pair` seconds a pair."""

    def __init__(self, per_pair: float) -> None:
        self.per_pair = per_pair
        self.calls: list[list[str]] = []

    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(passages))
        time.sleep(self.per_pair * len(passages))
        return np.array([-float(p.split()[-1]) for p in passages], dtype=np.float32)


def facts(n: int) -> list[Fact]:
    return [Fact(unit_id=i, text=f"fact {i}", room=None, hall=None, layer=None, author=None, thread=None,
                 tags=[], valid=None, occurred_start=None, mentioned_at=None, document_id=None, provenance={},
                 fused_score=1.0 / (i + 1), rank_dense=None, rank_lexical=None, rank_graph=None,
                 rank_temporal=None, context=f"before {i}" if i % 2 else None)
            for i in range(n)]


@pytest.fixture(autouse=True)
def fresh_pair_cost() -> Any:
    """Each test starts from the initial cost estimate and leaves it there (it is process-wide)."""
    set_cost(pair_cost.initial)
    yield
    set_cost(pair_cost.initial)


def set_cost(seconds: float) -> None:
    """The cost estimate as just measured (an estimate relaxes towards the initial one as it ages)."""
    pair_cost.seconds = pair_cost.compute = seconds
    pair_cost.at = time.monotonic()


def test_under_a_tight_deadline_the_reranker_reads_a_fused_prefix_in_batches() -> None:
    set_cost(0.010)                                   # a stand-in's pair counts one token
    scorer = SlowScores(per_pair=0.01)   # 80 ms a batch of 8: 40 pairs do not fit in 200 ms
    out, depth = rerank_within("q", facts(60), scorer, depth=40, context_depth=15, deadline=Deadline(200))
    assert depth.cut and 8 <= depth.rerank < 40
    # Read in fused order, a batch of 8 at a time (the last one cut to what still fits).
    assert scorer.calls[0] == [f"fact {i}" for i in range(8)]
    assert all(len(c) == 8 for c in scorer.calls[:-1]) and [x for c in scorer.calls for x in c] == [
        f"fact {i}" for i in range(depth.rerank)]
    read = out[: depth.rerank]
    assert all(f.rerank_score is not None for f in read)
    assert [f.unit_id for f in out[depth.rerank:]] == list(range(depth.rerank, 60))   # unread: fused order


def test_a_deadline_too_short_for_a_batch_of_8_reads_the_top_candidates_that_fit() -> None:
    """At 100k units the SQL phase takes most of a 150 ms deadline: what is left may not hold a
    batch of 8, but a few of the best fused candidates reranked still reorder the top."""
    set_cost(0.010)                                   # a stand-in's pair counts one token
    scorer = SlowScores(per_pair=0.01)
    out, depth = rerank_within("q", facts(60), scorer, depth=40, context_depth=15, deadline=Deadline(65))
    assert depth.cut and 2 <= depth.rerank < 8, depth
    assert scorer.calls == [[f"fact {i}" for i in range(depth.rerank)]]
    # Too little for two pairs: nothing is read (one read pair would reorder nothing).
    scorer = SlowScores(per_pair=0.01)
    _, depth = rerank_within("q", facts(60), scorer, depth=40, context_depth=15, deadline=Deadline(15))
    assert depth == Depth(0, 0, True) and scorer.calls == []


def test_without_a_deadline_the_depths_are_the_asked_ones() -> None:
    scorer = SlowScores(per_pair=0)
    out, depth = rerank_within("q", facts(60), scorer, depth=40, context_depth=15)
    assert depth == Depth(40, 15, False)
    assert scorer.calls[:5] == [[f"fact {i}" for i in range(b, b + 8)] for b in range(0, 40, 8)]
    assert sorted(f.unit_id for f in out) == list(range(60))


def test_rerank_waits_for_a_model_slot_only_while_time_is_left() -> None:
    q = WorkQueue(1)
    release = threading.Event()
    held = threading.Event()

    def bulk_write() -> None:
        with q.slot(WRITE):
            held.set()
            release.wait(10)

    t = threading.Thread(target=bulk_write)
    t.start()
    held.wait()
    try:
        started = time.perf_counter()
        out, depth = rerank_within("q", facts(20), SlowScores(0), depth=20, context_depth=5,
                                   deadline=Deadline(100), queue=q)
        assert time.perf_counter() - started < 0.5
        assert depth == Depth(0, 0, True) and [f.unit_id for f in out] == list(range(20))
    finally:
        release.set()
        t.join()


class Listed:
    """A store that answers every recall with the same candidates (the phases around the SQL, alone)."""

    waited = 0.0

    def __init__(self, pool: list[Fact]) -> None:
        self.pool = pool

    def entity_text(self, request: R, deadline: Deadline) -> str | None:
        return None

    def candidates(self, request: R, query_embedding: Any, entity_query_embedding: Any, limit: int,
                   deadline: Deadline) -> list[Fact]:
        return self.pool


class Slow(Listed):
    """Listed, each SQL phase taking `seconds`."""

    def __init__(self, pool: list[Fact], seconds: float) -> None:
        super().__init__(pool)
        self.seconds = seconds

    def entity_text(self, request: R, deadline: Deadline) -> str | None:
        time.sleep(self.seconds)
        return None

    def candidates(self, request: R, query_embedding: Any, entity_query_embedding: Any, limit: int,
                   deadline: Deadline) -> list[Fact]:
        time.sleep(self.seconds)
        return self.pool


def test_each_timing_measures_its_own_phase() -> None:
    # Both SQL phases (the entity text before the embedding, the candidates after it) count as
    # sql; embed is the model's work alone.
    out = recall(Slow(facts(10), 0.1), R(query="q", bank="b", rerank_depth=0), embedder=FixedEmbedder())
    assert out.timings.sql >= 200 and out.timings.embed < 100, out.timings


class FixedEmbedder:
    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return np.ones(384, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def test_the_deadline_counts_from_the_requests_arrival_not_from_the_start_of_recall() -> None:
    # Issue 13: a request that waited 2 s for a worker thread has no time left for the rerank;
    # it answers the fused order at once, and says how long it queued.
    started = time.perf_counter() - 2.0
    out = recall(Listed(facts(60)), R(query="q", bank="b", deadline_ms=1000), embedder=FixedEmbedder(), reranker=SlowScores(0.001), started=started, queue=WorkQueue(2))
    assert out.deadline_cut and out.rerank_depth_reached == 0
    assert [f.unit_id for f in out.ranked] == list(range(60))
    assert out.timings.queue >= 2000 and time.perf_counter() - started < 2.5
    assert out.timings.total == pytest.approx(out.timings.queue + out.timings.embed + out.timings.sql
                                              + out.timings.rerank + out.timings.cut)


def test_with_every_model_slot_taken_by_writes_a_recall_answers_the_fused_order_by_its_deadline() -> None:
    # Issue 13: the query embedding waited for a slot without bound (13 s under the soak). It takes
    # the express lane; the rerank batches wait only while they could still end in time.
    q = WorkQueue(2)
    release = threading.Event()
    held = threading.Barrier(3)

    def bulk_write() -> None:
        with q.slot(WRITE):
            held.wait()
            release.wait(10)

    writers = [threading.Thread(target=bulk_write) for _ in range(2)]
    for t in writers:
        t.start()
    held.wait()
    try:
        started = time.perf_counter()
        out = recall(Listed(facts(60)), R(query="q", bank="b", deadline_ms=300), embedder=FixedEmbedder(), reranker=SlowScores(0), started=started, queue=q)
        took = time.perf_counter() - started
    finally:
        release.set()
        for t in writers:
            t.join()
    assert out.deadline_cut and out.rerank_depth_reached == 0 and took < 0.45, took
    assert [f.unit_id for f in out.ranked] == list(range(60))
    assert out.timings.embed < 50 and out.timings.slot_wait > 200


def test_no_model_slot_for_the_query_embedding_within_the_deadline_is_refused_at_once() -> None:
    q = WorkQueue(1)
    release = threading.Event()
    held = threading.Barrier(3)

    def bulk_write(first: bool) -> None:         # the slot, and the express lane
        with q.slot(WRITE, first=first):
            held.wait()
            release.wait(10)

    t = threading.Thread(target=bulk_write, args=(False,))
    t.start()
    while q.snapshot().active[WRITE] < 1:
        time.sleep(0.002)
    lane = threading.Thread(target=bulk_write, args=(True,))
    lane.start()
    held.wait()
    try:
        started = time.perf_counter()
        with pytest.raises(DeadlinePassed) as refused:
            recall(Listed(facts(60)), R(query="q", bank="b", deadline_ms=150), embedder=FixedEmbedder(), reranker=SlowScores(0), started=started, queue=q)
        assert 0.14 < time.perf_counter() - started < 0.6
        assert isinstance(refused.value, Busy) and refused.value.retry_after >= 1
        assert refused.value.field == "deadline_ms" and "busy" in refused.value.message
    finally:
        release.set()
        t.join()
        lane.join()
    assert q.snapshot().active == {"read": 0, "write": 0} and q.snapshot().waiting == {"read": 0, "write": 0}


def test_a_cost_estimate_that_stops_reads_relaxes_as_it_ages_until_they_read_again() -> None:
    pair_cost.seconds = pair_cost.compute = 10.0      # one slow spell: 80 s a batch, as far as it knows
    pair_cost.at = time.monotonic()
    try:
        _, stopped = rerank_within("q", facts(60), SlowScores(0.0005), depth=40, context_depth=15,
                                   deadline=Deadline(300))
        pair_cost.at -= 20 * pair_cost.RELAX_S      # nothing measured it since
        depths = []
        for _ in range(10):
            _, depth = rerank_within("q", facts(60), SlowScores(0.0005), depth=40, context_depth=15,
                                     deadline=Deadline(300))
            depths.append(depth.rerank)
        assert stopped == Depth(0, 0, True) and depths[0] >= 8 and depths[-1] == 40, depths
    finally:
        pair_cost.seconds = pair_cost.compute = pair_cost.initial


class TokenScores:
    """A stand-in cross-encoder that costs what the real one does: `per_token` seconds for each of a
    batch's rows times its longest pair (a passage's words). score = -its number (last word)."""

    def __init__(self, per_token: float) -> None:
        self.per_token = per_token
        self.calls: list[list[str]] = []

    def pair_lengths(self, query: str, passages: Sequence[str]) -> list[int]:
        return [len(p.split()) for p in passages]

    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(passages))
        time.sleep(self.per_token * len(passages) * max(self.pair_lengths(query, passages)))
        return np.array([-float(p.split()[-1]) for p in passages], dtype=np.float32)


def test_long_context_pairs_do_not_make_a_generous_deadline_read_short_pairs_in_steps() -> None:
    """The cost is per token: after the context view's long pairs were measured, 40 short pairs that
    fit a 400 ms deadline four times over are read in one go, batched as one call would batch them
    (per pair, the long pairs' cost said they would not fit, and the batches - so the INT8 scores - moved)."""
    scorer = TokenScores(per_token=0.0002)
    long_pool = [replace(f, text=" ".join(["word"] * 98 + [f"fact {f.unit_id}"])) for f in facts(15)]
    rerank_within("q", long_pool, scorer, depth=15, context_depth=0, deadline=Deadline(600_000))
    short_pool = [replace(f, text=" ".join(["w"] * (f.unit_id * 7 % 9) + [f"fact {f.unit_id}"])) for f in facts(60)]
    scorer.calls.clear()
    out, depth = rerank_within("q", short_pool, scorer, depth=40, context_depth=0, deadline=Deadline(400))
    assert depth == Depth(40, 0, False)
    lengths = scorer.pair_lengths("q", [f.text for f in short_pool[:40]])
    order = sorted(range(40), key=lengths.__getitem__)
    assert scorer.calls == [[short_pool[j].text for j in order[b:b + 8]] for b in range(0, 40, 8)]


def test_a_reranker_that_cannot_count_its_tokens_leaves_the_cost_estimate_alone() -> None:
    """A stand-in or a cache of scores (no pair_lengths) says nothing of the model's cost per token:
    measured, a cache's microseconds or a stand-in's per-pair sleep made the next deadlined reads
    of the real model stop at once (the LoCoMo benchmark reads through such a cache)."""
    before = (pair_cost.seconds, pair_cost.compute)
    rerank_within("q", facts(60), SlowScores(0.002), depth=40, context_depth=15, deadline=Deadline(600_000))
    assert (pair_cost.seconds, pair_cost.compute) == before
    rerank_within("q", facts(60), TokenScores(0.00001), depth=16, context_depth=0, deadline=Deadline(600_000))
    assert pair_cost.seconds != before[0]


def test_the_reranker_batches_a_full_read_as_one_call_would() -> None:
    reranker = models.get_reranker()
    passages = [("short " * (i % 5 + 1)) + f"passage {i}" for i in range(20)]
    lengths = reranker.pair_lengths("a query", passages)
    assert len(lengths) == 20 and len(set(lengths)) > 1
    whole = reranker.score("a query", passages)
    pool = [Fact(unit_id=i, text=p, room=None, hall=None, layer=None, author=None, thread=None, tags=[],
                 valid=None, occurred_start=None, mentioned_at=None, document_id=None, provenance={},
                 fused_score=0.0, rank_dense=None, rank_lexical=None, rank_graph=None, rank_temporal=None)
            for i, p in enumerate(passages)]
    out, depth = rerank_within("a query", pool, reranker, depth=20, context_depth=0, deadline=Deadline(600_000))
    assert depth == Depth(20, 0, False)
    assert {f.unit_id: f.rerank_score for f in out} == {i: float(s) for i, s in enumerate(whole)}


@pg15_only
def test_in_database_recall_keeps_its_rows_under_a_generous_deadline_and_cuts_under_a_tiny_one(
        stored_dsn: str) -> None:
    # The bank as the client retained it (models_dsn's set-up, on the copy): recall runs the models in here.
    sql = ("SELECT unit_id, rerank_score FROM rcll.recall(%s, rcll.recall_scope(%s), deadline_ms => %s)")
    with psycopg.connect(stored_dsn, autocommit=True) as db:
        db.execute("SELECT rcll.enable_in_database_models(%s)", (python_path(),))
        configure(db)
        q = "what changed in the deploys process after review?"
        plain = db.execute("SELECT unit_id, rerank_score FROM rcll.recall(%s, rcll.recall_scope(%s))",
                           (q, BANK)).fetchall()
        assert db.execute(sql, (q, BANK, 600_000)).fetchall() == plain
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        cut = db.execute(sql, (q, BANK, 1)).fetchall()
        assert cut and all(score is None for _, score in cut)
        # The channels spent the millisecond: no rerank is asked for at all.
        assert any("the deadline (1 ms) left 0 ms after the channels: the rerank is skipped" in n for n in notices), notices


def test_a_call_costs_its_length_sorted_batches_rows_times_their_longest_pair() -> None:
    assert call_tokens([]) == 0
    assert call_tokens([10, 3, 5]) == 3 * 10                       # one batch, padded to its longest
    # nine pairs: the eight shortest in one batch (padded to 8), the longest alone
    assert call_tokens([9, 1, 2, 3, 4, 5, 6, 7, 8]) == 8 * 8 + 1 * 9
