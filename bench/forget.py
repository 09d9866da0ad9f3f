"""Forgetting a tenth of a 100k-unit bank, in batches, while that bank is read and another is written.

    .venv/bin/python -m bench.forget [--units 100000] [--batch 1000] [--port 55733]

Builds bench.recall's synthetic bank (binary COPY: texts drawn from a vocabulary, embeddings around
topic centres, entities, links), gives documents drawn across it (a tenth of its units) a thread of their own, and forgets that
thread with rcll.forget(thread => ..., batch => n) until nothing remains - each call its own
transaction, as Memory.forget(batch=n) runs it. Meanwhile, on connections of their own:

- a reader recalls in the same bank (rcll.recall_candidates, the SQL phase of a recall: six channels
  fused; bench.recall's queries) one query after another; its latencies during the forget are
  compared with the same queries run just before it;
- a writer retains a one-chunk document into another bank every 0.2 s (rcll.retain_chunks, one
  transaction each); every write must complete in under a second.

Prints the forget's throughput (units forgotten per second of wall time, the batches' own time
apart), the recall latencies without and during it, and the writes' latencies.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

import numpy as np
import psycopg

from bench._common import connect, create_database, embedded_cluster, pct, query_params, table
from bench.recall import BANK, CHANNELS, DIM, build, queries

RECALL = CHANNELS["fused (6 channels, z-score sum)"]
OTHER = "other"


def recall_once(conn: psycopg.Connection[Any], q: dict[str, Any]) -> float:
    t = time.perf_counter()
    conn.execute(RECALL, query_params(q, BANK)).fetchall()
    return (time.perf_counter() - t) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000, help="units per forget call (one transaction each)")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--port", type=int, default=55733)
    args = ap.parse_args()
    with embedded_cluster(args.port, prefix="rcllforget-") as pg:
        dsn = create_database(pg, "forget")
        with connect(dsn, autocommit=True) as conn:
            t = time.perf_counter()
            d = build(conn, args.units)
            # Whole documents, drawn across the whole bank (a fixed scatter of their ids), up to a tenth of the units.
            conn.execute("UPDATE rcll.memory_units SET thread = 'forget-me' WHERE document_id IN ("
                         " SELECT x.document_id FROM (SELECT u.document_id, sum(count(*)) OVER"
                         " (ORDER BY (u.document_id * 7919) %% 10007, u.document_id) AS upto FROM rcll.memory_units u"
                         " WHERE u.bank_id = rcll._bank_id(%s) GROUP BY u.document_id) x WHERE x.upto <= %s)",
                         (BANK, args.units // 10))
            conn.execute("SELECT rcll.create_bank(%s)", (OTHER,))
            conn.execute("VACUUM ANALYZE rcll.memory_units")
            selected = conn.execute("SELECT count(*) FROM rcll.memory_units WHERE thread = 'forget-me'").fetchone()[0]  # type: ignore[index]
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{args.units:,} units built in {time.perf_counter() - t:.0f} s; {selected:,} selected to forget; "
                  f"load average {load}", flush=True)
            qs = queries(d, args.queries)

            with connect(dsn, autocommit=True) as reader:
                for q in qs[:5]:
                    recall_once(reader, q)                       # warm the caches both runs read
                before = [recall_once(reader, q) for q in qs]

            done = threading.Event()
            during: list[float] = []
            writes: list[float] = []
            errors: list[BaseException] = []

            def read() -> None:
                try:
                    with connect(dsn, autocommit=True) as c:
                        i = 0
                        while not done.is_set():
                            during.append(recall_once(c, qs[i % len(qs)]))
                            i += 1
                except BaseException as e:      # noqa: BLE001 - reported after the run
                    errors.append(e)

            def write() -> None:
                rng = np.random.default_rng(3)
                try:
                    with connect(dsn, autocommit=True) as c:
                        i = 0
                        while not done.is_set():
                            v = rng.normal(size=DIM).astype(np.float32)
                            text = f"Write {i} into the other bank while the big one forgets."
                            t0 = time.perf_counter()
                            c.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s],"
                                      " embeddings => ARRAY[%s::vector])", (OTHER, text, text, v / np.linalg.norm(v)))
                            writes.append((time.perf_counter() - t0) * 1000)
                            i += 1
                            done.wait(0.2)
                except BaseException as e:      # noqa: BLE001
                    errors.append(e)

            workers = [threading.Thread(target=read), threading.Thread(target=write)]
            for w in workers:
                w.start()
            time.sleep(1.0)
            forgotten, batches, longest = 0, 0, 0.0
            t0 = time.perf_counter()
            while True:
                b0 = time.perf_counter()
                rows = dict(conn.execute("SELECT kind, count FROM rcll.forget(bank => %s, thread => 'forget-me',"
                                         " dry_run => false, batch => %s, reason => 'bench')",
                                         (BANK, args.batch)).fetchall())
                longest = max(longest, time.perf_counter() - b0)
                forgotten += rows["units"]
                batches += 1
                if rows["remaining"] == 0:
                    break
            elapsed = time.perf_counter() - t0
            done.set()
            for w in workers:
                w.join()
            if errors:
                raise errors[0]
            left = conn.execute("SELECT count(*) FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)",
                                (BANK,)).fetchone()[0]  # type: ignore[index]
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())

    print(f"\nforgot {forgotten:,} of {args.units:,} units ({left:,} left) in {batches} batches of ~{args.batch} "
          f"in {elapsed:.1f} s: {forgotten / elapsed:,.0f} units/s; longest batch {longest * 1000:.0f} ms; "
          f"load average {load}\n")
    print(table(["recall in the same bank (SQL phase, ms)", "queries", "p50", "p95"], [
        ["without a forget", len(before), pct(before, 0.5), pct(before, 0.95)],
        ["during the forget", len(during), pct(during, 0.5), pct(during, 0.95)],
    ]))
    print()
    print(table(["write into another bank during the forget (ms)", "writes", "p50", "p95", "max"], [
        ["rcll.retain_chunks, one chunk", len(writes), pct(writes, 0.5), pct(writes, 0.95), max(writes)],
    ]))
    ok = bool(writes) and max(writes) < 1000
    print(f"\nevery write into another bank under 1 s: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
