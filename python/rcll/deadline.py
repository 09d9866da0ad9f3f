"""Recall's latency deadline: the cross-encoder reads fused candidates while time is left.

Embedding the query always runs; the channels start only while the deadline leaves them time
(rcll.recall_channels: the first that does not fit and the ones after it are skipped, the lexical
channel runs when none ran before it), and the fusion always. What the deadline bounds most is the rerank, the
one phase whose cost grows with depth and with load (hindsight's users report 30-130 s recalls on
CPU at a fixed depth). The reranker reads candidates in fused order, in batches, and stops when
the time is spent; the context view (the top of its order read again with the chunk before them)
likewise. What it has not read keeps its fused order behind what it has.

Without a deadline - or with one it can meet - the reads are batched exactly as a single
reranker call would batch them (sorted by length, 8 to a batch), so the scores and the rows are
the same as the undeadlined recall's: INT8 scores move with batch composition (rcll.models), and
"a generous deadline changes nothing" must hold to the bit. When the remaining depth is not
expected to fit the time left (a running cost per token read, waits for a model slot included), it
reads one batch of 8 fused candidates at a time instead and looks at the clock between batches;
when not even 8 fit, it reads the longest fused prefix that does (two candidates at least, or one
after others: fewer would reorder nothing), then stops.
A batch starts when its run (that cost without the waits) fits the time left, and waits
for a model slot only while it could still end by the deadline once granted. The estimates relax
as their last measurement ages, so one slow spell does not stop every later read.

A server's deadline counts from the request's arrival: the waits for a worker thread, an admission
place, a model slot and a database connection spend it. When it passes before recall has anything
to answer - no slot for the query embedding, no connection for the SQL phases - the request is
refused at once (DeadlinePassed: HTTP 503 with Retry-After) rather than answered late.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from rcll import passages
from rcll.errors import Code, RcllError
from rcll.results import Fact
from rcll.settings import DEFAULTS
from rcll.workqueue import READ, Busy, WorkQueue, model_slot

__all__ = ["BATCH", "SERVER_DEADLINE_MS", "Deadline", "DeadlinePassed", "Depth", "call_tokens", "context_passage", "pair_cost",
           "read_prefix", "rerank_within"]

BATCH = 8  # rcll.models.RERANK_BATCH: the reranker's batch, and the step of a deadlined read
# The servers' (HTTP, MCP) default deadline. Unloaded on 2 cores a default recall (40 + 15 pairs)
# takes ~0.3-0.6 s, so 1 s reads the default depths; under load it bounds an agent's wait.
# RCLL_DEADLINE_MS (settings.deadline_ms) overrides it; Python callers have no deadline unless they pass one.
SERVER_DEADLINE_MS = DEFAULTS.deadline_ms


class _Reranker(Protocol):
    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]: ...


@dataclass(frozen=True, slots=True)
class Deadline:
    """A latency budget in milliseconds from `started` (a time.perf_counter() value; default now).
    ms None is no deadline."""

    ms: float | None
    started: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        """Seconds left (inf without a deadline; negative once passed)."""
        if self.ms is None:
            return math.inf
        return self.started + self.ms / 1000.0 - time.perf_counter()


class DeadlinePassed(Busy):
    """The deadline passed before recall had anything to answer (no model slot for the query
    embedding, or no database connection, within the time left): refused at once - HTTP 503 with
    Retry-After, as Busy - instead of an answer long after the deadline."""

    def __init__(self, deadline_ms: float, waiting_for: str, retry_after: int = 1) -> None:
        RcllError.__init__(self, "deadline_ms",
                           f"busy: the {deadline_ms:g} ms deadline passed while waiting for {waiting_for}",
                           f"retry after {retry_after} s (Retry-After), or allow a longer deadline_ms",
                           code=Code.UNAVAILABLE)
        self.kind = READ
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Depth:
    """How far the rerank read: candidates read by the cross-encoder (first view), how many of its
    top were read again with their context (second view), and whether the deadline stopped it.
    waited: seconds its batches spent waiting for a model slot (not part of equality)."""

    rerank: int = 0
    context: int = 0
    cut: bool = False
    waited: float = field(default=0.0, compare=False)


class _PairCost:
    """Running mean of wall seconds per token the cross-encoder reads - a batch costs its rows times
    its longest pair, padding included - waits for a model slot included: under load it rises, and
    reads fall back to one batch at a time. `compute` is the same without the waits (how long a
    batch runs once it has a slot). Per token, not per pair: the context view's pairs are about
    twice as long as the first view's, and a per-pair mean of both over-estimated the first view
    by half again, so generous deadlines fell back to batches of 8 and their scores moved.
    Only a reranker that counts its tokens (pair_lengths: the model) is measured; one that cannot
    (a test's stand-in, the benchmark's cache of scores) counts one token a pair and leaves the
    estimate alone - a cache answering in microseconds, or a stand-in timed per pair, said nothing
    of the model's cost, and mixed into it they made the next deadlined reads stop at once.

    An estimate that stops every read is never measured again, so one slow spell would stop the
    rerank for good: what get() and computing() return relaxes back towards the initial cost as
    the last measurement ages (half-way in RELAX_S seconds), and a later read measures afresh.
    measured() is the estimate as last measured, unrelaxed: a read goes all in one go (the
    bit-exact batching) only on that."""

    RELAX_S = 20.0

    # ms-marco-MiniLM-L-12 INT8 on one of these 2 cores: 110-145 us a token (batches of 8 pairs of
    # 26-103 tokens, measured 2026-12-01), so 40 LoCoMo pairs of ~60 tokens are ~0.3 s.
    def __init__(self, seconds: float = 0.000150) -> None:
        self._lock = threading.Lock()
        self.initial = seconds
        self.seconds = seconds
        self.compute = seconds
        self.at = time.monotonic()

    def _relaxed(self, value: float) -> float:
        if value <= self.initial:
            return value
        kept: float = 0.5 ** ((time.monotonic() - self.at) / self.RELAX_S)
        return self.initial + (value - self.initial) * kept

    def get(self) -> float:
        with self._lock:
            return self._relaxed(self.seconds)

    def computing(self) -> float:
        with self._lock:
            return self._relaxed(self.compute)

    def measured(self) -> float:
        with self._lock:
            return self.seconds

    def observe(self, seconds: float, tokens: int, compute: float | None = None) -> None:
        if tokens > 0:
            with self._lock:
                self.seconds = 0.7 * self._relaxed(self.seconds) + 0.3 * (seconds / tokens)
                self.compute = 0.7 * self._relaxed(self.compute) + 0.3 * ((seconds if compute is None else compute) / tokens)
                self.at = time.monotonic()


pair_cost = _PairCost()


def _lengths(reranker: Any, query: str, passages: list[str]) -> list[int] | None:
    """Tokens per (query, passage) pair as the reranker cuts them; None when it cannot count them."""
    fn: Callable[[str, Sequence[str]], list[int]] | None = getattr(reranker, "pair_lengths", None)
    return list(fn(query, passages)) if fn is not None else None


def _batches(window: range, lengths: list[int]) -> list[list[int]]:
    """The batches one reranker call over `window` would make: sorted by length (stable), 8 at a time."""
    order = sorted(window, key=lengths.__getitem__)
    return [order[b:b + BATCH] for b in range(0, len(order), BATCH)]


def _tokens(rows: list[int], lengths: list[int]) -> int:
    """What a batch costs the cross-encoder: its rows times its longest pair (padding included)."""
    return len(rows) * max(1, max(lengths[j] for j in rows))


def call_tokens(lengths: Sequence[int]) -> int:
    """What one reranker call over pairs of these token lengths costs, in the unit the running
    cost is kept in: its batches' rows times their longest pair (research/locomo/rerank_study.py)."""
    counted = list(lengths)
    return sum(_tokens(rows, counted) for rows in _batches(range(len(counted)), counted))


