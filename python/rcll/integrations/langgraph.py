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
  the value is an envelope {"rcll_store": 1, "value", "created_at", "ttl", "expires_at", "texts",
  "documents", "units"} - compare-and-set on its version, every earlier version kept as history;
- memory units (retain): the texts the index fields name are the chunks of one document of thread
  json.dumps([room, key]), in their order (an item holding a session's turns under
  "turns[*].text" is a session document, as retain files one), dated by time_field, tagged
  "langgraph" and "langgraph:<p>" for every prefix p of the namespace (so that a search under a
  prefix is recall with tags_all=["langgraph:<prefix>"]); "units" maps each unit to its text.

A put whose indexed texts changed forgets the previous version's units in the transaction that
writes the new ones (never two versions' units side by side); one whose texts did not change keeps
them. `search(query=...)` is RCLL's recall inside the namespace prefix (hybrid first stage and
cross-encoder), one score per item (its best unit), then LangGraph's filter and offset/limit; each
result is an RcllSearchItem, whose `matches` say which of the item's texts recall ranked (path,
text, rank in the whole search, score). A batch reads once (rcll.state_keys) and writes in one
transaction.

As LangGraph's InMemoryStore: ops in a batch read the store as it was before the batch, and the
last put of a key wins; search without a query lists items in the order their namespaces, then
keys, were first written. Unlike it: `created_at` is kept across updates (as PostgresStore does),
indexing uses RCLL's own embedder (an index config's "dims" and "embed" are not used; "fields"
is, default ["$"]), and namespaces are listed only while they hold an item.

TTL (minutes, `ttl=` on put or TTLConfig's default_ttl): an expired item is never returned (get,
search, list_namespaces), and `sweep_ttl()` forgets expired items with their units. A read that
refreshes (refresh_on_read, the default) writes a new version with the new expiry - at most one
per tenth of the TTL, so that reads do not fill the history.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
import psycopg
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
from psycopg.types.json import Jsonb

from rcll.chunking import chunk_text
from rcll.document import Document
from rcll.errors import RcllError
from rcll.memory import Memory
from rcll.models import get_embedder
from rcll.request import RecallRequest
from rcll.retain import retain
from rcll.validate import required_text, state_value_arg, text_arg, time_arg
from rcll.workqueue import WRITE, admitted

__all__ = ["ENVELOPE", "TAG", "Match", "RcllSearchItem", "RcllStore", "namespace_of", "prefix_tag", "room_of",
           "thread_of"]

ENVELOPE = "rcll_store"          # marks a room state value as an RcllStore item (its format version)
TAG = "langgraph"                # every unit the store writes; "langgraph:<prefix>" per namespace prefix
CONFLICT = "RC005"               # put_state's compare-and-set lost
TOO_BROAD = "RC007"              # forget refused: with existing unit ids, they are every unit of the bank
ATTEMPTS = 3                     # a batch that loses a compare-and-set is read and written again


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


