"""What recall's budget cut costs, counting every candidate (before) against rcll.budget.cut_counting
(now), on the same 100-candidate lists: LongMemEval S turns (long) and LoCoMo turns (short), with
the embedder's count cache cold (a bank's first recall) and warm (the same units recalled again,
as on a server). Both keep the same facts (checked); the times are the fastest of --repeat rounds
per list, alternating, in one process.

    nice -n 5 .venv/bin/python -m research.longmemeval.cut_cost [--lists 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

from bench.locomo.dataset import load_conversations
from bench.locomo.run import turn_text
from bench.longmemeval.dataset import load, scored
from rcll import models
from rcll.budget import cut_counting, cut_to_budget
from rcll.defaults import BUDGET, CANDIDATE_LIMIT


def before(emb: models.Embedder, texts: list[str]) -> list[int]:
    return cut_to_budget(emb.count_tokens(texts), BUDGET, CANDIDATE_LIMIT)


def now(emb: models.Embedder, texts: list[str]) -> list[int]:
    return cut_counting(texts, BUDGET, CANDIDATE_LIMIT, emb.count_tokens)[0]


def timed(fn: Callable[[], list[int]], cold: Callable[[], None] | None) -> tuple[float, list[int]]:
    if cold is not None:
        cold()
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lists", type=int, default=30, help="candidate lists per corpus")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rnd = random.Random(1)
    lme = [[t.text for s in q.sessions for t in s.turns] for q in rnd.sample(scored(load()), args.lists)]
    locomo = [[turn_text(t) for t in c.turns] for c in load_conversations()]
    corpora = {"LongMemEval S": [rnd.sample(turns, 100) for turns in lme],
               "LoCoMo": [rnd.sample(locomo[i % len(locomo)], 100) for i in range(args.lists)]}
    emb = models.get_embedder()
    emb.count_tokens(["warm the tokenizer"])
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; budget {BUDGET}, limit {CANDIDATE_LIMIT}\n")
    print(f"{'candidates':<15} {'cache':<5} {'before p50':>11} {'now p50':>9} {'ratio p50':>10} {'texts counted now':>18}")
    for name, lists in corpora.items():
        for cache in ("cold", "warm"):
            b_ms, n_ms, ratios, counted = [], [], [], []
            for texts in lists:
                clear = emb._counts.clear if cache == "cold" else None
                best_b = best_n = float("inf")
                for r in range(args.repeat):
                    order = (before, now) if r % 2 == 0 else (now, before)
                    for fn in order:
                        ms, kept = timed(lambda fn=fn, texts=texts: fn(emb, texts), clear)  # type: ignore[misc]
                        if fn is before:
                            best_b, kept_b = min(best_b, ms), kept
                        else:
                            best_n, kept_n = min(best_n, ms), kept
                assert kept_b == kept_n
                asked: list[str] = []
                emb._counts.clear()
                cut_counting(texts, BUDGET, CANDIDATE_LIMIT, lambda b, asked=asked: (asked.extend(b), emb.count_tokens(b))[1])
                b_ms.append(best_b)
                n_ms.append(best_n)
                ratios.append(best_n / best_b)
                counted.append(len(asked))
            print(f"{name:<15} {cache:<5} {statistics.median(b_ms):9.2f} ms {statistics.median(n_ms):6.2f} ms "
                  f"{statistics.median(ratios):10.3f} {statistics.median(counted):18.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
