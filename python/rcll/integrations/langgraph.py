"""RcllStore: RCLL as a LangGraph long-term memory store (langgraph.store.base.BaseStore).

    from rcll import Memory
    from rcll.integrations.langgraph import RcllStore

    store = RcllStore(Memory(), bank="agents", index={"fields": ["text"]})
    store.put(("memories", "alice"), "k1", {"text": "Alice deploys with Argo CD"})
    store.search(("memories", "alice"), query="how does alice deploy?")

Where an item lives (reversible both ways; LangGraph forbids "." in a namespace label, so the
join cannot be ambiguous):

- bank: the store's bank, for every namespace;
- room state (rcll.put_state): room = the namespace's labels joined by ".", key = the item's key;
  the value is an envelope {"rcll_store": 1, "value", "created_at", "updated_at", "ttl",
  "expires_at", "texts", "documents", "units"}, every earlier version kept as history;
- memory units (retain): the texts the index fields name are the chunks of one document of thread
  json.dumps([room, key]), in their order (an item holding a session's turns under
  "turns[*].text" is a session document, as retain files one), dated by time_field, tagged
  "langgraph" and "langgraph:<p>" for every prefix p of the namespace (so that a search under a
  prefix is recall with tags_all=["langgraph:<prefix>"]); "units" maps each unit to its text.

Only Memory's public verbs, so that a token's scope holds: a batch's writes are one unit of work
(Memory.transaction) that locks the keys it writes (Memory.lock_states), reads their current
versions and writes on top of them - last write wins under any concurrency, with no retry and no
conflict, every version kept. A put whose indexed texts changed forgets the previous version's
units (Memory.forget: the forget verb) in the transaction that retains the new ones (never two
versions' units side by side); one whose texts did not change keeps them. A delete needs forget.

`search(query=...)` is RCLL's recall inside the namespace prefix (hybrid first stage and
cross-encoder), one score per item (its best unit), then LangGraph's filter and offset/limit; each
result is an RcllSearchItem, whose `matches` say which of the item's texts recall ranked (path,
text, rank in the whole search, score). A batch reads once (Memory.get_states, or state_keys to
list) and writes in one transaction.

As LangGraph's stores: ops in a batch read the store as it was before the batch, and the last put
of a key wins; a prefix may be a tuple or a list; search without a query lists the most recently
updated items first (as PostgresStore); `created_at` is kept across updates. Unlike them: indexing
uses RCLL's own embedder (an index config's "dims" and "embed" are not used; "fields" is, default
["$"]), and namespaces are listed only while they hold an item (docs/integrations.md).

TTL (minutes, `ttl=` on put or TTLConfig's default_ttl): an expired item is never returned (get,
search, list_namespaces), and `sweep_ttl()` forgets expired items with their units. A read that
refreshes (refresh_on_read, the default) writes a new version with the new expiry - at most one
per tenth of the TTL, so that reads do not fill the history - and keeps updated_at.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

# LangGraph's own matching and filtering, so that a namespace condition or a filter means exactly
# what it means for InMemoryStore (private names: pinned by tests/test_langgraph_store.py).
from langgraph.store.memory import _compare_values, _does_match

from rcll.chunking import chunk_text
from rcll.errors import RcllError
from rcll.memory import Memory
from rcll.models import get_embedder
from rcll.request import RecallRequest
from rcll.results import StateKey
from rcll.settings import Settings
from rcll.validate import required_text, state_value_arg, text_arg, time_arg
from rcll.workqueue import WRITE, admitted

__all__ = ["ENVELOPE", "TAG", "Match", "RcllSearchItem", "RcllStore", "namespace_of", "prefix_tag", "room_of",
           "thread_of"]

ENVELOPE = "rcll_store"          # marks a room state value as an RcllStore item (its format version)
TAG = "langgraph"                # every unit the store writes; "langgraph:<prefix>" per namespace prefix
TOO_BROAD = "RC007"              # forget refused: matches nothing, or every unit of the bank
REASON = "langgraph store: replaced or deleted"
# A put waits its key's turn rather than fail: writers of one key take turns in the database, and
# in this process first (one stripe lock per key), so that they do not hold every pooled connection
# while they wait. WRITE_WAIT: seconds a batch may wait for a connection, its turn included.
STRIPES = 64
WRITE_WAIT = 120.0


def room_of(namespace: Sequence[str]) -> str:
    """The room of a namespace: its labels joined by "." (labels never contain one)."""
    return ".".join(namespace)


def namespace_of(room: str) -> tuple[str, ...]:
    """The namespace of a room room_of made."""
    return tuple(room.split("."))


def thread_of(namespace: Sequence[str], key: str) -> str:
    """The thread of an item's units: json.dumps([room, key]) - unique per item, and reversible."""
    return json.dumps([room_of(namespace), key], ensure_ascii=False)


