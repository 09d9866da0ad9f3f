"""What the janitor and the room registry cost on the write path (target: at most +10%).

Chunk-mode retain of the same documents (rooms typed with spelling variants, some forged tags) with
issue 4's write-path triggers enabled, then disabled with ALTER TABLE ... DISABLE TRIGGER (for the
measurement only). The documents are written in blocks, alternating on/off ABBA block by block, so
table growth and machine load do not favour either side; "on" and "off" write into two banks so the
content-hash dedup never short-circuits a write. Reported: wall time and the server backend's CPU
time (from /proc; robust on a loaded machine). Two comparisons: janitor + registry triggers alone,
and every issue-4 trigger (authors too).

    .venv/bin/python -m bench.janitor_overhead [--docs 400] [--chunks 4] [--reps 4] [--block 50] [--embeddings]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench._common import connect, fresh_database, table

ROOMS = ["deployment", "deploy", "Deploys", "ui", "api", "schema", "infra", "orchestrator", "marketing", None]
JANITOR = ["units_janitor", "units_room_counts_inserted", "units_room_counts_deleted"]
ALL_ISSUE4 = JANITOR + ["units_author"]


def documents(n: int, chunks: int, embeddings: bool) -> list[dict[str, Any]]:
    rng = random.Random(4)
    nrng = np.random.default_rng(4)
    docs = []
    for i in range(n):
        texts = [f"doc {i} chunk {c}: the {rng.choice(['canary', 'login', 'schema', 'button'])} "
                 f"{rng.choice(['failed', 'shipped', 'moved', 'broke'])} at step {rng.randint(1, 99)}" for c in range(chunks)]
        embs = None
        if embeddings:
            v = nrng.standard_normal((chunks, 384)).astype(np.float32)
            embs = list(v / np.linalg.norm(v, axis=1, keepdims=True))
        docs.append({"content": "\n".join(texts), "chunks": texts, "embeddings": embs, "room": rng.choice(ROOMS),
                     "tags": ["author:forged", "team:core"] if i % 5 == 0 else []})
    return docs


def backend_cpu(pid: int) -> float:
    """User + system CPU seconds of a server backend (we run as root, so /proc is readable)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(conn: psycopg.Connection[Any], bank: str, docs: list[dict[str, Any]], pid: int) -> tuple[float, float]:
    c0, t0 = backend_cpu(pid), time.perf_counter()
    for d in docs:
        conn.execute("SELECT rcll.retain_chunks(bank => %(bank)s, content => %(content)s, chunks => %(chunks)s,"
                     " embeddings => %(embeddings)s, room => %(room)s, tags => %(tags)s, author => 'bench')",
                     {**d, "bank": bank})
    return time.perf_counter() - t0, backend_cpu(pid) - c0


def set_triggers(conn: psycopg.Connection[Any], names: list[str], enabled: bool) -> None:
    for name in names:
        conn.execute(f"ALTER TABLE rcll.memory_units {'ENABLE' if enabled else 'DISABLE'} TRIGGER {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--block", type=int, default=50, help="documents per on/off block")
    ap.add_argument("--embeddings", action="store_true", help="random 384-d embeddings (HNSW insert; default NULL)")
    args = ap.parse_args()
    docs = documents(args.docs, args.chunks, args.embeddings)
    rows = []
    with fresh_database("bench", port=55482) as dsn, connect(dsn, autocommit=True) as conn:
        conn.execute("SET client_min_messages = error")
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        conn.execute("SELECT rcll.create_bank('warmup')")
        run(conn, "warmup", docs[: max(1, len(docs) // 4)], pid)
        for n, (label, names) in enumerate([("janitor + registry", JANITOR), ("all issue-4 triggers", ALL_ISSUE4)]):
            wall = {True: 0.0, False: 0.0}
            cpu = {True: 0.0, False: 0.0}
            for rep in range(args.reps):
                banks = {on: f"b{n}_{rep}_{int(on)}" for on in (True, False)}
                for bank in banks.values():
                    conn.execute("SELECT rcll.create_bank(%s)", (bank,))
                for i, start in enumerate(range(0, len(docs), args.block)):
                    block = docs[start:start + args.block]
                    for enabled in ([True, False] if (rep + i) % 2 == 0 else [False, True]):
                        set_triggers(conn, names, enabled)
                        w, c = run(conn, banks[enabled], block, pid)
                        wall[enabled] += w
                        cpu[enabled] += c
                set_triggers(conn, names, True)
            units = args.docs * args.chunks * args.reps
            rows.append([label, args.docs * args.reps, units, "random 384-d" if args.embeddings else "NULL",
                         round(wall[False], 2), round(wall[True], 2), f"{(wall[True] / wall[False] - 1) * 100:+.1f}%",
                         round(cpu[False], 2), round(cpu[True], 2), f"{(cpu[True] / cpu[False] - 1) * 100:+.1f}%"])
    print(table(["triggers", "docs", "units", "embeddings", "wall off s", "wall on s", "wall overhead",
                 "backend CPU off s", "backend CPU on s", "CPU overhead"], rows))


if __name__ == "__main__":
    main()
