"""Recall from Python: the one path every recall takes, from a RecallRequest to a RecallResult.

    result = recall(Pooled(pool, agent=...), request)    # Memory.recall
    result = recall(Direct(conn), request)                # one connection of your own (tests, bench)

Five phases: the query without the entities it names (rcll.query_without_entities, one
statement), the query embeddings (the query, and that rest of it for the entity channel), the
channels and their z-score fusion (rcll.recall_candidates: one statement in one short
transaction; with a spare connection, the BM25 channels run on it side by side), the
cross-encoder under the deadline (rcll.deadline), and the cut to the token budget with the
embedder's tokenizer. The models run outside any transaction, so no connection is held while they
work. It never builds SQL from input: the statements below are composed once, from the field and
channel names, and take every value as a parameter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from rcll import models
from rcll.auth import act_as
from rcll.budget import cut_counting
from rcll.db import POOL_TIMEOUT, retried_once
from rcll.deadline import Deadline, DeadlinePassed, rerank_within
from rcll.defaults import CHANNELS
from rcll.errors import database_errors
from rcll.request import SCOPE, RecallRequest
from rcll.results import Fact, RecallResult, Timings
from rcll.settings import DEFAULTS, Settings
from rcll.workqueue import READ, WorkQueue, admitted, installed, model_slot

__all__ = ["MAIN_CHANNELS", "SIDE_CHANNELS", "Direct", "Fact", "Pooled", "RecallResult", "Store", "Timings",
           "candidates", "entity_query", "recall"]

# A recall's wait for a pooled connection is bounded by its deadline's time left, but never below
# this: a connection is usually free within a round trip, and a passed deadline still reads fused.
MIN_CONNECTION_WAIT: Final = 0.05
# How long a recall waits for a spare connection: long enough to take an idle one (psycopg_pool
# refuses a wait of 0 even when one is idle), and a request that finds none asks the pool to grow.
SPARE_WAIT: Final = 0.001

# Which channels the second connection runs: the lexical and session channels share one candidate
# scan (rcll._bm25_channels) and are most of the SQL phase on a big bank (docs/scaling.md).
SIDE_CHANNELS: Final = ("lexical", "session")
MAIN_CHANNELS: Final = tuple(c for c in CHANNELS if c not in SIDE_CHANNELS)


def _named(names: Sequence[str], casts: dict[str, str] | None = None) -> sql.Composable:
    """`name => %(name)s, ...` (with a cast where given): named notation, every value a parameter."""
    casts = casts or {}
    return sql.SQL(", ").join(
        sql.SQL("{} => {}{}").format(sql.Identifier(n), sql.Placeholder(n),
                                     sql.SQL("::" + casts[n]) if n in casts else sql.SQL(""))
        for n in names)


# What a recall may read, resolved once per statement (rcll.recall_scope: its parameters are
# RecallRequest's scope fields, a test holds the two lists equal).
_SCOPE = sql.SQL("rcll.recall_scope({})").format(_named(SCOPE, {"as_of": "timestamptz"}))
# The channels' weights, one value (rcll.channel_weights: its parameters are the channel names).
_WEIGHTS = sql.SQL("weights => rcll.channel_weights({})").format(sql.SQL(", ").join(
    sql.SQL("{} => {}").format(sql.Identifier(c), sql.Placeholder(f"{c}_weight")) for c in CHANNELS))
_CHANNEL_ARGS = _named(["query_embedding", "entity_query_embedding", "time_range", "reference_time",
                        "channel_limit", "deadline_ms"], {"time_range": "tstzrange", "reference_time": "timestamptz"})

# Phases 2-3 in one statement: the channels one after another, then their fusion.
_CANDIDATES = sql.SQL('SELECT * FROM rcll.recall_candidates(query => %(query)s, scope => {}, {}, {}, '
                      '"limit" => %(limit)s)').format(_SCOPE, _CHANNEL_ARGS, _WEIGHTS)

# Side by side: each connection runs some of the channels (rcll.recall_channels), then one fuses
# both lists (rcll.fuse_candidates: the fusion recall_candidates runs).
_CHANNELS = sql.SQL("SELECT channel, unit_id, score, rank FROM rcll.recall_channels(query => %(query)s, "
                    "scope => {}, {}, {}, channels => %(channels)s::text[])").format(_SCOPE, _CHANNEL_ARGS, _WEIGHTS)

# The lists go back as binary arrays (%b): ~1,500 hits as text cost ~4 ms more to write and parse.
_FUSE = sql.SQL("SELECT * FROM rcll.fuse_candidates(scope => {}, channels => %(hit_channels)b::text[], "
                "unit_ids => %(hit_units)b::bigint[], scores => %(hit_scores)b::double precision[], "
                'ranks => %(hit_ranks)b::integer[], {}, "limit" => %(limit)s)').format(_SCOPE, _WEIGHTS)

_ENTITY_QUERY = "SELECT rcll.query_without_entities(query => %(query)s, bank => %(bank)s)"

# On a Citus cluster (rcll.citus): the scope resolved first, as a value, then phases 2-3 as one call
# with the bank's id first, which Citus runs whole on the worker holding the bank
# (sql/functions/610-citus-delegation.sql; it delegates a top-level call only, so outside a
# transaction block).
_SCOPE_VALUE = sql.SQL("SELECT s::text, (s).bank_id FROM {} s").format(_SCOPE)
_CANDIDATES_IN_BANK = sql.SQL('SELECT * FROM rcll.recall_candidates_in_bank(bank_id => %(bank_id)s, '
                              'query => %(query)s, scope => %(scope)s::rcll.recall_scope, {}, {}, '
                              '"limit" => %(limit)s)').format(_CHANNEL_ARGS, _WEIGHTS)

# Threads that wait on side connections (one per recall in flight; created only when needed).
_side_work = ThreadPoolExecutor(max_workers=32, thread_name_prefix="rcll-side")

Vector = npt.NDArray[np.float32]


class _Embedder(Protocol):
    def embed_query(self, text: str) -> Vector: ...
    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


class _Reranker(Protocol):
    def score(self, query: str, passages: Sequence[str]) -> Vector: ...


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _params(request: RecallRequest, query_embedding: Vector | None, entity_query_embedding: Vector | None,
            limit: int | None, deadline_ms: int | None) -> dict[str, Any]:
    return {"query": request.query, **request.scope,
            **{f"{c}_weight": w for c, w in request.weights.items()},
            "query_embedding": None if query_embedding is None else np.asarray(query_embedding, dtype=np.float32),
            "entity_query_embedding": (None if entity_query_embedding is None
                                       else np.asarray(entity_query_embedding, dtype=np.float32)),
            "time_range": request.time_range, "reference_time": request.reference_time or "now",
            "channel_limit": request.channel_limit, "limit": request.limit if limit is None else limit,
            "deadline_ms": deadline_ms}


def candidates(conn: psycopg.Connection[Any], request: RecallRequest, *, query_embedding: Vector | None = None,
               entity_query_embedding: Vector | None = None, limit: int | None = None,
               side: psycopg.Connection[Any] | None = None, deadline_ms: int | None = None) -> list[Fact]:
    """Phases 2-3 only, on connections the caller holds: rcll.recall_candidates for `request`, as
    Facts in fused order (at most `limit`, default request.limit). entity_query_embedding is the
    embedding of rcll.query_without_entities (entity_query); without it the entity channel ranks by
    query_embedding. With `side` (a second connection to the same database, acting as the same
    role and agent), the BM25 channels run there while `conn` runs the others, side by side
    (rcll.recall_channels on each, rcll.fuse_candidates on `conn`): the same facts in the same
    order, in about the time of the BM25 channels and the fusion instead of every channel's time
    added up (faster in banks of tens of thousands of units and more; in a bank of a thousand, the
    lists' round trip costs more than it saves: README "Recall latency"). With deadline_ms (from
    the statements' start; None: none), each connection starts a channel only while that leaves it
    time, the lexical channel when none ran before it (rcll.recall_channels)."""
    params = _params(request, query_embedding, entity_query_embedding, limit, deadline_ms)
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


def candidates_in_bank(conn: psycopg.Connection[Any], request: RecallRequest, scope: str, bank_id: int, *,
                       query_embedding: Vector | None = None, entity_query_embedding: Vector | None = None,
                       limit: int | None = None, deadline_ms: int | None = None) -> list[Fact]:
    """Phases 2-3 on a Citus cluster: rcll.recall_candidates_in_bank with the scope resolved
    before (scope: its text form, bank_id: its bank's id), sent outside a transaction block so
    that Citus runs it whole on the worker holding the bank. The same facts as candidates()."""
    params = {**_params(request, query_embedding, entity_query_embedding, limit, deadline_ms),
              "scope": scope, "bank_id": bank_id}
    autocommit = conn.autocommit
    conn.autocommit = True
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_CANDIDATES_IN_BANK, params).fetchall()
    finally:
        if not conn.closed:
            conn.autocommit = autocommit
    return [Fact(**row) for row in rows]


def _channel_rows(conn: psycopg.Connection[Any], params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return conn.execute(_CHANNELS, params).fetchall()


def entity_query(conn: psycopg.Connection[Any], request: RecallRequest) -> str | None:
    """rcll.query_without_entities: the query without the known entities it names, written
    capitalised (what the entity channel's second query embedding embeds); None when it names
    none. One statement: outside a transaction it runs as its own (it reads, and needs no agent)."""
    args = {"query": request.query, "bank": request.bank}
    if conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
        row = conn.execute(_ENTITY_QUERY, args).fetchone()
    else:
        conn.autocommit = True
        try:
            row = conn.execute(_ENTITY_QUERY, args).fetchone()
        finally:
            if not conn.closed:
                conn.autocommit = False
    return None if row is None or row[0] is None else str(row[0])


class Store(Protocol):
    """Where a recall's SQL phases run: recall() calls entity_text, then (the models having run)
    candidates, each under the recall's deadline. waited: seconds spent waiting for connections."""

    waited: float

    def entity_text(self, request: RecallRequest, deadline: Deadline) -> str | None: ...

    def candidates(self, request: RecallRequest, query_embedding: Vector | None,
                   entity_query_embedding: Vector | None, limit: int, deadline: Deadline) -> list[Fact]: ...


class _Transactions:
    """The SQL phases over connections from `connection(timeout)` and `spare()`: the entity text as
    one statement, the candidates in one transaction acting as `agent` (with a spare connection
    free at once, side by side on both), each retried once if its connection broke."""

    waited: float

    def __init__(self, *, agent: str | None, read_only: bool, in_bank: bool = False) -> None:
        self.agent, self.read_only, self.in_bank, self.waited = agent, read_only, in_bank, 0.0

    def connection(self, timeout: float | None) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def spare(self) -> AbstractContextManager[psycopg.Connection[Any] | None]:
        raise NotImplementedError

    @contextmanager
    def _within(self, deadline: Deadline) -> Iterator[psycopg.Connection[Any]]:
        # The wait for a connection is bounded by the time left: without candidates there is
        # nothing to answer, so past it the caller is refused at once.
        t = time.perf_counter()
        timeout = None if deadline.ms is None else min(POOL_TIMEOUT, max(deadline.left(), MIN_CONNECTION_WAIT))
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self.connection(timeout))
            except PoolTimeout as e:
                if timeout is not None and timeout < POOL_TIMEOUT:
                    assert deadline.ms is not None
                    raise DeadlinePassed(deadline.ms, "a database connection") from e
                raise
            finally:
                self.waited += time.perf_counter() - t
            yield conn

    @contextmanager
    def _transaction(self, conn: psycopg.Connection[Any], bank: str) -> Iterator[psycopg.Connection[Any]]:
        with database_errors(read_only=self.read_only, bank=bank), conn.transaction():
            act_as(conn, self.agent)
            yield conn

    @retried_once
    def entity_text(self, request: RecallRequest, deadline: Deadline) -> str | None:
        # An unknown bank is refused here, before any model works (query_without_entities resolves it).
        with self._within(deadline) as conn, database_errors(read_only=self.read_only, bank=request.bank):
            return entity_query(conn, request)

    @retried_once
    def candidates(self, request: RecallRequest, query_embedding: Vector | None,
                   entity_query_embedding: Vector | None, limit: int, deadline: Deadline) -> list[Fact]:
        if self.in_bank:
            return self._candidates_in_bank(request, query_embedding, entity_query_embedding, limit, deadline)
        with (self._within(deadline) as conn, self._transaction(conn, request.bank), self.spare() as free,
              self._transaction(free, request.bank) if free is not None else nullcontext() as side):
            # The channels get the time the deadline has left as they are sent, by the rule SQL's
            # recall applies (rcll.recall_channels): the same statements, so the same check.
            left = None if deadline.ms is None else max(math.floor(deadline.left() * 1000.0), 0)
            return candidates(conn, request, query_embedding=query_embedding,
                              entity_query_embedding=entity_query_embedding, limit=limit, side=side,
                              deadline_ms=left)


    def _candidates_in_bank(self, request: RecallRequest, query_embedding: Vector | None,
                            entity_query_embedding: Vector | None, limit: int, deadline: Deadline) -> list[Fact]:
        # The scope as the agent sees it (mine), in a transaction acting as the agent; then the
        # delegated call, which needs no agent: the scope carries what it resolved.
        with self._within(deadline) as conn:
            with self._transaction(conn, request.bank):
                row = conn.execute(_SCOPE_VALUE, _params(request, None, None, limit, None)).fetchone()
            assert row is not None
            left = None if deadline.ms is None else max(math.floor(deadline.left() * 1000.0), 0)
            with database_errors(read_only=self.read_only, bank=request.bank):
                return candidates_in_bank(conn, request, str(row[0]), int(row[1]), query_embedding=query_embedding,
                                          entity_query_embedding=entity_query_embedding, limit=limit,
                                          deadline_ms=left)


class Pooled(_Transactions):
    """The product's store (Memory.recall): connections from a pool, each phase on its own; a
    second connection for the channels only when one is free right now (under load it would
    only take one from another request)."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[Any]], *, agent: str | None = None,
                 read_only: bool = False, in_bank: bool = False) -> None:
        super().__init__(agent=agent, read_only=read_only, in_bank=in_bank)
        self.pool = pool

    def connection(self, timeout: float | None) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self.pool.connection(timeout)

    @contextmanager
    def spare(self) -> Iterator[psycopg.Connection[Any] | None]:
        with ExitStack() as stack:
            try:
                conn: psycopg.Connection[Any] | None = stack.enter_context(self.pool.connection(SPARE_WAIT))
            except PoolTimeout:
                conn = None
            yield conn


class Direct(_Transactions):
    """A store over connections the caller holds (tests, benchmarks, a script): `conn`, and `side`
    for the channels side by side. Each is used as recall uses a pooled one. in_bank: rcll is
    distributed by bank on a Citus cluster (Memory reads it at open): phases 2-3 are delegated to
    the bank's worker, as Memory.recall does there (`side` is then not used)."""

    def __init__(self, conn: psycopg.Connection[Any], *, side: psycopg.Connection[Any] | None = None,
                 agent: str | None = None, read_only: bool = False, in_bank: bool = False) -> None:
        super().__init__(agent=agent, read_only=read_only, in_bank=in_bank)
        self.conn, self.side = conn, side

    def connection(self, timeout: float | None) -> AbstractContextManager[psycopg.Connection[Any]]:
        return nullcontext(self.conn)

    def spare(self) -> AbstractContextManager[psycopg.Connection[Any] | None]:
        return nullcontext(self.side)


@dataclass
class _Clock:
    """Milliseconds spent in the SQL phases (they run before and after the embedding)."""

    sql: float = 0.0

    def timed(self, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.sql += _ms(t)


def recall(store: Store, request: RecallRequest, *, embedder: _Embedder | None = None,
           reranker: _Reranker | None = None, query_embedding: Vector | None = None,
           started: float | None = None, queue: WorkQueue | None = None,
           settings: Settings = DEFAULTS) -> RecallResult:
    """The recall `request` asks for, over `store`: every phase, timed. Returns the facts that fit
    the budget (best first), every candidate as ranked before the cut, and per-phase timings:
    embed (the query embeddings, a model slot's wait included), sql (the entity text and the
    candidates, the waits for a connection included and shown apart as connection_wait), rerank,
    cut, and queue (from `started` to the start of recall).

    The deadline (request.deadline_ms; None: none, the depths asked for are read) counts from
    `started` (a time.perf_counter() value; default now - a server passes the request's arrival,
    so waiting for a thread counts): the embedding and the SQL phases run, then the cross-encoder
    reads candidates in fused order while time is left (rcll.deadline); the result says how deep
    it read. The recall takes an admission place for a read and model batches take slots of
    `queue` (default: the process's installed rcll.workqueue, if any); the query embedding and the
    connections are waited for only while time is left, else DeadlinePassed (a Busy: HTTP 503 +
    Retry-After) is raised at once. query_embedding given: the query is not embedded (and the
    entity channel ranks by it). settings: the models' (rcll.models.get_embedder and get_reranker)
    when no embedder or reranker is given."""
    deadline = Deadline(request.deadline_ms, time.perf_counter() if started is None else started)
    with admitted(READ):
        return _phases(store, request, deadline, embedder, reranker, query_embedding, queue, settings)


def _phases(store: Store, request: RecallRequest, deadline: Deadline, embedder: _Embedder | None,
            reranker: _Reranker | None, query_embedding: Vector | None, queue: WorkQueue | None,
            settings: Settings) -> RecallResult:
    t = time.perf_counter()
    queue_ms = (t - deadline.started) * 1000.0
    emb = embedder or models.get_embedder(settings)
    clock = _Clock()
    slot_s = 0.0
    entity_embedding = None
    embed_ms = 0.0
    if query_embedding is None:
        rest = clock.timed(lambda: store.entity_text(request, deadline))
        t = time.perf_counter()
        # The query embedding waits for a slot only while time is left: without it there is
        # nothing to answer, so past the deadline the caller is refused at once (DeadlinePassed).
        try:
            with model_slot(READ, None if deadline.ms is None else max(deadline.left(), 0.0), queue=queue,
                            first=True):
                slot_s = time.perf_counter() - t
                query_embedding = emb.embed_query(request.query)
                if rest is not None and rest != request.query:
                    entity_embedding = emb.embed_query(rest)
        except TimeoutError as e:
            assert deadline.ms is not None
            q = queue or installed()
            busy = q.retry_after(READ) if q is not None else 1
            raise DeadlinePassed(deadline.ms, "a model slot for the query embedding", busy) from e
        embed_ms = _ms(t)

    depth_asked = request.rerank_depth
    pool: list[Fact] = clock.timed(lambda: store.candidates(request, query_embedding, entity_embedding,
                                                            max(request.limit, depth_asked), deadline))

    t = time.perf_counter()
    ranked, depth = list(pool), None
    if depth_asked > 0 and pool:
        ranked, depth = rerank_within(request.query, pool, reranker or models.get_reranker(settings), depth=depth_asked,
                                      context_depth=request.context_depth, deadline=deadline, queue=queue)
    rerank_ms = _ms(t)

    # Phase 5: only the facts the cut must look at are counted (rcll.budget.cut_counting: the
    # same facts as counting all); past the deadline the rest are estimated, as SQL's recall does.
    t = time.perf_counter()
    keep, tokens = cut_counting([f.text for f in ranked], request.budget, request.limit, emb.count_tokens,
                                in_time=lambda: deadline.left() > 0)
    ranked = [f if n is None else replace(f, tokens=n) for f, n in zip(ranked, tokens, strict=True)]
    facts = [ranked[i] for i in keep]
    cut_ms = _ms(t)

    return RecallResult(
        facts=facts,
        timings=Timings(embed=embed_ms, sql=clock.sql, rerank=rerank_ms, cut=cut_ms, queue=queue_ms,
                        slot_wait=(slot_s + (depth.waited if depth else 0.0)) * 1000.0,
                        connection_wait=store.waited * 1000.0),
        candidates=len(pool),
        tokens=sum(f.tokens for f in facts),
        ranked=ranked,
        rerank_depth_reached=depth.rerank if depth else 0,
        context_depth_reached=depth.context if depth else 0,
        deadline_ms=request.deadline_ms,
        deadline_cut=depth.cut if depth else False,
    )
