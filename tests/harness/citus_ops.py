"""Operations a DBA runs on a Citus cluster, under writers and readers (rcll.citus_cluster):

- rebalance: a third worker added (citus_add_node) and citus_rebalance_start() run to its end
  (citus_rebalance_wait) in its default mode (auto: logical replication, writes go on);
- isolate: the big bank isolated onto a shard group of its own (isolate_tenant_to_new_shard
  ... CASCADE) and that group moved onto a worker added for it (citus_move_shard_placement);
- kill: kill -9 of the postmaster of the worker holding most banks; the banks on the others must keep answering, the
  banks on it must be refused fast with RC010 (HTTP 503 with Retry-After) naming the node; the
  worker restarts and every acknowledged write must be there.

    .venv/bin/python -m bench.citus_ops [--drills rebalance isolate kill] [--port 26140]

Half the writers and readers go through the Python client (Memory), half through the HTTP server
(rcll.http on loopback): every answer is counted by its code ("python RC010", "http 503 RC010").
A write counts as acknowledged when retain returned (200 over HTTP); the audit reads every
document of every bank through the coordinator. The nodes run synchronous_commit on: a commit is
acknowledged once its WAL is written, so a killed server's acknowledged writes survive (fsync
stays off - the OS keeps what a killed process wrote).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from rcll import citus_cluster, install
from rcll.citus_cluster import CitusCluster
from rcll.errors import Code, RcllError
from rcll.memory import Memory

DRILLS = ("rebalance", "isolate", "kill")
DURABLE = {"synchronous_commit": "on"}
BIG = "big"
QUERIES = ("which writer recorded step three?", "what did the deploy pipeline record?", "who passed the rollout?")
DEADLINE_MS = 1000          # the servers' default recall deadline (RCLL_DEADLINE_MS)


@dataclass
class Load:
    """Every answer the writers and readers got: (when, bank, verb, code or "ok", seconds)."""

    acked: dict[str, str] = field(default_factory=dict)             # content -> bank
    answers: list[tuple[float, str, str, str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def note(self, bank: str, verb: str, code: str, seconds: float) -> None:
        with self.lock:
            self.answers.append((time.monotonic(), bank, verb, code, seconds))


class Refused(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code)
        self.code, self.message = code, message


class Python:
    name = "python"

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except RcllError as e:
            raise Refused(f"python {e.code.value}", str(e)) from e
        except Exception as e:  # noqa: BLE001 - anything else is what the drill must not see
            raise Refused(f"python {type(e).__name__}", str(e)) from e

    def retain(self, bank: str, content: str) -> None:
        self._call(lambda: self.memory.retain(content, bank=bank, room="ops"))

    def recall(self, bank: str, query: str) -> None:
        self._call(lambda: self.memory.recall(query, bank=bank, rerank_depth=0, context_depth=0,
                                              deadline_ms=DEADLINE_MS))


class Http:
    name = "http"

    def __init__(self, base: str) -> None:
        self.client = httpx.Client(base_url=base, timeout=60.0)

    def _post(self, path: str, body: dict[str, Any]) -> None:
        try:
            r = self.client.post(path, json=body)
        except httpx.HTTPError as e:
            raise Refused(f"http {type(e).__name__}", str(e)) from e
        if r.status_code == 200:
            return
        try:
            doc = r.json()
        except ValueError:
            doc = {}
        code = f"http {r.status_code} {doc.get('code', '?')}"
        if r.status_code == 503 and "retry-after" not in r.headers:
            code += " without Retry-After"
        raise Refused(code, f"{doc.get('error')} ({doc.get('hint')})")

    def retain(self, bank: str, content: str) -> None:
        self._post("/retain", {"bank": bank, "content": content, "room": "ops"})

    def recall(self, bank: str, query: str) -> None:
        self._post("/recall", {"bank": bank, "query": query, "rerank_depth": 0, "context_depth": 0})


Client = Python | Http


def _writer(client: Client, banks: list[str], w: int, load: Load, run: str, messages: dict[str, str]) -> None:
    n = 0
    while not load.stop.is_set():
        bank = banks[n % len(banks)]
        content = f"Writer {w} recorded step {n % 7} of run {run} item {n} in {bank}: the rollout passed."
        t = time.perf_counter()
        try:
            client.retain(bank, content)
            with load.lock:
                load.acked[content] = bank
            load.note(bank, "retain", "ok", time.perf_counter() - t)
        except Refused as e:
            load.note(bank, "retain", e.code, time.perf_counter() - t)
            messages.setdefault(e.code, e.message)
            time.sleep(0.1)
        n += 1
        time.sleep(0.02)


def _reader(client: Client, banks: list[str], r: int, load: Load, messages: dict[str, str]) -> None:
    i = r
    while not load.stop.is_set():
        bank = banks[i % len(banks)]
        t = time.perf_counter()
        try:
            client.recall(bank, QUERIES[i % len(QUERIES)])
            load.note(bank, "recall", "ok", time.perf_counter() - t)
        except Refused as e:
            load.note(bank, "recall", e.code, time.perf_counter() - t)
            messages.setdefault(e.code, e.message)
            time.sleep(0.1)
        i += 1
        time.sleep(0.05)


@contextlib.contextmanager
def served(memory: Memory, port: int) -> Iterator[str]:
    """The HTTP API over memory on loopback port, in a thread of this process."""
    import uvicorn

    from rcll.http import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(service=memory, host="127.0.0.1"), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextlib.contextmanager
def loaded(clients: list[Client], banks: list[str], writers: int, readers: int, run: str) -> Iterator[tuple[Load, dict[str, str]]]:
    """writers and readers running (alternately through each client) until the block ends."""
    load, messages = Load(), {}
    threads = [threading.Thread(target=_writer, args=(clients[w % len(clients)], banks[w::writers] or banks, w, load, run,
                                                      messages), daemon=True) for w in range(writers)]
    threads += [threading.Thread(target=_reader, args=(clients[r % len(clients)], banks, r, load, messages), daemon=True)
                for r in range(readers)]
    for t in threads:
        t.start()
    try:
        yield load, messages
    finally:
        load.stop.set()
        for t in threads:
            t.join(timeout=60)


def stored(url: str, banks: list[str]) -> list[str]:
    """Every document's content in these banks, read through the coordinator."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT d.content FROM rcll.documents d JOIN rcll.banks b USING (bank_id) WHERE b.name = ANY (%s)", (banks,))]


