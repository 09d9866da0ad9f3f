"""Write rate into two kept fleet stores' biggest banks, in alternating bursts, and their ratio:

    .venv/bin/python -m bench.recall --fleet 1000000 --no-rerank --split 20000 --keep --port 55544
    .venv/bin/python -m bench.recall --fleet 100000 --no-rerank --split 20000 --keep --port 55543
    .venv/bin/python -m bench.fleet_writes --big '<1M URL, dbname=fleet>' --small '<100k URL, dbname=fleet>'

Each round writes `--burst` fresh one-unit documents (bench.fleet.write_rate: retain_chunks, one
transaction each, given embeddings; new content every round, since a re-retained document is
deduplicated) into each store in turn, the order alternating, so the machine's drift falls on both
alike. Prints each round and the medians' ratio (the issue's bar: the big store within 20%).
"""

from __future__ import annotations

import argparse
import statistics

import psycopg
from pgvector.psycopg import register_vector

from bench._common import table
from bench.fleet import write_rate


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", required=True, help="the bigger kept store's URL (bench.recall --keep prints it)")
    ap.add_argument("--small", required=True, help="the smaller kept store's URL")
    ap.add_argument("--bank", default="fleet-000", help="the bank written in both (default: the biggest)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--burst", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1000, help="content seed; change it to rerun on the same stores")
    args = ap.parse_args()
    with psycopg.connect(args.big, autocommit=True) as big, psycopg.connect(args.small, autocommit=True) as small:
        for c in (big, small):
            register_vector(c)
        rates: dict[str, list[float]] = {"big": [], "small": []}
        rows = []
        for i in range(args.rounds):
            seed = args.seed + 7 * i
            order = [("big", big), ("small", small)] if i % 2 == 0 else [("small", small), ("big", big)]
            for name, conn in order:
                rates[name].append(write_rate(conn, args.bank, args.burst, seed=seed))
            rows.append([i, rates["big"][-1], rates["small"][-1], rates["big"][-1] / rates["small"][-1]])
            print(f"  round {i}: big {rates['big'][-1]:.0f}, small {rates['small'][-1]:.0f} units/s", flush=True)
    print(table(["round", "big store units/s", "small store units/s", "ratio"], rows))
    mb, ms = statistics.median(rates["big"]), statistics.median(rates["small"])
    print(f"\nmedians: big {mb:.0f} units/s, small {ms:.0f} units/s: ratio {mb / ms:.2f} "
          f"(per-round median {statistics.median(r[3] for r in rows):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
