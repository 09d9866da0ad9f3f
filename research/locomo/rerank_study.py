"""Where the cross-encoder's reading pays: the scores of every view it could read, kept per
question, so rerank policies (depth, context view, reading the second view only where the first
is uncertain) are compared offline on identical scores.

    .venv/bin/python -m research.locomo.rerank_study collect --out /tmp/rerank_study.jsonl [--max-depth 40]
    .venv/bin/python -m research.locomo.rerank_study compare --scores /tmp/rerank_study.jsonl \
        [--detail "rerank@30 + context 10"]

collect: retains LoCoMo as bench.locomo.run does (chunk mode, one bank per conversation), and for
every question keeps the fused pool (top 100 turn ids), the first-view logits of its top
--max-depth (one call, as the live recall reads them; 40, the default depth, batches exactly as
the default recall does), and the context-view logits of every fact any policy below could read
twice (the top 20 by first view of each depth's prefix), with the tokens each pair costs (rows x
longest pair of a batch, as rcll.deadline counts them). --trims 12,24 also scores the context view
with the chunk before cut to its last N words. Questions go round-robin over the conversations, so
a run stopped early (the file is flushed per question) is a sample of all ten; --every N samples.

compare: ranks every policy from those scores exactly as rcll.deadline.rerank_within orders them (the
facts read twice by the mean of both logits, then the rest of those read once, then the unread in
fused order) and prints nDCG@5 / R@10 for conversations 0-4 (choose), 5-9 (report) and all ten,
with the mean tokens read per question relative to today's default (rerank@40 + context view 15).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench._common import connect, create_database, embedded_cluster
from bench.locomo.dataset import load
from bench.locomo.metrics import Aggregate
from bench.locomo.run import ALL, HALVES, dedupe, retain
from rcll import models
from rcll.deadline import call_tokens, context_passage
from rcll.recall import candidates, entity_query
from rcll.request import RecallRequest as R

DEPTHS = (20, 25, 30, 35, 40, 50, 60)
TWICE = 20


def trimmed(context: str, words: int) -> str:
    """The chunk before a fact cut to its last `words` words (those nearest the fact)."""
    return " ".join(context.split()[-words:])


def twice_candidates(first: Sequence[float]) -> set[int]:
    """Pool positions any policy here may read twice: the top TWICE by first view of each depth's prefix."""
    out: set[int] = set()
    for d in DEPTHS:
        if d <= len(first):
            out.update(sorted(range(d), key=lambda i: -first[i])[:TWICE])
    out.update(sorted(range(len(first)), key=lambda i: -first[i])[:TWICE])
    return out


