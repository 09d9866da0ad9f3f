"""Recall from Python: embed the query, call rcll.recall_candidates, rerank, cut to the token budget.

The SQL function does phases 2-3 (the channels and their z-score fusion); this module adds the two
model phases around it - the query embeddings (the query, and the query without the entities it
names for the entity channel) and the cross-encoder - and the budget cut with the embedder's
tokenizer. It never builds SQL: one constant statement calls the named function with parameters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import datetime
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.rows import dict_row

from rcll import defaults, models
from rcll.budget import cut_to_budget
from rcll.deadline import Deadline, DeadlinePassed, context_passage, rerank_within
from rcll.results import Fact, RecallResult, Timings
from rcll.workqueue import READ, WorkQueue, installed, model_slot

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_CONTEXT_DEPTH",
    "DEFAULT_RERANK_DEPTH",
    "Fact",
    "RecallResult",
    "Timings",
    "candidates",
    "context_passage",
    "entity_query",
    "recall",
    "recall_with",
    "rerank",
]

# The rerank reads the top RERANK_DEPTH fused candidates as "<chunk>" (first view), then the top
# CONTEXT_DEPTH of its order again as "<end of the chunk before> / <chunk>" (second view), those
# ordered by the mean of both logits. Why those depths: rcll.defaults (the one source). The
# DEFAULT_* names are kept for callers (bench/) that import them from here.
DEFAULT_BUDGET = defaults.BUDGET
DEFAULT_RERANK_DEPTH = defaults.RERANK_DEPTH
DEFAULT_CONTEXT_DEPTH = defaults.CONTEXT_DEPTH
NOW = "now"  # passed as a timestamptz literal: the server's transaction time, like the SQL default

# What a recall may read, resolved once per statement (rcll.recall_scope).
_SCOPE = """rcll.recall_scope(
        bank => %(bank)s, rooms => %(rooms)s, authors => %(authors)s, mine => %(mine)s,
        include_unattributed => %(include_unattributed)s, halls => %(halls)s, layers => %(layers)s,
        tags_any => %(tags_any)s, tags_all => %(tags_all)s, thread => %(thread)s,
        as_of => %(as_of)s::timestamptz)"""

_CHANNEL_ARGS = """
    query_embedding => %(query_embedding)s, entity_query_embedding => %(entity_query_embedding)s,
    time_range => %(time_range)s::tstzrange,
    reference_time => %(reference_time)s::timestamptz, channel_limit => %(channel_limit)s,"""

_WEIGHTS = """
    dense_weight => %(dense_weight)s, lexical_weight => %(lexical_weight)s,
    graph_weight => %(graph_weight)s, temporal_weight => %(temporal_weight)s,
    entity_weight => %(entity_weight)s, session_weight => %(session_weight)s,
    context_weight => %(context_weight)s,"""

# Phases 2-3 in one statement: the channels one after another, then their fusion.
_CANDIDATES = f"""
SELECT * FROM rcll.recall_candidates(query => %(query)s, scope => {_SCOPE},{_CHANNEL_ARGS}{_WEIGHTS}
    "limit" => %(limit)s)
"""

# Side by side: each connection runs some of the channels (rcll.recall_channels), then one fuses
# both lists (rcll.fuse_candidates: the fusion recall_candidates runs).
_CHANNELS = f"""
SELECT channel, unit_id, score, rank FROM rcll.recall_channels(query => %(query)s, scope => {_SCOPE},{_CHANNEL_ARGS}{_WEIGHTS}
    channels => %(channels)s::text[])
"""

# The lists go back as binary arrays (%b): ~1,500 hits as text cost ~4 ms more to write and parse.
_FUSE = f"""
SELECT * FROM rcll.fuse_candidates(scope => {_SCOPE},
    channels => %(hit_channels)b::text[], unit_ids => %(hit_units)b::bigint[],
    scores => %(hit_scores)b::double precision[], ranks => %(hit_ranks)b::integer[],{_WEIGHTS}
    "limit" => %(limit)s)