def groups_per_worker(url: str) -> dict[int, int]:
    """Shard groups (memory_units shards, each with its 17 co-located shards) per worker port."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {int(p): int(n) for p, n in conn.execute(
            "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = 'rcll.memory_units'::regclass "
            "GROUP BY 1 ORDER BY 1")}


def bank_ports(url: str, banks: list[str]) -> dict[str, int]:
    """The port of the worker holding each bank."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {str(b): int(p) for b, p in conn.execute(
            "SELECT b.name, s.nodeport FROM rcll.banks b JOIN citus_shards s "
            "ON s.shardid = get_shard_id_for_distribution_column('rcll.memory_units', b.bank_id) "
            "WHERE b.name = ANY (%s)", (banks,))}


@dataclass
class Result:
    drill: str
    seconds: float                         # the operation's own time (rebalance, isolation + move, restart)
    acknowledged: int
    present: int
    lost: int
    codes: Counter[str]
    retain_ok: int
    retain_tried: int
    recall_ok: int
    recall_tried: int
    before: dict[int, int]
    after: dict[int, int]
    max_failed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)

    @property
    def bad(self) -> bool:
        return self.lost > 0 or any(not c.endswith(Code.UNAVAILABLE.value) for c in self.codes)


def _result(drill: str, seconds: float, load: Load, messages: dict[str, str], url: str, banks: list[str],
            before: dict[int, int], after: dict[int, int]) -> Result:
    present = set(stored(url, banks))
    acked = dict(load.acked)
    answers = list(load.answers)
    return Result(drill=drill, seconds=seconds, acknowledged=len(acked), present=len(present & set(acked)),
                  lost=len(set(acked) - present), codes=Counter(a[3] for a in answers if a[3] != "ok"),
                  retain_ok=sum(1 for a in answers if a[2] == "retain" and a[3] == "ok"),
                  retain_tried=sum(1 for a in answers if a[2] == "retain"),
                  recall_ok=sum(1 for a in answers if a[2] == "recall" and a[3] == "ok"),
                  recall_tried=sum(1 for a in answers if a[2] == "recall"),
                  before=before, after=after, max_failed_s=max((a[4] for a in answers if a[3] != "ok"), default=0.0),
                  messages=messages)


