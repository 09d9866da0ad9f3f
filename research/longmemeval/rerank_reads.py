"""How the cross-encoder should read long facts, compared on the same pools (issue 43).

    nice -n 10 .venv/bin/python -m research.longmemeval.rerank_reads --sample 5 --half a \
        --reads whole,window,window=96/3072,window=128/4096

A proxy that needs no embeddings: the S haystacks are hours of embedding on 2 cores, so each
question's bank is retained with random unit vectors and recalled without the dense and entity
channels (weights 0): the pool is the lexical, session and temporal channels' fusion. The rerank
settings (bench.longmemeval.run's --reads) are then compared on the same pool, paired - what the
cross-encoder reads, not what the first stage finds. The product's figures are
bench.longmemeval.run's, with every channel.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench._common import connect, create_database, embedded_cluster, pct, table
from bench.longmemeval.dataset import DEFAULT_PATH, load, scored, stratified
from bench.longmemeval.metrics import SESSION_METRICS, TURN_METRICS, Means
from bench.longmemeval.run import INDEXES, CountingReranker, read_settings, retain_question
from rcll import models, passages
from rcll.deadline import context_passage
from rcll.recall import Direct, recall
from rcll.request import RecallRequest as R


class RandomVectors:
    """Stands in for the embedding cache: a random unit vector per text (the dense channel is off)."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def embed(self, texts: Sequence[str]) -> Any:
        v = self.rng.standard_normal((len(texts), models.EMBED_DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=5, help="questions per type")
    ap.add_argument("--half", choices=["a", "b"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reads", default="whole,window")
    ap.add_argument("--index", default="all", choices=list(INDEXES))
    ap.add_argument("--port", type=int, default=55571)
    args = ap.parse_args()
    reads = args.reads.split(",")
    questions = scored(load(DEFAULT_PATH))
    if args.half:
        questions = [q for q in questions if q.half == args.half]
    questions = stratified(questions, args.sample, args.seed)
    session = {r: Means(SESSION_METRICS) for r in reads}
    turn = {r: Means(TURN_METRICS) for r in reads}
    stats: dict[str, dict[str, list[float]]] = {r: defaultdict(list) for r in reads}
    rr = CountingReranker(models.get_reranker())
    emb = models.get_embedder()
    window, budget = passages.WINDOW, passages.FIRST_VIEW_WORDS
    with embedded_cluster(args.port, prefix="rclmr-") as pg, connect(create_database(pg, "lmr"), autocommit=True) as conn:
        for n, q in enumerate(questions):
            bank = f"r{n}"
            unit_turn = retain_question(conn, RandomVectors(), q, bank, INDEXES[args.index])  # type: ignore[arg-type]
            request = R(query=q.question, bank=bank, reference_time=q.date, weights={"dense": 0.0, "entity": 0.0})
            for rd in reads:
                passages.WINDOW, passages.FIRST_VIEW_WORDS = read_settings(rd, window, budget)
                rr.read.clear()
                t = time.perf_counter()
                res = recall(Direct(conn), request, embedder=emb, reranker=rr)
                wall = (time.perf_counter() - t) * 1000
                views = {context_passage(f) for f in res.ranked} - {None}
                first = [p for _, ps in rr.read for p in ps if p not in views]
                second = [p for _, ps in rr.read for p in ps if p in views]
                s = stats[rd]
                s["rerank ms"].append(res.timings.rerank)
                s["full recall ms"].append(wall)
                s["pairs"].append(len(first) + len(second))
                s["tokens"].append(sum(rr.pair_lengths(q.question, first + second)) if first + second else 0)
                session[rd].add(q.type, [unit_turn[f.unit_id][0] for f in res.ranked], q.answer_sessions)
                turn[rd].add(q.type, [unit_turn[f.unit_id][1] for f in res.ranked], q.answer_turns(INDEXES[args.index]))
            passages.WINDOW, passages.FIRST_VIEW_WORDS = window, budget
            conn.execute("SELECT * FROM rcll.drop_bank(%s, %s, dry_run => false)", (bank, bank))
            print(f"  {n + 1}/{len(questions)}", flush=True)
    print(f"\n{len(questions)} questions (half {args.half or 'a+b'}, {args.sample} a type), lexical + session + "
          f"temporal pool, load average {os.getloadavg()[0]:.1f}\n")
    rows = []
    for rd in reads:
        sm, tq, s = session[rd].mean(), turn[rd].mean(), stats[rd]
        rows.append([rd, sm["recall_any@5"], sm["ndcg_any@5"], sm["ndcg_any@10"], tq["recall_any@5"], tq["recall_any@10"],
                     tq["ndcg_any@10"], f"{statistics.mean(s['pairs']):.0f}", f"{statistics.median(s['tokens']):.0f}",
                     f"{statistics.median(s['rerank ms']):.0f} / {pct(s['rerank ms'], 0.95):.0f}"])
    print(table(["reads", "session recall_any@5", "session ndcg_any@5", "session ndcg_any@10", "turn recall_any@5",
                 "turn recall_any@10", "turn ndcg_any@10", "pairs", "tokens p50", "rerank ms p50 / p95"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