def collect(args: argparse.Namespace) -> None:
    convs, questions = load()
    now = {c.index: max(t.date for t in c.turns) for c in convs}
    with embedded_cluster(args.port, prefix="rclls-") as pg, \
            connect(create_database(pg, "locomo"), autocommit=True) as conn, open(args.out, "w") as out:
        unit_dia = retain(conn, convs)
        emb, rr = models.get_embedder(), models.get_reranker()
        # Round-robin over the conversations (each one's questions in order, every --every-th), so
        # that a run stopped early still holds a sample of all ten, both halves alike.
        by_conv: dict[int, list[Any]] = {}
        for q in questions[: args.limit or None]:
            by_conv.setdefault(q.conv, []).append(q)
        lists = [qs[:: args.every] for _, qs in sorted(by_conv.items())]
        order = [qs[i] for i in range(max(map(len, lists), default=0)) for qs in lists if i < len(qs)]
        for n, q in enumerate(order):
            bank = f"locomo{q.conv}"
            rest = entity_query(conn, R(query=q.question, bank=bank))
            qe = emb.embed_query(q.question)
            qe_entity = emb.embed_query(rest) if rest is not None and rest != q.question else None
            pool = candidates(conn, R(query=q.question, bank=bank, reference_time=now[q.conv]), query_embedding=qe, entity_query_embedding=qe_entity, limit=100)
            head = pool[: args.max_depth]
            texts = [f.text for f in head]
            t = time.perf_counter()
            first = [float(x) for x in rr.score(q.question, texts)]
            first_ms = (time.perf_counter() - t) * 1000
            ctx_idx = sorted(i for i in twice_candidates(first) if context_passage(head[i]) is not None)
            ctx_texts = [context_passage(head[i]) or "" for i in ctx_idx]
            t = time.perf_counter()
            ctx = [float(x) for x in rr.score(q.question, ctx_texts)] if ctx_texts else []
            ctx_ms = (time.perf_counter() - t) * 1000
            trims: dict[str, Any] = {}
            for w in args.trims:
                cut = [f"{trimmed(head[i].context or '', w)} / {head[i].text}" for i in ctx_idx]
                trims[f"ctx_t{w}"] = dict(zip(map(str, ctx_idx), [float(x) for x in rr.score(q.question, cut)] if cut else [],
                                              strict=True))
                trims[f"ctx_t{w}_len"] = dict(zip(map(str, ctx_idx), rr.pair_lengths(q.question, cut), strict=True))
            out.write(json.dumps({
                "conv": q.conv, "qid": q.qid, "category": q.category, "evidence": sorted(q.evidence),
                "pool": [unit_dia[f.unit_id] for f in pool],
                "first": first, "first_len": rr.pair_lengths(q.question, texts),
                "ctx": dict(zip(map(str, ctx_idx), ctx, strict=True)),
                "ctx_len": dict(zip(map(str, ctx_idx), rr.pair_lengths(q.question, ctx_texts), strict=True)),
                "ms": [first_ms, ctx_ms],
                "tokens": [call_tokens(rr.pair_lengths(q.question, texts)), call_tokens(rr.pair_lengths(q.question, ctx_texts))],
            } | trims) + "\n")
            out.flush()
            if (n + 1) % 100 == 0:
                print(f"  {n + 1} questions", flush=True)


# A policy: (record) -> (depth, how many of the first view's top are read twice).
Policy = Callable[[dict[str, Any]], tuple[int, ...]]


def ranked(rec: dict[str, Any], depth: int, twice: int, prior: float = 0.0) -> tuple[list[str], int]:
    """The turn ranking rcll.deadline.rerank_within gives, and the tokens it read. prior > 0: the facts
    read twice are still the first view's top `twice`, but both groups are ordered by their logit
    less prior * log2(2 + the fact's fused position)."""
    pool, first = rec["pool"], rec["first"]
    depth = min(depth, len(first))

    def pen(i: int) -> float:
        return prior * math.log2(2 + i)

    head = sorted(range(depth), key=lambda i: -first[i])
    top = head[:twice]
    missing = [i for i in top if str(i) not in rec["ctx"] and i not in rec["_no_ctx"]]
    if missing:
        raise SystemExit(f"question {rec['qid']}: no context score for pool position {missing[0]}; collect deeper")
    score = {i: (first[i] + rec["ctx"][str(i)]) / 2 if str(i) in rec["ctx"] else first[i] for i in top}
    order = (sorted(top, key=lambda i: -(score[i] - pen(i))) + sorted(head[twice:], key=lambda i: -(first[i] - pen(i)))
             + list(range(depth, len(pool))))
    lengths = [rec["first_len"][i] for i in range(depth)]
    ctx_lengths = [rec["ctx_len"][str(i)] for i in top if str(i) in rec["ctx_len"]]
    return dedupe([pool[i] for i in order]), call_tokens(lengths) + call_tokens(ctx_lengths)


def margin(rec: dict[str, Any], depth: int) -> float:
    top = sorted(rec["first"][:depth], reverse=True)
    return top[0] - top[1] if len(top) > 1 else float("inf")