def rebalance(cl: CitusCluster, base: Path, port: int, clients: list[Client], banks: list[str], *, writers: int,
              readers: int, before_s: float, after_s: float, log: Callable[[str], None] = print) -> Result:
    """Add a worker at port and rebalance onto it (default mode) under load."""
    url = cl.url()
    before = groups_per_worker(url)
    with loaded(clients, banks, writers, readers, "rebalance") as (load, messages):
        time.sleep(before_s)
        citus_cluster.add_worker(cl, base / f"worker{len(cl.workers) + 1}", port)
        t = time.monotonic()
        with cl.connect() as conn:
            conn.execute("SELECT citus_rebalance_start()")
            conn.execute("SELECT citus_rebalance_wait()")
            state = conn.execute("SELECT state FROM pg_dist_background_job ORDER BY job_id DESC LIMIT 1").fetchone()
        seconds = time.monotonic() - t
        log(f"rebalance: {seconds:.1f} s, job {state[0] if state else '?'}")
        time.sleep(after_s)
    r = _result("rebalance", seconds, load, messages, url, banks, before, groups_per_worker(url))
    r.notes.append(f"job {state[0] if state else '?'}")
    return r


def isolate(cl: CitusCluster, base: Path, port: int, clients: list[Client], banks: list[str], *, writers: int,
            readers: int, before_s: float, after_s: float, log: Callable[[str], None] = print) -> Result:
    """Isolate BIG onto a shard group of its own and move it onto a new worker of its own, under load."""
    url = cl.url()
    node = citus_cluster.add_worker(cl, base / f"worker{len(cl.workers) + 1}", port)
    before = groups_per_worker(url)
    with loaded(clients, banks, writers, readers, "isolate") as (load, messages):
        time.sleep(before_s)
        t = time.monotonic()
        with cl.connect() as conn:
            row = conn.execute("SELECT bank_id FROM rcll.banks WHERE name = %s", (BIG,)).fetchone()
            assert row is not None
            shard = conn.execute("SELECT isolate_tenant_to_new_shard('rcll.memory_units', %s, 'CASCADE')",
                                 (row[0],)).fetchone()
            assert shard is not None
            split = time.monotonic() - t
            source = conn.execute("SELECT nodename, nodeport FROM citus_shards WHERE shardid = %s", (shard[0],)).fetchone()
            assert source is not None
            conn.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s)",
                         (shard[0], source[0], source[1], citus_cluster.HOST, node.port))
        seconds = time.monotonic() - t
        log(f"isolate: split {split:.1f} s, move {seconds - split:.1f} s")
        time.sleep(after_s)
    r = _result("isolate", seconds, load, messages, url, banks, before, groups_per_worker(url))
    alone = bank_ports(url, banks)
    r.notes.append(f"split {split:.1f} s + move {seconds - split:.1f} s; {BIG} on :{alone[BIG]}, "
                   f"banks there: {sorted(b for b, p in alone.items() if p == node.port)}")
    return r


@dataclass
class KillFigures:
    live_retain: tuple[int, int] = (0, 0)       # ok, tried on the other workers' banks while the worker was down
    live_recall: tuple[int, int] = (0, 0)
    dead_codes: Counter[str] = field(default_factory=Counter)
    dead_ok: int = 0
    dead_max_s: float = 0.0
    restart_s: float = 0.0
    recover_s: float = 0.0                      # restart begun -> first write acknowledged on a dead bank
    dead_banks: list[str] = field(default_factory=list)
    port: int = 0                               # the killed worker's


