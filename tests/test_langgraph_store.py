"""RcllStore is a LangGraph BaseStore that behaves as LangGraph documents its stores.

LangGraph's packages ship no contract tests for stores: langgraph-checkpoint-conformance (PyPI
0.0.2) covers checkpointers only (put, put_writes, get_tuple, list, delete_thread, delete_for_runs,
copy_thread, prune, delta channel history), and the store tests of its repository
(libs/checkpoint/tests/test_store.py for InMemoryStore, libs/checkpoint-postgres and
libs/checkpoint-sqlite's tests/test_store.py and test_async_store.py) are each implementation's own
fixtures and are not in any wheel (the wheels include only langgraph/). So the documented
behaviour of its stores is the contract: one scenario body runs against InMemoryStore, against
LangGraph's PostgresStore (langgraph-checkpoint-postgres, in the test's own database) and against
RcllStore, through the sync API and the async one, and the answers must be the same
(differential), answer by answer. Both references embed with RCLL's own embedder, so that "the best
match" means the same to all three. A search without a query lists the most recently updated item
first, as PostgresStore does (InMemoryStore keeps first-write order: against it those listings are
compared as sets); where PostgresStore and InMemoryStore differ, RcllStore's choice is named in
POSTGRES_DIFFERS. Then what RcllStore promises beyond them: versions kept as history, units replaced
and never duplicated, last write wins under concurrent puts, TTL, the namespace mapping, a session
item's turns as one document, forget only with the forget verb.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp, SearchItem
from langgraph.store.memory import InMemoryStore

from rcll import Memory
from rcll.auth import Caller
from rcll.errors import Code, RcllError
from rcll.integrations.langgraph import (
    RcllSearchItem,
    RcllStore,
    namespace_of,
    prefix_tag,
    room_of,
    thread_of,
)
from rcll.models import get_embedder

INDEX = {"fields": ["text"]}


class Clock:
    """What time it is for a store (RcllStore(clock=...)), moved by the test: TTLs pass without
    the test waiting for them."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _embed(texts: list[str]) -> list[list[float]]:
    return [list(map(float, v)) for v in get_embedder().embed(texts)]


@pytest.fixture
def memory(dsn: str) -> Iterator[Memory]:
    with Memory(dsn, bank="agents") as m:
        yield m


class Sync:
    """The sync API (store.put, ...) behind awaitables, so one scenario body drives both APIs."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)
        return call




class Async(Sync):
    """The async API (store.aput, ...)."""

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        return getattr(self.store, "a" + name)  # type: ignore[no-any-return]


async def at_once(api: type[Sync], puts: list[tuple[BaseStore, dict[str, Any]]]) -> list[Any]:
    """Each (store, value) put to ("race",) "k", all at once: a thread each (sync) or gathered
    (async); the errors, if any, are returned."""
    if api is Async:
        got = await asyncio.gather(*(store.aput(("race",), "k", v) for store, v in puts), return_exceptions=True)
        return [g if isinstance(g, BaseException) else None for g in got]
    with ThreadPoolExecutor(len(puts)) as pool:
        futures = [pool.submit(store.put, ("race",), "k", v) for store, v in puts]
        return [f.exception() for f in futures]


class Listed(list[Any]):
    """A search without a query: its order is the store's listing order (most recently updated
    first for PostgresStore and RcllStore, first write for InMemoryStore)."""


def view(x: Any, ordered: bool = True) -> Any:
    """What the stores must agree on: namespace, key, value, and whether a score was given (a
    listing compared as a set when not `ordered`)."""
    if isinstance(x, Listed):
        items = [view(i) for i in x]
        return items if ordered else sorted(items, key=repr)
    if isinstance(x, SearchItem):
        return (x.namespace, x.key, x.value, x.score is not None)
    if isinstance(x, Item):
        return (x.namespace, x.key, x.value)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str):
        return (x[0], view(x[1], ordered))
    if isinstance(x, list):
        return [view(i, ordered) for i in x]
    return x


def unordered(hits: list[SearchItem]) -> list[Any]:
    """Results whose order is the ranker's own (none of them matches the query): compared as a set."""
    return sorted(view(hits), key=repr)


