"""Bank isolation on a Citus cluster: what its policies cost a SQL role's recall and retain.

    nice -n 5 .venv/bin/python -m bench.citus_isolation [--port 26300] [--units 3000] [--queries 20] [--rounds 3]

Starts a coordinator and two workers (rcll.citus_cluster on 127.0.0.1, ports --port to --port + 2,
track_functions = all), installs rcll, fills bank `mine` and a neighbour bank with --units units
each (random 384-dimension embeddings, texts over a small vocabulary so that the lexical channel
finds hundreds of candidates), and makes an rcll_agent login with its credentials on every node
(rcll.citus_cluster.add_login_role, as docs/scaling.md tells a DBA), granted `mine`. Then, for
--rounds rounds, isolation off and on in turn, as that role:

- recall: `rcll.recall_in_bank` (delegated: the whole recall on the bank's worker, as the role)
  for --queries queries, with a query embedding - the dense, lexical, entity, graph and temporal
  channels and the fusion;
- retain: `rcll.retain_chunks_in_bank` (delegated) of a 5-chunk document with embeddings;

and prints p50 / p95 milliseconds per call, and how many times the policies called
`rcll._visible_banks` per call on the bank's worker (pg_stat_user_functions): once per scan where
the planner makes it an index condition, again at each rescan of a nested loop's inner side and
per row where it filters. The owner's calls (never isolated) are the baseline. Removes the
cluster afterwards.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench._common import pct, table
from rcll import citus_cluster, install
from rcll.db import configure
from rcll.settings import Settings

DIM = 384
WORDS = ["deploy", "rollback", "billing", "invoice", "gateway", "latency", "alert", "backup", "restore", "cluster", "shard", "worker",
         "release", "canary", "incident", "pager", "owner", "service", "queue", "cache", "index", "vacuum", "replica", "failover"]


def _vectors(rng: np.random.Generator, n: int) -> list[str]:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return ["[" + ",".join(f"{x:.4f}" for x in row) + "]" for row in v]


def _text(rng: np.random.Generator, i: int) -> str:
    return f"note {i}: " + " ".join(rng.choice(WORDS, size=8))


def _fill(conn: psycopg.Connection[Any], bank: str, units: int, rng: np.random.Generator) -> int:
    (bank_id,) = conn.execute("SELECT rcll.create_bank(%s)", (bank,)).fetchone()  # type: ignore[misc]
    for d in range(0, units, 50):
        chunks = [_text(rng, d + i) for i in range(min(50, units - d))]
        conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(%s, %s, %s, %s, %s::vector[])",
                     (bank_id, bank, "\n".join(chunks), chunks, _vectors(rng, len(chunks))))
    return int(bank_id)


def _calls(worker_url: str) -> int:
    with psycopg.connect(worker_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = '_visible_banks'").fetchone()
    return int(row[0]) if row else 0


def _measure(dsn: str, worker_url: str, bank: str, bank_id: int, queries: list[tuple[str, str]],
             rng: np.random.Generator) -> tuple[list[float], list[float], float, float]:
    """Recall and retain timings (ms) on one connection as dsn's role, and _visible_banks calls per call."""
    recall_ms, retain_ms = [], []
    with psycopg.connect(dsn, autocommit=True) as conn:
        configure(conn)
        conn.add_notice_handler(lambda d: None)
        (scope,) = conn.execute("SELECT rcll.recall_scope(%s)::text", (bank,)).fetchone()  # type: ignore[misc]
        conn.execute("SELECT count(*) FROM rcll.recall_in_bank(%s, %s, %s::rcll.recall_scope, query_embedding => %s::vector)",
                     (bank_id, queries[0][0], scope, queries[0][1]))      # the worker's connection, warm
        before = _calls(worker_url)
        for text, vector in queries:
            t = time.perf_counter()
            conn.execute("SELECT count(*) FROM rcll.recall_in_bank(%s, %s, %s::rcll.recall_scope, query_embedding => %s::vector)",
                         (bank_id, text, scope, vector)).fetchone()
            recall_ms.append((time.perf_counter() - t) * 1000)
        mid = _calls(worker_url)
        for i in range(len(queries)):
            chunks = [_text(rng, 10_000_000 + i * 10 + j) for j in range(5)]
            t = time.perf_counter()
            conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(%s, %s, %s, %s, %s::vector[])",
                         (bank_id, bank, "\n".join(chunks), chunks, _vectors(rng, 5))).fetchall()
            retain_ms.append((time.perf_counter() - t) * 1000)
        after = _calls(worker_url)
    return recall_ms, retain_ms, (mid - before) / len(queries), (after - mid) / len(queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=26300)
    parser.add_argument("--units", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    base = Path(tempfile.mkdtemp(prefix="rcllb-iso-", dir="/tmp"))
    t0 = time.perf_counter()
    try:
        with citus_cluster.running(base, args.port, Settings.from_env(), {"track_functions": "all"}) as citus:
            with psycopg.connect(citus.url(), autocommit=True) as conn:
                install.install(conn)
                configure(conn)
                bank_id = _fill(conn, "mine", args.units, rng)
                _fill(conn, "theirs", args.units, rng)
                worker_port = conn.execute("SELECT nodeport FROM citus_shards WHERE shardid = "
                                           "get_shard_id_for_distribution_column('rcll.memory_units', %s)", (bank_id,)).fetchone()
                conn.execute("VACUUM ANALYZE")
            worker_url = citus.url(citus.worker_of(int(worker_port[0]) if worker_port else 0))
            name, password = f"bench_agent_{secrets.token_hex(4)}", secrets.token_hex(16)
            role_dsn = citus_cluster.add_login_role(citus, name, password, member_of="rcll_agent")
            with psycopg.connect(citus.url(), autocommit=True) as conn:
                conn.execute("SELECT rcll.grant_bank(%s, 'mine')", (name,))
            print(f"cluster, install and fill ({args.units} units in each of 2 banks): {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
            queries = [(" ".join(rng.choice(WORDS, size=3)), v) for v in _vectors(rng, args.queries)]
            runs: dict[tuple[str, str], list[Any]] = {}
            for _ in range(args.rounds):
                for isolation in ("off", "on"):
                    with psycopg.connect(citus.url(), autocommit=True) as conn:
                        conn.execute(f"SELECT rcll.{'enable' if isolation == 'on' else 'disable'}_bank_isolation()")
                    for who, dsn in (("owner", citus.url()), ("rcll_agent login", role_dsn)):
                        recall, retain, per_recall, per_retain = _measure(dsn, worker_url, "mine", bank_id, queries, rng)
                        run = runs.setdefault((isolation, who), [[], [], [], []])
                        run[0] += recall
                        run[1] += retain
                        run[2].append(per_recall)
                        run[3].append(per_retain)
            rows = [[isolation, who, pct(r[0], 0.5), pct(r[0], 0.95), pct(r[1], 0.5), pct(r[1], 0.95),
                     f"{np.mean(r[2]):.0f}", f"{np.mean(r[3]):.0f}"]
                    for (isolation, who), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
            print(f"\n{args.rounds} rounds x {args.queries} recalls and {args.queries} retains (5 chunks) per row, "
                  f"bank of {args.units} units, delegated to its worker\n")
            print(table(["isolation", "as", "recall p50 ms", "recall p95 ms", "retain p50 ms", "retain p95 ms",
                         "_visible_banks calls / recall", "/ retain"], rows))
            citus_cluster.drop_login_role(citus, name)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