def kill(cl: CitusCluster, clients: list[Client], banks: list[str], *, writers: int, readers: int, before_s: float,
         down_s: float, after_s: float, log: Callable[[str], None] = print) -> tuple[Result, KillFigures]:
    """kill -9 of the worker holding most of the banks under load; down_s seconds down; restarted; audited."""
    url = cl.url()
    placed = bank_ports(url, banks)
    victim = max(cl.workers, key=lambda w: sum(1 for p in placed.values() if p == w.port))
    k = KillFigures(dead_banks=sorted(b for b, p in placed.items() if p == victim.port), port=victim.port)
    before = groups_per_worker(url)
    with loaded(clients, banks, writers, readers, "kill") as (load, messages):
        time.sleep(before_s)
        killed = time.monotonic()
        citus_cluster.kill(victim)
        log(f"kill: worker :{victim.port} killed (banks {', '.join(k.dead_banks)})")
        time.sleep(down_s)
        restarted = time.monotonic()
        citus_cluster.restart(victim)
        k.restart_s = time.monotonic() - restarted
        probe = clients[0]
        n = 0
        while time.monotonic() - restarted < 60:
            content = f"Recovery probe {n} after the kill: the worker is back."
            try:
                probe.retain(k.dead_banks[0], content)
            except Refused:
                n += 1
                time.sleep(0.05)
                continue
            with load.lock:
                load.acked[content] = k.dead_banks[0]
            break
        k.recover_s = time.monotonic() - restarted
        log(f"kill: restarted in {k.restart_s:.1f} s, writes acknowledged again after {k.recover_s:.1f} s")
        time.sleep(after_s)
    r = _result("kill", k.recover_s, load, messages, url, banks, before, groups_per_worker(url))
    during = [a for a in load.answers if killed + 0.5 <= a[0] <= restarted]      # 0.5 s: requests in flight at the kill
    live = [a for a in during if a[1] not in k.dead_banks]
    dead = [a for a in during if a[1] in k.dead_banks]
    k.live_retain = (sum(1 for a in live if a[2] == "retain" and a[3] == "ok"), sum(1 for a in live if a[2] == "retain"))
    k.live_recall = (sum(1 for a in live if a[2] == "recall" and a[3] == "ok"), sum(1 for a in live if a[2] == "recall"))
    k.dead_codes = Counter(a[3] for a in dead if a[3] != "ok")
    k.dead_ok = sum(1 for a in dead if a[3] == "ok")
    k.dead_max_s = max((a[4] for a in dead if a[3] != "ok"), default=0.0)
    return r, k


def _codes(c: Counter[str]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(c.items())) or "none"


def _ports(d: dict[int, int]) -> str:
    return " ".join(f":{p} {n}" for p, n in sorted(d.items()))


def table(results: list[Result]) -> str:
    head = ["drill", "operation s", "acknowledged", "present", "lost", "retains ok", "recalls ok", "codes seen",
            "slowest refusal s", "shard groups per worker before", "after"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append("| " + " | ".join(str(x) for x in (
            r.drill, f"{r.seconds:.1f}", r.acknowledged, r.present, r.lost, f"{r.retain_ok}/{r.retain_tried}",
            f"{r.recall_ok}/{r.recall_tried}", _codes(r.codes), f"{r.max_failed_s:.2f}", _ports(r.before), _ports(r.after))) + " |")
    return "\n".join(lines)


def kill_table(k: KillFigures) -> str:
    head = ["banks on the killed worker", "other banks: retains ok", "other banks: recalls ok",
            "killed banks: answers", "slowest refusal s (recall deadline 1.0)", "worker restart s", "writes again after s"]
    row = [", ".join(k.dead_banks), f"{k.live_retain[0]}/{k.live_retain[1]}", f"{k.live_recall[0]}/{k.live_recall[1]}",
           _codes(k.dead_codes) + (f", ok x{k.dead_ok}" if k.dead_ok else ""), f"{k.dead_max_s:.2f}", f"{k.restart_s:.1f}",
           f"{k.recover_s:.1f}"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), "| " + " | ".join(row) + " |"])


