"""What delegating a bank's verb whole to its worker changes, verb by verb, through a Citus coordinator.

    nice -n 5 .venv/bin/python -m bench.citus_delegation [--port 26140] [--rounds 30]

Needs Citus built into the embedded PostgreSQL (`make citus`). Starts a throwaway cluster (a
coordinator and two workers, rcll.citus_cluster, loopback ports --port..--port+2), installs rcll,
fills one bank (60 chunks, 3 keyed states of 5 versions), then calls each verb of `Memory` --rounds
times both ways, in alternation: delegated (the *_in_bank twin, one command to the bank's worker:
sql/functions/616-citus-delegated-verbs.sql) and routed (the function itself through the
coordinator, which sends each of its statements to the worker: what a Memory did before the twins,
forced here by marking the Memory's store as not distributed). Prints p50 per verb, both ways, and
their ratio. Loopback: between machines each statement's round trip costs more. (correct has no
twin: measured here while it had one, at ba202eb, its delegated p50 was 77 ms against 29 routed -
rcll._in_bank_twins says why.)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench._common import citus_store
from rcll import Memory, citus_cluster
from rcll.settings import DEFAULTS

BANK = "delegation"


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=26140, help="the coordinator's; the workers +1, +2")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    missing = citus_cluster.citus_missing()
    if missing:
        print(missing)
        return 2
    with citus_store(args.port) as cl:
        offline = DEFAULTS.replace(llm_provider="offline")
        with Memory(cl.url(), bank=BANK, agent="alice", settings=offline) as m:
            m.create_bank(BANK)
            m.retain_many([f"Service {i} is owned by team {i % 7} and deployed with Argo CD." for i in range(60)])
            for key in ("freeze", "owner", "window"):
                for v in range(5):
                    m.put_state("ops", key, {"v": v}, expected_version=v)
            version = {"put": 5}
            n = {"retain": 0}

            def put() -> None:
                m.put_state("ops", "freeze", {"v": version["put"]}, expected_version=version["put"])
                version["put"] += 1

            def retain_facts() -> None:
                n["retain"] += 1
                m.retain(f"Carol moved to the billing team {n['retain']} in May 2024.")

            verbs: list[tuple[str, Callable[[], Any]]] = [
                ("get_state", lambda: m.get_state("ops", "freeze")),
                ("get_states (3 keys)", lambda: m.get_states([("ops", "freeze"), ("ops", "owner"), ("ops", "window")])),
                ("state_history", lambda: m.state_history("ops", "owner")),
                ("state_keys", lambda: m.state_keys()),
                ("put_state", put),
                ("forget_state (dry run)", lambda: m.forget_state("ops", "window")),
                ("retain, extracting facts (offline)", retain_facts),
                ("export (NDJSON stream)", lambda: b"".join(m.export_lines())),
            ]
            for _, fn in verbs:            # warm: the models, the plans, the pool
                fn()
            print(f"bank {BANK!r}: {len(m.units(limit=500).units)} units; {args.rounds} rounds a verb and way\n")
            print("| verb | delegated p50 ms | routed p50 ms | routed / delegated |\n| --- | --- | --- | --- |")
            for name, fn in verbs:
                ways: dict[bool, list[float]] = {True: [], False: []}
                for _ in range(args.rounds):
                    for delegated in (True, False):
                        m._shared.in_bank = delegated      # routed: as if the store were not distributed
                        ways[delegated].append(timed(fn))
                m._shared.in_bank = True
                d, r = statistics.median(ways[True]), statistics.median(ways[False])
                print(f"| {name} | {d:.1f} | {r:.1f} | {r / d:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
