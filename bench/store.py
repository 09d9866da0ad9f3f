"""RcllStore (the LangGraph store) against Memory: the store's own cost, and its search quality.

    .venv/bin/python -m bench.store overhead [--items 150] [--searches 60]
    .venv/bin/python -m bench.store locomo [--conversations 0,1] [--every N] [--turn-items] [--dump-rankings F]

overhead: LoCoMo turns put one by one through RcllStore.put and, interleaved, the same work on
Memory by hand (Memory.retain of the text, then Memory.put_state of the value: what a put does),
then the conversation's questions through RcllStore.search(query=...) and Memory.recall with the
same request; p50/p90 of each, side by side, one run, one database.

locomo: turn-level nDCG@5 / R@5 / R@10 / MRR of bench.locomo.run's default (its retain: one
document per session, one chunk per turn, the session date as occurred_at; recall at the default
depths with the conversation's last date as reference time) against the same conversations stored
through RcllStore as a LangGraph user files a conversation: one namespace per conversation, one
item per session {"date", "turns": [{"id", "text"}]} with index fields ["turns[*].text"] and
time_field "date" (the same reference time), searched with RcllStore.search; the search's ranking
of turns is its items' matches (RcllSearchItem.matches) merged by rank. --turn-items adds one item
per turn (a document per turn: the session channel and the rerank's view of the chunk before then
read other text). Printed for conversations 0-4 (where choices are made), 5-9 (where they are
reported) and all, with how many questions got the default's top 10 exactly. Each model reads an
input once and both sides share its output (the cross-encoder's score of a pair moves with the
pairs batched beside it; this keeps batching out of the comparison), so the store's side costs
SQL time only; the default's side is reranked, ~1-3 s a question on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
from langgraph.store.base import PutOp

from bench._common import connect, fresh_database
from bench.locomo.dataset import Conversation, load
from bench.locomo.metrics import Aggregate
from bench.locomo.run import ALL, HALVES, dedupe, retain, turn_text
from rcll import Memory, models
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


class _Once:
    """A model that reads each input once: both sides of the comparison get the same model outputs
    (the cross-encoder's score of a pair moves a little with the pairs batched beside it, so without
    this two identical rankings could differ by batching alone), and the second side costs no model
    time. Everything else (chunking, SQL, fusion, the rerank's order) runs for real on each side."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.seen: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def _each(self, key: Any, inputs: list[str], run: Callable[[list[str]], Any]) -> Any:
        todo = [x for x in dict.fromkeys(inputs) if (key, x) not in self.seen]
        if todo:
            self.seen.update({(key, x): v for x, v in zip(todo, run(todo), strict=True)})
        return np.array([self.seen[(key, x)] for x in inputs], dtype=np.float32)

    def score(self, query: str, passages: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        return self._each(query, list(passages), lambda todo: self.model.score(query, todo, *args, **kwargs))

    def embed(self, texts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        return self._each("", list(texts), lambda todo: self.model.embed(todo, *args, **kwargs))

    def embed_query(self, text: str) -> Any:
        return self._each("?", [text], lambda todo: [self.model.embed_query(todo[0])])[0]


def _sessions(conv: Conversation) -> dict[int, list[Any]]:
    by: dict[int, list[Any]] = defaultdict(list)
    for t in conv.turns:
        by[t.session].append(t)
    return dict(sorted(by.items()))


def _store(memory: Memory, conv: Conversation, reference: Any, layout: str) -> RcllStore:
    """The conversation through RcllStore.batch: one item per session ({"date", "turns": [{"id",
    "text"}]}, index "turns[*].text") or one per turn ({"date", "text"}, index "text"); a turn's text
    is written as the default run writes its chunk, so that both sides index the same words."""
    fields = ["turns[*].text"] if layout == SESSIONS else ["text"]
    store = RcllStore(memory, bank=f"{layout}{conv.index}", index={"fields": fields}, time_field="date",  # type: ignore[typeddict-item]
                      recall={"reference_time": reference})
    ns = ("locomo", f"conversation{conv.index}")
    if layout == SESSIONS:
        ops = [PutOp(ns, f"session{s}", {"date": ts[0].date.isoformat(),
                                         "turns": [{"id": t.dia_id, "text": turn_text(t)} for t in ts]})
               for s, ts in _sessions(conv).items()]
    else:
        ops = [PutOp(ns, t.dia_id, {"text": turn_text(t), "date": t.date.isoformat()}) for t in conv.turns]
    for i in range(0, len(ops), 64):
        store.batch(ops[i:i + 64])
    return store


def _turns_found(hits: list[Any]) -> list[str]:
    """The search's ranking of turns: every hit's matches merged by their rank (a match's path is
    "turns[*].text.<i>", or "turns[*].text" in a session of one turn)."""
    found = []
    for h in hits:
        for m in h.matches:
            i = int(m.path.rsplit(".", 1)[1]) if m.path.count(".") > 1 else 0
            found.append((m.rank, h.value["turns"][i]["id"]))
    return dedupe([dia for _, dia in sorted(found)])


SESSIONS, TURNS = "sessions", "turns"
DEFAULT = "bench.locomo.run default (Memory.recall, session documents)"
VIA = {SESSIONS: "RcllStore.search, one item per session (turns by the matches' rank)",
       TURNS: "RcllStore.search, one item per turn"}


def locomo(args: argparse.Namespace) -> None:
    convs, questions = load()
    keep = {int(c) for c in args.conversations.split(",")} if args.conversations else {c.index for c in convs}
    convs = [c for c in convs if c.index in keep]
    questions = [q for q in questions if q.conv in keep][::args.every]
    layouts = [SESSIONS, TURNS] if args.turn_items else [SESSIONS]
    now = {c.index: max(t.date for t in c.turns) for c in convs}
    whole = ALL if len(keep) == 10 else f"conversations {sorted(keep)}"
    groups = {name: set(half) & keep for name, half in HALVES.items()} | {whole: keep}
    aggs: dict[str, dict[str, Aggregate]] = {g: defaultdict(Aggregate) for g in groups}
    same: dict[str, dict[str, int]] = {g: defaultdict(int) for g in groups}
    models._embedder = _Once(models.get_embedder())  # type: ignore[assignment]
    models._reranker = _Once(models.get_reranker())  # type: ignore[assignment]
    with fresh_database("storelocomo", port=args.port) as dsn, connect(dsn, autocommit=True) as conn, \
            Memory(dsn) as memory, open(args.dump_rankings, "w") if args.dump_rankings else nullcontext() as dump:
        unit_dia = retain(conn, convs)
        stores: dict[tuple[str, int], RcllStore] = {}
        for c in convs:
            for layout in layouts:
                t = time.perf_counter()
                stores[(layout, c.index)] = _store(memory, c, now[c.index], layout)
                print(f"conversation {c.index}: {len(c.turns)} turns through RcllStore ({layout}) in "
                      f"{time.perf_counter() - t:.0f} s", flush=True)
        for n, q in enumerate(questions):
            ranking = {DEFAULT: dedupe([unit_dia[f.unit_id] for f in recall(
                Direct(conn), RecallRequest(query=q.question, bank=f"locomo{q.conv}", reference_time=now[q.conv])).ranked])}
            ns = ("locomo", f"conversation{q.conv}")
            for layout in layouts:
                # every item recall found, so that the merged matches are its whole ranking
                hits = stores[(layout, q.conv)].search(ns, query=q.question, limit=args.limit)
                ranking[VIA[layout]] = _turns_found(hits) if layout == SESSIONS else [h.key for h in hits]
            if dump is not None:
                dump.write(json.dumps({"conv": q.conv, "qid": q.qid, "category": q.category, "evidence": q.evidence,
                                       "rankings": ranking}) + "\n")
                dump.flush()
            for g, members in groups.items():
                if q.conv in members:
                    for name, ranked in ranking.items():
                        aggs[g][name].add(q.category, ranked, q.evidence)
                        same[g][name] += ranked[:10] == ranking[DEFAULT][:10]
            if (n + 1) % 50 == 0:
                print(f"  {n + 1}/{len(questions)} questions", flush=True)
    print(f"\nLoCoMo through RcllStore, {len(questions)} questions (categories 1-4), turn-level; each model reads "
          "an input once and both sides share its answer")
    for g, members in groups.items():
        asked = sum(1 for q in questions if q.conv in members)
        if not asked or (g != whole and members == keep):
            continue
        print(f"\n{g}, {asked} questions\n")
        print("| ranking | nDCG@5 | R@5 | R@10 | MRR | top 10 = default's |")
        print("|---|---|---|---|---|---|")
        for name, agg in aggs[g].items():
            row = agg.table()["all"]
            print(f"| {name} | {row['ndcg@5']:.3f} | {row['r@5']:.3f} | {row['r@10']:.3f} | {row['mrr']:.3f} | "
                  f"{same[g][name]}/{asked} |")
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
    lo.add_argument("--conversations", default="", help="e.g. 0,1 (default: all ten)")
    lo.add_argument("--every", type=int, default=1, help="every n-th question only (both sides the same ones)")
    lo.add_argument("--turn-items", action="store_true", help="also one item per turn (a document per turn)")
    lo.add_argument("--limit", type=int, default=100, help="items a search returns")
    lo.add_argument("--dump-rankings", metavar="FILE", help="write each question's rankings (turn ids) as a JSON line")
    lo.add_argument("--port", type=int, default=55561)
    lo.set_defaults(func=locomo)
    args = ap.parse_args()
    args.func(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