def _now() -> datetime:
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
    updated_at: datetime

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
    rerank_depth, weights, reference_time, ...), checked now.
    """

    supports_ttl = True

    def __init__(self, memory: Memory, *, bank: str | None = None,
                 index: IndexConfig | None = {"fields": ["$"]},  # noqa: B006 - read only
                 ttl: TTLConfig | None = None, time_field: str | None = None,
                 recall: Mapping[str, Any] | None = None) -> None:
        self.memory = memory
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

    # -- BaseStore --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops`: reads see the store as it was before the batch; the puts (the last one per
        key) are then written in one transaction."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
        for attempt in range(ATTEMPTS):
            try:
                return self._batch(ops)
            except RcllError as e:
                if e.code.value != CONFLICT or attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """batch() on a worker thread (Memory's pool is synchronous): the event loop never blocks."""
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Forget every expired item with its units and history; returns how many."""
        now = _now()
        stored = self._read_all()
        expired = [PutOp(s.namespace, s.key, None) for s in stored.values() if s.expired(now)]
        self._write(expired, stored)
        return len(expired)

    # -- reads ------------------------------------------------------------------------------------

    def _stored(self, rows: Iterable[Any]) -> dict[Pair, _Stored]:
        out = {}
        for room, key, version, value, created_at in rows:
            if isinstance(value, dict) and value.get(ENVELOPE) == 1:
                ns = namespace_of(room)
                out[(ns, key)] = _Stored(ns, key, version, value, created_at)
        return out

    def _read_all(self) -> dict[Pair, _Stored]:
        """Every item of the store in one call (rcll.state_keys), expired ones included."""
        return self._stored((s.room, s.key, s.version, s.value, s.created_at)
                            for s in self.memory.state_keys(bank=self.bank))

    def _read(self, pairs: Iterable[Pair]) -> dict[Pair, _Stored]:
        """These items (those that exist) in one call (rcll.get_states), expired ones included."""
        pairs = sorted(set(pairs))
        if not pairs:
            return {}
        b = self.memory._bank(self.bank)
        with self.memory._tx(b) as conn:
            rows = conn.execute("SELECT room, key, version, value, created_at FROM rcll.get_states(bank => %s, "
                                "rooms => %s, keys => %s)", (b, [room_of(ns) for ns, _ in pairs],
                                                             [k for _, k in pairs])).fetchall()
        return self._stored(rows)

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
        now = _now()
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
        """The items under the prefix that pass the filter, in InMemoryStore's order: namespaces by
        their first write, then keys by theirs."""
        n = len(op.namespace_prefix)
        items = [s for s in live.values() if s.namespace[:n] == op.namespace_prefix and _kept(op, s)]
        first: dict[tuple[str, ...], str] = {}
        for s in items:
            c = s.envelope["created_at"]
            first[s.namespace] = min(first.get(s.namespace, c), c)
        return sorted(items, key=lambda s: (first[s.namespace], s.envelope["created_at"], s.namespace, s.key))

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

    def _write(self, puts: list[PutOp], stored: dict[Pair, _Stored], refresh: Sequence[_Stored] = ()) -> None:
        now = _now()
        refresh = [s for s in refresh if self._refreshes(s, now)]
        if not puts and not refresh:
            return
        b = self.memory._bank(self.bank, "write")
        self.memory.check_writable()
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
        # chunked as retain chunks it), so an item is one document as a retained text is.
        # Each chunk remembers the text it came from (owners), so that a search can say which of
        # an item's texts it found.
        plans = []
        for op in puts:
            old = stored.get((op.namespace, op.key))
            texts = self._texts(op)
            changed = old is None or old.envelope.get("texts") != texts or op.value is None
            pieces = [(c, i) for i, (_, t) in enumerate(texts) for c in chunk_text(t)] if changed and op.value is not None else []
            plans.append((op, old, texts, changed, [c for c, _ in pieces], [i for _, i in pieces]))
        with admitted(WRITE):
            flat = [c for _, _, _, _, chunks, _ in plans for c in chunks]
            vectors = get_embedder(self.memory.settings).embed(flat) if flat else np.zeros((0, 0), np.float32)
            now = _now()           # a TTL counts from the write, after the model work
            with self.memory._tx(b) as conn:
                _forget_threads(conn, b, [thread_of(op.namespace, op.key) for op, old, _, changed, _, _ in plans
                                          if old is not None and old.envelope["documents"] and changed])
                at = 0
                for op, old, texts, changed, chunks, owners in plans:
                    pair = (op.namespace, op.key)
                    if op.value is None:
                        if old is not None:
                            conn.execute("SELECT rcll.forget_state(bank => %s, room => %s, key => %s, dry_run => false, "
                                         "reason => %s)", (b, room_of(op.namespace), op.key, "langgraph store delete"))
                        continue
                    documents = [] if changed or old is None else list(old.envelope["documents"])
                    units = [] if changed or old is None else list(old.envelope.get("units", []))
                    if chunks:
                        doc = Document(content="\n".join(t for _, t in texts), thread=thread_of(*pair),
                                       occurred_at=when.get(pair), source="langgraph",
                                       tags=[TAG, *(prefix_tag(op.namespace[:i]) for i in range(1, len(op.namespace) + 1))],
                                       metadata={"namespace": list(op.namespace), "key": op.key,
                                                 "paths": [p for p, _ in texts]})
                        kept = retain(conn, b, doc, via="langgraph", prepared=(chunks, vectors[at:at + len(chunks)]),
                                      settings=self.memory.settings)
                        documents = [kept.document_id]
                        units = [[u, i] for u, i in zip(kept.unit_ids, owners, strict=True)]
                        at += len(chunks)
                    # an expired item not yet swept is gone for LangGraph: its key starts again
                    created = old.envelope["created_at"] if old is not None and not old.expired(now) else now.isoformat()
                    ttl = op.ttl
                    envelope = {ENVELOPE: 1, "value": dict(op.value), "created_at": created, "ttl": ttl,
                                "expires_at": (now + timedelta(minutes=ttl)).isoformat() if ttl else None,
                                "texts": texts, "documents": documents, "units": units}
                    _put(conn, b, op.namespace, op.key, envelope, old.version if old is not None else 0)
                for s in refresh:
                    envelope = dict(s.envelope, expires_at=(now + timedelta(minutes=s.envelope["ttl"])).isoformat())
                    _put(conn, b, s.namespace, s.key, envelope, s.version)


def _put(conn: psycopg.Connection[Any], bank: str, namespace: tuple[str, ...], key: str, envelope: dict[str, Any],
         version: int) -> None:
    conn.execute("SELECT rcll.put_state(bank => %s, room => %s, key => %s, value => %s, expected_version => %s, "
                 "via => %s)", (bank, room_of(namespace), key, Jsonb(envelope), version, "langgraph"))


def _forget_threads(conn: psycopg.Connection[Any], bank: str, threads: list[str]) -> None:
    """Forget every unit of these threads (the items' earlier versions), in the caller's transaction."""
    if not threads:
        return
    ids: list[int] = []
    offset = 0
    while True:
        rows = conn.execute('SELECT unit_id, total FROM rcll.units(bank => %s, threads => %s, "limit" => 500, '
                            '"offset" => %s)', (bank, threads, offset)).fetchall()
        ids += [int(r[0]) for r in rows]
        offset += 500
        if not rows or offset >= int(rows[0][1]):
            break
    if not ids:
        return
    try:
        with conn.transaction():
            conn.execute("SELECT count(*) FROM rcll.forget(bank => %s, unit_ids => %s, dry_run => false, reason => %s)",
                         (bank, ids, "langgraph store: replaced or deleted"))
    except psycopg.Error as e:
        # Existing ids are refused only when they are every unit of the bank: say so, as forget asks.
        if e.sqlstate != TOO_BROAD:
            raise
        conn.execute("SELECT count(*) FROM rcll.forget(bank => %s, everything => %s, dry_run => false, reason => %s)",
                     (bank, bank, "langgraph store: replaced or deleted"))


def _kept(op: SearchOp, s: _Stored) -> bool:
    return not op.filter or all(_compare_values(s.envelope["value"].get(k), v) for k, v in op.filter.items())


def _list_namespaces(op: ListNamespacesOp, live: Iterable[_Stored]) -> list[tuple[str, ...]]:
    namespaces = {s.namespace for s in live}
    if op.match_conditions:
        namespaces = {ns for ns in namespaces if all(_does_match(c, ns) for c in op.match_conditions)}
    if op.max_depth is not None:
        namespaces = {ns[:op.max_depth] for ns in namespaces}
    return sorted(namespaces)[op.offset:op.offset + op.limit]