"""

# Which channels the second connection runs: the lexical and session channels share one candidate
# scan (rcll._bm25_channels) and are most of the SQL phase on a big bank (docs/scaling.md).
SIDE_CHANNELS: Final = ("lexical", "session")
MAIN_CHANNELS: Final = ("dense", "context", "graph", "temporal", "entity")

_ENTITY_QUERY = "SELECT rcll.query_without_entities(query => %(query)s, bank => %(bank)s)"

# Threads that wait on side connections (one per recall in flight; created only when needed).
_side_work = ThreadPoolExecutor(max_workers=32, thread_name_prefix="rcll-side")

Fetch = Callable[[npt.NDArray[np.float32] | None, int, npt.NDArray[np.float32] | None], list["Fact"]]


class _Embedder(Protocol):
    def embed_query(self, text: str) -> npt.NDArray[np.float32]: ...
    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


class _Reranker(Protocol):
    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]: ...


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def candidates(
    conn: psycopg.Connection[Any],
    query: str,
    bank: str,
    *,
    query_embedding: npt.NDArray[np.float32] | None = None,
    entity_query_embedding: npt.NDArray[np.float32] | None = None,
    rooms: Sequence[str] | None = None,
    authors: Sequence[str] | None = None,
    mine: bool = False,
    include_unattributed: bool = False,
    halls: Sequence[str] | None = None,
    layers: Sequence[str] | None = None,
    tags_any: Sequence[str] | None = None,
    tags_all: Sequence[str] | None = None,
    thread: str | None = None,
    as_of: datetime | str | None = NOW,
    time_range: str | None = None,
    reference_time: datetime | str = NOW,
    channel_limit: int = defaults.CHANNEL_LIMIT,
    dense_weight: float = 1.0,
    lexical_weight: float = 1.0,
    graph_weight: float = 1.0,
    temporal_weight: float = 1.0,
    entity_weight: float = 1.0,
    session_weight: float = 1.0,
    context_weight: float = 0.0,
    limit: int = defaults.CANDIDATE_LIMIT,
    side: psycopg.Connection[Any] | None = None,
) -> list[Fact]:
    """Phases 2-3 only: rcll.recall_candidates with these filters, as Facts in fused order.
    time_range is a tstzrange literal such as '[2024-05-01,2024-06-01)'. entity_query_embedding is
    the embedding of rcll.query_without_entities (entity_query); without it the entity channel
    ranks by query_embedding. With `side` (a second connection to the same database, acting as
    the same role and agent), the BM25 channels run there while `conn` runs the others, side by
    side (rcll.recall_channels on each, rcll.fuse_candidates on `conn`): the same facts in the
    same order, in about the time of the BM25 channels and the fusion instead of every channel's
    time added up (faster in banks of tens of thousands of units and more; in a bank of a thousand,
    the lists' round trip costs more than it saves: README "Recall latency")."""
    params: dict[str, Any] = {
        "query": query, "bank": bank,
        "query_embedding": None if query_embedding is None else np.asarray(query_embedding, dtype=np.float32),
        "entity_query_embedding": (None if entity_query_embedding is None
                                   else np.asarray(entity_query_embedding, dtype=np.float32)),
        "rooms": _list(rooms), "authors": _list(authors), "mine": mine,
        "include_unattributed": include_unattributed, "halls": _list(halls), "layers": _list(layers),
        "tags_any": _list(tags_any), "tags_all": _list(tags_all), "thread": thread,
        "as_of": as_of, "time_range": time_range, "reference_time": reference_time,
        "channel_limit": channel_limit, "dense_weight": dense_weight,
        "lexical_weight": lexical_weight, "graph_weight": graph_weight,
        "temporal_weight": temporal_weight, "entity_weight": entity_weight,
        "session_weight": session_weight, "context_weight": context_weight, "limit": limit,
    }
    if side is None:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_CANDIDATES, params).fetchall()
        return [Fact(**row) for row in rows]
    # Side by side: the second connection's channels run in a thread of ours (psycopg waits for
    # the server without holding the GIL), this connection runs the rest, then fuses both lists.
    # The thread is always waited for, so `side` is never still in use when this returns.
    other = _side_work.submit(_channel_rows, side, {**params, "channels": list(SIDE_CHANNELS)})
    try:
        hits = _channel_rows(conn, {**params, "channels": list(MAIN_CHANNELS)})
    except BaseException:
        wait([other])           # the caller's error, once `side` is free again
        raise
    hits += other.result()
    fuse = {**params, "hit_channels": [h[0] for h in hits], "hit_units": [h[1] for h in hits],
            "hit_scores": [h[2] for h in hits], "hit_ranks": [h[3] for h in hits]}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_FUSE, fuse).fetchall()
    return [Fact(**row) for row in rows]


