"""Does rcll.passages (a long fact read by its query window, within a token budget) change LoCoMo?

    nice -n 10 .venv/bin/python -m research.locomo.window_check [--window W] [--budget B]

Exact over all 1,536 questions without reading every one: where the depth's facts are read as
before - no fact longer than the window and the pairs within the budget, so rcll.passages.windows
returns the texts unchanged, all of them, and nothing loses its context view - the rerank reads the very same
pairs in the very same batches, and the ranking is the one before. Only the other questions are
reranked, both ways (passages.WINDOW = 0: every fact whole, as before), and scored. The change of
each half's mean is the sum of their differences over the half's number of questions.
"""

from __future__ import annotations

import argparse

from bench._common import connect, create_database, embedded_cluster
from bench.locomo.dataset import load
from bench.locomo.metrics import score_one
from bench.locomo.run import HALVES, dedupe, retain
from rcll import models, passages
from rcll.deadline import rerank_within
from rcll.defaults import CONTEXT_DEPTH, RERANK_DEPTH
from rcll.recall import candidates, entity_query
from rcll.request import RecallRequest as R


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=55642)
    ap.add_argument("--window", type=int, default=passages.WINDOW, help="rcll.passages.WINDOW to check (words)")
    ap.add_argument("--budget", type=int, default=passages.FIRST_VIEW_WORDS,
                    help="rcll.passages.FIRST_VIEW_WORDS to check (words)")
    args = ap.parse_args()
    passages.WINDOW, passages.FIRST_VIEW_WORDS = args.window, args.budget
    convs, questions = load()
    now = {c.index: max(t.date for t in c.turns) for c in convs}
    emb, rr = models.get_embedder(), models.get_reranker()
    window = passages.WINDOW
    changed: list[tuple[int, dict[str, float], dict[str, float], int]] = []
    with embedded_cluster(args.port, prefix="rclwc-") as pg, connect(create_database(pg, "locomo"), autocommit=True) as conn:
        unit_dia = retain(conn, convs)
        for n, q in enumerate(questions):
            bank = f"locomo{q.conv}"
            request = R(query=q.question, bank=bank, reference_time=now[q.conv])
            rest = entity_query(conn, request)
            qe = emb.embed_query(q.question)
            qe_entity = emb.embed_query(rest) if rest is not None and rest != q.question else None
            pool = candidates(conn, request, query_embedding=qe, entity_query_embedding=qe_entity, limit=100)
            texts, cut = passages.first_view(q.question, [f.text for f in pool[:RERANK_DEPTH]])
            if any(cut) or len(texts) < min(RERANK_DEPTH, len(pool)):
                ranked = {}
                for name, w in (("before", 0), ("after", window)):
                    passages.WINDOW = w
                    out = rerank_within(q.question, pool, rr, depth=RERANK_DEPTH, context_depth=CONTEXT_DEPTH)[0]
                    ranked[name] = score_one(dedupe([unit_dia[f.unit_id] for f in out]), q.evidence)
                passages.WINDOW = window
                changed.append((q.conv, ranked["before"], ranked["after"], min(RERANK_DEPTH, len(pool)) - len(texts)))
            if (n + 1) % 200 == 0:
                print(f"  {n + 1} questions, {len(changed)} read otherwise", flush=True)
    print(f"\nLoCoMo, all {len(questions)} questions, default depths ({RERANK_DEPTH} + context view {CONTEXT_DEPTH}): "
          f"questions whose reads rcll.passages changes (window {window}, budget {passages.FIRST_VIEW_WORDS})\n")
    print("| half | questions | read otherwise | facts left unread | nDCG@5 change of the half's mean | R@10 change |")
    print("|---|---|---|---|---|---|")
    for name, convs_in in [*HALVES.items(), ("all ten", range(10))]:
        total = sum(1 for q in questions if q.conv in convs_in)
        rows = [c for c in changed if c[0] in convs_in]
        d5 = sum(a["ndcg@5"] - b["ndcg@5"] for _, b, a, _ in rows) / total
        d10 = sum(a["r@10"] - b["r@10"] for _, b, a, _ in rows) / total
        print(f"| {name} | {total} | {len(rows)} | {sum(c[3] for c in rows)} | {d5:+.4f} | {d10:+.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