def _read(query: str, passages: list[str], reranker: _Reranker, deadline: Deadline,
          queue: WorkQueue | None, waited: list[float]) -> tuple[dict[int, float], bool]:
    """Scores of passages (by index), read in order while time is left; True when time ran out
    before all were read. Adds the seconds spent waiting for model slots to `waited`."""
    scores: dict[int, float] = {}
    i, n = 0, len(passages)
    counted = _lengths(reranker, query, passages)
    lengths = counted if counted is not None else [1] * n
    while i < n:
        left = deadline.left()
        step = _batches(range(i, min(n, i + BATCH)), lengths)
        if left <= 0 or (deadline.ms is not None and left < pair_cost.computing() * _tokens(step[0], lengths)):
            # The next batch of 8 would end past the deadline even with a slot now: read the
            # longest fused prefix of it that still fits, if that reorders anything (two pairs,
            # or one after others), then stop.
            fits = [k for k in range(len(step[0]) - 1, 0, -1)
                    if left >= pair_cost.computing() * _tokens(list(range(i, i + k)), lengths)]
            if left <= 0 or not fits or fits[0] < (2 if i == 0 else 1):
                return scores, True
            _score_batches(query, passages, reranker, deadline, queue, waited, [list(range(i, i + fits[0]))],
                           lengths, counted is not None, scores)
            return scores, True
        # All the rest in one go (batched as one call would) when it should take at most half
        # the time left as last measured; otherwise one batch of 8, then look at the clock again.
        rest = _batches(range(i, n), lengths)
        cost = max(pair_cost.get(), pair_cost.measured())
        whole = sum(_tokens(rows, lengths) for rows in rest) * cost <= left / 2
        batches, end = (rest, n) if whole else (step, min(n, i + BATCH))
        if not _score_batches(query, passages, reranker, deadline, queue, waited, batches, lengths,
                              counted is not None, scores):
            return scores, True
        i = end
    return scores, False