async def scenario(s: Sync) -> list[tuple[str, Any]]:
    """LangGraph's documented store behaviour, step by step; returns every answer, labelled."""
    out: list[tuple[str, Any]] = []

    async def listed(label: str, *args: Any, **kwargs: Any) -> None:
        try:
            out.append((label, Listed(await s.search(*args, **kwargs))))
        except ValueError as e:
            out.append((label, ("refused", type(e).__name__)))

    await s.put(("users", "alice", "memories"), "m1", {"text": "Alice deploys the API with Argo CD", "n": 1})
    await s.put(("users", "alice", "memories"), "m2", {"text": "Alice is allergic to peanuts", "n": 2,
                                                       "kind": {"topic": "health"}})
    await s.put(("users", "alice", "prefs"), "theme", {"text": "Alice prefers a dark theme", "n": 3})
    await s.put(("users", "bob", "memories"), "m1", {"text": "Bob plays the cello in an orchestra", "n": 4})
    await s.put(("users", "bob", "memories"), "raw", {"n": 5, "note": "not indexed"}, index=False)
    out.append(("get", await s.get(("users", "alice", "memories"), "m1")))
    out.append(("get missing", await s.get(("users", "alice", "memories"), "missing")))
    # an update replaces the value (and makes the item the most recently updated)
    await s.put(("users", "alice", "memories"), "m1", {"text": "Alice deploys the API with Flux now", "n": 6})
    out.append(("get updated", await s.get(("users", "alice", "memories"), "m1")))
    # listing: prefix, suffix, wildcards, depth, limit and offset
    out.append(("namespaces", await s.list_namespaces()))
    out.append(("namespaces prefix", await s.list_namespaces(prefix=("users", "alice"))))
    out.append(("namespaces suffix", await s.list_namespaces(suffix=("memories",))))
    out.append(("namespaces wildcard", await s.list_namespaces(prefix=("users", "*", "memories"))))
    out.append(("namespaces depth", await s.list_namespaces(max_depth=2)))
    out.append(("namespaces page", await s.list_namespaces(limit=2, offset=1)))
    out.append(("namespaces none", await s.list_namespaces(prefix=("nobody",))))
    # search without a query: everything under the prefix, unscored, filtered, paged
    await listed("list", ("users",))
    await listed("list prefix", ("users", "alice"))
    await listed("list filter", ("users",), filter={"n": 4})
    await listed("list $gte", ("users",), filter={"n": {"$gte": 3}})
    await listed("list $ne", ("users",), filter={"n": {"$ne": 2}, "note": "not indexed"})
    await listed("list nested filter", ("users",), filter={"kind": {"topic": "health"}})
    everything = await s.search(("users",))
    out.append(("list page is the listing's slice", await s.search(("users",), limit=2, offset=1) == everything[1:3]))
    await listed("list nothing", ("users", "dave"))
    # a prefix given as a list means what the tuple means (LangGraph's docs pass lists)
    await listed("list prefix as a list", ["users", "alice"])
    await s.put(("lists", "docs"), "d1", {"text": "a document under a namespace read as a list"})
    await listed("list a list-put item", ["lists"])
    out.append(("namespaces as a list", await s.list_namespaces(prefix=["lists"])))
    # search with a query: the best match first, scored; inside the prefix only
    out.append(("query", await s.search(("users", "alice"), query="what is Alice allergic to?", limit=1)))
    out.append(("query wide", await s.search(("users",), query="which instrument does Bob play?", limit=1)))
    out.append(("query elsewhere", await s.search(("users", "bob"), query="peanut allergy", limit=1)))
    out.append(("query filter", await s.search(("users", "alice"), query="how does Alice deploy?", filter={"n": 6},
                                               limit=3)))
    out.append(("query list prefix", await s.search(["users", "alice"], query="what is Alice allergic to?", limit=1)))
    # the not-indexed item fills a short page, unscored
    out.append(("query short page", await s.search(("users", "bob"), query="cello", limit=5)))
    # listing order: an item written again comes first
    await s.put(("users", "alice", "memories"), "m2", {"text": "Alice is allergic to peanuts and shellfish", "n": 2})
    await listed("list after an update", ("users",))
    # delete: the item goes (deleting a missing key is no error)
    await s.delete(("users", "alice", "prefs"), "theme")
    await s.delete(("users", "alice", "prefs"), "theme")
    out.append(("get deleted", await s.get(("users", "alice", "prefs"), "theme")))
    out.append(("query after delete", unordered(await s.search(("users", "alice"), query="dark theme", limit=5))))
    # concurrent puts to one key: last write wins, none fails
    values = [{"text": f"writer {i} was here", "i": i} for i in range(20)]
    errors = await at_once(type(s), [(s.store, v) for v in values])
    out.append(("concurrent put errors", [repr(e) for e in errors if e is not None]))
    last = await s.get(("race",), "k")
    out.append(("concurrent put: one of the values", last is not None and last.value in values))
    # a batch reads the store as it was before the batch; the last put of a key wins
    out.append(("batch", await s.batch([PutOp(("batch",), "k", {"text": "first"}), GetOp(("batch",), "k"),
                                        PutOp(("batch",), "k", {"text": "second"})])))
    out.append(("after batch", await s.get(("batch",), "k")))
    # (last: a read of an unknown namespace makes InMemoryStore list it from then on, a quirk of
    # its defaultdict that no database store shares; RcllStore lists namespaces that hold items)
    out.append(("get unknown namespace", await s.get(("users", "carol"), "m1")))
    # namespaces are checked as LangGraph checks them
    for bad in [(), ("a.b",), ("langgraph", "x"), ("",)]:
        try:
            await s.put(bad, "k", {"text": "x"})
            out.append((f"bad namespace {bad}", "accepted"))
        except InvalidNamespaceError as e:
            out.append((f"bad namespace {bad}", ("refused", type(e).__name__)))
    return out


