"""Which verbs still answer while one Citus worker is down, for a bank on a worker that is up.

    .venv/bin/python -m bench.citus_worker_down [--port 26140]

Needs Citus built into the embedded PostgreSQL (`make citus`). Starts a throwaway cluster (a
coordinator and two workers, rcll.citus_cluster, loopback ports --port..--port+2), installs rcll,
makes six banks of three units each through `Memory`, kills one worker's postmaster (kill -9),
then calls each verb of `Memory` once for a bank on the other worker (and recall for a bank on the
dead one), its reads included (keyed state, tags, the floor plan, merge proposals, retention, a unit's
history, the session's rules), printing for each whether it answered or was refused, with its time. A verb refused
here needs every worker up: it writes a reference table (which has a copy on every node), or one of
its statements names no bank and so reaches every shard. The worker is restarted at the end.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench._common import citus_store
from rcll import Memory, citus_cluster
from rcll.errors import RcllError
from rcll.settings import DEFAULTS


def attempt(name: str, fn: Callable[[], Any]) -> None:
    t = time.perf_counter()
    try:
        fn()
        print(f"| {name} | answers | {time.perf_counter() - t:.2f} |", flush=True)
    except (RcllError, psycopg.Error) as e:
        said = str(e).splitlines()[0]
        code = getattr(e, "code", None) or getattr(e, "sqlstate", None)
        print(f"| {name} | refused, {code}: {said[:90]}... | {time.perf_counter() - t:.2f} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=26140, help="the coordinator's; the workers +1, +2")
    args = ap.parse_args()
    missing = citus_cluster.citus_missing()
    if missing:
        print(missing)
        return 2
    with citus_store(args.port) as cl:
        banks = [f"team{i}" for i in range(6)]
        with Memory(cl.url()) as m:
            for b in banks:
                m.create_bank(b)
                m.retain_many(["Carol owns billing.", "We deploy with Argo CD.", "Dave is on call."], bank=b)
        with psycopg.connect(cl.url(), autocommit=True) as conn:
            where = dict(conn.execute(
                "SELECT b.name, s.nodeport FROM rcll.banks b JOIN citus_shards s ON s.shardid = "
                "get_shard_id_for_distribution_column('rcll.memory_units', b.bank_id) WHERE b.name = ANY (%s)",
                (banks,)).fetchall())
        dead = next(w for w in cl.workers if w.port in where.values())
        up = next((b for b in banks if where[b] != dead.port), None)
        down = next(b for b in banks if where[b] == dead.port)
        print(f"banks per worker: {where}; killing worker :{dead.port}")
        if up is None:
            print("every bank hashed to one worker: nothing to compare")
            return 1
        with Memory(cl.url(), bank=up) as m:
            units = m.units().units
        citus_cluster.kill(dead)
        time.sleep(2)
        print(f"\n| verb, bank {up} on the worker that is up | answer | s |\n| --- | --- | --- |")
        with Memory(cl.url(), bank=up, agent="alice") as m:
            attempt("recall", lambda: m.recall("who owns billing?"))
            attempt("retain", lambda: m.retain("Erin runs the load test."))
            attempt("retain_many", lambda: m.retain_many(["Frank reviews it.", "Gina signs off."]))
            attempt("put_state", lambda: m.put_state("ops", "freeze", {"until": "friday"}, expected_version=0))
            attempt("get_state", lambda: m.get_state("ops", "freeze"))
            attempt("get_states", lambda: m.get_states([("ops", "freeze")]))
            attempt("state_history", lambda: m.state_history("ops", "freeze"))
            attempt("state_keys", lambda: m.state_keys())
            attempt("tags", lambda: m.tags())
            attempt("floor_plan", lambda: m.floor_plan())
            attempt("merge_proposals", lambda: m.merge_proposals(include_decided=True))
            attempt("retention (the policies)", lambda: m.retention())
            attempt("history (of a unit)", lambda: m.history(units[1].unit_id))
            attempt("session_start", lambda: m.session_start())
            attempt("stats", lambda: m.stats())
            attempt("rooms", lambda: m.rooms())
            attempt("export", lambda: m.export(io.BytesIO()))
            exported = list(m.export_lines())
            attempt("import (its own export, on_conflict skip)", lambda: m.import_lines(exported, on_conflict="skip"))
            attempt("units (the console's list)", lambda: m.units())
            attempt("forget (one unit)", lambda: m.forget(unit_ids=[units[0].unit_id], dry_run=False, reason="drill"))
            attempt("forget_state", lambda: m.forget_state("ops", "freeze", dry_run=False, reason="drill"))
            attempt("correct", lambda: m.correct(units[1].unit_id, "We deploy with Argo CD since May.", reason="drill"))
            attempt("create_bank", lambda: m.create_bank("another"))
            attempt("banks (the list)", lambda: m.banks())
            attempt("upkeep", lambda: m.upkeep())
        with Memory(cl.url(), bank=up, agent="alice", settings=DEFAULTS.replace(llm_provider="offline")) as m:
            attempt("retain, extracting facts (offline)",
                    lambda: m.retain("Carol moved to the billing team in May 2024.", room="people"))
        with Memory(cl.url(), bank=down) as m:
            attempt(f"recall, bank {down} on the dead worker", lambda: m.recall("who owns billing?"))
        citus_cluster.restart(dead)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
