"""SQL recall through the model service beside Memory.recall, on the same bank, in one run.

    .venv/bin/python -m bench.sql_recall [--size 100000] [--queries 40] [--callers 8] [--rounds 3]
                                         [--deadline-ms 1000] [--runs 2] [--keep]
    .venv/bin/python -m bench.sql_recall --dsn <the URL a --keep run printed>/sqlrecall [--runs 2]

Builds bench.recall's synthetic fleet store in a fresh embedded PG 18 cluster, starts `rcll models`
(a process of its own: the one copy of the models every backend shares; it registers itself with
rcll.use_model_service), then:

1. side by side, query by query in turn: `SELECT * FROM rcll.recall(<text>, rcll.recall_scope(...))`
   on one connection (every phase in the database: embedding and rerank from the service) and
   Memory.recall in this process (its own models, the channels side by side on two connections) -
   both with the shipped depths, no deadline; p50/p95 and the ratio;
2. `--callers` threads, each on its own connection, run the SQL recall with deadline_ms (the HTTP
   default, 1000) for `--rounds` rounds over the queries: p50/p95 against the deadline, and the
   service's resident memory before and after (the models load once, whatever the callers).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench._common import connect, create_database, embedded_cluster, pct, table, vacuum_analyze
from bench.recall import BANK, build, queries
from rcll.memory import Memory

SQL = """SELECT count(*) FROM rcll.recall(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true),
                                         deadline_ms => %(deadline)s)"""


# Queries drawn from a bank built earlier (--dsn), as bench.recall.queries draws them from its build:
# five words of a unit's text, a third naming an entity of that unit, a third a time; filters mixed.
_DRAWN = """SELECT u.text, (SELECT e.name FROM rcll.unit_entities ue JOIN rcll.entities e USING (entity_id)
                          WHERE ue.unit_id = u.unit_id ORDER BY e.entity_id LIMIT 1)
            FROM rcll.memory_units u WHERE u.bank_id = rcll._bank_id(%s) ORDER BY mod(u.unit_id * 7919, 100003) LIMIT %s"""


def queries_from_bank(conn: psycopg.Connection[Any], count: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    times = ["last week", "in March 2024", "yesterday", "2 months ago", "before January 2024", "last year"]
    out = []
    for q, (text, entity) in enumerate(conn.execute(_DRAWN, (BANK, count)).fetchall()):
        words = [w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 3]
        query = " ".join(rng.choice(words, size=min(5, len(words)), replace=False)) if words else "status"
        if q % 3 == 0 and entity:
            query += " about " + entity
        if q % 3 == 1:
            query += " " + times[q % len(times)]
        kind = ["none", "none", "big room", "tiny room", "author"][q % 5]
        f: dict[str, Any] = {}
        if kind == "big room":
            f["rooms"] = ["engineering"]
        elif kind == "tiny room":
            f["rooms"] = [f"room-{int(rng.integers(0, 200))}"]
        elif kind == "author":
            f["authors"] = [f"agent-{int(rng.integers(0, 10))}"]
            f["include_self_declared"] = True   # the synthetic writers declared themselves
        out.append({"text": query, "filters": f})
    return out


def notice_kind(message: str) -> str:
    """What a NOTICE says recall did without: where the deadline's time went."""
    for needle, kind in (("after the channels", "rerank skipped (channels spent the deadline)"),
                         ("channel was to start", "channels skipped by the deadline"),
                         ("cut the rerank", "rerank cut"), ("cut the context view", "context view cut"),
                         ("did not answer within", "service late"), ("has not answered", "service still late"),
                         ("deadline passed while waiting for a model slot", "no model slot in time"),
                         ("busy", "service busy")):
        if needle in message:
            return kind
    return "other"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def params(q: dict[str, Any], deadline: int | None) -> dict[str, Any]:
    return {"q": q["text"], "bank": BANK, "rooms": q["filters"].get("rooms"), "authors": q["filters"].get("authors"),
            "deadline": deadline}


def start_service(dsn: str) -> subprocess.Popen[str]:
    # Its default socket directory: in the temporary directory itself, so the server's OS user
    # can reach it (a directory under a private one could not be).
    proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "models", "--dsn", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for _ in range(2):
        line = proc.stdout.readline()
        print(f"  {line.rstrip()}", flush=True)
    return proc