def prepare(cl: CitusCluster, banks: int, big_units: int, log: Callable[[str], None] = print) -> list[str]:
    """rcll installed (distributed), BIG with big_units units and `banks` small banks; their names."""
    with psycopg.connect(cl.url()) as conn:
        log(install.install(conn))
        conn.commit()
    names = [BIG] + [f"team{i:02d}" for i in range(banks)]
    with Memory(cl.url(), pool_size=2) as m:
        for name in names:
            m.create_bank(name)
        t = time.monotonic()
        m.retain_many([f"Archive note {i}: build {i % 97} of service {i % 13} passed its checks." for i in range(big_units)],
                      bank=BIG)
        log(f"{BIG}: {big_units} units retained in {time.monotonic() - t:.0f} s")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--drills", nargs="+", choices=DRILLS, default=list(DRILLS))
    p.add_argument("--port", type=int, default=26140,
                   help="the coordinator's; workers +1, +2; added workers +3, +4; the HTTP server +9")
    p.add_argument("--banks", type=int, default=15, help="small banks (plus the big one)")
    p.add_argument("--big-units", type=int, default=2000)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--before", type=float, default=3.0, help="seconds of load before each operation")
    p.add_argument("--after", type=float, default=3.0, help="seconds of load after it")
    p.add_argument("--down", type=float, default=6.0, help="seconds the killed worker stays down")
    args = p.parse_args(argv)
    missing = citus_cluster.citus_missing()
    if missing:
        print(missing)
        return 2
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)       # each drill's line as it ends, also into a file
    logging.getLogger("httpx").setLevel(logging.WARNING)
    base = Path(tempfile.mkdtemp(prefix="rcllops-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    results: list[Result] = []
    figures: KillFigures | None = None
    t0 = time.monotonic()
    cl: CitusCluster | None = None
    try:
        cl = citus_cluster.start(base, args.port, settings=DURABLE)
        banks = prepare(cl, args.banks, args.big_units)
        print(f"cluster up and filled in {time.monotonic() - t0:.0f} s; {len(banks)} banks; load avg "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        load = {"writers": args.writers, "readers": args.readers, "before_s": args.before, "after_s": args.after}
        with Memory(cl.url(), pool_size=args.writers + args.readers) as py, \
                Memory(cl.url(), pool_size=args.writers + args.readers, install=False) as served_memory, \
                served(served_memory, args.port + 9) as url:
            clients: list[Client] = [Python(py), Http(url)]
            if "rebalance" in args.drills:
                results.append(rebalance(cl, base, args.port + 3, clients, banks, **load))
            if "isolate" in args.drills:
                results.append(isolate(cl, base, args.port + 4, clients, banks, **load))
            if "kill" in args.drills:
                r, figures = kill(cl, clients, banks, down_s=args.down, **load)
                results.append(r)
    finally:
        load_avg = os.getloadavg()
        if cl is not None:
            citus_cluster.stop(cl)
        with contextlib.suppress(OSError):
            base.rmdir()
    print(f"load average {load_avg[0]:.1f} / {load_avg[1]:.1f} / {load_avg[2]:.1f} (1 / 5 / 15 min) at the end")
    print(table(results))
    if figures is not None:
        print(kill_table(figures))
    for r in results:
        for note in r.notes:
            print(f"{r.drill}: {note}")
        for code, message in sorted(r.messages.items()):
            print(f"{r.drill}: {code}: {message[:300]}")
    bad = [r for r in results if r.bad] or (figures is not None and (figures.live_retain[0] < figures.live_retain[1]
                                                                     or figures.live_recall[0] < figures.live_recall[1]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