def prefix_tag(prefix: Sequence[str]) -> str:
    """The tag every unit under `prefix` carries ("langgraph" for the empty prefix)."""
    return f"{TAG}:{room_of(prefix)}" if prefix else TAG


def _system_now() -> datetime:
    return datetime.now(UTC)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


Pair = tuple[tuple[str, ...], str]      # (namespace, key): an item


class Match(NamedTuple):
    """One indexed text of a found item that the search ranked.

    path: the text's label as the store keeps it (the index field's path, with ".<i>" for the i-th
    text of a path that names several: "turns[*].text.3"); text: the chunk recall ranked (a long
    text is several chunks); rank: its place in the whole search's ranking, across items (1 = best);
    score: as the item's score (the cross-encoder's, or the fused one where the rerank did not reach)."""

    path: str
    text: str
    rank: int
    score: float


class RcllSearchItem(SearchItem):
    """A SearchItem (equal to LangGraph's for every comparison and in dict()) that also says which
    of the item's indexed texts the search ranked: `matches`, best first. An item whose value holds
    many texts (a session's turns, a document's paragraphs) tells where in it the answer is, and
    merging several items' matches by rank gives the search's ranking of texts."""

    __slots__ = ("matches",)

    def __init__(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], created_at: datetime,
                 updated_at: datetime, score: float | None = None, matches: Sequence[Match] = ()) -> None:
        super().__init__(namespace, key, value, created_at, updated_at, score)
        self.matches = list(matches)


class _Hit(NamedTuple):
    """A unit recall ranked: its item, document, id, text, place in the ranking (from 1) and score."""

    pair: Pair
    document: int | None
    unit: int
    text: str
    rank: int
    score: float


@dataclass
class _Stored:
    """An item as the store holds it: the room state's current version and its envelope."""

    namespace: tuple[str, ...]
    key: str
    version: int
    envelope: dict[str, Any]
    written_at: datetime          # when this version was written (a TTL refresh writes one too)

    @property
    def updated_at(self) -> datetime:
        """When the value was last written: a refresh of the TTL moves only the expiry."""
        return _time(self.envelope.get("updated_at")) or self.written_at

    @property
    def expires_at(self) -> datetime | None:
        return _time(self.envelope.get("expires_at"))

    def expired(self, now: datetime) -> bool:
        at = self.expires_at
        return at is not None and at <= now

    def item(self) -> Item:
        return Item(value=dict(self.envelope["value"]), key=self.key, namespace=self.namespace,
                    created_at=_time(self.envelope["created_at"]) or self.updated_at, updated_at=self.updated_at)

    def found(self, score: float | None, matches: Sequence[Match] = ()) -> RcllSearchItem:
        return RcllSearchItem(self.namespace, self.key, dict(self.envelope["value"]),
                              _time(self.envelope["created_at"]) or self.updated_at, self.updated_at, score, matches)

    def path_of(self, unit_id: int) -> str | None:
        """The label of the indexed text a unit of this version was chunked from."""
        owner = {u: i for u, i in self.envelope.get("units", [])}.get(unit_id)
        return None if owner is None else str(self.envelope["texts"][owner][0])