def stores(memory: Memory) -> tuple[InMemoryStore, RcllStore]:
    return (InMemoryStore(index={"dims": 384, "embed": _embed, **INDEX}),  # type: ignore[typeddict-item]
            RcllStore(memory, bank="agents", index=INDEX))  # type: ignore[arg-type]


def differential(reference: BaseStore, store: RcllStore, api: type[Sync], *, ordered: bool,
                 differs: dict[str, str]) -> None:
    expected = view(asyncio.run(scenario(api(reference))), ordered)
    got = view(asyncio.run(scenario(api(store))), ordered)
    assert [label for label, _ in got] == [label for label, _ in expected]
    name = type(reference).__name__
    for (label, g), (_, e) in zip(got, expected, strict=True):
        if label not in differs:
            assert g == e, f"{label}: RcllStore {g!r} != {name} {e!r}"
        else:
            assert g != e, f"{label}: now answers as {name}: take it out of the known differences"


@pytest.mark.parametrize("api", [Sync, Async], ids=["sync", "async"])
def test_store_answers_as_langgraphs_in_memory_store(memory: Memory, api: type[Sync]) -> None:
    reference, store = stores(memory)
    differential(reference, store, api, ordered=False, differs=IN_MEMORY_DIFFERS)


# Where InMemoryStore answers otherwise than PostgresStore, and RcllStore as PostgresStore: why.
IN_MEMORY_DIFFERS = {
    # InMemoryStore compares a list prefix with its tuple namespaces and finds nothing, with a
    # query or without; PostgresStore finds the items, as LangGraph's docs (which pass prefixes
    # as lists) expect.
    "list prefix as a list": "a list prefix finds the items under it",
    "list a list-put item": "a list prefix finds the items under it",
    "query list prefix": "a list prefix finds the items under it",
}


# Where PostgresStore answers otherwise than InMemoryStore, and RcllStore as InMemoryStore: why.
POSTGRES_DIFFERS = {
    # PostgresStore ranks only items that have a vector; InMemoryStore (and RcllStore) fill a short
    # page with the unindexed items under the prefix, unscored.
    "query short page": "unindexed items fill a short page",
    # PostgresStore reads a dict in a filter as operators ({"$gt": ...}) only, and refuses
    # {"kind": {"topic": "health"}}; InMemoryStore (and RcllStore) compare it as a value.
    "list nested filter": "a dict in a filter is a value to compare",
}