def _channel_rows(conn: psycopg.Connection[Any], params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return conn.execute(_CHANNELS, params).fetchall()


def entity_query(conn: psycopg.Connection[Any], query: str, bank: str) -> str | None:
    """rcll.query_without_entities: the query without the known entities it names, written
    capitalised (what the entity channel's second query embedding embeds); None when it names none."""
    row = conn.execute(_ENTITY_QUERY, {"query": query, "bank": bank}).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _list(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)


def rerank(
    query: str,
    pool: Sequence[Fact],
    reranker: _Reranker,
    *,
    depth: int,
    context_depth: int = defaults.CONTEXT_DEPTH,
) -> list[Fact]:
    """Phase 4. The cross-encoder reads the top `depth` facts (first view: the fact); the top
    `context_depth` of that order are read again with the chunk before them (second view) and
    re-ordered by the mean of the two logits - a fact without a preceding chunk keeps its first
    score. Reranked facts come first, the rest keep their fused order behind them. (With a
    deadline: rcll.deadline.rerank_within, which this is without one.)"""
    return rerank_within(query, pool, reranker, depth=depth, context_depth=context_depth)[0]


def recall(
    conn: psycopg.Connection[Any],
    query: str,
    bank: str,
    *,
    rerank_depth: int = defaults.RERANK_DEPTH,
    context_depth: int = defaults.CONTEXT_DEPTH,
    budget: int | None = defaults.BUDGET,
    limit: int = defaults.CANDIDATE_LIMIT,
    embedder: _Embedder | None = None,
    reranker: _Reranker | None = None,
    query_embedding: npt.NDArray[np.float32] | None = None,
    deadline_ms: float | None = None,
    started: float | None = None,
    queue: WorkQueue | None = None,
    side: psycopg.Connection[Any] | None = None,
    **filters: Any,
) -> RecallResult:
    """All five phases: embed the query, rcll.recall_candidates (filters are its parameters:
    rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of,
    time_range, reference_time, k, channel_limit, *_weight), rerank the top `rerank_depth`
    with the cross-encoder (the top `context_depth` of those read again with the chunk before
    them), then fill `budget` tokens of fact text (a fact that does not fit is skipped; a later
    shorter one may fit). Returns the facts and per-phase timings.

    deadline_ms (None: no deadline, the depths asked for are read) is a latency budget counted
    from `started` (a time.perf_counter() value; default: now - a server passes the request's
    arrival, so waiting for a thread counts): the embedding and the SQL phases run, then the
    cross-encoder reads candidates in fused order while time is left (rcll.deadline); the result
    says how deep it read. Model batches take slots of `queue` (default: the process's installed
    rcll.workqueue, if any); the query embedding waits for one only while time is left, else
    DeadlinePassed (a Busy: HTTP 503 + Retry-After) is raised at once. With `side`, a second
    connection, the channels run side by side on both (candidates())."""
    def fetch(embedding: npt.NDArray[np.float32] | None, n: int,
              entity_embedding: npt.NDArray[np.float32] | None) -> list[Fact]:
        return candidates(conn, query, bank, query_embedding=embedding, entity_query_embedding=entity_embedding,
                          limit=n, side=side, **filters)

    return recall_with(fetch, query, rerank_depth=rerank_depth, context_depth=context_depth, budget=budget,
                       limit=limit, embedder=embedder, reranker=reranker, query_embedding=query_embedding,
                       deadline_ms=deadline_ms, started=started, queue=queue,
                       entity_text=lambda: entity_query(conn, query, bank))


def recall_with(
    fetch: Fetch,
    query: str,
    *,
    rerank_depth: int = defaults.RERANK_DEPTH,
    context_depth: int = defaults.CONTEXT_DEPTH,
    budget: int | None = defaults.BUDGET,
    limit: int = defaults.CANDIDATE_LIMIT,
    embedder: _Embedder | None = None,
    reranker: _Reranker | None = None,
    query_embedding: npt.NDArray[np.float32] | None = None,
    deadline_ms: float | None = None,
    started: float | None = None,
    queue: WorkQueue | None = None,
    entity_text: Callable[[], str | None] | None = None,
) -> RecallResult:
    """recall() with the SQL phases behind `fetch(query_embedding, limit, entity_query_embedding)` -
    the candidates in fused order - so a server runs them in a short transaction of its own (and
    retries it) and holds no connection while the models work. `entity_text()` returns the query
    without the entities it names (rcll.query_without_entities, None: it names none); when the
    query is embedded here, that text is embedded with it for the entity channel."""
    t = time.perf_counter()
    deadline = Deadline(deadline_ms, t if started is None else started)
    queue_ms = (t - deadline.started) * 1000.0
    emb = embedder or models.get_embedder()
    slot_s = 0.0
    entity_embedding = None
    if query_embedding is None:
        rest = entity_text() if entity_text is not None else None
        t_slot = time.perf_counter()
        # The query embedding waits for a slot only while time is left: without it there is
        # nothing to answer, so past the deadline the caller is refused at once (DeadlinePassed).
        try:
            with model_slot(READ, None if deadline.ms is None else max(deadline.left(), 0.0), queue=queue,
                            first=True):
                slot_s = time.perf_counter() - t_slot
                query_embedding = emb.embed_query(query)
                if rest is not None and rest != query:
                    entity_embedding = emb.embed_query(rest)
        except TimeoutError as e:
            assert deadline.ms is not None
            q = queue or installed()
            busy = q.retry_after(READ) if q is not None else 1
            raise DeadlinePassed(deadline.ms, "a model slot for the query embedding", busy) from e
    embed_ms = _ms(t)

    t = time.perf_counter()
    pool = fetch(query_embedding, max(limit, rerank_depth), entity_embedding)
    sql_ms = _ms(t)

    t = time.perf_counter()
    ranked, depth = list(pool), None
    if rerank_depth > 0 and pool:
        ranked, depth = rerank_within(query, pool, reranker or models.get_reranker(), depth=rerank_depth,
                                      context_depth=context_depth, deadline=deadline, queue=queue)
    rerank_ms = _ms(t)

    t = time.perf_counter()
    tokens = emb.count_tokens([f.text for f in ranked]) if ranked else []
    ranked = [replace(f, tokens=n) for f, n in zip(ranked, tokens, strict=True)]
    keep = cut_to_budget(tokens, budget, limit)
    facts = [ranked[i] for i in keep]
    cut_ms = _ms(t)

    return RecallResult(
        facts=facts,
        timings=Timings(embed=embed_ms, sql=sql_ms, rerank=rerank_ms, cut=cut_ms, queue=queue_ms,
                        slot_wait=(slot_s + (depth.waited if depth else 0.0)) * 1000.0),
        candidates=len(pool),
        tokens=sum(f.tokens for f in facts),
        ranked=ranked,
        rerank_depth_reached=depth.rerank if depth else 0,
        context_depth_reached=depth.context if depth else 0,
        deadline_ms=deadline_ms,
        deadline_cut=depth.cut if depth else False,
    )
