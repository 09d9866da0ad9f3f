"""Failover drills: writers and readers on an HA cluster (rcll.hacluster) while its leader fails.

    .venv/bin/python -m bench.failover                        # the three drills and machine death
    PYTHONPATH=python:tests .venv/bin/python -m harness.failover --drills kill-node --after 3

Writers retain through one Memory over the cluster's multi-host DSN (target_session_attrs
read-write) and retry a write refused with RC010 (unavailable) until it is acknowledged - a retry
is safe because a document's identity in a bank is its thread and content (the same content
retained twice in one thread is stored once). Readers recall through a Memory that may read a
standby (recall_from_standby). Each drill, on a bank of its own:

- kill-postgres: kill -9 of the leader's postmaster and backends (Patroni starts it again);
- stop-patroni: SIGTERM to the leader's Patroni (it stops PostgreSQL and hands over);
- partition: the leader's etcd member stopped - the leader alone loses the consensus store
  (each Patroni talks to its own member), the other two members keep a quorum;
- kill-node: kill -9 of the leader's Patroni and PostgreSQL together (the machine dies).

Then whatever was stopped starts again and the old leader must rejoin as a replica (pg_rewind
when its history diverged). The audit reads every node: each acknowledged write present on
each, none twice, nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from rcll.errors import Code, RcllError
from rcll.hacluster import TTL, HACluster
from rcll.memory import Memory

DRILLS = ("kill-postgres", "stop-patroni", "partition", "kill-node")
QUERIES = ("which writer wrote item seven?", "what did the deploy pipeline record?", "where is the pager rotation?")


@dataclass
class Load:
    """The writers' and readers' record: every acknowledgement and every recall, with times."""

    acked: dict[str, float] = field(default_factory=dict)          # content -> when acknowledged
    refused: int = 0                                                # RC010 answers (each retried)
    stored_before: int = 0       # retries answered created=False: the refused attempt had committed
    other_errors: list[str] = field(default_factory=list)
    recalls: list[tuple[float, bool]] = field(default_factory=list)  # (when, succeeded)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


def _writer(memory: Memory, bank: str, w: int, load: Load, pause: float) -> None:
    n = 0
    while not load.stop.is_set():
        content = f"Writer {w} recorded item {n} of the {bank} drill: deploy step {n % 7} passed."
        tries = 0
        while True:     # until acknowledged: a refused write is retried with the same content
            tries += 1
            try:
                result = memory.retain(content, bank=bank, room=f"w{w}")
            except RcllError as e:
                with load.lock:
                    if e.code is Code.UNAVAILABLE:
                        load.refused += 1
                    else:
                        load.other_errors.append(f"{e.code}: {e}")
                time.sleep(0.1)
                continue
            except Exception as e:  # noqa: BLE001 - anything but RC010 is a failure the audit reports
                with load.lock:
                    load.other_errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.1)
                continue
            with load.lock:
                load.acked[content] = time.monotonic()
                load.stored_before += tries > 1 and not result.created
            break
        n += 1
        time.sleep(pause)


def _reader(memory: Memory, bank: str, r: int, load: Load, pause: float) -> None:
    i = r
    while not load.stop.is_set():
        ok = True
        try:
            memory.recall(QUERIES[i % len(QUERIES)], bank=bank, rerank_depth=0, context_depth=0)
        except Exception:  # noqa: BLE001 - counted as a failed recall
            ok = False
        with load.lock:
            load.recalls.append((time.monotonic(), ok))
        i += 1
        time.sleep(pause)


@dataclass
class Result:
    drill: str
    acknowledged: int
    present: int
    lost: int
    duplicated: int
    unexpected: int
    refused: int
    stored_before: int
    other_errors: list[str]
    unavailable_s: float
    recall_ok: int
    recall_tried: int
    leader_before: int
    sync_before: int
    leader_after: int
    rejoined: bool
    rewound: bool
    nodes_equal: bool

    @property
    def recall_rate(self) -> float:
        return self.recall_ok / self.recall_tried if self.recall_tried else float("nan")


def _inject(c: HACluster, drill: str, leader: int) -> Callable[[], None]:
    """Fail the leader as the drill says; return what brings the failed part back."""
    if drill == "kill-postgres":
        c.kill_postgres(leader)
        return lambda: None
    if drill == "stop-patroni":
        c.kill(f"patroni{leader}", signal.SIGTERM)
        return lambda: c.start_node(leader)
    if drill == "partition":
        c.kill(f"etcd{leader}", signal.SIGKILL)
        return lambda: c.start_etcd(leader)
    if drill == "kill-node":
        c.kill(f"patroni{leader}", signal.SIGKILL)
        c.kill_postgres(leader)
        return lambda: c.start_node(leader)
    raise ValueError(drill)


def _contents(dsn: str, bank: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT d.content FROM rcll.documents d JOIN rcll.banks b USING (bank_id) WHERE b.name = %s", (bank,))]


def _caught_up(c: HACluster, deadline: float) -> None:
    """Every node has replayed what the primary had written when this was called."""
    with psycopg.connect(c.dsn("rcll"), autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    assert row is not None
    for i in range(c.nodes):
        with psycopg.connect(c.node_dsn(i), autocommit=True) as conn:
            while True:
                r = conn.execute("SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() < %s::pg_lsn",
                                 (row[0],)).fetchone()
                if r is not None and not r[0]:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node{i} did not catch up")
                time.sleep(0.1)


def drill(c: HACluster, name: str, *, writers: int = 8, readers: int = 4, before: float = 3.0,
          observe: float = TTL + 5.0, after: float = 2.0, timeout: float = 90.0,
          log: Callable[[str], None] = print) -> Result:
    """One drill on a started cluster (see the module's docstring), audited on every node."""
    bank = name.replace("-", "_")
    leader, sync = c.leader(), c.sync_standby()
    assert leader is not None and sync is not None, "no leader or no synchronous standby"
    load = Load()
    with (Memory(c.dsn(), pool_size=writers + 2) as wm,
          Memory(c.dsn(), pool_size=readers + 1, install=False, recall_from_standby=True) as rm):
        wm.create_bank(bank)
        threads = [threading.Thread(target=_writer, args=(wm, bank, w, load, 0.02), daemon=True)
                   for w in range(writers)]
        threads += [threading.Thread(target=_reader, args=(rm, bank, r, load, 0.05), daemon=True)
                    for r in range(readers)]
        for t in threads:
            t.start()
        time.sleep(before)
        log(f"{name}: leader node{leader}, {len(load.acked)} writes acknowledged; failing it")
        failed_at = time.monotonic()
        restore = _inject(c, name, leader)
        deadline = failed_at + timeout
        # Watch for `observe` seconds at least (a leader cut off from etcd goes on acknowledging
        # writes until it demotes itself: writes stop some seconds after the fault, not at it),
        # then until writes flow again: as many acknowledgements in the last 2 s as writers.
        while time.monotonic() < deadline:
            now = time.monotonic()
            with load.lock:
                recent = sum(1 for t in load.acked.values() if t > now - 2.0)
            if now > failed_at + observe and recent >= writers:
                break
            time.sleep(0.1)
        time.sleep(after)
        load.stop.set()
        for t in threads:
            t.join(timeout=30)
        new_leader = c.leader()
        log(f"{name}: node{new_leader} leads; restoring node{leader}")
        restore()
        rejoined = True
        try:
            c.wait_healthy(time.monotonic() + timeout)
            _caught_up(c, time.monotonic() + timeout)
        except Exception as e:  # noqa: BLE001 - reported as not rejoined
            log(f"{name}: the cluster did not become whole again: {e}")
            rejoined = False
    with load.lock:
        acked = dict(load.acked)
        recalls = list(load.recalls)
    # Write unavailability: the longest time without an acknowledgement after the fault; recall is
    # judged from the fault to the end of that gap (the failover).
    times = sorted(t for t in acked.values() if t > failed_at - 1)
    start, end = max(zip(times, times[1:]), key=lambda ab: ab[1] - ab[0], default=(failed_at, failed_at))
    during = [ok for t, ok in recalls if failed_at <= t <= end]
    stored = _contents(c.dsn(), bank)
    per_node = [sorted(_contents(c.node_dsn(i), bank)) for i in range(c.nodes)] if rejoined else []
    log_text = (c.root / f"patroni{leader}.log").read_text(errors="replace")
    present = set(stored)
    return Result(
        drill=name, acknowledged=len(acked), present=len(present & set(acked)),
        lost=len(set(acked) - present), duplicated=len(stored) - len(present),
        unexpected=len(present - set(acked)), refused=load.refused, stored_before=load.stored_before,
        other_errors=sorted(set(load.other_errors))[:5],
        unavailable_s=end - start, recall_ok=sum(during), recall_tried=len(during),
        leader_before=leader, sync_before=sync, leader_after=new_leader if new_leader is not None else -1,
        rejoined=rejoined, rewound="running pg_rewind" in log_text,
        nodes_equal=bool(per_node) and all(p == per_node[0] for p in per_node))


def table(results: list[Result]) -> str:
    head = ["drill", "acknowledged", "present after", "lost", "duplicated", "RC010 answers (retried)", "writes whose refused try had committed",
            "write unavailability s", "recall ok during failover", "leader", "old leader rejoined", "pg_rewind ran",
            "every node equal"]
    rows = [[r.drill, r.acknowledged, r.present, r.lost, r.duplicated, r.refused, r.stored_before, f"{r.unavailable_s:.1f}",
             f"{r.recall_ok}/{r.recall_tried} ({100 * r.recall_rate:.0f}%)",
             f"node{r.leader_before} -> node{r.leader_after}"
             + (" (the sync standby)" if r.leader_after == r.sync_before else ""), "yes" if r.rejoined else "NO",
             "yes" if r.rewound else "no", "yes" if r.nodes_equal else "NO"] for r in results]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--drills", nargs="+", choices=DRILLS, default=list(DRILLS))
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--before", type=float, default=5.0, help="seconds of load before the fault")
    p.add_argument("--observe", type=float, default=TTL + 5.0,
                   help="seconds of load after the fault at least (then until writes flow again)")
    p.add_argument("--after", type=float, default=2.0, help="seconds of load after that")
    p.add_argument("--base-port", type=int, default=26200)
    p.add_argument("--os-user", default=os.environ.get("RCLL_HA_OS_USER", "embedded_postgres"))
    args = p.parse_args(argv)
    # psycopg_pool warns of every connection a failover broke: the table says what matters.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="rcllha-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    os.rmdir(root)
    c = HACluster(root, os_user=args.os_user, base_port=args.base_port)
    results = []
    t0 = time.monotonic()
    try:
        c.start()
        print(f"cluster up in {time.monotonic() - t0:.1f} s (3 etcd members, 3 Patroni nodes, synchronous_mode)")
        for name in args.drills:
            results.append(drill(c, name, writers=args.writers, readers=args.readers,
                                 before=args.before, observe=args.observe, after=args.after))
    finally:
        with contextlib.suppress(Exception):
            c.stop()
    print(table(results))
    for r in results:
        for e in r.other_errors:
            print(f"{r.drill}: writer error other than RC010: {e}")
    bad = [r for r in results if r.other_errors or r.lost or r.duplicated or r.unexpected or not r.rejoined or not r.nodes_equal]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
