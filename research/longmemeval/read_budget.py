"""How much the cross-encoder must read of a LongMemEval recall: reading rules compared on the
product's own pools (every channel, real embeddings), paired (issue 43).

    nice -n 5 .venv/bin/python -m research.longmemeval.read_budget save --cached \
        --ids research/longmemeval/cached-51.txt --port 55570 POOLS
    nice -n 5 .venv/bin/python -m research.longmemeval.read_budget read POOLS --half a \
        --reads window,window=96/2048,...
    nice -n 5 .venv/bin/python -m research.longmemeval.read_budget speed POOLS --reads window,window=64/1536

`save` retains each chosen question's haystack (every turn, the embedding cache's vectors), runs
the recall's first stage once (rcll.recall.recall with rerank_depth 0: the fused pool, each fact
with the chunk before it) and pickles the pools to POOLS (~8 MB for 51 questions; not committed). `read` runs
the recall's rerank (rcll.deadline.rerank_within, default depths, no deadline) over each saved
pool once per reading rule, the rules' order turning question by question so the machine's drift
falls on all alike, and scores the rankings as bench.longmemeval.run does. The ranking a recall
returns is the rerank's (the budget cut only chooses what is returned of it), so a pool and a rule
give the ranking bench.longmemeval.run scores for that rule (the same rerank on the same pool; not
cross-checked against a bench run) without a retain and a SQL phase per rule.

Reads, one row each (rcll.passages' knobs; the rest as the product's):
  window            the product's (WINDOW words, FIRST_VIEW_WORDS)
  window=W/B        windows of at most W words, the fused prefix whose pairs fit B words
  ...+noctx         no context view (the top read again with the chunk before them)
`speed` replays the cross-encoder calls each rule makes on the first pools and times them (wall and
CPU per token). Printed per rule: the metrics, pairs and tokens (the cross-encoder's own, padding excluded) of the
first and the context view, p50 / p95, and the rerank's wall milliseconds with the load average.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench._common import connect, create_database, embedded_cluster, pct, table
from bench.longmemeval.dataset import DEFAULT_PATH, load, scored
from bench.longmemeval.embeddings import DEFAULT_DIR, CachedEmbedder
from bench.longmemeval.metrics import SESSION_METRICS, TURN_METRICS, Means, score
from bench.longmemeval.run import INDEXES, CountingReranker, retain_question
from rcll import models, passages
from rcll.deadline import call_tokens, context_passage, rerank_within
from rcll.recall import Direct, recall
from rcll.request import RecallRequest as R
from rcll.results import Fact


@dataclass
class Pool:
    id: str
    type: str
    half: str
    query: str
    facts: list[Fact]
    unit_turn: dict[int, tuple[str, str]]
    answer_sessions: frozenset[str]
    answer_turns: frozenset[str]


def save(args: argparse.Namespace) -> int:
    questions = scored(load(args.data))
    if args.half:
        questions = [q for q in questions if q.half == args.half]
    cache = CachedEmbedder(Path(args.cache_dir) / "longmemeval.bin")
    if args.ids:
        wanted = set(Path(args.ids).read_text().split())
        questions = [q for q in questions if q.id in wanted]
    if args.cached:
        questions = [q for q in questions if not cache.missing([t.text for s in q.sessions for t in s.turns])]
    if args.limit:
        questions = questions[: args.limit]
    print(f"{len(questions)} questions", flush=True)
    pools = []
    with embedded_cluster(args.port, prefix="rclmb-") as pg, connect(create_database(pg, "lmb"), autocommit=True) as conn:
        for n, q in enumerate(questions):
            bank = f"b{n}"
            unit_turn = retain_question(conn, cache, q, bank, INDEXES["all"])
            res = recall(Direct(conn), R(query=q.question, bank=bank, reference_time=q.date, rerank_depth=0),
                         embedder=cache.embedder)
            pools.append(Pool(q.id, q.type, q.half, q.question, list(res.ranked), unit_turn, q.answer_sessions,
                              q.answer_turns(INDEXES["all"])))
            conn.execute("SELECT * FROM rcll.drop_bank(%s, %s, dry_run => false)", (bank, bank))
            print(f"  {n + 1}/{len(questions)} {q.id} half {q.half}", flush=True)
    with open(args.pools, "wb") as f:
        pickle.dump(pools, f)
    return 0


def apply(rule: str, window: int, budget: int) -> tuple[None, bool]:
    """Set rcll.passages for a --reads entry; returns whether the context view runs."""
    head, *opts = rule.split("+")
    passages.WINDOW, passages.FIRST_VIEW_WORDS = window, budget
    if head.startswith("window="):
        w, b = head.split("=")[1].split("/")
        passages.WINDOW, passages.FIRST_VIEW_WORDS = int(w), int(b)
    return None, "noctx" not in opts


def read(args: argparse.Namespace) -> int:
    with open(args.pools, "rb") as f:
        pools: list[Pool] = pickle.load(f)
    if args.half:
        pools = [p for p in pools if p.half == args.half]
    if args.limit:
        pools = pools[: args.limit]
    rules = [r.strip() for r in args.reads.split(",") if r.strip()]
    window, budget = passages.WINDOW, passages.FIRST_VIEW_WORDS
    rr = CountingReranker(models.get_reranker())
    session = {r: Means(SESSION_METRICS) for r in rules}
    turn = {r: Means(TURN_METRICS) for r in rules}
    stats: dict[str, dict[str, list[float]]] = {r: defaultdict(list) for r in rules}
    loads = []
    per: dict[tuple[str, str], tuple[float, ...]] = {}
    rerank_within(pools[0].query, pools[0].facts, rr.reranker, depth=40, context_depth=15)   # warm up
    for n, p in enumerate(pools):
        for rule in rules[n % len(rules):] + rules[: n % len(rules)]:
            _, on = apply(rule, window, budget)
            rr.read.clear()
            t = time.perf_counter()
            ranked, depth = rerank_within(p.query, p.facts, rr, depth=args.depth,
                                          context_depth=args.context_depth if on else 0)
            ms = (time.perf_counter() - t) * 1000
            passages.WINDOW, passages.FIRST_VIEW_WORDS = window, budget
            views = {context_passage(f) for f in p.facts} - {None}
            first = [x for _, xs in rr.read for x in xs if x not in views]
            second = [x for _, xs in rr.read for x in xs if x in views]
            s = stats[rule]
            s["pairs, first"].append(len(first))
            s["pairs, context"].append(len(second))
            s["tokens, first"].append(sum(rr.pair_lengths(p.query, first)) if first else 0)
            s["tokens, context"].append(sum(rr.pair_lengths(p.query, second)) if second else 0)
            s["tokens"].append(s["tokens, first"][-1] + s["tokens, context"][-1])
            s["rerank ms"].append(ms)
            s["ms per token"].append(ms / max(s["tokens"][-1], 1))
            sessions = [p.unit_turn[f.unit_id][0] for f in ranked]
            turns = [p.unit_turn[f.unit_id][1] for f in ranked]
            session[rule].add(p.type, sessions, p.answer_sessions)
            turn[rule].add(p.type, turns, p.answer_turns)
            ss = score(sessions, p.answer_sessions, ("recall_any@5", "ndcg_any@10"))
            ts = score(turns, p.answer_turns, ("recall_any@10", "ndcg_any@10"))
            per[(rule, p.id)] = (*ss.values(), *ts.values())
        loads.append(os.getloadavg()[0])
        print(f"  {n + 1}/{len(pools)}", flush=True)
    halves = "".join(sorted({p.half for p in pools}))
    print(f"\n{len(pools)} questions (half {halves}), the product's pools, depth {args.depth} + {args.context_depth}, "
          f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores\n")
    rows = []
    for r in rules:
        sm, tq, s = session[r].mean(), turn[r].mean(), stats[r]
        rows.append([r, sm["recall_any@5"], sm["ndcg_any@5"], sm["ndcg_any@10"], tq["recall_any@5"], tq["recall_any@10"],
                     tq["ndcg_any@10"],
                     f"{statistics.median(s['pairs, first']):.0f} + {statistics.median(s['pairs, context']):.0f}",
                     f"{statistics.median(s['tokens, first']):.0f} + {statistics.median(s['tokens, context']):.0f}",
                     f"{statistics.median(s['tokens']):.0f} / {pct(s['tokens'], 0.95):.0f}",
                     f"{statistics.median(s['rerank ms']):.0f} / {pct(s['rerank ms'], 0.95):.0f}",
                     f"{statistics.median(s['ms per token']) * 1000:.0f}"])
    print(table(["reads", "session recall_any@5", "session ndcg_any@5", "session ndcg_any@10", "turn recall_any@5",
                 "turn recall_any@10", "turn ndcg_any@10", "pairs p50 (first + context)", "tokens p50 (first + context)",
                 "tokens p50 / p95", "rerank ms p50 / p95", "us per token p50"], rows))
    if args.per_question:
        print(f"\nquestions any rule scores otherwise than {rules[0]} (session recall_any@5, ndcg_any@10; "
              "turn recall_any@10, ndcg_any@10)\n")
        for p in pools:
            got = {r: per[(r, p.id)] for r in rules}
            if any(got[r] != got[rules[0]] for r in rules):
                print(f"{p.id} {p.type}: " + "; ".join(f"{r} " + " ".join(f"{v:.2f}" for v in got[r]) for r in rules))
    return 0


def speed(args: argparse.Namespace) -> int:
    """The cross-encoder's wall and CPU time per token on the calls each rule makes (captured once,
    then replayed --repeat times, the rules' order turning), on the first --limit pools."""
    with open(args.pools, "rb") as f:
        pools: list[Pool] = pickle.load(f)[: args.limit or None]
    rules = [r.strip() for r in args.reads.split(",") if r.strip()]
    window, budget = passages.WINDOW, passages.FIRST_VIEW_WORDS
    rr = CountingReranker(models.get_reranker())
    calls: dict[str, list[tuple[str, list[str]]]] = {}
    for rule in rules:
        calls[rule] = []
        for p in pools:
            _, on = apply(rule, window, budget)
            rr.read.clear()
            rerank_within(p.query, p.facts, rr, depth=args.depth, context_depth=args.context_depth if on else 0)
            calls[rule] += rr.read
        passages.WINDOW, passages.FIRST_VIEW_WORDS = window, budget
    tokens = {r: sum(sum(rr.pair_lengths(q, ps)) for q, ps in calls[r]) for r in rules}
    padded = {r: sum(call_tokens(rr.pair_lengths(q, ps)) for q, ps in calls[r]) for r in rules}
    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    loads = []
    for k in range(args.repeat):
        for rule in rules[k % len(rules):] + rules[: k % len(rules)]:
            t, c = time.perf_counter(), time.process_time()
            for q, ps in calls[rule]:
                rr.reranker.score(q, ps)
            wall[rule].append(time.perf_counter() - t)
            cpu[rule].append(time.process_time() - c)
        loads.append(os.getloadavg()[0])
    print(f"\ncross-encoder on {len(pools)} recalls' reads, fastest of {args.repeat}, load average "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores\n")
    print(table(["reads", "tokens a recall", "padded tokens a recall", "wall ms a recall (fastest)",
                 "us a token (wall)", "CPU ms a recall (least)", "us a token (CPU)"],
                [[r, tokens[r] / len(pools), padded[r] / len(pools), min(wall[r]) * 1000 / len(pools),
                  min(wall[r]) * 1e6 / tokens[r], min(cpu[r]) * 1000 / len(pools), min(cpu[r]) * 1e6 / tokens[r]]
                 for r in rules]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("pools")
    s.add_argument("--data", default=str(DEFAULT_PATH))
    s.add_argument("--half", choices=["a", "b"])
    s.add_argument("--cached", action="store_true", help="only questions whose haystacks the embedding cache holds whole")
    s.add_argument("--ids", metavar="FILE", help="only these question ids (one a line)")
    s.add_argument("--cache-dir", default=str(DEFAULT_DIR))
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--port", type=int, default=55570)
    r = sub.add_parser("read")
    r.add_argument("pools")
    r.add_argument("--half", choices=["a", "b"])
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--reads", default="window")
    r.add_argument("--depth", type=int, default=R(query="q", bank="b").rerank_depth)
    r.add_argument("--context-depth", type=int, default=R(query="q", bank="b").context_depth)
    r.add_argument("--per-question", action="store_true")
    sp = sub.add_parser("speed")
    sp.add_argument("pools")
    sp.add_argument("--limit", type=int, default=4)
    sp.add_argument("--repeat", type=int, default=5)
    sp.add_argument("--reads", default="window")
    sp.add_argument("--depth", type=int, default=R(query="q", bank="b").rerank_depth)
    sp.add_argument("--context-depth", type=int, default=R(query="q", bank="b").context_depth)
    args = ap.parse_args()
    return {"save": save, "read": read, "speed": speed}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
