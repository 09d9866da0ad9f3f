"""The dense channel's recall@10 against exact search on a kept store, at several hnsw.ef_search
values, before and after rebuilding the HNSW index with other build parameters - the same queries
throughout, so the comparison is a ratio taken in one run:

    .venv/bin/python -m bench.recall --fleet 1000000 --no-rerank --keep     # prints the store's URL
    .venv/bin/python -m bench.hnsw_probe --dsn '<URL with dbname=fleet>' --banks fleet-000,fleet-013 \\
        --ef-search 400,800 --rebuild 'm = 16, ef_construction = 128'

Queries are units of the bank (drawn with a fixed seed) plus Gaussian noise of the fleet
generator's spread, so each sits among its topic's near-equidistant units, as the fleet bench's
queries do. The value of ef_search is set on rcll.channel_dense itself (ALTER FUNCTION, on this
throwaway store) and restored afterwards; `--rebuild` drops and rebuilds the store's HNSW index
and leaves it rebuilt.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from bench._common import table
from bench.fleet import dense_ef_search, dense_recall, exact_top10

INDEX = "memory_units_embedding_hnsw"


def probe_queries(conn: psycopg.Connection[Any], bank: str, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = [r[0] for r in conn.execute("SELECT u.unit_id FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id) "
                                      "WHERE b.name = %s AND u.embedding IS NOT NULL ORDER BY u.unit_id", (bank,))]
    out = []
    for i in rng.choice(len(ids), size=count, replace=False):
        e = conn.execute("SELECT embedding FROM rcll.memory_units WHERE unit_id = %s", (ids[int(i)],)).fetchone()[0]  # type: ignore[index]
        v = e.to_numpy().astype(np.float32) + rng.normal(scale=0.05, size=384).astype(np.float32)
        out.append(v / np.linalg.norm(v))
    return out


def sweep(conn: psycopg.Connection[Any], set_ef: Callable[[int], None],
          cases: dict[str, tuple[list[dict[str, Any]], list[list[int]]]], efs: list[int], label: str) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for ef in efs:
        set_ef(ef)
        for bank, (ps, exact) in cases.items():
            rows.append([label, ef, bank, *dense_recall(conn, ps, exact)])
            print(f"  {label}, ef_search {ef}, {bank}: recall@10 {rows[-1][3]:.3f}, p50 {rows[-1][5]:.1f} ms", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True, help="the kept store (bench.recall --keep prints its URL)")
    ap.add_argument("--banks", default="fleet-000", help="banks to query")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--ef-search", default="400,800")
    ap.add_argument("--rooms", default="", help="a room filter for every query, e.g. engineering (default: none)")
    ap.add_argument("--index", default=INDEX, help=f"the HNSW index --rebuild rebuilds (default {INDEX}; "
                                                   "a bank's own graph: memory_units_embedding_hnsw_bank_<id>)")
    ap.add_argument("--rebuild", default="", help="HNSW build parameters to rebuild with, e.g. 'm = 16, ef_construction = 128'")
    args = ap.parse_args()
    efs = [int(x) for x in args.ef_search.split(",")]
    with psycopg.connect(args.dsn, autocommit=True) as conn, dense_ef_search(conn) as set_ef:
        register_vector(conn)
        cases: dict[str, tuple[list[dict[str, Any]], list[list[int]]]] = {}
        for bank in args.banks.split(","):
            ps = [{"qe": q, "bank": bank, "rooms": args.rooms.split(",") if args.rooms else None, "authors": None}
                  for q in probe_queries(conn, bank, args.queries, args.seed)]
            cases[bank] = (ps, exact_top10(conn, ps))
        built = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"rcll.{args.index}",)).fetchone()[0]  # type: ignore[index]
        rows = sweep(conn, set_ef, cases, efs, "as built")
        if args.rebuild:
            conn.execute("SET maintenance_work_mem = '3GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            t = time.perf_counter()
            conn.execute(f"DROP INDEX rcll.{args.index}")
            # the same definition (a partial index keeps its WHERE), other build parameters
            # (an index built with the defaults has no WITH: it goes after the column list)
            conn.execute(re.sub(r" WITH \([^)]*\)", f" WITH ({args.rebuild})", built) if " WITH (" in built
                         else re.sub(r"(USING hnsw \([^)]*\))", rf"\1 WITH ({args.rebuild})", built, count=1))
            print(f"rebuilt with ({args.rebuild}) in {time.perf_counter() - t:.0f} s "
                  f"(was: {built})", flush=True)
            rows += sweep(conn, set_ef, cases, efs, f"rebuilt ({args.rebuild})")
    print(f"\ndense recall@10 vs exact, {args.queries} queries a bank ({'rooms ' + args.rooms if args.rooms else 'unfiltered'}), "
          "the same queries in every row")
    print(table(["index", "ef_search", "bank", "recall@10 (mean)", "worst query", "p50 ms", "p95 ms"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
