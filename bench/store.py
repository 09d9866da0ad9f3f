"""RcllStore (the LangGraph store) against Memory: the store's own cost, and its search quality.

    .venv/bin/python -m bench.store overhead [--items 150] [--searches 60]
    .venv/bin/python -m bench.store locomo [--conversations 0,1] [--every N]

overhead: LoCoMo turns put one by one through RcllStore.put and, interleaved, the same work on
Memory by hand (Memory.retain of the text, then Memory.put_state of the value: what a put does),
then the conversation's questions through RcllStore.search(query=...) and Memory.recall with the
same request; p50/p90 of each, side by side, one run, one database.

locomo: turn-level nDCG@5 / R@10 of bench.locomo.run's default (one document per session, one
chunk per turn, recall at the default depths with the conversation's last date as reference
time), against the same turns stored through RcllStore - one namespace per conversation, one item
per turn ({"text", "date"}; index fields ["text"], time_field "date", the same reference time) -
and ranked by RcllStore.search(limit=10); between them, Memory.recall over the store's bank (the
same units, per-turn documents), which separates what the store does from what the layout does
(a document per turn, not per session: the session channel and the rerank's view of the chunk
before read other text). Reranked: ~1-3 s a question on each side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench._common import connect, fresh_database
from bench.locomo.dataset import Conversation, load
from bench.locomo.metrics import Aggregate
from bench.locomo.run import dedupe, retain, turn_text
from rcll import Memory
from rcll.integrations.langgraph import RcllStore
from rcll.recall import Direct, recall
from rcll.request import RecallRequest


def _load() -> str:
    return os.popen("uptime").read().strip()


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _timed(f: Callable[[], Any]) -> float:
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000


def overhead(args: argparse.Namespace) -> None:
    convs, questions = load()
    conv = convs[0]
    turns = conv.turns[:args.items]
    asked = [q.question for q in questions if q.conv == conv.index][:args.searches]
    ns = ("bench", "conversation0")
    with fresh_database("storebench", port=args.port) as dsn, Memory(dsn, bank="viastore") as memory:
        memory.create_bank("viamemory")
        store = RcllStore(memory, bank="viastore", index={"fields": ["text"]})
        # warm the models on both paths (not timed)
        store.put(("warm",), "w", {"text": "warm up"})
        memory.retain("warm up", bank="viamemory", thread="warm")
        lat: dict[str, list[float]] = defaultdict(list)
        for i, t in enumerate(turns):
            text, key = turn_text(t), t.dia_id
            lat["put: RcllStore.put"].append(_timed(lambda k=key, x=text: store.put(ns, k, {"text": x})))

            def by_hand(key: str = key, text: str = text) -> None:
                memory.retain(text, bank="viamemory", thread=key)
                memory.put_state("bench.conversation0", key, {"text": text}, expected_version=0, bank="viamemory")
            lat["put: Memory.retain + put_state"].append(_timed(by_hand))
            if i % 50 == 49:
                print(f"  {i + 1} puts", flush=True)
        for q in asked:
            lat["search: RcllStore.search"].append(_timed(lambda q=q: store.search(ns, query=q, limit=5)))
            request = RecallRequest(query=q, bank="viamemory", budget=None)
            lat["search: Memory.recall"].append(_timed(lambda r=request: memory.recall(r)))
    print(f"\nRcllStore against Memory: {len(turns)} LoCoMo turns put, {len(asked)} questions searched "
          f"(one run, interleaved)\n")
    print("| operation | p50 ms | p90 ms | p50 ratio store/Memory |")
    print("|---|---|---|---|")
    pairs = [("put: RcllStore.put", "put: Memory.retain + put_state"), ("search: RcllStore.search", "search: Memory.recall")]
    for store_side, memory_side in pairs:
        ratio = statistics.median(lat[store_side]) / statistics.median(lat[memory_side])
        for name in (store_side, memory_side):
            print(f"| {name} | {statistics.median(lat[name]):.1f} | {_pct(lat[name], 0.9):.1f} | "
                  f"{f'{ratio:.2f}x' if name == store_side else ''} |")
    print(f"\nload: {_load()}")


def _store_turns(memory: Memory, conv: Conversation, reference: Any) -> RcllStore:
    store = RcllStore(memory, bank=f"store{conv.index}", index={"fields": ["text"]}, time_field="date",
                      recall={"reference_time": reference})
    store.batch([])
    from langgraph.store.base import PutOp

    ns = ("locomo", f"conversation{conv.index}")
    ops = [PutOp(ns, t.dia_id, {"text": turn_text(t), "date": t.date.isoformat()}) for t in conv.turns]
    for i in range(0, len(ops), 64):
        store.batch(ops[i:i + 64])
    return store


def locomo(args: argparse.Namespace) -> None:
    convs, questions = load()
    keep = {int(c) for c in args.conversations.split(",")} if args.conversations else {c.index for c in convs}
    convs = [c for c in convs if c.index in keep]
    questions = [q for q in questions if q.conv in keep][::args.every]
    now = {c.index: max(t.date for t in c.turns) for c in convs}
    aggs = {"bench.locomo.run default (Memory, session documents)": Aggregate(),
            "Memory.recall over the store's bank (turn documents)": Aggregate(),
            "RcllStore.search (one item per turn)": Aggregate()}
    base, layout, via = list(aggs)
    with fresh_database("storelocomo", port=args.port) as dsn, connect(dsn, autocommit=True) as conn, \
            Memory(dsn) as memory:
        unit_dia = retain(conn, convs)
        stores = {}
        for c in convs:
            t = time.perf_counter()
            stores[c.index] = _store_turns(memory, c, now[c.index])
            print(f"conversation {c.index}: {len(c.turns)} turns through RcllStore in {time.perf_counter() - t:.0f} s",
                  flush=True)
        for n, q in enumerate(questions):
            live = recall(Direct(conn), RecallRequest(query=q.question, bank=f"locomo{q.conv}",
                                                      reference_time=now[q.conv]))
            aggs[base].add(q.category, dedupe([unit_dia[f.unit_id] for f in live.ranked]), q.evidence)
            same = memory.recall(RecallRequest(query=q.question, bank=f"store{q.conv}", budget=None,
                                               tags_all=[f"langgraph:locomo.conversation{q.conv}"],
                                               reference_time=now[q.conv]))
            aggs[layout].add(q.category, dedupe([json.loads(f.thread or "[]")[1] for f in same.facts]), q.evidence)
            hits = stores[q.conv].search(("locomo", f"conversation{q.conv}"), query=q.question, limit=10)
            aggs[via].add(q.category, [h.key for h in hits], q.evidence)
            if (n + 1) % 25 == 0:
                print(f"  {n + 1}/{len(questions)} questions", flush=True)
    print(f"\nLoCoMo through RcllStore, conversations {sorted(keep)}, {len(questions)} questions (categories 1-4), "
          "turn-level\n")
    print("| ranking | nDCG@5 | R@5 | R@10 | MRR |")
    print("|---|---|---|---|---|")
    for name, agg in aggs.items():
        row = agg.table()["all"]
        print(f"| {name} | {row['ndcg@5']:.3f} | {row['r@5']:.3f} | {row['r@10']:.3f} | {row['mrr']:.3f} |")
    print(f"\nload: {_load()}")


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--items", type=int, default=150)
    o.add_argument("--searches", type=int, default=60)
    o.add_argument("--port", type=int, default=55560)
    o.set_defaults(func=overhead)
    lo = sub.add_parser("locomo")
    lo.add_argument("--conversations", default="0", help="e.g. 0,1 (empty: all ten, ~1-3 s a question a side)")
    lo.add_argument("--every", type=int, default=1, help="every n-th question only (both sides the same ones)")
    lo.add_argument("--port", type=int, default=55561)
    lo.set_defaults(func=locomo)
    args = ap.parse_args()
    args.func(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