@pytest.mark.parametrize("api", [Sync, Async], ids=["sync", "async"])
def test_store_answers_as_langgraphs_postgres_store(memory: Memory, dsn: str, api: type[Sync]) -> None:
    from langgraph.store.postgres import PostgresStore  # the test's own reference: loaded for it only
    index = {"dims": 384, "embed": _embed, **INDEX}
    with PostgresStore.from_conn_string(dsn, index=index, pool_config={"max_size": 20}) as reference:  # type: ignore[arg-type]
        reference.setup()
        differential(reference, RcllStore(memory, bank="agents", index=INDEX), api,  # type: ignore[arg-type]
                     ordered=True, differs=POSTGRES_DIFFERS)


def test_a_put_over_a_key_keeps_the_old_version_as_history(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents", index=INDEX)  # type: ignore[arg-type]
    ns = ("users", "alice")
    store.put(ns, "k", {"text": "Alice lives in Lyon"})
    first = store.get(ns, "k")
    time.sleep(0.01)
    store.put(ns, "k", {"text": "Alice lives in Porto"})
    item = store.get(ns, "k")
    assert item is not None and first is not None
    assert item.value == {"text": "Alice lives in Porto"}
    assert item.created_at == first.created_at and item.updated_at > first.updated_at
    history = memory.state_history(room_of(ns), "k", bank="agents")
    assert [h.value["value"]["text"] for h in history] == ["Alice lives in Porto", "Alice lives in Lyon"]


def test_a_put_replaces_the_units_of_the_previous_version_never_duplicates_them(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents", index={"fields": ["text", "notes[*]"]})  # type: ignore[arg-type]
    ns = ("users", "alice")
    store.put(ns, "other", {"text": "Bob owns the billing service"})
    for city in ("Lyon", "Porto", "Oslo"):
        store.put(ns, "k", {"text": f"Alice lives in {city}", "notes": [f"{city} is rainy", "she cycles"]})
    units = memory.units(bank="agents", threads=[thread_of(ns, "k")]).units
    assert sorted(u.text for u in units) == ["Alice lives in Oslo", "Oslo is rainy", "she cycles"]
    assert len({u.document_id for u in units}) == 1          # one document per item, its texts as chunks
    # an unchanged text is not embedded again: the same units stay
    before = {u.unit_id for u in units}
    store.put(ns, "k", {"text": "Alice lives in Oslo", "notes": ["Oslo is rainy", "she cycles"], "extra": 1})
    assert {u.unit_id for u in memory.units(bank="agents", threads=[thread_of(ns, "k")]).units} == before
    hits = store.search(ns, query="where does Alice live?", limit=5)
    assert [h.key for h in hits][:1] == ["k"] and len({h.key for h in hits}) == len(hits)
    recalled = memory.recall("where does Alice live?", bank="agents").facts
    assert not any("Lyon" in f.text or "Porto" in f.text for f in recalled)


def test_a_session_item_is_one_document_of_its_turns_and_a_search_says_which_turn_it_found(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents", index={"fields": ["turns[*].text"]}, time_field="date",  # type: ignore[arg-type]
                      recall={"reference_time": "2023-06-01T00:00:00Z"})
    ns = ("chats", "alice")
    trip = ["Alice: we are back from the trip", "Bob: how was Lisbon?", "Alice: the tram up the hill was the best part"]
    store.put(ns, "s1", {"date": "2023-05-20T10:00:00+00:00", "turns": [{"text": t} for t in trip]})
    store.put(ns, "s2", {"date": "2023-05-27T10:00:00+00:00", "turns": [{"text": "Bob: I adopted a cat named Miso"},
                                                                       {"text": "Alice: a cat! congratulations"}]})
    units = memory.units(bank="agents", threads=[thread_of(ns, "s1")]).units
    # the turns are the chunks of one document, in their order, dated by the item's time field
    assert len({u.document_id for u in units}) == 1
    assert [u.text for u in sorted(units, key=lambda u: u.unit_id)] == trip
    assert {u.at.isoformat()[:10] for u in units} == {"2023-05-20"}
    hits = store.search(ns, query="what did Alice like most in Lisbon?", limit=2)
    assert isinstance(hits[0], RcllSearchItem) and hits[0].key == "s1"
    best = hits[0].matches[0]
    assert (best.path, best.text) == ("turns[*].text.2", trip[2])
    assert best.rank == 1 and best.score == hits[0].score
    # matches of every item, merged by rank, are the search's ranking of turns (each once)
    ranks = sorted(m.rank for h in hits for m in h.matches)
    assert ranks == sorted(set(ranks)) and len(ranks) == 5
    assert [m.rank for m in hits[0].matches] == sorted(m.rank for m in hits[0].matches)
    # an update that keeps the turns keeps the units and what they map to
    store.put(ns, "s1", {"date": "2023-05-20T10:00:00+00:00", "turns": [{"text": t} for t in trip], "read": True})
    again = store.search(ns, query="what did Alice like most in Lisbon?", limit=1)
    assert again[0].matches[0].path == "turns[*].text.2"


def test_the_only_item_of_a_bank_can_be_replaced_and_deleted(memory: Memory) -> None:
    store = RcllStore(memory, bank="solo")
    store.put(("a",), "k", {"text": "one"})
    store.put(("a",), "k", {"text": "two"})
    assert memory.units(bank="solo").total == 1
    store.delete(("a",), "k")
    assert store.get(("a",), "k") is None and memory.units(bank="solo").total == 0
    assert memory.state_keys(bank="solo") == []


def test_delete_forgets_the_value_its_history_and_its_units(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents")
    ns = ("users", "alice")
    store.put(ns, "keep", {"text": "Alice likes tea"})
    store.put(ns, "k", {"text": "Alice likes coffee"})
    store.put(ns, "k", {"text": "Alice likes cocoa"})
    store.delete(ns, "k")
    assert store.get(ns, "k") is None
    assert memory.state_history(room_of(ns), "k", bank="agents") == []
    assert memory.units(bank="agents", threads=[thread_of(ns, "k")]).total == 0
    assert [h.key for h in store.search(ns, query="what does Alice drink?")] == ["keep"]


def test_namespaces_map_to_rooms_threads_and_tags_and_back(memory: Memory) -> None:
    ns = ("users", "alice:x", "memories")
    assert room_of(ns) == "users.alice:x.memories" and namespace_of(room_of(ns)) == ns
    assert thread_of(ns, "k/1") == '["users.alice:x.memories", "k/1"]'
    assert prefix_tag(()) == "langgraph" and prefix_tag(ns[:2]) == "langgraph:users.alice:x"
    store = RcllStore(memory, bank="agents")
    store.put(ns, "k/1", {"text": "Alice's deploy notes"})
    [unit] = memory.units(bank="agents", threads=[thread_of(ns, "k/1")]).units
    assert set(unit.tags) >= {"langgraph", "langgraph:users", "langgraph:users.alice:x",
                              "langgraph:users.alice:x.memories"}
    [key] = memory.state_keys(bank="agents")
    assert (key.room, key.key) == (room_of(ns), "k/1") and key.value["value"] == {"text": "Alice's deploy notes"}


def test_a_search_never_returns_another_prefix_or_another_banks_items(memory: Memory) -> None:
    mine = RcllStore(memory, bank="agents")
    theirs = RcllStore(memory, bank="others")
    mine.put(("users", "alice"), "k", {"text": "The launch code is tulip"})
    mine.put(("users", "bob"), "k", {"text": "Bob's launch code is daisy"})
    theirs.put(("users", "alice"), "k", {"text": "The launch code is orchid"})
    hits = mine.search(("users", "alice"), query="what is the launch code?", limit=10)
    assert [h.value["text"] for h in hits] == ["The launch code is tulip"]
    assert [ns for ns in theirs.list_namespaces()] == [("users", "alice")]
    assert theirs.get(("users", "bob"), "k") is None


def test_an_expired_item_is_gone_and_the_sweep_forgets_it(memory: Memory) -> None:
    clock = Clock()
    store = RcllStore(memory, bank="agents", ttl={"refresh_on_read": False}, clock=clock)
    store.put(("s",), "long", {"text": "a lasting thought"}, ttl=60)
    store.put(("s",), "short", {"text": "a passing thought"}, ttl=0.01)       # 600 ms
    assert store.get(("s",), "short") is not None
    clock.advance(0.7)
    assert store.get(("s",), "short") is None
    assert [h.key for h in store.search(("s",), query="thought")] == ["long"]
    assert [h.key for h in store.search(("s",))] == ["long"]
    assert store.sweep_ttl() == 1
    assert memory.state_history("s", "short", bank="agents") == []
    assert memory.units(bank="agents", threads=[thread_of(("s",), "short")]).total == 0


def test_a_read_refreshes_the_ttl_without_filling_the_history(memory: Memory) -> None:
    clock = Clock()
    store = RcllStore(memory, bank="agents", ttl={"default_ttl": 0.01, "refresh_on_read": True},   # 600 ms
                      clock=clock)
    store.put(("s",), "k", {"text": "kept alive by reading"})
    for _ in range(6):
        clock.advance(0.2)
        assert store.get(("s",), "k") is not None       # 1.2 s in all: alive only if refreshed
    versions = len(memory.state_history("s", "k", bank="agents"))
    assert versions == 7                                # one a read: each came after a tenth of the TTL
    clock.advance(0.8)
    assert store.get(("s",), "k", refresh_ttl=False) is None


@pytest.mark.slow      # ~5 s a case: the file (~95 s on both legs) is handed out first
@pytest.mark.parametrize("api", [Sync, Async], ids=["sync", "async"])
def test_concurrent_puts_to_one_key_are_last_write_wins_with_every_version_kept(memory: Memory, dsn: str,
                                                                              api: type[Sync]) -> None:
    # 20 writers at once, 20 rounds: none fails, the key holds one of the round's values, every
    # put is a version. The writers share four stores, each on a Memory (a pool) of its own, so
    # that they take turns in the database as well as in each store's process-local turn.
    # Unindexed, to keep it short: the scenario above races 20 indexed writers (their units
    # replaced under the key's lock) against each store.
    others = [Memory(dsn, bank="agents") for _ in range(3)]
    stores = [RcllStore(m, bank="agents", index=None) for m in [memory, *others]]
    written: list[dict[str, Any]] = []

    async def rounds() -> None:
        for r in range(20):
            values = [{"text": f"round {r}: writer {w} was here", "w": w} for w in range(20)]
            errors = await at_once(api, [(stores[w % len(stores)], v) for w, v in enumerate(values)])
            assert [e for e in errors if e is not None] == []
            written.extend(values)
            last = await api(stores[r % len(stores)]).get(("race",), "k")
            assert last is not None and last.value in values
    try:
        asyncio.run(rounds())
    finally:
        for m in others:
            m.close()
    history = memory.state_history(room_of(("race",)), "k", bank="agents")
    assert [h.version for h in history] == list(range(len(written), 0, -1))
    assert sorted((h.value["value"] for h in history), key=lambda v: v["text"]) == sorted(written, key=lambda v: v["text"])


@pytest.mark.parametrize("api", [Sync, Async], ids=["sync", "async"])
def test_a_read_that_refreshes_the_ttl_moves_the_expiry_not_updated_at(memory: Memory, api: type[Sync]) -> None:
    clock = Clock()
    store = RcllStore(memory, bank="agents", ttl={"default_ttl": 0.01, "refresh_on_read": True},   # 600 ms
                      clock=clock)

    async def steps() -> None:
        s = api(store)
        await s.put(("s",), "k", {"text": "kept alive by reading"})
        written = await s.get(("s",), "k", refresh_ttl=False)
        clock.advance(0.2)
        read = await s.get(("s",), "k")            # refreshes: a tenth of the TTL has passed
        again = await s.get(("s",), "k", refresh_ttl=False)
        assert written is not None and read is not None and again is not None
        assert again.updated_at == read.updated_at == written.updated_at
        assert again.created_at == written.created_at and again.value == written.value
        [hit] = await s.search(("s",))
        assert hit.updated_at == written.updated_at
    asyncio.run(steps())
    refreshed, first = memory.state_history("s", "k", bank="agents")
    assert refreshed.value["expires_at"] > first.value["expires_at"]
    assert refreshed.value["updated_at"] == first.value["updated_at"]


def test_forgetting_through_the_store_needs_the_forget_verb(memory: Memory) -> None:
    memory.create_bank("agents")
    writer = memory.as_caller(Caller("agent", banks=("agents",), can=frozenset({"read", "write"})))
    clock = Clock()
    mine = RcllStore(writer, bank="agents", index=INDEX, ttl={"refresh_on_read": False},  # type: ignore[arg-type]
                     clock=clock)
    mine.put(("a",), "k", {"text": "Alice likes tea"})
    mine.put(("a",), "k", {"text": "Alice likes tea", "n": 1})     # same texts: nothing to forget
    mine.put(("a",), "short", {"text": "a passing thought"}, ttl=0.001)
    refused: list[Callable[[], object]] = [
        lambda: mine.delete(("a",), "k"),
        lambda: mine.delete(("a",), "missing"),
        lambda: mine.put(("a",), "k", {"text": "Alice likes coffee"}),   # replaces the units: forgets
    ]
    clock.advance(0.1)
    refused.append(mine.sweep_ttl)
    for call in refused:
        with pytest.raises(RcllError) as e:
            call()
        assert e.value.code is Code.NOT_PERMITTED
    item = mine.get(("a",), "k")
    assert item is not None and item.value == {"text": "Alice likes tea", "n": 1}
    assert memory.state_history("a", "short", bank="agents") != []
    assert memory.units(bank="agents", threads=[thread_of(("a",), "k")]).total == 1
    # with the verb, the same calls forget
    RcllStore(memory, bank="agents", index=INDEX).delete(("a",), "k")  # type: ignore[arg-type]
    assert mine.get(("a",), "k") is None


def test_a_batch_with_a_bad_put_names_the_field_and_writes_nothing(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents")
    store.put(("a",), "k", {"text": "kept"})
    for bad, field in (({"text": "x\x00y"}, "value.text"), ({"n": float("nan")}, "value.n"), ([1, 2], "value")):
        with pytest.raises(RcllError) as e:
            store.batch([PutOp(("a",), "new", {"text": "fine"}), PutOp(("a",), "k", bad)])  # type: ignore[arg-type]
        assert e.value.field == field
    assert view(store.search(("a",))) == [(("a",), "k", {"text": "kept"}, False)]
    assert memory.units(bank="agents").total == 1


def test_the_core_package_imports_no_agent_framework() -> None:
    import subprocess
    import sys
    code = ("import sys, rcll, rcll.memory, rcll.http, rcll.cli, rcll.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'langgraph', 'langchain_core', 'llama_index', 'agents'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_time_field_dates_the_units_and_recall_options_reach_every_search(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents", index={"fields": ["text"]}, time_field="date",  # type: ignore[arg-type]
                      recall={"rerank_depth": 0, "reference_time": "2023-06-01T00:00:00Z"})
    store.put(("log",), "a", {"text": "Moved to the new office", "date": "2023-05-20T10:00:00+00:00"})
    [unit] = memory.units(bank="agents").units
    assert unit.at.isoformat().startswith("2023-05-20")
    [hit] = store.search(("log",), query="when did we move office?")
    assert hit.key == "a" and hit.score is not None
    with pytest.raises(RcllError) as e:
        store.put(("log",), "b", {"text": "x", "date": "not a date"})
    assert e.value.field == "value.date"
    with pytest.raises(RcllError) as e:
        RcllStore(memory, bank="agents", recall={"rerank_depth": -1})
    assert e.value.field == "rerank_depth"
    with pytest.raises(RcllError) as e:
        RcllStore(memory, bank="agents", recall={"tags_all": ["x"]})
    assert e.value.field == "recall.tags_all"


def test_the_same_text_scores_the_same_unless_another_text_of_its_item_comes_before_it(memory: Memory) -> None:
    # The cross-encoder's second view reads a chunk with the end of the one before it in its
    # document (the item): docs/integrations.md, "Scores".
    store = RcllStore(memory, bank="agents", index={"fields": ["notes", "text"]})  # type: ignore[arg-type]
    text = "Alice deploys the API with Argo CD"
    store.put(("a",), "one", {"text": text})
    store.put(("a",), "two", {"text": text})
    store.put(("a",), "after", {"notes": "Bob likes tea", "text": text})
    scores = {h.key: h.score for h in store.search(("a",), query="how does Alice deploy?")}
    assert scores["one"] == scores["two"] != scores["after"]
