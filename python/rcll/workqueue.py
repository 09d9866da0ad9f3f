"""Bounded model work: requests are admitted up to a limit, model batches take one of a few slots.

The cross-encoder and the embedder share the cores with PostgreSQL. Left alone, every request a
server accepts starts model work at once, the cores are oversubscribed and every request's latency
grows with the queue; recalls (tens of cross-encoder pairs each) crowd out writes (a few embedded
chunks each). So model work goes through one WorkQueue per process:

- admission, per request: at most `read_limit` recalls and `write_limit` retains in progress; one
  more is refused at once with Busy (HTTP 503 + Retry-After) instead of waiting without bound;
- slots, per model batch: at most `slots` batches run at a time (the core count by default). A
  batch holds a slot for tens of milliseconds (a rerank batch of 8 pairs, one retain's chunks), so
  a waiting write is served within about one batch whatever the reads do;
- fairness: when reads and writes both wait, the next slot goes to the kind that is furthest
  below its share of the slot time held lately - writes' share WRITE_SHARE (0.6), reads' the rest
  (hold times decay with a half-life of USAGE_HALF_LIFE_S; a rerank batch holds a slot ten times
  longer than a retain's embedding, so turns by count would give reads most of the cores). Writes
  get the larger share because a recall under its deadline degrades gracefully (it reranks fewer
  candidates) while a write has nothing to drop, and a recall also spends CPU outside the slots
  (its SQL phase in PostgreSQL): at an even share writers kept 42-52% of their alone rate in the
  soak (tests/harness/soak.py). A kind below its share takes the next free slot, so a write waits about one
  batch behind a flood of recalls, and a read one batch behind a bulk retain. (The rule before -
  while one kind waits the other never holds the last free slot - split 2 slots one a kind
  whatever the shares.) A recall's query embedding (a few milliseconds, one per recall,
  and the recall cannot start without it) takes the next free slot ahead of both queues, or, when
  none is free, the express lane: one place beside the slots for such work only.

Python callers get no queue unless one is installed (`install`), so the library keeps its
behaviour; `rcll serve` and `rcll mcp` install one sized to the cores.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from rcll.errors import Code, RcllError
from rcll.settings import DEFAULTS, Settings

__all__ = ["READ", "WRITE", "Busy", "Kind", "WorkQueue", "admitted", "install", "installed", "model_slot"]

USAGE_HALF_LIFE_S = 10.0   # how long a kind's past slot time counts against it (fairness)
WRITE_SHARE = DEFAULTS.write_share   # writes' share of contended slot time (RCLL_WRITE_SHARE overrides it)

Kind = Literal["read", "write"]
READ: Kind = "read"
WRITE: Kind = "write"
_KINDS: tuple[Kind, Kind] = (READ, WRITE)
_WHAT = {READ: "recalls", WRITE: "writes"}


class Busy(RcllError):
    """The server already has as many requests of this kind in progress as it admits."""

    def __init__(self, kind: Kind, limit: int, retry_after: int) -> None:
        super().__init__("server", f"busy: {limit} {_WHAT[kind]} in progress is the limit",
                         f"retry after {retry_after} s (Retry-After), or raise RCLL_{kind.upper()}_LIMIT",
                         code=Code.UNAVAILABLE)
        self.kind = kind
        self.retry_after = retry_after


@dataclass(eq=False)
class _Waiter:
    """One thread waiting for a slot. Compared by identity: a waiter that gives up is removed from
    its queue by `is`, never by value - with value equality every ungranted waiter of a kind is
    "equal", so a timed-out rerank batch removed another thread's waiter (a query embedding, left
    waiting forever) and left its own behind, to be granted a slot nobody would release."""

    kind: Kind
    granted: bool = False
    first: bool = False
    express: bool = False     # granted the express lane, not a slot


@dataclass
class Snapshot:
    """Counters, for tests and /health."""

    slots: int
    limits: dict[Kind, int]
    admitted: dict[Kind, int]
    active: dict[Kind, int]
    waiting: dict[Kind, int]
    grants: dict[Kind, int] = field(default_factory=dict)
    refused: dict[Kind, int] = field(default_factory=dict)
    express: int = 0


class WorkQueue:
    """Admission limits per request and fair model slots per batch (see the module docstring).

    slots defaults to os.cpu_count(); read_limit to 4 x slots (recalls in progress), write_limit
    to 8 x slots (retains in progress); write_share to WRITE_SHARE (writes' share of the slot time
    when both kinds wait, 0.05-0.95); from_settings() takes them from RCLL_MODEL_SLOTS,
    RCLL_READ_LIMIT, RCLL_WRITE_LIMIT and RCLL_WRITE_SHARE."""

    def __init__(self, slots: int | None = None, *, read_limit: int | None = None,
                 write_limit: int | None = None, write_share: float | None = None) -> None:
        self.slots = max(1, slots or os.cpu_count() or 1)
        self.limits: dict[Kind, int] = {
            READ: max(1, read_limit or 4 * self.slots),
            WRITE: max(1, write_limit or 8 * self.slots),
        }
        share = write_share if write_share is not None else WRITE_SHARE
        self.write_share = min(max(share, 0.05), 0.95)
        self._cond = threading.Condition()
        self._admitted: dict[Kind, int] = {READ: 0, WRITE: 0}
        self._active: dict[Kind, int] = {READ: 0, WRITE: 0}
        self._waiting: dict[Kind, deque[_Waiter]] = {READ: deque(), WRITE: deque()}
        self._grants: dict[Kind, int] = {READ: 0, WRITE: 0}
        self._refused: dict[Kind, int] = {READ: 0, WRITE: 0}
        self._last: Kind = READ   # so that writes go first when both kinds wait on a fresh queue
        self._express = 0         # query embeddings running in the express lane (at most 1)
        self._batch_s = 0.05      # running mean of a slot's hold time, for Retry-After
        self._usage: dict[Kind, float] = {READ: 0.0, WRITE: 0.0}   # decayed slot-seconds held
        self._usage_at = time.monotonic()

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkQueue:
        """The queue settings size (None in a field: the default above)."""
        return cls(settings.model_slots, read_limit=settings.read_limit, write_limit=settings.write_limit,
                   write_share=settings.write_share)

    # -- admission ------------------------------------------------------------------------------

    @contextmanager
    def admit(self, kind: Kind) -> Iterator[None]:
        """Hold one of `kind`'s admission places for a request; Busy at once when none is free."""
        with self._cond:
            if self._admitted[kind] >= self.limits[kind]:
                self._refused[kind] += 1
                raise Busy(kind, self.limits[kind], self.retry_after(kind))
            self._admitted[kind] += 1
        try:
            yield
        finally:
            with self._cond:
                self._admitted[kind] -= 1

    def retry_after(self, kind: Kind) -> int:
        """Seconds after which a refused request may find room: the admitted work's batches spread
        over the slots, at least 1 s."""
        per_request = 8 if kind == READ else 1      # a recall's rerank is several batches
        backlog = self._admitted[kind] * per_request * self._batch_s / self.slots
        return max(1, math.ceil(backlog))

    # -- slots ----------------------------------------------------------------------------------

    @contextmanager
    def slot(self, kind: Kind, timeout: float | None = None, *, first: bool = False) -> Iterator[None]:
        """Hold a model slot for one batch. Waits for it (at most `timeout` seconds, then
        TimeoutError); waiting reads and writes are served in turn. first: ahead of every other
        waiter, of either kind, and when no slot is free it takes the express lane - one more
        place beside the slots, for work this small only (a recall's query embedding: one short
        text, a few milliseconds, and nothing else of that recall can start without it; it would
        otherwise wait out a whole batch, ~1 s on a loaded machine)."""
        waiter = _Waiter(kind, first=first)
        limit = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        with self._cond:
            if first:
                self._waiting[kind].appendleft(waiter)
            else:
                self._waiting[kind].append(waiter)
            self._dispatch()
            while not waiter.granted:
                left = None if limit is None else limit - time.monotonic()
                if left is not None and left <= 0:
                    self._waiting[kind].remove(waiter)       # this waiter: _Waiter compares by identity
                    self._dispatch()
                    raise TimeoutError(f"no model slot within {timeout:.3f} s")
                self._cond.wait(left)
        started = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - started
            with self._cond:
                if waiter.express:
                    self._express -= 1
                else:
                    self._active[kind] -= 1
                    self._batch_s = 0.9 * self._batch_s + 0.1 * held
                self._decay_usage()
                self._usage[kind] += held        # the express lane's time counts too: it is CPU
                self._dispatch()

    def _decay_usage(self) -> None:
        now = time.monotonic()
        factor = 0.5 ** ((now - self._usage_at) / USAGE_HALF_LIFE_S)
        self._usage_at = now
        for kind in _KINDS:
            self._usage[kind] *= factor

    def _dispatch(self) -> None:
        """Grant free slots to waiters (called with the lock held)."""
        granted = False
        while self._active[READ] + self._active[WRITE] < self.slots:
            kind = self._next_kind()
            if kind is None:
                break
            waiter = self._waiting[kind].popleft()
            waiter.granted = True
            self._active[kind] += 1
            self._grants[kind] += 1
            self._last = kind
            granted = True
        for kind in _KINDS:            # no slot free: a query embedding takes the express lane
            if self._express == 0 and self._waiting[kind] and self._waiting[kind][0].first:
                waiter = self._waiting[kind].popleft()
                waiter.granted = waiter.express = True
                self._express += 1
                self._grants[kind] += 1
                granted = True
        if granted:
            self._cond.notify_all()

    def _next_kind(self) -> Kind | None:
        for kind in _KINDS:
            if self._waiting[kind] and self._waiting[kind][0].first:
                return kind                                   # a query embedding: the next free slot
        ready = [kind for kind in _KINDS if self._waiting[kind]]
        if not ready:
            return None
        if len(ready) == 2:
            # Both wait: the kind furthest below its share of the slot time held lately; equal (a
            # fresh queue): in turn.
            reads = self._usage[READ] / (1.0 - self.write_share)
            writes = self._usage[WRITE] / self.write_share
            if reads != writes:
                return READ if reads < writes else WRITE
            return WRITE if self._last == READ else READ
        return ready[0]

    def snapshot(self) -> Snapshot:
        with self._cond:
            return Snapshot(self.slots, dict(self.limits), dict(self._admitted), dict(self._active),
                            {k: len(v) for k, v in self._waiting.items()}, dict(self._grants), dict(self._refused),
                            self._express)


_installed: WorkQueue | None = None


def install(queue: WorkQueue | None) -> WorkQueue | None:
    """Make `queue` the process's model-work queue (None removes it). Returns the previous one."""
    global _installed
    previous, _installed = _installed, queue
    return previous


def installed() -> WorkQueue | None:
    return _installed


@contextmanager
def model_slot(kind: Kind, timeout: float | None = None, queue: WorkQueue | None = None, *,
               first: bool = False) -> Iterator[None]:
    """A slot of `queue` (default: the installed one) for one batch; nothing when there is none."""
    q = queue or _installed
    if q is None:
        yield
        return
    with q.slot(kind, timeout, first=first):
        yield


@contextmanager
def admitted(kind: Kind, queue: WorkQueue | None = None) -> Iterator[None]:
    """An admission place of `queue` (default: the installed one) for one request - Busy at once
    when there is none; nothing when no queue is installed."""
    q = queue or _installed
    if q is None:
        yield
        return
    with q.admit(kind):
        yield
