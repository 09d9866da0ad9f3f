"""How fast the cross-encoder reads one recall's passages, run in different ways on this machine.

    .venv/bin/python -m research.rerank_speed [--questions 24]

Per LoCoMo question, the passages a default recall reads (40 in the first view, "[date] speaker:
text"; the top 15 again with the last 16 words of the turn before them): the question's evidence
turns and random turns of its conversation. Each way runs every question, the order of the ways
turning question by question so that the machine's drift falls on all alike; the first two
questions warm up and are not counted. Prints wall and CPU p50 and the median per-question time
ratio against the shipped way, and checks that every way returns the shipped scores.

Ways: the shipped session (`rcll.models.Reranker`: 2 intra-op threads, batches of 8 sorted by
length, no spinning); the same with onnxruntime's spinning allowed; one thread; two one-thread
sessions taking alternate batches from two Python threads (onnxruntime drops the GIL).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from bench._common import table
from bench.locomo.dataset import Turn, load
from rcll import models

Score = Callable[[str, Sequence[str]], np.ndarray]


def view(t: Turn) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


def workload(questions: int, seed: int = 3) -> list[tuple[str, list[str], list[str]]]:
    """(question, first-view passages, context-view passages) per question."""
    convs, qs = load()
    rng = random.Random(seed)
    out = []
    for q in rng.sample(qs, questions):
        turns = list(convs[q.conv].turns)
        index = {t.dia_id: i for i, t in enumerate(turns)}
        picked = [index[d] for d in q.evidence][:40]
        rest = [i for i in range(len(turns)) if i not in picked]
        picked += rng.sample(rest, 40 - len(picked))
        rng.shuffle(picked)
        first = [view(turns[i]) for i in picked]
        context = [" ".join(turns[i - 1].text.split()[-16:]) + " / " + view(turns[i]) for i in picked[:15] if i > 0]
        out.append((q.question, first, context))
    return out


def session(threads: int, spinning: bool) -> Any:
    """A cross-encoder session as rcll.models builds it, with this many threads and spinning."""
    return models._session(models.find_model_dir("reranker_en"), threads, spinning=spinning)


def with_session(s: Any) -> Score:
    """Reranker.score (same tokenizer, batching and cut) on another onnxruntime session."""
    clone = models.Reranker(threads=1)
    clone._session = s
    return clone.score


def two_sessions(reranker: models.Reranker) -> Score:
    """Alternate batches (as score() forms them) on two one-thread sessions at once."""
    sessions = [session(1, False), session(1, False)]
    pool = ThreadPoolExecutor(2)
    tokenizer = reranker._tokenizer_for(256)

    def score(query: str, passages: Sequence[str]) -> np.ndarray:
        encodings = models._encode_all(tokenizer, [(query, p) for p in passages])
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        batches = [order[i : i + models.RERANK_BATCH] for i in range(0, len(order), models.RERANK_BATCH)]
        out = np.empty(len(encodings), dtype=np.float32)

        def run(k: int) -> None:
            for rows in batches[k::2]:
                part = np.empty(len(rows), dtype=np.float32)
                models._run_sorted(sessions[k], [encodings[i] for i in rows], len(rows), part, models._first_logit, sort=False)
                out[rows] = part

        list(pool.map(run, [0, 1]))
        return out

    return score


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=24)
    args = ap.parse_args()
    work = workload(args.questions + 2)
    shipped = models.Reranker()
    ways: dict[str, Score] = {
        "shipped (2 threads, no spinning)": shipped.score,
        "2 threads, spinning allowed": with_session(session(2, True)),
        "1 thread": with_session(session(1, False)),
        "two 1-thread sessions, alternate batches": two_sessions(shipped),
    }
    names = list(ways)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    same = dict.fromkeys(names, 0)
    for k, (query, first, context) in enumerate(work):
        scores = {}
        for n in names[k % len(names):] + names[: k % len(names)]:
            t, c = time.perf_counter(), time.process_time()
            scores[n] = np.concatenate([ways[n](query, first), ways[n](query, context)])
            if k >= 2:
                wall[n].append((time.perf_counter() - t) * 1000)
                cpu[n].append((time.process_time() - c) * 1000)
        for n in names:
            same[n] += bool(np.array_equal(scores[n], scores[names[0]]))
    pairs = sum(len(f) + len(c) for _, f, c in work[2:]) / max(len(work) - 2, 1)
    print(f"\ncross-encoder, {len(work) - 2} LoCoMo questions, {pairs:.0f} pairs each (40 + the top 15 read again)")
    rows = []
    for n in names:
        ratio = statistics.median(a / b for a, b in zip(wall[n], wall[names[0]], strict=True))
        rows.append([n, statistics.median(wall[n]), statistics.median(cpu[n]), ratio, f"{same[n]}/{len(work)}"])
    print(table(["way", "wall p50 ms", "CPU p50 ms", "median time ratio vs shipped", "same scores"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
