"""LongMemEval retrieval through RCLL: the benchmark's own session- and turn-level metrics, per
question type, and where recall's time goes on long texts.

    .venv/bin/python -m bench.longmemeval.run [--sample N] [--half a|b] [--cached] [--index all,user]
        [--rerank-depth D] [--context-depth M] [--deadline-ms none,MS] [--cache-dir DIR] [--embed-only] [--ids FILE]

One bank per question: its haystack (S: 38-58 sessions), one document per session, one chunk per
turn written "<role>: <content>" (user and assistant turns alike), the session date as
occurred_at; the question date is the reference time. Each question is recalled once through the
whole recall a server runs (rcll.recall.recall: query embedding, recall_candidates, the
cross-encoder, the budget cut; default settings unless told), and its ranking scored as
LongMemEval scores retrieval (bench/longmemeval/metrics.py): session level (turns mapped to their
session, deduplicated in rank order; gold = answer_session_ids) recall_any@5/10, recall_all@5/10,
ndcg_any@5/10; turn level (gold = the has_answer turns) recall_any@5/10/50, recall_all@10,
ndcg_any@10. Abstention questions are left out, as the benchmark does. --index user adds a
second bank per question with only the user turns retained, the protocol LongMemEval's published
retrieval figures use (a session is its user turns).

Selection discipline: a question is in half a or b by a hash of its id (dataset.Question.half);
choose on a, report on b and on all. --sample N takes N questions of each type (seed --seed).

Embeddings are cached by content hash (bench/longmemeval/embeddings.py, under --cache-dir,
default ~/.cache/rcll-bench): the S set is ~190k distinct turns, hours of embedding on 2 cores
once; --embed-only fills the cache for the chosen questions and exits. Latency per phase is the
recall's own timings (rcll.results.Timings), measured wall clock on whatever else the machine runs:
report the load average printed with the table. "pairs" and "tokens" are what the cross-encoder
read: (query, passage) pairs, and their tokens as it cut them (padding excluded). The budget cut
before rcll.budget.cut_counting (every candidate counted, then cut) is timed on the same ranking
right after each recall, and must keep the same facts; "full recall, cut before" is the recall
with that cut instead. Each --deadline-ms value is a row of its own, on the same banks.
LongMemEval: Wu et al., ICLR 2025, MIT (see data/longmemeval/ATTRIBUTION.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import connect, create_database, embedded_cluster, pct, retain_chunks, table
from bench.longmemeval.dataset import DEFAULT_PATH, TYPES, Question, load, scored, stratified
from bench.longmemeval.embeddings import DEFAULT_DIR, CachedEmbedder
from bench.longmemeval.metrics import SESSION_METRICS, TURN_METRICS, Means
from rcll import models, passages
from rcll.budget import cut_to_budget
from rcll.deadline import context_passage
from rcll.recall import Direct, recall
from rcll.request import RecallRequest as R

INDEXES = {"all": ("user", "assistant"), "user": ("user",)}
READ_NAMES = {"window": "", "whole": ", long facts read whole (before rcll.passages)"}
INDEX_NAMES = {"all": "every turn indexed (RCLL's retain)", "user": "user turns only (LongMemEval's protocol)"}


Row = tuple[str, str, int | None]      # index, reads, deadline_ms
HALVES = {"a": "half a (choose)", "b": "half b (report)"}


def row_name(row: Row) -> str:
    return (INDEX_NAMES[row[0]] + READ_NAMES.get(row[1], f", {row[1]}")
            + ("" if row[2] is None else f", deadline {row[2]} ms"))


def read_settings(reads: str, window: int, budget: int) -> tuple[int, int]:
    """rcll.passages' WINDOW and FIRST_VIEW_WORDS (and SPEND) for a --reads entry: window (the
    product's), whole (no window: before rcll.passages), window=W/B (a window of W tokens, a budget
    of B), shrink=W/B (the windows shrunk to fit B)."""
    if reads == "whole":
        return 0, budget
    passages.SPEND = "window" if reads.startswith("shrink=") else "depth"
    if reads.startswith(("window=", "shrink=")):
        w, b = reads.split("=")[1].split("/")
        return int(w), int(b)
    return window, budget


class CountingReranker:
    """The cross-encoder, recording the passages each call reads (counted after the recall, so
    the count costs the recall nothing)."""

    def __init__(self, reranker: Any) -> None:
        self.reranker = reranker
        self.read: list[tuple[str, list[str]]] = []

    def pair_lengths(self, query: str, passages: Sequence[str], max_length: int = 256) -> list[int]:
        return list(self.reranker.pair_lengths(query, passages, max_length=max_length))

    def score(self, query: str, passages: Sequence[str], **kw: Any) -> Any:
        self.read.append((query, list(passages)))
        return self.reranker.score(query, passages, **kw)


class CountingEmbedder:
    """The embedder, recording how many texts the budget cut had the tokenizer count."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.counted = 0

    def embed_query(self, text: str) -> Any:
        return self.embedder.embed_query(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        self.counted += len(texts)
        return list(self.embedder.count_tokens(texts))


def quality_table(session: dict[tuple[str, Row], Means], turn: dict[tuple[str, Row], Means], groups: Sequence[str],
                  rows_of: Sequence[Row]) -> str:
    """The quality table: a row per group of questions and reading (index, reads, deadline)."""
    rows: list[list[Any]] = []
    for g in groups:
        for r in rows_of:
            sm, tq = session[(g, r)].mean(), turn[(g, r)].mean()
            if sm:
                rows.append([f"{g}, {session[(g, r)].counts['all']}", row_name(r), *(sm[m] for m in SESSION_METRICS),
                             *(tq.get(m, float("nan")) for m in TURN_METRICS)])
    return table(["questions", "index", *(f"session {m}" for m in SESSION_METRICS), *(f"turn {m}" for m in TURN_METRICS)],
                 rows)


def type_table(session: Means, turn: Means) -> str:
    """One group's and reading's scores per question type, "all" last."""
    rows: list[list[Any]] = []
    for qt in [*TYPES, "all"]:
        sm, tq = session.mean(qt), turn.mean(qt)
        if sm:
            rows.append([qt, session.counts[qt], sm["recall_any@5"], sm["recall_any@10"], sm["ndcg_any@10"],
                         tq.get("recall_any@10", float("nan")), tq.get("recall_any@50", float("nan")),
                         tq.get("ndcg_any@10", float("nan"))])
    return table(["type", "n", "session recall_any@5", "session recall_any@10", "session ndcg_any@10",
                  "turn recall_any@10", "turn recall_any@50", "turn ndcg_any@10"], rows)


def retain_question(conn: Any, cache: CachedEmbedder, q: Question, bank: str, roles: tuple[str, ...]) -> dict[int, tuple[str, str]]:
    """The haystack as one bank; returns unit id -> (session id, turn key)."""
    conn.execute("SELECT rcll.create_bank(%s)", (bank,))
    unit_turn: dict[int, tuple[str, str]] = {}
    texts = [t.text for s in q.sessions for t in s.turns if t.role in roles]
    vectors = iter(cache.embed(texts))
    for s in q.sessions:
        turns = [t for t in s.turns if t.role in roles]
        if not turns:
            continue
        ids = retain_chunks(conn, bank, [t.text for t in turns], [next(vectors) for _ in turns], s.date, s.id,
                            "longmemeval")
        unit_turn.update((u, (s.id, t.key)) for u, t in zip(ids, turns, strict=True))
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))
    conn.execute("ANALYZE")
    return unit_turn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_PATH), help="longmemeval_s.json.gz (or the oracle file)")
    ap.add_argument("--sample", type=int, default=0, help="questions per question type (0 = all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--half", choices=["a", "b"], help="only this half of the question ids (a: choose, b: report)")
    ap.add_argument("--index", default="all,user", help="banks per question: all (every turn), user (user turns only)")
    ap.add_argument("--rerank-depth", type=int, help="recall's rerank_depth (default: the product's)")
    ap.add_argument("--context-depth", type=int, help="recall's context_depth (default: the product's)")
    ap.add_argument("--deadline-ms", default="none",
                    help="recall under these deadlines, a row each: none, or ms (the servers' default is 1000), e.g. none,1000")
    ap.add_argument("--cached", action="store_true",
                    help="only the chosen questions whose haystacks the embedding cache holds whole (no embedding)")
    ap.add_argument("--cache-dir", default=str(DEFAULT_DIR), help="where the embedding cache lives (not committed)")
    ap.add_argument("--embed-only", action="store_true", help="fill the embedding cache for these questions and exit")
    ap.add_argument("--limit", type=int, default=0, help="only the first N of the chosen questions (a quick check)")
    ap.add_argument("--ids", metavar="FILE", help="only these question ids (one a line): the same questions as another run")
    ap.add_argument("--reads", default="window",
                    help="how the cross-encoder reads long facts, one row each: window (rcll.passages, the product's), "
                         "whole (every fact whole, cut at 256 tokens, and all read again with context: before rcll.passages), "
                         "window=W/B (research: a window of W tokens, a first-view budget of B), "
                         "shrink=W/B (the same, the windows shrunk to fit the budget instead of fewer facts read)")
    ap.add_argument("--dump", metavar="FILE", help="write each question's rankings as JSON lines")
    ap.add_argument("--port", type=int, default=55560)
    args = ap.parse_args()
    indexes = [x.strip() for x in args.index.split(",") if x.strip()]
    reads = [x.strip() for x in args.reads.split(",") if x.strip()]
    deadlines = [None if x.strip() == "none" else int(x) for x in args.deadline_ms.split(",") if x.strip()]
    rows_of: list[Row] = [(ix, rd, dl) for ix in indexes for rd in reads for dl in deadlines]

    questions = scored(load(args.data))
    if args.half:
        questions = [q for q in questions if q.half == args.half]
    if args.sample:
        questions = stratified(questions, args.sample, args.seed)
    if args.ids:
        wanted = set(Path(args.ids).read_text().split())
        questions = [q for q in questions if q.id in wanted]
    if args.limit:
        questions = questions[: args.limit]
    cache = CachedEmbedder(Path(args.cache_dir) / "longmemeval.bin")
    if args.cached:
        chosen = len(questions)
        questions = [q for q in questions if not cache.missing([t.text for s in q.sessions for t in s.turns])]
        print(f"--cached: {len(questions)} of the {chosen} chosen questions have their haystacks in the cache")
    if args.embed_only:
        t = time.perf_counter()
        for n, q in enumerate(questions):
            cache.embed([t.text for s in q.sessions for t in s.turns])
            print(f"  {n + 1}/{len(questions)} questions, {cache.misses:,} turns embedded, {cache.hits:,} cached, "
                  f"{time.perf_counter() - t:.0f} s", flush=True)
        return 0

    groups = {"all": {q.id for q in questions}} if args.half else {
        **{name: {q.id for q in questions if q.half == h} for h, name in HALVES.items()}, "all": {q.id for q in questions}}
    session = {(g, r): Means(SESSION_METRICS) for g in groups for r in rows_of}
    turn = {(g, r): Means(TURN_METRICS) for g in groups for r in rows_of}
    lat: dict[Row, dict[str, list[float]]] = {r: defaultdict(list) for r in rows_of}
    depth: dict[Row, list[tuple[int, int, bool]]] = {r: [] for r in rows_of}
    counter = models.get_embedder()
    window, budget = passages.WINDOW, passages.FIRST_VIEW_WORDS
    retain_s = 0.0
    rr = CountingReranker(models.get_reranker())
    dump = open(args.dump, "w") if args.dump else None  # noqa: SIM115 - closed below
    with embedded_cluster(args.port, prefix="rclml-") as pg, connect(create_database(pg, "lme"), autocommit=True) as conn:
        for n, q in enumerate(questions):
            for ix in indexes:
                bank = f"q{n}{ix}"
                t = time.perf_counter()
                unit_turn = retain_question(conn, cache, q, bank, INDEXES[ix])
                retain_s += time.perf_counter() - t
                request = R(query=q.question, bank=bank, reference_time=q.date,
                            **({"rerank_depth": args.rerank_depth} if args.rerank_depth is not None else {}),
                            **({"context_depth": args.context_depth} if args.context_depth is not None else {}))
                if n == 0:          # load the models and warm the caches before anything is timed
                    recall(Direct(conn), request, embedder=cache.embedder, reranker=rr.reranker)
                for row in [r for r in rows_of if r[0] == ix]:
                    _, rd, dl = row
                    passages.WINDOW, passages.FIRST_VIEW_WORDS = read_settings(rd, window, budget)
                    rr.read.clear()
                    # A fresh bank: the embedder keeps no token count of its texts (as before the
                    # first recall of a new bank), so the cut pays for what it counts.
                    counter._counts.clear()
                    ce = CountingEmbedder(cache.embedder)
                    t = time.perf_counter()
                    res = recall(Direct(conn), replace(request, deadline_ms=dl), embedder=ce, reranker=rr)
                    wall = (time.perf_counter() - t) * 1000
                    # The cut as it was (every candidate counted, then cut), timed on the same
                    # ranking right after, with a tokenizer that keeps no counts: the same facts?
                    t = time.perf_counter()
                    every = models.count_tokens([f.text for f in res.ranked])
                    kept_before = cut_to_budget(every, request.budget, request.limit)
                    cut_before = (time.perf_counter() - t) * 1000
                    if dl is None:
                        assert [res.ranked[i].unit_id for i in kept_before] == [f.unit_id for f in res.facts], q.id
                    views = {context_passage(f) for f in res.ranked} - {None}
                    first = [p for _, ps in rr.read for p in ps if p not in views]
                    second = [p for _, ps in rr.read for p in ps if p in views]
                    tm = res.timings
                    for k, v in (("embed", tm.embed), ("sql", tm.sql), ("rerank", tm.rerank), ("cut", tm.cut),
                                 ("cut, counting all (before)", cut_before),
                                 ("texts the cut counted", ce.counted),
                                 ("full recall", wall), ("full recall, cut before", wall - tm.cut + cut_before),
                                 ("pairs, first view", len(first)),
                                 ("pairs, context view", len(second)),
                                 ("tokens, first view", sum(rr.pair_lengths(q.question, first)) if first else 0),
                                 ("tokens, context view", sum(rr.pair_lengths(q.question, second)) if second else 0)):
                        lat[row][k].append(float(v))
                    depth[row].append((res.rerank_depth_reached, res.context_depth_reached, res.deadline_cut))
                    turns = [unit_turn[f.unit_id][1] for f in res.ranked]
                    sessions = [unit_turn[f.unit_id][0] for f in res.ranked]
                    for g, members in groups.items():
                        if q.id in members:
                            session[(g, row)].add(q.type, sessions, q.answer_sessions)
                            turn[(g, row)].add(q.type, turns, q.answer_turns(INDEXES[ix]))
                    if dump is not None:
                        dump.write(json.dumps({"id": q.id, "type": q.type, "index": ix, "reads": rd, "deadline_ms": dl,
                                               "turns": turns}) + "\n")
                passages.WINDOW, passages.FIRST_VIEW_WORDS = window, budget
                conn.execute("SELECT * FROM rcll.drop_bank(%s, %s, dry_run => false)", (bank, bank))
            if (n + 1) % 10 == 0 or n + 1 == len(questions):
                print(f"  {n + 1}/{len(questions)} questions, retain {retain_s:.0f} s "
                      f"({cache.misses:,} turns embedded, {cache.hits:,} cached)", flush=True)
    if dump is not None:
        dump.close()

    settings = ", ".join(f"{k} {v}" for k, v in (("rerank_depth", args.rerank_depth), ("context_depth", args.context_depth))
                         if v is not None) or "default settings"
    print(f"\nLongMemEval {Path(args.data).name}, {len(questions)} questions (abstention left out), {settings}\n")
    print(quality_table(session, turn, list(groups), rows_of))
    for r in rows_of:
        print(f"\nper question type, {row_name(r)}, all {len(questions)} questions\n")
        print(type_table(session[("all", r)], turn[("all", r)]))
        if turn[("all", r)].no_gold:
            print(f"({turn[('all', r)].no_gold} questions without a has_answer turn at this index: left out at turn level)")
    load1 = os.getloadavg()
    for r in rows_of:
        print(f"\nlatency, {row_name(r)} (ms; pairs and tokens the cross-encoder read), "
              f"load average {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} on {os.cpu_count()} cores\n")
        print(f"{'':<24} {'p50':>9} {'p95':>9} {'mean':>9}")
        for k, xs in lat[r].items():
            print(f"{k:<24} {statistics.median(xs):9.1f} {pct(xs, 0.95):9.1f} {float(np.mean(xs)):9.1f}")
    print()
    for r, d in depth.items():
        if d:
            first_depths = sorted(x[0] for x in d)
            print(f"{row_name(r)}: rerank depth p50 {statistics.median(first_depths):.0f} (min {first_depths[0]}, "
                  f"max {first_depths[-1]}), context depth p50 {statistics.median(x[1] for x in d):.0f}, "
                  f"cut by the deadline {sum(x[2] for x in d)}/{len(d)}")
    print(f"\nretain: {retain_s:.0f} s for {len(questions)} questions x {len(indexes)} banks "
          f"({cache.misses:,} turns embedded, {cache.hits:,} from the cache)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