def side_by_side(dsn: str, qs: list[dict[str, Any]]) -> list[list[Any]]:
    sql_ms: list[float] = []
    py_ms: list[float] = []
    with connect(dsn, autocommit=True) as conn, Memory(dsn, install=False) as memory:
        for q in qs[:3]:                                   # warm both: connections, caches, models
            conn.execute(SQL, params(q, None))
            memory.recall(q["text"], bank=BANK, **q["filters"])
        for i, q in enumerate(qs):
            order = ("sql", "py") if i % 2 == 0 else ("py", "sql")
            for which in order:
                t = time.perf_counter()
                if which == "sql":
                    conn.execute(SQL, params(q, None)).fetchone()
                    sql_ms.append((time.perf_counter() - t) * 1000)
                else:
                    memory.recall(q["text"], bank=BANK, **q["filters"])
                    py_ms.append((time.perf_counter() - t) * 1000)
    ratio = statistics.median(sql_ms) / statistics.median(py_ms)
    return [["SELECT * FROM rcll.recall(...) (service)", statistics.median(sql_ms), pct(sql_ms, 0.95), f"{ratio:.2f}"],
            ["Memory.recall (in process)", statistics.median(py_ms), pct(py_ms, 0.95), "1.00"]]


def concurrent(dsn: str, qs: list[dict[str, Any]], callers: int, rounds: int,
               deadline: int) -> tuple[list[float], Counter[str], int]:
    times: list[float] = []
    notices: Counter[str] = Counter()
    errors = [0]
    lock = threading.Lock()

    def caller(k: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: notices.update([notice_kind(d.message_primary or "")]))
            for r in range(rounds):
                for q in qs[k::callers] if r else qs[k::callers][:2]:
                    t = time.perf_counter()
                    try:
                        conn.execute(SQL, params(q, deadline)).fetchone()
                    except psycopg.Error as e:      # a recall must never fail: count it, say what it was
                        print(f"  error: {str(e).splitlines()[0]}", flush=True)
                        with lock:
                            errors[0] += 1
                    with lock:
                        times.append((time.perf_counter() - t) * 1000)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, notices, errors[0]


def measure(dsn: str, qs: list[dict[str, Any]], args: argparse.Namespace, pid: int, label: str) -> None:
    before = rss_mb(pid)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{label}: side by side, the shipped depths, no deadline (load average {load}):")
    print(table(["recall", "wall p50 ms", "wall p95 ms", "p50 ratio to Memory.recall"], side_by_side(dsn, qs)),
          flush=True)
    times, notices, errors = concurrent(dsn, qs, args.callers, args.rounds, args.deadline_ms)
    after = rss_mb(pid)
    print(f"\n{label}: {args.callers} concurrent SQL callers, deadline_ms {args.deadline_ms}, {len(times)} recalls:")
    print(table(["callers", "p50 ms", "p95 ms", "max ms", "within deadline", "NOTICEs", "errors",
                 "service RSS MB before / after"],
                [[args.callers, statistics.median(times), pct(times, 0.95), max(times),
                  f"{sum(x <= args.deadline_ms for x in times)}/{len(times)}",
                  ", ".join(f"{k} {n}" for k, n in notices.most_common()) or "-", errors,
                  f"{before:.0f} / {after:.0f}"]]))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average after: {load}", flush=True)


def run(dsn: str, qs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    service = start_service(dsn)
    try:
        for k in range(1, args.runs + 1):
            measure(dsn, qs, args, service.pid, f"run {k} of {args.runs}")
    finally:
        service.terminate()
        service.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deadline-ms", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1, help="measure this many times on the one bank")
    ap.add_argument("--port", type=int, default=55540)
    ap.add_argument("--keep", action="store_true", help="keep the cluster afterwards (its URL is printed)")
    ap.add_argument("--dsn", help="a database a --keep run built: its bank, queries drawn from it, no build")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    if args.dsn:
        # A bank built by an earlier run (--keep): measure again without building it again.
        with connect(args.dsn, autocommit=True) as conn:
            qs = queries_from_bank(conn, args.queries)
        run(args.dsn, qs, args)
        return 0
    with embedded_cluster(args.port, prefix="rclls-", keep=args.keep) as pg:
        dsn = create_database(pg, "sqlrecall")
        with connect(dsn, autocommit=True) as conn:
            t = time.perf_counter()
            d = build(conn, args.size)
            vacuum_analyze(conn)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{args.size:,} units built in {time.perf_counter() - t:.0f} s; load average {load}", flush=True)
        run(dsn, queries(d, args.queries), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
