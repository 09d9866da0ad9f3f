"""Room registry under concurrent writers: exact counts, no deadlock, no lost row.

16 writers retain chunk-mode documents into overlapping rooms (spelling variants included, so the
janitor rewrites some of them) for 30 s while a background job folds the count queue every second.
Afterwards: fold once more and compare every room's registry count with count(*) of its units, and
the rows the writers were told they wrote with the rows in the table.

    .venv/bin/python -m bench.registry_concurrency [--writers 16] [--seconds 30] [--chunks 4] [--embeddings]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from typing import Any

import numpy as np
import psycopg

from bench._common import connect, fresh_database, table

ROOMS = ["deployment", "deploy", "Deploys", "ui", "api", "API", "schema", "infra", "infrastructure",
         "auth", "testing", "tests", "orchestrator", "Orchestrators", "marketing", None]


def writer(dsn: str, n: int, stop: float, chunks: int, embeddings: bool, out: dict[str, Any], lock: threading.Lock) -> None:
    rng = random.Random(n)
    nrng = np.random.default_rng(n)
    rows = deadlocks = errors = 0
    with connect(dsn, autocommit=True) as conn:
        i = 0
        while time.monotonic() < stop:
            i += 1
            texts = [f"writer {n} doc {i} chunk {c}: {rng.random()}" for c in range(chunks)]
            embs = None
            if embeddings:
                v = nrng.standard_normal((chunks, 384)).astype(np.float32)
                embs = list(v / np.linalg.norm(v, axis=1, keepdims=True))
            try:
                row = conn.execute(
                    "SELECT cardinality(unit_ids) FROM rcll.retain_chunks(bank => 'bench', content => %s, chunks => %s,"
                    " embeddings => %s, room => %s)", ("\n".join(texts), texts, embs, rng.choice(ROOMS))).fetchone()
                rows += row[0] if row else 0
            except psycopg.errors.DeadlockDetected:
                deadlocks += 1
            except psycopg.Error:
                errors += 1
    with lock:
        out["rows"] += rows
        out["deadlocks"] += deadlocks
        out["errors"] += errors


def folder(dsn: str, stop: float, out: dict[str, Any]) -> None:
    with connect(dsn, autocommit=True) as conn:
        while time.monotonic() < stop:
            try:
                conn.execute("SELECT rcll.fold_room_counts()")
                out["folds"] += 1
            except psycopg.errors.DeadlockDetected:
                out["deadlocks"] += 1
            time.sleep(1.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--embeddings", action="store_true", help="random 384-d embeddings (default: NULL)")
    args = ap.parse_args()
    with fresh_database("bench", port=55481) as dsn:
        with connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT rcll.create_bank('bench')")
            conn.execute("SET client_min_messages = error")
        out: dict[str, Any] = {"rows": 0, "deadlocks": 0, "errors": 0, "folds": 0}
        lock = threading.Lock()
        start = time.monotonic()
        stop = start + args.seconds
        threads = [threading.Thread(target=writer, args=(dsn, n, stop, args.chunks, args.embeddings, out, lock))
                   for n in range(args.writers)]
        threads.append(threading.Thread(target=folder, args=(dsn, stop, out)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        with connect(dsn, autocommit=True) as conn:
            pending_before = conn.execute("SELECT count(*) FROM rcll.room_count_queue").fetchone()[0]  # type: ignore[index]
            # Exact before the final fold too: rcll.rooms() adds the pending deltas.
            before = dict(conn.execute("SELECT name, fact_count FROM rcll.rooms('bench') WHERE fact_count <> 0").fetchall())
            conn.execute("SELECT rcll.fold_room_counts()")
            after = dict(conn.execute("SELECT name, fact_count FROM rcll.rooms('bench') WHERE fact_count <> 0").fetchall())
            actual = dict(conn.execute("""SELECT room, count(*) FROM rcll.memory_units
                                          WHERE room IS NOT NULL GROUP BY room""").fetchall())
            total = conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone()[0]  # type: ignore[index]
            per_room = sorted(after.items(), key=lambda kv: -kv[1])
        mismatches = sum(1 for r in set(actual) | set(after) if actual.get(r) != after.get(r))
        mismatches_unfolded = sum(1 for r in set(actual) | set(before) if actual.get(r) != before.get(r))
        print(table(["writers", "seconds", "rows", "rows/s", "deadlocks", "errors", "lost rows", "folds",
                     "pending deltas at end", "count mismatches (unfolded)", "count mismatches (folded)"],
                    [[args.writers, round(elapsed, 1), total, round(total / elapsed), out["deadlocks"], out["errors"],
                      out["rows"] - total, out["folds"], pending_before, mismatches_unfolded, mismatches]]))
        print()
        print(table(["room", "registry count", "count(*)"], [[r, c, actual.get(r)] for r, c in per_room]))


if __name__ == "__main__":
    main()
