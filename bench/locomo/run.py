"""LoCoMo retrieval through RCLL: every channel alone, fused, fused + rerank at several depths.

    .venv/bin/python -m bench.locomo.run [--sample N] [--depths 20,50,100,300] [--context-depths 20]
        [--split] [--dump-rankings FILE] [--deadlines 150,300,500] [--conversations 0,1]

Retains every LoCoMo turn in chunk mode - one bank per conversation, one document per session,
one chunk per turn written "[<session date>] <speaker>: <text>", the session date as occurred_at
- with bge-small embeddings, then recalls every question of categories 1-4 (or a stratified
sample) and scores turn-level nDCG@5, R@5, R@10 and MRR per category and overall
(bench/locomo/metrics.py). The reference time of a conversation is its last session's date
(its "now"). One recall_candidates call per question yields every channel's own ranking (its
rank columns) and the fused one. The cross-encoder reads each (question, passage) once; every
rerank configuration (depth, and how many of its top are read again with the chunk before them)
is ranked by rcll.deadline.rerank_within from those scores, and its latency is the measured time of the
pairs it reads. Also reported: the share of evidence ranked in the top 10 that
survives the 4,096-token cut at the default settings.

--deadlines D1,D2,... also runs, per question and deadline, the whole recall a server runs
(rcll.recall.recall at the default depths: query embedding, recall_candidates, the
cross-encoder reading fused candidates while time is left, with no cache), plus once without a
deadline, and prints beside the depth table the quality at each deadline, how deep the
cross-encoder read, how often the deadline cut it, the measured latency, and how many questions
got exactly the undeadlined ranking. These are wall-clock runs: on a loaded machine the deadline
rows read less deep (report them with the load average); the depth table does not depend on time. LoCoMo: Maharana et al., ACL 2024,
CC BY-NC 4.0 (see data/locomo/ATTRIBUTION.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import time
from collections import defaultdict
from typing import Any

import numpy as np
import psycopg

from bench._common import connect, create_database, embedded_cluster
from bench.locomo.dataset import CATEGORY_NAMES, Conversation, load
from bench.locomo.metrics import Aggregate
from rcll import models
from rcll.budget import cut_to_budget
from rcll.deadline import rerank_within
from rcll.defaults import BUDGET as DEFAULT_BUDGET
from rcll.defaults import CHANNELS
from rcll.defaults import CONTEXT_DEPTH as DEFAULT_CONTEXT_DEPTH
from rcll.defaults import RERANK_DEPTH as DEFAULT_RERANK_DEPTH
from rcll.recall import Direct, RecallResult, candidates, entity_query, recall
from rcll.request import RecallRequest as R

FUSED = "fused (z-sum), no rerank"
NO_GRAPH = "fused (z-sum) without the graph channel, no rerank"
# Selection discipline (issue 14): choices are made on conversations 0-4 and reported on 5-9 and all ten.
HALVES = {"conversations 0-4 (choose)": range(0, 5), "conversations 5-9 (report)": range(5, 10)}
ALL = "all ten conversations"


def turn_text(t: Any) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


def retain(conn: psycopg.Connection[Any], convs: list[Conversation]) -> dict[int, str]:
    """One bank per conversation; returns unit_id -> dia id."""
    emb = models.get_embedder()
    unit_dia: dict[int, str] = {}
    for c in convs:
        bank = f"locomo{c.index}"
        conn.execute("SELECT rcll.create_bank(%s)", (bank,))
        texts = [turn_text(t) for t in c.turns]
        vecs = emb.embed(texts)
        by_session: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(c.turns):
            by_session[t.session].append(i)
        for s, idx in sorted(by_session.items()):
            chunks = [texts[i] for i in idx]
            row = conn.execute(
                """SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s,
                       embeddings => %s::vector[], occurred_at => %s, source => %s, author => 'locomo')""",
                (bank, "\n".join(chunks), chunks, [vecs[i] for i in idx], c.turns[idx[0]].date,
                 f"{c.sample_id}/session_{s}")).fetchone()
            assert row is not None
            for uid, i in zip(row[0], idx, strict=True):
                unit_dia[int(uid)] = c.turns[i].dia_id
        conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))
    conn.execute("ANALYZE")
    return unit_dia


def retain_offline(conn: psycopg.Connection[Any], convs: list[Conversation]) -> dict[int, str]:
    """LLM_PROVIDER=offline: each turn is its own document, run through the keyless rule extractor
    (sentence facts, dates against the session date, named entities, links). A turn may yield
    several units; all map back to the turn."""
    from rcll.retain import Document
    from rcll.retain import retain as retain_doc
    from rcll.settings import Settings

    offline = Settings(llm_provider="offline")
    unit_dia: dict[int, str] = {}
    for c in convs:
        bank = f"locomo{c.index}"
        conn.execute("SELECT rcll.create_bank(%s)", (bank,))
        for t in c.turns:
            r = retain_doc(conn, bank, Document(content=f"{t.speaker}: {t.text}", occurred_at=t.date,
                                                source=f"{c.sample_id}/{t.dia_id}",
                                                # one thread per turn: repeated lines ("Yeah!") stay distinct
                                                # documents; recall here names no thread, so it reads them all
                                                thread=t.dia_id), via="bench", settings=offline)
            for uid in r.unit_ids:
                unit_dia[uid] = t.dia_id
        conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))
    conn.execute("ANALYZE")
    return unit_dia


def config_name(depth: int, context_depth: int) -> str:
    view = f" + context view top {context_depth}" if context_depth else ""
    return f"fused + rerank@{depth}{view}"


class CachedScorer:
    """The cross-encoder, each (query, passage) scored once; `spent` adds up the measured
    milliseconds of the pairs read since it was last reset (a pair's share of its batch)."""

    def __init__(self, reranker: Any) -> None:
        self.reranker = reranker
        self.cache: dict[tuple[str, str], tuple[float, float]] = {}
        self.spent = 0.0

    def score(self, query: str, passages: list[str]) -> Any:
        todo = [p for p in dict.fromkeys(passages) if (query, p) not in self.cache]
        if todo:
            t = time.perf_counter()
            scores = self.reranker.score(query, todo)
            each = (time.perf_counter() - t) * 1000 / len(todo)
            self.cache.update({(query, p): (float(x), each) for p, x in zip(todo, scores, strict=True)})
        self.spent += sum(self.cache[(query, p)][1] for p in passages)
        return np.array([self.cache[(query, p)][0] for p in passages], dtype=np.float32)


def dedupe(ids: list[str]) -> list[str]:
    """Turn-level ranking from unit-level ranking: a turn counts at its best-ranked unit."""
    seen: set[str] = set()
    return [x for x in ids if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def deadline_name(ms: int | None) -> str:
    return "no deadline" if ms is None else f"deadline {ms} ms"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=0, help="questions to score (stratified by category); 0 = all")
    ap.add_argument("--every", type=int, default=1,
                    help="score every N-th question only (research/locomo/RESEARCH.md's fixed 1-in-3 sample: --every 3)")
    ap.add_argument("--per-conversation", action="store_true",
                    help="also print, per conversation, the fused pool against the best single channel (nDCG@5, R@50)")
    ap.add_argument("--no-rerank", action="store_true",
                    help="first stage only: the channels and the fused pool (pool recall R@40/50/100), no cross-encoder")
    ap.add_argument("--depths", default="20,50,100,300", help="cross-encoder depths (first view)")
    ap.add_argument("--context-depths", default=str(DEFAULT_CONTEXT_DEPTH),
                    help="for each depth, also read the top M again with the chunk before them (0 = one view only)")
    ap.add_argument("--port", type=int, default=55540)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mode", choices=["chunks", "offline"], default="chunks",
                    help="chunks: LLM_PROVIDER=none, one chunk per turn; offline: the keyless rule extractor per turn")
    ap.add_argument("--split", action="store_true",
                    help="also print the table for conversations 0-4 (where choices are made) and 5-9 (where they are reported)")
    ap.add_argument("--dump-rankings", metavar="FILE",
                    help="write, per question, the default configuration's final ranking (with --no-rerank: the fused list; unit ids and their dia ids) "
                         "as JSON lines, for exact before/after comparisons of runs with the same arguments")
    ap.add_argument("--deadlines", default="",
                    help="also recall at these deadlines (ms, e.g. 150,300,500) through rcll.recall.recall at the "
                         "default depths, and once without a deadline; printed beside the depth table")
    ap.add_argument("--conversations", default="",
                    help="only these conversations (e.g. 0,1): retain and ask only theirs, for a quick check")
    args = ap.parse_args()
    depths = sorted(int(d) for d in args.depths.split(","))
    deadlines: list[int | None] = [int(d) for d in args.deadlines.split(",") if d.strip()]
    if deadlines:
        deadlines = [None, *deadlines]           # the undeadlined live recall: the reference
    context_depths = sorted({int(m) for m in args.context_depths.split(",")} | {0})
    configs = [(d, m) for d in depths for m in context_depths if m <= d]
    default = (DEFAULT_RERANK_DEPTH, DEFAULT_CONTEXT_DEPTH)
    if default not in configs:      # the default is always scored and timed (--depths need not name it)
        configs = sorted([*configs, default])

    convs, questions = load()
    if args.conversations:
        keep = {int(c) for c in args.conversations.split(",")}
        convs = [c for c in convs if c.index in keep]
        questions = [q for q in questions if q.conv in keep]
    if args.sample and args.sample < len(questions):
        rnd = random.Random(args.seed)
        by_cat: dict[int, list[Any]] = defaultdict(list)
        for q in questions:
            by_cat[q.category].append(q)
        questions = []
        for _cat, qs in sorted(by_cat.items()):
            questions += rnd.sample(qs, max(1, round(args.sample * len(qs) / sum(map(len, by_cat.values())))))
    if args.every > 1:
        questions = questions[::args.every]
    if args.no_rerank:
        configs = []
    now = {c.index: max(t.date for t in c.turns) for c in convs}

    # Every figure is kept for all ten conversations and, with --split, for each half as well.
    groups = ({name: set(half) for name, half in HALVES.items()} if args.split else {}) | {ALL: set(now)}
    per_conv = {f"conversation {i}": {i} for i in sorted(now)} if args.per_conversation else {}
    groups |= per_conv
    aggs: dict[str, dict[str, Aggregate]] = {g: defaultdict(Aggregate) for g in groups}

    def score(name: str, q: Any, ranking: list[str]) -> None:
        for g, members in groups.items():
            if q.conv in members:
                aggs[g][name].add(q.category, ranking, q.evidence)

    with (embedded_cluster(args.port, prefix="rclll-") as pg,
          connect(create_database(pg, "locomo"), autocommit=True) as conn,
          open(args.dump_rankings, "w") if args.dump_rankings else contextlib.nullcontext() as dump):
        t = time.perf_counter()
        unit_dia = retain(conn, convs) if args.mode == "chunks" else retain_offline(conn, convs)
        print(f"retained {len(unit_dia):,} turns in {time.perf_counter() - t:.0f} s; scoring {len(questions)} questions",
              flush=True)
        emb = models.get_embedder()
        rr = None if args.no_rerank else models.get_reranker()
        lat: dict[str, list[float]] = defaultdict(list)
        reached: dict[int | None, list[tuple[int, int, bool, bool]]] = defaultdict(list)
        survive_num = survive_den = 0
        for n, q in enumerate(questions):
            bank = f"locomo{q.conv}"
            t = time.perf_counter()
            # the query, and the query without the names it gives (the entity channel's), as recall does
            rest = entity_query(conn, R(query=q.question, bank=bank))
            qe = emb.embed_query(q.question)
            qe_entity = emb.embed_query(rest) if rest is not None and rest != q.question else None
            lat["embed"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            pool = candidates(conn, R(query=q.question, bank=bank, reference_time=now[q.conv]), query_embedding=qe, entity_query_embedding=qe_entity, limit=max(depths + [100]))
            lat["sql"].append((time.perf_counter() - t) * 1000)
            # Every channel's own ranking, from its rank column (recall_candidates returns
            # the union when the limit is above what the channels found); the context channel,
            # out of the fusion by default, is run here to be reported alone.
            full = candidates(conn, R(query=q.question, bank=bank, reference_time=now[q.conv], weights={"context": 1.0}), query_embedding=qe, entity_query_embedding=qe_entity, limit=1500)
            no_graph = candidates(conn, R(query=q.question, bank=bank, reference_time=now[q.conv], weights={"graph": 0.0}), query_embedding=qe, entity_query_embedding=qe_entity, limit=100)
            score(NO_GRAPH, q, dedupe([unit_dia[f.unit_id] for f in no_graph]))
            for ch in CHANNELS:
                ranked = sorted((f for f in full if getattr(f, f"rank_{ch}") is not None),
                                key=lambda f, ch=ch: getattr(f, f"rank_{ch}"))
                score(f"{ch} alone", q, dedupe([unit_dia[f.unit_id] for f in ranked]))
            fused_ids = [unit_dia[f.unit_id] for f in pool]
            score(FUSED, q, dedupe(fused_ids))
            if args.no_rerank:
                if dump is not None:     # the final ranking is the fused list
                    dump.write(json.dumps({"conv": q.conv, "qid": q.qid, "category": q.category,
                                           "unit_ids": [f.unit_id for f in pool], "dia_ids": fused_ids}) + "\n")
                if (n + 1) % 100 == 0:
                    print(f"  {n + 1} questions", flush=True)
                continue
            # The cross-encoder reads each (question, passage) once; every configuration is
            # then ranked by rcll.deadline.rerank_within from the cached scores, and its latency is the
            # measured time of the pairs it reads.
            scorer = CachedScorer(rr)
            scorer.score(q.question, [f.text for f in pool[: depths[-1]]])
            for d, m in configs:
                scorer.spent = 0.0
                ranked = rerank_within(q.question, pool, scorer, depth=d, context_depth=m)[0]
                lat[config_name(d, m)].append(scorer.spent)
                ids = [unit_dia[f.unit_id] for f in ranked]
                score(config_name(d, m), q, dedupe(ids))
                if (d, m) == default:
                    t = time.perf_counter()
                    tokens = emb.count_tokens([f.text for f in ranked])
                    kept = {ids[i] for i in cut_to_budget(tokens, DEFAULT_BUDGET, 100)}
                    lat["cut"].append((time.perf_counter() - t) * 1000)
                    top10 = [x for x in ids[:10] if x in q.evidence]
                    survive_den += len(top10)
                    survive_num += sum(1 for x in top10 if x in kept)
            # The whole recall at each deadline (and without one), as a server runs it: no cache.
            reference: list[int] | None = None
            for ms in deadlines:
                t = time.perf_counter()
                live: RecallResult = recall(Direct(conn), R(query=q.question, bank=bank, reference_time=now[q.conv],
                                                            deadline_ms=ms), embedder=emb, reranker=rr)
                took = (time.perf_counter() - t) * 1000
                live_ids = [f.unit_id for f in live.ranked]
                reference = live_ids if ms is None else reference
                lat[deadline_name(ms)].append(took)
                reached[ms].append((live.rerank_depth_reached, live.context_depth_reached, live.deadline_cut,
                                    live_ids == reference))
                score(deadline_name(ms), q, dedupe([unit_dia[u] for u in live_ids]))
            if dump is not None:
                ranked = rerank_within(q.question, pool, scorer, depth=default[0], context_depth=default[1])[0]
                dump.write(json.dumps({"conv": q.conv, "qid": q.qid, "category": q.category,
                                       "unit_ids": [f.unit_id for f in ranked],
                                       "dia_ids": [unit_dia[f.unit_id] for f in ranked]}) + "\n")
            if (n + 1) % 100 == 0:
                print(f"  {n + 1} questions", flush=True)

    order = [f"{ch} alone" for ch in CHANNELS] + [FUSED, NO_GRAPH] + [config_name(d, m) for d, m in configs]
    if per_conv:
        print("\nfused pool against the best single channel, per conversation (no rerank)\n")
        print("| conversation | fused nDCG@5 | best single nDCG@5 | fused R@50 | best single R@50 |")
        print("|---|---|---|---|---|")
        for g in per_conv:
            t = {name: aggs[g][name].table().get("all") for name in [f"{ch} alone" for ch in CHANNELS] + [FUSED]}
            if t[FUSED] is None:
                continue
            singles = {n: v for n, v in t.items() if n != FUSED and v is not None}
            bn = max(singles, key=lambda n: singles[n]["ndcg@5"])
            br = max(singles, key=lambda n: singles[n]["r@50"])
            print(f"| {g} | {t[FUSED]['ndcg@5']:.3f} | {singles[bn]['ndcg@5']:.3f} ({bn}) | "
                  f"{t[FUSED]['r@50']:.3f} | {singles[br]['r@50']:.3f} ({br}) |")
    for g in [x for x in groups if x not in per_conv]:   # the halves first, all ten last
        asked = sum(1 for q in questions if q.conv in groups[g])
        if not asked:                    # a small --sample may leave a half without questions
            continue
        where = "" if g == ALL else f", {g}"
        print(f"\nLoCoMo, {asked} questions (categories 1-4){where}, turn-level retrieval, retain mode: {args.mode}\n")
        print("| configuration | nDCG@5 | R@5 | R@10 | MRR | " + " | ".join(f"nDCG@5 {CATEGORY_NAMES[k]}" for k in (1, 2, 3, 4)) + " |")
        print("|---|---|---|---|---|" + "---|" * 4)
        for name in order:
            t = aggs[g][name].table()
            a = t["all"]
            cats = " | ".join(f"{t[str(k)]['ndcg@5']:.3f}" if str(k) in t else "-" for k in (1, 2, 3, 4))
            mark = " (default)" if name == config_name(*default) else ""
            print(f"| {name}{mark} | {a['ndcg@5']:.3f} | {a['r@5']:.3f} | {a['r@10']:.3f} | {a['mrr']:.3f} | {cats} |")
        if deadlines:
            print(f"\nthe same questions through the whole recall (rcll.recall.recall, {config_name(*default)}),"
                  f" at each deadline; wall clock, machine load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")
            print("| recall | nDCG@5 | R@5 | R@10 | MRR | rerank depth p50 (min) | context depth p50 | cut by the deadline "
                  "| latency p50 / p95 ms | ranking = no deadline |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for limit_ms in deadlines:
                m_all = aggs[g][deadline_name(limit_ms)].table()["all"]
                rows = [r for r, qq in zip(reached[limit_ms], questions, strict=True) if qq.conv in groups[g]]
                ls = [x for x, qq in zip(lat[deadline_name(limit_ms)], questions, strict=True) if qq.conv in groups[g]]
                first = sorted(r[0] for r in rows)
                print(f"| {deadline_name(limit_ms)} | {m_all['ndcg@5']:.3f} | {m_all['r@5']:.3f} | {m_all['r@10']:.3f} | "
                      f"{m_all['mrr']:.3f} | "
                      f"{statistics.median(first):.0f} ({first[0]}) | {statistics.median(r[1] for r in rows):.0f} | "
                      f"{sum(r[2] for r in rows)}/{len(rows)} | {statistics.median(ls):.0f} / {pct(ls, 0.95):.0f} | "
                      f"{sum(r[3] for r in rows)}/{len(rows)} |")
        print(f"\npool recall (evidence in the top k, before any rerank){where}\n")
        print("| first stage | R@40 | R@50 | R@100 | R@50 " + " | R@50 ".join(CATEGORY_NAMES[k] for k in (1, 2, 3, 4)) + " |")
        print("|---|---|---|---|" + "---|" * 4)
        for name in [f"{ch} alone" for ch in CHANNELS] + [FUSED, NO_GRAPH]:
            t = aggs[g][name].table()
            a = t["all"]
            cats = " | ".join(f"{t[str(k)]['r@50']:.3f}" if str(k) in t else "-" for k in (1, 2, 3, 4))
            print(f"| {name} | {a['r@40']:.3f} | {a['r@50']:.3f} | {a['r@100']:.3f} | {cats} |")
    if args.no_rerank:
        print("\nlatency (ms)      p50      p95")
        for k in ("embed", "sql"):
            print(f"{k:<34} {statistics.median(lat[k]):8.1f} {pct(lat[k], 0.95):8.1f}")
        return 0
    print(f"\nper category, default settings ({config_name(*default)}):")
    print(aggs[ALL][config_name(*default)].format())
    print("\nper category, lexical (BM25) alone:")
    print(aggs[ALL]["lexical alone"].format())
    print("\nlatency (ms)      p50      p95")
    for k in ["embed", "sql"] + [config_name(d, m) for d, m in configs] + ["cut"]:
        print(f"{k:<34} {statistics.median(lat[k]):8.1f} {pct(lat[k], 0.95):8.1f}")
    full_default = [a + b + c_ + d for a, b, c_, d in zip(lat["embed"], lat["sql"], lat[config_name(*default)], lat["cut"], strict=False)]
    print(f"{'full recall':<34} {statistics.median(full_default):8.1f} {pct(full_default, 0.95):8.1f}   (embed + sql + {config_name(*default)} + cut)")
    if survive_den:
        print(f"\nevidence in the top 10 that survives the {DEFAULT_BUDGET}-token cut: {survive_num}/{survive_den} = {survive_num / survive_den:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
