"""How many BM25 candidates an exact top-k with term upper bounds (MaxScore) would leave to read,
against the lexical channel's candidates today, on a kept store:

    .venv/bin/python -m bench.recall --sizes 100000 --keep          # prints the cluster's URL
    .venv/bin/python -m bench.bm25_bounds --dsn '<URL with dbname=recall_100000>' --k 300,100,30

MaxScore (Turtle & Flood 1995) orders a query's terms by the most each can add to a score. The
longest run of the weakest terms whose bounds add up to less than the k-th best score (theta) is
"non-essential": a unit holding only those terms cannot reach the top k, so only the units holding
an essential term need reading. This computes, per query, every candidate's exact BM25 score (the
scope's units only), theta, and the essential set under two bounds: idf x (k1 + 1) (the loose bound,
needing no statistics) and each term's highest actual contribution in the bank (the tight bound, a
per-(bank, lexeme) statistic the write path would have to keep). It counts the units an exact
top-k would read under each, with and without the channel's 5% candidate pruning, against the
pruned channel's candidates today. Nothing is timed: the count of candidates is what the channel's
time follows (~8 us each, docs/scaling.md). Queries are drawn as bench.recall draws its own (five
words of a unit's text), every third in bench.recall's big room.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from collections.abc import Iterable
from typing import Any

import numpy as np
import psycopg

from bench._common import table

K1, B = 1.2, 0.75
PRUNE = 0.05

_HITS = """
SELECT h.unit_id, (h.e).lexeme, coalesce(array_length((h.e).positions, 1), 1), h.lexical_length, h.room
FROM (SELECT u.unit_id, u.lexical_length, u.room, unnest(ts_filter(setweight(u.lexical, 'A', %(terms)s), '{a}')) AS e
      FROM rcll.unit_lexicon u
      WHERE rcll._bank_keys(u.bank_id, tsvector_to_array(u.lexical)) && rcll._bank_keys(%(bank)s, %(terms)s)) h
"""


def essential(bounds: dict[str, float], theta: float) -> set[str]:
    """The terms an exact top-k must read: all but the longest run of the weakest, by bound,
    whose bounds sum to less than theta."""
    acc, skipped = 0.0, set()
    for term in sorted(bounds, key=bounds.__getitem__):
        if acc + bounds[term] >= theta:
            break
        acc += bounds[term]
        skipped.add(term)
    return set(bounds) - skipped


def reading(terms_of: dict[int, set[str]], needed: Iterable[str]) -> int:
    want = set(needed)
    return sum(1 for ts in terms_of.values() if ts & want)


def one_query(conn: psycopg.Connection[Any], bank: int, n: float, avgdl: float, text: str,
              room: str | None, ks: list[int]) -> dict[int, list[int]]:
    terms = conn.execute("SELECT rcll._query_lexemes(%s, %s)", (text, bank)).fetchone()[0]  # type: ignore[index]
    gen = set(conn.execute("SELECT gen FROM rcll._bm25_pruned_terms(%s, %s, %s)",
                           (terms, n, PRUNE)).fetchone()[0])  # type: ignore[index]
    hits = conn.execute(_HITS, {"terms": terms, "bank": bank}).fetchall()
    df: dict[str, int] = {}
    for _, lexeme, *_rest in hits:
        df[lexeme] = df.get(lexeme, 0) + 1
    idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    score: dict[int, float] = {}
    terms_of: dict[int, set[str]] = {}
    tight: dict[str, float] = {}
    for unit, lexeme, tf, dl, unit_room in hits:
        c = idf[lexeme] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
        tight[lexeme] = max(tight.get(lexeme, 0.0), c)
        terms_of.setdefault(unit, set()).add(lexeme)
        if room is None or unit_room == room:
            score[unit] = score.get(unit, 0.0) + c
    best = sorted(score.values(), reverse=True)
    loose = {t: idf[t] * (K1 + 1) for t in df}
    out = {}
    for k in ks:
        theta = best[k - 1] if len(best) >= k else 0.0
        tight_needed = essential(tight, theta)
        out[k] = [len(terms_of), reading(terms_of, gen), reading(terms_of, essential(loose, theta)),
                  reading(terms_of, tight_needed), reading(terms_of, tight_needed & gen)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True, help="a kept bench.recall store (dbname recall_<size>)")
    ap.add_argument("--bank", default="bench")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--k", default="300,100,30", help="top-k sizes (300: the channel's limit)")
    ap.add_argument("--room", default="engineering", help="the room of every third query (bench.recall's big room)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]
    rng = np.random.default_rng(args.seed)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        bank = conn.execute("SELECT rcll._bank_id(%s)", (args.bank,)).fetchone()[0]  # type: ignore[index]
        n, avgdl = conn.execute("SELECT n, avgdl FROM rcll._bm25_corpus(%s)", (bank,)).fetchone()  # type: ignore[misc]
        ids = [r[0] for r in conn.execute("SELECT unit_id FROM rcll.memory_units WHERE bank_id = %s ORDER BY unit_id", (bank,))]
        per_k: dict[int, list[list[int]]] = {k: [] for k in ks}
        for i in range(args.queries):
            unit = ids[int(rng.integers(0, len(ids)))]
            text = conn.execute("SELECT text FROM rcll.memory_units WHERE unit_id = %s", (unit,)).fetchone()[0]  # type: ignore[index]
            words = [w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 3] or ["status"]
            query = " ".join(rng.choice(words, size=min(5, len(words)), replace=False))
            room = args.room if i % 3 == 1 else None
            for k, row in one_query(conn, bank, n, avgdl, query, room, ks).items():
                per_k[k].append(row)
    rows = []
    for k in ks:
        a = np.array(per_k[k], dtype=float)
        today = a[:, 1].sum()
        rows.append([k, len(a), *[statistics.median(a[:, j]) for j in range(5)],
                     a[:, 3].sum() / today, a[:, 4].sum() / today])
    print(f"{args.queries} queries in a bank of {int(n):,} units (every third in one room); units read per query, median")
    print(table(["top k", "queries", "every matching unit", "today (terms in <= 5% generate)", "MaxScore, idf x (k1+1) bound",
                 "MaxScore, tight bound", "tight bound + today's pruning", "tight / today (sum)", "tight + pruning / today (sum)"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
