"""RcllStore is a LangGraph BaseStore that behaves as LangGraph documents its stores.

LangGraph's packages ship no contract tests for stores: langgraph-checkpoint-conformance (PyPI
0.0.2) covers checkpointers only (put, put_writes, get_tuple, list, delete_thread, delete_for_runs,
copy_thread, prune, delta channel history), and the store tests of its repository
(libs/checkpoint/tests/test_store.py for InMemoryStore, libs/checkpoint-postgres and
libs/checkpoint-sqlite's tests/test_store.py and test_async_store.py) are each implementation's own
fixtures and are not in any wheel (the wheels include only langgraph/). So the documented
behaviour of its reference store, InMemoryStore, is the contract: one scenario body runs against
InMemoryStore and RcllStore, through the sync API and the async one, and the answers must be the
same (differential). InMemoryStore embeds with RCLL's own embedder, so that "the best match" means
the same to both. Then what RcllStore promises beyond it: versions kept as history, units replaced
and never duplicated, TTL, the namespace mapping, a session item's turns as one document.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp, SearchItem
from langgraph.store.memory import InMemoryStore

from rcll import Memory
from rcll.errors import RcllError
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


def view(x: Any) -> Any:
    """What both stores must agree on: namespace, key, value, and whether a score was given."""
    if isinstance(x, SearchItem):
        return (x.namespace, x.key, x.value, x.score is not None)
    if isinstance(x, Item):
        return (x.namespace, x.key, x.value)
    if isinstance(x, list):
        return [view(i) for i in x]
    return x


def unordered(hits: list[SearchItem]) -> list[Any]:
    """Results whose order is the ranker's own (none of them matches the query): compared as a set."""
    return sorted(view(hits), key=repr)


async def scenario(s: Sync) -> list[Any]:
    """LangGraph's documented store behaviour, step by step; returns every answer."""
    out: list[Any] = []
    await s.put(("users", "alice", "memories"), "m1", {"text": "Alice deploys the API with Argo CD", "n": 1})
    await s.put(("users", "alice", "memories"), "m2", {"text": "Alice is allergic to peanuts", "n": 2,
                                                       "kind": {"topic": "health"}})
    await s.put(("users", "alice", "prefs"), "theme", {"text": "Alice prefers a dark theme", "n": 3})
    await s.put(("users", "bob", "memories"), "m1", {"text": "Bob plays the cello in an orchestra", "n": 4})
    await s.put(("users", "bob", "memories"), "raw", {"n": 5, "note": "not indexed"}, index=False)
    out.append(await s.get(("users", "alice", "memories"), "m1"))
    out.append(await s.get(("users", "alice", "memories"), "missing"))
    # an update replaces the value (the key keeps its place)
    await s.put(("users", "alice", "memories"), "m1", {"text": "Alice deploys the API with Flux now", "n": 6})
    out.append(await s.get(("users", "alice", "memories"), "m1"))
    # listing: prefix, suffix, wildcards, depth, limit and offset
    out.append(await s.list_namespaces())
    out.append(await s.list_namespaces(prefix=("users", "alice")))
    out.append(await s.list_namespaces(suffix=("memories",)))
    out.append(await s.list_namespaces(prefix=("users", "*", "memories")))
    out.append(await s.list_namespaces(max_depth=2))
    out.append(await s.list_namespaces(limit=2, offset=1))
    out.append(await s.list_namespaces(prefix=("nobody",)))
    # search without a query: everything under the prefix, unscored, filtered, paged
    out.append(await s.search(("users",)))
    out.append(await s.search(("users", "alice")))
    out.append(await s.search(("users",), filter={"n": 4}))
    out.append(await s.search(("users",), filter={"n": {"$gte": 3}}))
    out.append(await s.search(("users",), filter={"n": {"$ne": 2}, "note": "not indexed"}))
    out.append(await s.search(("users",), filter={"kind": {"topic": "health"}}))
    out.append(await s.search(("users",), limit=2, offset=1))
    out.append(await s.search(("users", "dave")))
    # search with a query: the best match first, scored; inside the prefix only
    hit = await s.search(("users", "alice"), query="what is Alice allergic to?", limit=1)
    out.append(hit)
    hit = await s.search(("users",), query="which instrument does Bob play?", limit=1)
    out.append(hit)
    hit = await s.search(("users", "bob"), query="peanut allergy", limit=1)
    out.append(hit)
    hit = await s.search(("users", "alice"), query="how does Alice deploy?", filter={"n": 6}, limit=3)
    out.append(hit)
    # the not-indexed item fills a short page, unscored
    page = await s.search(("users", "bob"), query="cello", limit=5)
    out.append(page)
    # delete: the item goes (deleting a missing key is no error)
    await s.delete(("users", "alice", "prefs"), "theme")
    await s.delete(("users", "alice", "prefs"), "theme")
    out.append(await s.get(("users", "alice", "prefs"), "theme"))
    out.append(unordered(await s.search(("users", "alice"), query="dark theme", limit=5)))
    # a batch reads the store as it was before the batch; the last put of a key wins
    out.append(await s.batch([PutOp(("batch",), "k", {"text": "first"}), GetOp(("batch",), "k"),
                              PutOp(("batch",), "k", {"text": "second"})]))
    out.append(await s.get(("batch",), "k"))
    # (last: a read of an unknown namespace makes InMemoryStore list it from then on, a quirk of
    # its defaultdict that no database store shares; RcllStore lists namespaces that hold items)
    out.append(await s.get(("users", "carol"), "m1"))
    # namespaces are checked as LangGraph checks them
    for bad in [(), ("a.b",), ("langgraph", "x"), ("",)]:
        try:
            await s.put(bad, "k", {"text": "x"})
            out.append("accepted")
        except InvalidNamespaceError as e:
            out.append(("refused", type(e).__name__))
    return out


