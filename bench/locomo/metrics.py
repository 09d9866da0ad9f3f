"""Turn-level retrieval metrics for LoCoMo: nDCG@k, recall@k, MRR; per category and overall.

Binary relevance: a retrieved turn is relevant iff its dia id is in the question's evidence.
  nDCG@k   = sum_{i<k, rel} 1/log2(i+2)  /  sum_{i<min(k,|E|)} 1/log2(i+2)
  recall@k = |top-k ∩ E| / |E|
  MRR      = 1 / rank of the first relevant turn (0 if none retrieved)
Overall = mean over all questions (micro), not mean of category means.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def ndcg_at_k(ranked: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal


def recall_at_k(ranked: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & relevant) / len(relevant)


def mrr(ranked: Sequence[str], relevant: set[str] | frozenset[str]) -> float:
    for i, d in enumerate(ranked):
        if d in relevant:
            return 1.0 / (i + 1)
    return 0.0


def score_one(ranked: Sequence[str], relevant: Iterable[str]) -> dict[str, float]:
    rel = frozenset(relevant)
    # de-duplicate while keeping order, so a repeated id cannot count twice
    seen: set[str] = set()
    r = [d for d in ranked if not (d in seen or seen.add(d))]
    return {
        "ndcg@5": ndcg_at_k(r, rel, 5),
        "ndcg@10": ndcg_at_k(r, rel, 10),
        "r@5": recall_at_k(r, rel, 5),
        "r@10": recall_at_k(r, rel, 10),
        "mrr": mrr(r, rel),
        # pool recall: how much of the evidence a first stage hands to the rerank
        "r@40": recall_at_k(r, rel, 40),
        "r@50": recall_at_k(r, rel, 50),
        "r@100": recall_at_k(r, rel, 100),
    }


METRICS = ("ndcg@5", "ndcg@10", "r@5", "r@10", "mrr", "r@40", "r@50", "r@100")


@dataclass
class Aggregate:
    """Accumulates per-question scores keyed by category; ``table()`` gives means."""

    sums: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, category: int | str, ranked: Sequence[str], relevant: Iterable[str]) -> dict[str, float]:
        s = score_one(ranked, relevant)
        for key in (str(category), "all"):
            self.counts[key] += 1
            for m, v in s.items():
                self.sums[key][m] += v
        return s

    def table(self) -> dict[str, dict[str, float]]:
        keys = sorted(k for k in self.counts if k != "all") + ["all"]
        return {k: {m: self.sums[k][m] / self.counts[k] for m in METRICS} | {"n": self.counts[k]} for k in keys if self.counts[k]}

    def format(self, metrics: Sequence[str] = ("ndcg@5", "r@5", "r@10", "mrr")) -> str:
        t = self.table()
        lines = ["cat   n     " + " ".join(f"{m:>7}" for m in metrics)]
        for k, row in t.items():
            lines.append(f"{k:<5} {int(row['n']):<5} " + " ".join(f"{row[m]:7.3f}" for m in metrics))
        return "\n".join(lines)


def evaluate(runs: Iterable[tuple[int | str, Sequence[str], Iterable[str]]]) -> Aggregate:
    """runs: (category, ranked dia ids, evidence ids) per question."""
    agg = Aggregate()
    for cat, ranked, rel in runs:
        agg.add(cat, ranked, rel)
    return agg