class RcllStore(BaseStore):
    """A LangGraph BaseStore on an RCLL Memory (see the module's docstring for the mapping).

    memory: the Memory to use (its agent is the author of every write). bank: the bank to keep the
    items in (default: the Memory's; created if missing). index: LangGraph's IndexConfig; only
    "fields" is read (default ["$"]: the whole value as one text); None indexes nothing (search
    then only lists). ttl: LangGraph's TTLConfig (default_ttl in minutes, refresh_on_read).
    time_field: a value field holding when the item happened (ISO 8601), for recall's time
    channels (its units' occurred_at). recall: RecallRequest fields for every search (deadline_ms,
    rerank_depth, weights, reference_time, ...), checked now. clock: what time it is, for the
    items' timestamps and TTLs (default: the system's, in UTC; a test passes one it moves itself).
    """

    supports_ttl = True

    def __init__(self, memory: Memory, *, bank: str | None = None,
                 index: IndexConfig | None = {"fields": ["$"]},  # noqa: B006 - read only
                 ttl: TTLConfig | None = None, time_field: str | None = None,
                 recall: Mapping[str, Any] | None = None, clock: Callable[[], datetime] = _system_now) -> None:
        self.memory = memory
        self._clock = clock
        self.bank = memory.bank if bank is None else bank
        self.index_config: dict[str, Any] | None = dict(index) if index is not None else None
        fields: list[str] = (self.index_config or {}).get("fields") or ["$"]
        self._fields: list[tuple[str, str | list[str]]] = [(p, p if p == "$" else tokenize_path(p)) for p in fields]
        self.ttl_config = ttl
        self.time_field = text_arg(time_field, "time_field")
        self.recall = dict(recall or {})
        taken = sorted({"query", "bank", "tags_all"} & set(self.recall))
        if taken:
            raise RcllError(f"recall.{taken[0]}", "is set by the store", "the store scopes every search itself")
        RecallRequest(query="check", bank=self.bank, **self.recall)      # every field checked now
        if self.bank not in {b.name for b in memory.banks()}:
            memory.create_bank(self.bank)
        self._stripes = [threading.Lock() for _ in range(STRIPES)]

    # -- BaseStore --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops`: reads see the store as it was before the batch; the puts (the last one per
        key) are then written in one transaction."""
        ops = [_normal(op) for op in ops]
        for op in ops:
            validate_op_namespace(op)
        return self._batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """batch() on a worker thread (Memory's pool is synchronous): the event loop never blocks."""
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Forget every expired item with its units and history; returns how many. Needs the
        forget verb."""
        now = self._clock()
        stored = self._read_all()
        expired = [PutOp(s.namespace, s.key, None) for s in stored.values() if s.expired(now)]
        return self._write(expired, stored, sweep=True)

    # -- reads ------------------------------------------------------------------------------------

    def _stored(self, rows: Iterable[StateKey]) -> dict[Pair, _Stored]:
        out = {}
        for r in rows:
            if isinstance(r.value, dict) and r.value.get(ENVELOPE) == 1:
                ns = namespace_of(r.room)
                out[(ns, r.key)] = _Stored(ns, r.key, r.version, r.value, r.created_at)
        return out

    def _read_all(self) -> dict[Pair, _Stored]:
        """Every item of the store in one call (rcll.state_keys), expired ones included."""
        return self._stored(self.memory.state_keys(bank=self.bank))

    def _read(self, pairs: Iterable[Pair]) -> dict[Pair, _Stored]:
        """These items (those that exist) in one call (rcll.get_states), expired ones included."""
        pairs = sorted(set(pairs))
        if not pairs:
            return {}
        return self._stored(self.memory.get_states([(room_of(ns), k) for ns, k in pairs], bank=self.bank))

    def _ranks(self, op: Op) -> bool:
        return isinstance(op, SearchOp) and bool(op.query) and self.index_config is not None

    def _recall(self, op: SearchOp) -> list[_Hit]:
        """RCLL's recall inside the namespace prefix: one hit per unit, best first."""
        request = RecallRequest(query=op.query or "", bank=self.bank, tags_all=[prefix_tag(op.namespace_prefix)],
                                **({"budget": None} | self.recall))
        out = []
        for rank, fact in enumerate(self.memory.recall(request).facts, 1):
            try:
                room, key = json.loads(fact.thread or "")
            except (ValueError, TypeError):
                continue
            score = fact.rerank_score if fact.rerank_score is not None else fact.fused_score
            out.append(_Hit((namespace_of(room), key), fact.document_id, fact.unit_id, fact.text, rank, float(score)))
        return out

    def _batch(self, ops: list[Op]) -> list[Result]:
        # A search with a query recalls first, then reads only the items it found; listing (and a
        # search without a query) reads the whole store.
        recalled = {i: self._recall(op) for i, op in enumerate(ops) if isinstance(op, SearchOp) and self._ranks(op)}
        listing = any(isinstance(op, (SearchOp, ListNamespacesOp)) and not self._ranks(op) for op in ops)
        if listing:
            stored = self._read_all()
        else:
            stored = self._read([(op.namespace, op.key) for op in ops if isinstance(op, (GetOp, PutOp))]
                                + [hit.pair for hits in recalled.values() for hit in hits])
        now = self._clock()
        live = {k: s for k, s in stored.items() if not s.expired(now)}
        everything = live if listing else None
        results: list[Result] = []
        refresh: dict[Pair, _Stored] = {}
        puts: dict[Pair, PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                got = live.get((op.namespace, op.key))
                results.append(None if got is None else got.item())
                if got is not None and op.refresh_ttl:
                    refresh[(got.namespace, got.key)] = got
            elif isinstance(op, SearchOp):
                if i in recalled:
                    page = self._ranked(op, recalled[i], live, lambda: everything or self._live(now))
                else:
                    page = [(s, None, []) for s in self._listed(op, live)[op.offset:op.offset + op.limit]]
                found: list[SearchItem] = [s.found(score, matches) for s, score, matches in page]
                results.append(found)
                if op.refresh_ttl:
                    refresh.update({(s.namespace, s.key): s for s, _, _ in page})
            elif isinstance(op, ListNamespacesOp):
                results.append(_list_namespaces(op, live.values()))
            else:
                puts[(op.namespace, op.key)] = op
                results.append(None)
        self._write(list(puts.values()), stored, [s for k, s in refresh.items() if k not in puts])
        return results

    def _live(self, now: datetime) -> dict[Pair, _Stored]:
        return {k: s for k, s in self._read_all().items() if not s.expired(now)}

    def _listed(self, op: SearchOp, live: dict[Pair, _Stored]) -> list[_Stored]:
        """The items under the prefix that pass the filter, in PostgresStore's order: the most
        recently updated first (then by namespace and key, for items written together)."""
        n = len(op.namespace_prefix)
        items = [s for s in live.values() if s.namespace[:n] == op.namespace_prefix and _kept(op, s)]
        items.sort(key=lambda s: (s.namespace, s.key))
        return sorted(items, key=lambda s: s.updated_at, reverse=True)

    def _ranked(self, op: SearchOp, hits: list[_Hit], live: dict[Pair, _Stored],
                everything: Callable[[], dict[Pair, _Stored]]) -> list[tuple[_Stored, float | None, list[Match]]]:
        # One entry per item, at its best unit; its other units become its matches.
        scored: dict[Pair, tuple[float, _Stored, list[Match]]] = {}
        for hit in hits:
            s = live.get(hit.pair)
            # a unit of the item's current version only (a concurrent put may have replaced it)
            if s is None or hit.document not in s.envelope["documents"] or not _kept(op, s):
                continue
            entry = scored.setdefault(hit.pair, (hit.score, s, []))
            path = s.path_of(hit.unit)
            if path is not None:
                entry[2].append(Match(path, hit.text, hit.rank, hit.score))
        out: list[tuple[_Stored, float | None, list[Match]]] = [
            (s, score, matches) for score, s, matches in list(scored.values())[op.offset:op.offset + op.limit]]
        if len(out) < op.limit:
            # As InMemoryStore: items with nothing indexed fill a short page, unscored.
            out += [(s, None, []) for s in self._listed(op, everything()) if not s.envelope["documents"]
                    ][:op.limit - len(out)]
        return out

    # -- writes -----------------------------------------------------------------------------------

    def _texts(self, op: PutOp) -> list[list[str]]:
        """The [path, text] pairs a put indexes (LangGraph's paths: "$", "a.b", "a[*].c")."""
        if op.value is None or op.index is False or self.index_config is None:
            return []
        paths = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        out = []
        for path, tokens in paths:
            texts = [t for t in get_text_at_path(op.value, tokens) if t.strip()]
            out += [[f"{path}.{i}" if len(texts) > 1 else path, t] for i, t in enumerate(texts)]
        return out

    def _refreshes(self, s: _Stored, now: datetime) -> bool:
        ttl = s.envelope.get("ttl")
        at = s.expires_at
        return ttl is not None and at is not None and now + timedelta(minutes=ttl) - at >= timedelta(minutes=ttl / 10)

    def _write(self, puts: list[PutOp], stored: dict[Pair, _Stored], refresh: Sequence[_Stored] = (),
               sweep: bool = False) -> int:
        """Write the puts (and the reads' TTL refreshes) in one unit of work of the Memory; returns
        how many items it deleted. sweep: the deletes are the sweep's, of items expired when it
        read - one that a put has renewed since stays.

        Last write wins, without retries and without errors: the unit of work locks the keys it
        writes (Memory.lock_states: every other writer of them waits), reads their current versions
        and writes on top of them - whatever another writer committed since this batch read. The
        model work is done before, from the batch's read; a text another writer changed meanwhile
        is embedded under the lock (rare: two writers of one key, one of them with the old texts)."""
        refresh = [s for s in refresh if self._refreshes(s, self._clock())]
        if not puts and not refresh:
            return 0
        self.memory.check_writable()
        if any(op.value is None for op in puts):
            self.memory.scope.check(self.bank, "forget")     # a delete forgets, whether the key exists or not
        when: dict[Pair, datetime | None] = {}
        for op in puts:            # every put checked before anything is embedded or written
            required_text(op.key, "key")
            if op.value is not None:
                if not isinstance(op.value, dict):
                    raise RcllError("value", f"must be a dict, got {type(op.value).__name__}",
                                    "LangGraph stores keep dicts: wrap it, e.g. {'value': ...}")
                state_value_arg(op.value, limit=self.memory.settings.max_state_bytes)
                if self.time_field is not None:
                    when[(op.namespace, op.key)] = time_arg(op.value.get(self.time_field), f"value.{self.time_field}")
        # One document per item: its indexed texts are the document's chunks (a long text is
        # chunked as retain chunks it), so an item is one document as a retained text is. Each
        # chunk remembers the text it came from (owners), so that a search can say which of an
        # item's texts it found.
        texts = {(op.namespace, op.key): self._texts(op) for op in puts}
        embedded: dict[Pair, _Pieces] = {}
        # The model work holds an admission place (rcll.workqueue) before the transaction, not
        # during it: Memory.retain takes its own there.
        with admitted(WRITE):
            todo = [(op, _pieces(texts[(op.namespace, op.key)])) for op in puts if op.value is not None
                    and _changed(stored.get((op.namespace, op.key)), texts[(op.namespace, op.key)])]
            flat = [c for _, (chunks, _) in todo for c in chunks]
            vectors = get_embedder(self.memory.settings).embed(flat) if flat else np.zeros((0, 0), np.float32)
            at = 0
            for op, (chunks, owners) in todo:
                embedded[(op.namespace, op.key)] = (chunks, owners, vectors[at:at + len(chunks)])
                at += len(chunks)
        pairs = sorted({(op.namespace, op.key) for op in puts} | {(s.namespace, s.key) for s in refresh})
        with self._turn(pairs), self.memory.transaction(timeout=WRITE_WAIT) as tx:
            current = self._stored(tx.lock_states([(room_of(ns), k) for ns, k in pairs], bank=self.bank))
            now = self._clock()       # a TTL counts from the write, after the model work and the keys' turn
            if sweep:
                puts = [op for op in puts if (old := current.get((op.namespace, op.key))) is not None
                        and old.expired(now)]
            deleted = 0
            # Forgets first: a forget takes the bank's write lock alone, a retain shares it, so
            # a unit of work that forgets after it retained could wait for another that does the same.
            for op in puts:
                old = current.get((op.namespace, op.key))
                if old is not None and old.envelope["documents"] and (
                        op.value is None or _changed(old, texts[(op.namespace, op.key)])):
                    self._forget_units(tx, thread_of(op.namespace, op.key))
            for op in puts:
                pair = (op.namespace, op.key)
                old = current.get(pair)
                if op.value is None:
                    if old is not None:
                        tx.forget_state(room_of(op.namespace), op.key, bank=self.bank, dry_run=False,
                                        reason="langgraph store delete")
                        deleted += 1
                    continue
                if _changed(old, texts[pair]):
                    documents, units = self._index(tx, op, texts[pair], embedded.get(pair), when.get(pair))
                else:
                    assert old is not None
                    documents, units = list(old.envelope["documents"]), list(old.envelope.get("units", []))
                # an expired item not yet swept is gone for LangGraph: its key starts again
                created = old.envelope["created_at"] if old is not None and not old.expired(now) else now.isoformat()
                ttl = op.ttl
                envelope = {ENVELOPE: 1, "value": dict(op.value), "created_at": created,
                            "updated_at": now.isoformat(), "ttl": ttl,
                            "expires_at": (now + timedelta(minutes=ttl)).isoformat() if ttl else None,
                            "texts": texts[pair], "documents": documents, "units": units}
                tx.put_state(room_of(op.namespace), op.key, envelope, bank=self.bank, via="langgraph",
                             expected_version=old.version if old is not None else 0)
            for s in refresh:
                # a refresh of the version the read returned; a newer one has its own expiry
                got = current.get((s.namespace, s.key))
                if got is None or got.version != s.version or got.expired(now) or (s.namespace, s.key) in texts:
                    continue
                envelope = dict(s.envelope, expires_at=(now + timedelta(minutes=s.envelope["ttl"])).isoformat(),
                                updated_at=s.updated_at.isoformat())
                tx.put_state(room_of(s.namespace), s.key, envelope, bank=self.bank, via="langgraph",
                             expected_version=s.version)
        return deleted

    @contextmanager
    def _turn(self, pairs: Sequence[Pair]) -> Iterator[None]:
        """This process's writers of these keys, one at a time (the stripes taken in one order)."""
        stripes = sorted({hash(p) % STRIPES for p in pairs})
        with ExitStack() as stack:
            for i in stripes:
                stack.enter_context(self._stripes[i])
            yield

    def _index(self, tx: Memory, op: PutOp, texts: list[list[str]], pieces: _Pieces | None,
               when: datetime | None) -> tuple[list[int], list[list[int]]]:
        """Retain an item's indexed texts as one document (in the unit of work); its documents and
        [unit, text] pairs."""
        if pieces is None:
            with admitted(WRITE):
                pieces = _embedded(texts, self.memory.settings)
        chunks, owners, vectors = pieces
        if not chunks:
            return [], []
        ns = op.namespace
        kept = tx.retain("\n".join(t for _, t in texts), bank=self.bank, thread=thread_of(ns, op.key), source="langgraph",
                         occurred_at=when, tags=[TAG, *(prefix_tag(ns[:i]) for i in range(1, len(ns) + 1))],
                         metadata={"namespace": list(ns), "key": op.key, "paths": [p for p, _ in texts]},
                         via="langgraph", prepared=(chunks, vectors))
        return [kept.document_id], [[u, i] for u, i in zip(kept.unit_ids, owners, strict=True)]

    def _forget_units(self, tx: Memory, thread: str) -> None:
        """Forget every unit of an item's thread (its earlier version), in the unit of work."""
        try:
            tx.forget(bank=self.bank, thread=thread, dry_run=False, reason=REASON)
        except RcllError as e:
            if e.code.value != TOO_BROAD:
                raise
            total = tx.units(bank=self.bank, threads=[thread], limit=1).total
            if total == 0:
                return                    # forgotten already (a forget by another selector)
            # They are every unit of the bank: say so, as forget asks - in a savepoint that goes
            # back if a unit of another item arrived meanwhile (the thread alone is then narrower).
            try:
                with tx.transaction() as inner:
                    gone = inner.forget(bank=self.bank, everything=self.bank, dry_run=False, reason=REASON)
                    if gone.counts.get("units", 0) != total:
                        raise _Wider
            except _Wider:
                tx.forget(bank=self.bank, thread=thread, dry_run=False, reason=REASON)


class _Wider(Exception):
    """Forgetting everything would have forgotten more than the item's units."""


_Pieces = tuple[list[str], list[int], Any]      # an item's chunks, the text each came from, their vectors


def _pieces(texts: list[list[str]]) -> tuple[list[str], list[int]]:
    pieces = [(c, i) for i, (_, t) in enumerate(texts) for c in chunk_text(t)]
    return [c for c, _ in pieces], [i for _, i in pieces]


def _embedded(texts: list[list[str]], settings: Settings) -> _Pieces:
    chunks, owners = _pieces(texts)
    return chunks, owners, get_embedder(settings).embed(chunks) if chunks else np.zeros((0, 0), np.float32)


def _changed(old: _Stored | None, texts: list[list[str]]) -> bool:
    """Whether a put's indexed texts differ from the stored version's (then its units are replaced)."""
    return old is None or old.envelope.get("texts") != texts


def _normal(op: Op) -> Op:
    """An op with its namespace as a tuple: LangGraph's own tests and docs pass lists."""
    if isinstance(op, (GetOp, PutOp)):
        return op._replace(namespace=tuple(op.namespace))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=tuple(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp):
        return op
    raise ValueError(f"Unknown operation type: {type(op)}")


def _kept(op: SearchOp, s: _Stored) -> bool:
    return not op.filter or all(_compare_values(s.envelope["value"].get(k), v) for k, v in op.filter.items())


def _list_namespaces(op: ListNamespacesOp, live: Iterable[_Stored]) -> list[tuple[str, ...]]:
    namespaces = {s.namespace for s in live}
    if op.match_conditions:
        namespaces = {ns for ns in namespaces if all(_does_match(c, ns) for c in op.match_conditions)}
    if op.max_depth is not None:
        namespaces = {ns[:op.max_depth] for ns in namespaces}
    return sorted(namespaces)[op.offset:op.offset + op.limit]