def stores(memory: Memory) -> tuple[InMemoryStore, RcllStore]:
    return (InMemoryStore(index={"dims": 384, "embed": _embed, **INDEX}),  # type: ignore[typeddict-item]
            RcllStore(memory, bank="agents", index=INDEX))  # type: ignore[arg-type]


@pytest.mark.parametrize("api", [Sync, Async], ids=["sync", "async"])
def test_store_answers_as_langgraphs_in_memory_store(memory: Memory, api: type[Sync]) -> None:
    reference, store = stores(memory)
    expected = view(asyncio.run(scenario(api(reference))))
    got = view(asyncio.run(scenario(api(store))))
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"step {i}: RcllStore {g!r} != InMemoryStore {e!r}"


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
    store = RcllStore(memory, bank="agents", ttl={"refresh_on_read": False})
    store.put(("s",), "long", {"text": "a lasting thought"}, ttl=60)
    store.put(("s",), "short", {"text": "a passing thought"}, ttl=0.01)       # 600 ms
    assert store.get(("s",), "short") is not None
    time.sleep(0.7)
    assert store.get(("s",), "short") is None
    assert [h.key for h in store.search(("s",), query="thought")] == ["long"]
    assert [h.key for h in store.search(("s",))] == ["long"]
    assert store.sweep_ttl() == 1
    assert memory.state_history("s", "short", bank="agents") == []
    assert memory.units(bank="agents", threads=[thread_of(("s",), "short")]).total == 0


def test_a_read_refreshes_the_ttl_without_filling_the_history(memory: Memory) -> None:
    store = RcllStore(memory, bank="agents", ttl={"default_ttl": 0.01, "refresh_on_read": True})   # 600 ms
    store.put(("s",), "k", {"text": "kept alive by reading"})
    for _ in range(6):
        time.sleep(0.2)
        assert store.get(("s",), "k") is not None       # 1.2 s in all: alive only if refreshed
    versions = len(memory.state_history("s", "k", bank="agents"))
    assert 2 <= versions <= 8
    time.sleep(0.8)
    assert store.get(("s",), "k", refresh_ttl=False) is None


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
