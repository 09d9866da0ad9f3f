"""LongMemEval's retrieval metrics, as the benchmark's own code defines them
(src/retrieval/eval_utils.py): for a ranking of ids and a set of gold ids,

  recall_any@k  1 if any gold id is in the top k
  recall_all@k  1 if every gold id is in the top k
  ndcg_any@k    binary relevance, DCG = rel_1 + sum_{i=2..k} rel_i / log2(i) (its dcg: the first two
                ranks weigh alike), over the ideal ranking's DCG (all gold first)

Session level: the turn ranking mapped to sessions, each counted at its best-ranked turn
(deduplicated in rank order); gold = answer_session_ids. Turn level: gold = the has_answer
turns. A question without gold at a level is left out of that level's means (counted apart).
Means are over questions (micro), and per question type.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

SESSION_METRICS = ("recall_any@5", "recall_any@10", "recall_all@5", "recall_all@10", "ndcg_any@5", "ndcg_any@10")
TURN_METRICS = ("recall_any@5", "recall_any@10", "recall_any@50", "recall_all@10", "ndcg_any@10")


def dedupe(ids: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in ids if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def _dcg(relevances: Sequence[int], k: int) -> float:
    r = list(relevances)[:k]
    return float(r[0] + sum(x / math.log2(i + 1) for i, x in enumerate(r[1:], start=1))) if r else 0.0


def ndcg_any(ranked: Sequence[str], gold: frozenset[str], k: int) -> float:
    ideal = _dcg([1] * len(gold), k)
    return _dcg([int(x in gold) for x in ranked], k) / ideal if ideal else 0.0


def score(ranked: Sequence[str], gold: frozenset[str], metrics: Sequence[str]) -> dict[str, float]:
    r = dedupe(ranked)
    out: dict[str, float] = {}
    for m in metrics:
        name, k = m.split("@")
        top = set(r[: int(k)])
        if name == "recall_any":
            out[m] = float(any(g in top for g in gold))
        elif name == "recall_all":
            out[m] = float(all(g in top for g in gold))
        else:
            out[m] = ndcg_any(r, gold, int(k))
    return out


@dataclass
class Means:
    """Per-question scores summed by question type; table() gives the means, "all" last."""

    metrics: tuple[str, ...]
    sums: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    no_gold: int = 0

    def add(self, qtype: str, ranked: Sequence[str], gold: frozenset[str]) -> None:
        if not gold:
            self.no_gold += 1
            return
        s = score(ranked, gold, self.metrics)
        for key in (qtype, "all"):
            self.counts[key] += 1
            for m, v in s.items():
                self.sums[key][m] += v

    def mean(self, key: str = "all") -> dict[str, float]:
        n = self.counts.get(key, 0)
        return {m: self.sums[key][m] / n for m in self.metrics} if n else {}