def compare(args: argparse.Namespace) -> None:
    with open(args.scores) as f:
        recs = [json.loads(line) for line in f]
    for rec in recs:
        # facts collected as "twice" candidates without a context score had no chunk before them
        rec["_no_ctx"] = {i for i in twice_candidates(rec["first"]) if str(i) not in rec["ctx"]}
    deepest = min(len(r["first"]) for r in recs)      # what collect read (--max-depth)
    depths = [d for d in DEPTHS if d <= deepest]
    policies: dict[str, Policy] = {}
    for d in depths:
        for m in (0, 5, 10, 15, 20):
            policies[f"rerank@{d} + context {m}"] = (lambda r, d=d, m=m: (d, m))
    for d in (25, 30, 35, 40):
        if d not in depths:
            continue
        for th in (1.0, 2.0, 3.0):
            for m0 in (0, 5, 10):
                policies[f"rerank@{d} + context 15 if margin < {th} else {m0}"] = (
                    lambda r, d=d, th=th, m0=m0: (d, 15 if margin(r, d) < th else m0))
    for lo in (0.0, 2.0, 4.0):
        for d0 in (20, 25, 30):
            if deepest < 40:
                continue
            # read deeper only where the first d0 hold nothing the cross-encoder is sure of
            policies[f"rerank@{d0}, @40 if top logit < {lo}, context 15"] = (
                lambda r, d0=d0, lo=lo: (40 if max(r["first"][:d0]) < lo else d0, 15))
    groups = {name: set(h) for name, h in HALVES.items()} | {ALL: set(range(10))}
    base_tokens = statistics.mean(ranked(r, 40, 15)[1] for r in recs)
    print(f"{len(recs)} questions; default (rerank@40 + context 15) reads {base_tokens:.0f} tokens a question\n")
    print("| policy | " + " | ".join(f"{g} nDCG@5 / R@10" for g in groups) + " | tokens vs default |")
    print("|---|" + "---|" * len(groups) + "---|")
    kept: dict[str, dict[str, Aggregate]] = {}
    for name, policy in policies.items():
        aggs = {g: Aggregate() for g in groups}
        tokens: list[int] = []
        for rec in recs:
            ids, tok = ranked(rec, *policy(rec))
            tokens.append(tok)
            for g, members in groups.items():
                if rec["conv"] in members:
                    aggs[g].add(rec["category"], ids, rec["evidence"])
        cells = []
        for g in groups:
            a = aggs[g].table().get("all", {"ndcg@5": float("nan"), "r@10": float("nan")})
            cells.append(f"{a['ndcg@5']:.3f} / {a['r@10']:.3f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {statistics.mean(tokens) / base_tokens:.2f} |")
        kept[name] = aggs
    for name in args.detail or []:
        if name not in kept:
            raise SystemExit(f"--detail: no policy named {name!r}")
        print(f"\n{name}, per category (nDCG@5 / R@10), and its difference from the default")
        print("| category | " + " | ".join(groups) + " |")
        print("|---|" + "---|" * len(groups))
        base = {g: kept["rerank@40 + context 15"][g].table() for g in groups}
        mine = {g: kept[name][g].table() for g in groups}
        for cat in sorted({c for g in groups for c in mine[g]}, key=lambda c: (c == "all", c)):
            cells = []
            for g in groups:
                a, b = mine[g].get(cat), base[g].get(cat)
                cells.append("" if a is None or b is None else
                             f"{a['ndcg@5']:.3f} / {a['r@10']:.3f} ({a['ndcg@5'] - b['ndcg@5']:+.3f} / {a['r@10'] - b['r@10']:+.3f}, n {int(a['n'])})")
            print(f"| {cat} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--max-depth", type=int, default=40)
    c.add_argument("--port", type=int, default=55560)
    c.add_argument("--limit", type=int, default=0, help="questions (0 = all)")
    c.add_argument("--every", type=int, default=1, help="every Nth question only (a sample across all ten)")
    c.add_argument("--trims", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   help="also read the context view with the chunk before cut to its last N words (comma list)")
    p = sub.add_parser("compare")
    p.add_argument("--scores", required=True)
    p.add_argument("--detail", action="append", help="also print this policy per category against the default (repeatable)")
    args = ap.parse_args(argv)
    collect(args) if args.what == "collect" else compare(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