def _score_batches(query: str, passages: list[str], reranker: _Reranker, deadline: Deadline,
                   queue: WorkQueue | None, waited: list[float], batches: list[list[int]], lengths: list[int],
                   measure: bool, scores: dict[int, float]) -> bool:
    """Score `batches` in turn into `scores`; False when the deadline stopped it (no slot in time,
    or the next batch would end past it)."""
    for k, rows in enumerate(batches):
        t = time.perf_counter()
        tokens = _tokens(rows, lengths)
        # Wait for a slot only while the batch, once granted, can still end by the deadline.
        wait = None if deadline.ms is None else max(deadline.left() - pair_cost.computing() * tokens, 0.0)
        try:
            with model_slot(READ, wait, queue):
                run = time.perf_counter()
                waited[0] += run - t
                out = reranker.score(query, [passages[j] for j in rows])
        except TimeoutError:
            waited[0] += time.perf_counter() - t
            return False
        if measure:
            pair_cost.observe(time.perf_counter() - t, tokens, time.perf_counter() - run)
        scores.update(zip(rows, (float(s) for s in out), strict=True))
        if k + 1 < len(batches) and deadline.left() < pair_cost.computing() * _tokens(batches[k + 1], lengths):
            return False
    return True


def read_prefix(query: str, passages: Sequence[str], reranker: _Reranker, deadline: Deadline) -> list[float]:
    """Scores of the longest prefix of passages read while time is left (all of them when the
    deadline allows) - the in-database rerank (rcll._model_rerank_until) reads through this, so
    both legs batch and stop alike."""
    scores, _ = _read(query, list(passages), reranker, deadline, None, [0.0])
    return [scores[j] for j in range(_prefix(scores))]


def _prefix(scores: dict[int, float]) -> int:
    n = 0
    while n in scores:
        n += 1
    return n


def context_passage(fact: Fact) -> str | None:
    """The cross-encoder's second view of a fact: the chunk before it, then the fact itself."""
    return None if not fact.context else f"{fact.context} / {fact.text}"


def rerank_within(
    query: str,
    pool: Sequence[Fact],
    reranker: _Reranker,
    *,
    depth: int,
    context_depth: int,
    deadline: Deadline | None = None,
    queue: WorkQueue | None = None,
) -> tuple[list[Fact], Depth]:
    """Recall's rerank (phase 4), under a deadline or none. The cross-encoder reads the top `depth` facts in fused
    order while time is left (first view); the top `context_depth` of the facts it read, in its
    order, are read again with the chunk before them (second view) while time is left, and ordered
    by the mean of both logits. Only a fused-order prefix counts as read: a batch scored beyond
    a gap is dropped. Order of the result: the facts read twice, the rest of those read once, then
    the unread ones in fused order. Returns the facts and how deep it read."""
    deadline = deadline or Deadline(None)
    depth = min(max(depth, 0), len(pool))
    if depth == 0:
        return list(pool), Depth()
    waited = [0.0]
    # Long facts are read by their most query-relevant window, within a budget of words (rcll.passages).
    texts, trimmed = passages.first_view(query, [f.text for f in pool[:depth]])
    first, cut = _read(query, texts, reranker, deadline, queue, waited)
    read = _prefix(first)
    order = sorted(range(read), key=lambda j: -first[j])
    head = [replace(pool[j], rerank_score=first[j]) for j in order]
    top = head[: min(max(context_depth, 0), read)]
    done = 0
    if top and not cut:
        # A fact the window cut carries its own context: only the ones read whole are read again.
        views = [(i, p) for i, p in enumerate(None if trimmed[order[i]] else context_passage(f) for i, f in enumerate(top))
                 if p is not None]
        second, cut = _read(query, [p for _, p in views], reranker, deadline, queue, waited)
        n = _prefix(second)
        for k in range(n):
            i = views[k][0]
            top[i] = replace(top[i], rerank_score=((top[i].rerank_score or 0.0) + second[k]) / 2)
        # A fact without a preceding chunk has nothing to read again: it counts as read.
        done = len(top) if n == len(views) else views[n][0]
    twice = sorted(top[:done], key=lambda f: -(f.rerank_score or 0.0))
    return twice + head[done:] + list(pool[read:]), Depth(read, done, cut, waited[0])
