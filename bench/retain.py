"""Chunk-mode retain throughput vs the bare embedder, on the same LoCoMo-sized texts, in one run.

Embedding is the physical limit of keyless retain; the figure that matters is the ratio
retain rate / embedder rate (target >= 0.75), taken in one run so machine noise cancels.
Each phase runs in its own child process, so peak memory (max RSS) is per phase.

    .venv/bin/python -m bench.retain [--turns 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time
from typing import Any

from bench._common import connect, fresh_database, table
from bench.locomo.dataset import load_conversations


def texts(n: int) -> list[tuple[str, Any]]:
    turns = [t for c in load_conversations() for t in c.turns]
    out, seen = [], set()
    for i in range(n):
        t = turns[i % len(turns)]
        text = f"{t.speaker}: {t.text}"
        # LoCoMo has 5,882 turns, some repeated ("Thanks!"): repeats are numbered so that every
        # text is a distinct document (re-retaining identical content is a deliberate no-op).
        if text in seen:
            text = f"{text} (#{i})"
        seen.add(text)
        out.append((text, t.date))
    return out


def embed_phase(n: int, q: Any) -> None:
    from rcll.models import get_embedder

    data = [s for s, _ in texts(n)]
    emb = get_embedder()
    emb.embed(data[:64])  # load + warm up outside the timed part, as retain's server would be
    t = time.perf_counter()
    emb.embed(data)
    q.put((n / (time.perf_counter() - t), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


# Rooms as callers type them: the janitor canonicalises the variants (deploy, Deploys -> deployment).
ROOMS = ["deployment", "deploy", "Deploys", "infrastructure", "infra_structure", "schema", "Schemas", "auth",
         "ui", "api", "pipeline", "marketing", "orchestrator"]
SCOPING_TRIGGERS = ["units_author", "units_janitor", "units_room_counts_inserted"]


def retain_phase(dsn: str, bank: str, n: int, rooms: bool, scoping: bool, q: Any) -> None:
    from rcll.models import get_embedder
    from rcll.retain import Document, retain_many

    docs = [Document(content=s, occurred_at=d, room=ROOMS[i % len(ROOMS)] if rooms else None)
            for i, (s, d) in enumerate(texts(n))]
    get_embedder().embed([d.content for d in docs[:64]])
    with connect(dsn) as conn:
        conn.execute("SELECT rcll.create_bank(%s)", (bank,))
        for trigger in SCOPING_TRIGGERS:  # off only to measure what they cost; never in production
            conn.execute(f"ALTER TABLE rcll.memory_units {'ENABLE' if scoping else 'DISABLE'} TRIGGER {trigger}")
        conn.commit()
        try:
            t = time.perf_counter()
            results = retain_many(conn, bank, docs, via="bench")
            rate = n / (time.perf_counter() - t)
        finally:
            for trigger in SCOPING_TRIGGERS:
                conn.execute(f"ALTER TABLE rcll.memory_units ENABLE TRIGGER {trigger}")
            conn.commit()
        assert sum(r.created for r in results) == n
    q.put((rate, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def run(target: Any, *args: Any) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    out = q.get()
    p.join()
    return out  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--janitor", action="store_true",
                    help="also retain with the janitor, author and registry triggers off, and report their cost")
    a = ap.parse_args()
    rows, jrows = [], []
    with fresh_database("bench_retain") as dsn:
        for r in range(a.repeat):
            e_rate, e_mem = run(embed_phase, a.turns)
            r_rate, r_mem = run(retain_phase, dsn, f"retain{r}", a.turns, a.janitor, True)
            rows.append([r + 1, e_rate, r_rate, r_rate / e_rate, e_mem, r_mem])
            print(f"run {r + 1}: embedder {e_rate:.1f}/s, retain {r_rate:.1f}/s, ratio {r_rate / e_rate:.3f}",
                  flush=True)
            if a.janitor:
                off_rate, _ = run(retain_phase, dsn, f"off{r}", a.turns, True, False)
                jrows.append([r + 1, r_rate, off_rate, off_rate / r_rate - 1])
                print(f"run {r + 1}: scoping triggers off {off_rate:.1f}/s", flush=True)
    med = [statistics.median(col) for col in list(zip(*rows))[1:]]
    rows.append(["median", *med])
    print(f"\nchunk-mode retain of {a.turns:,} LoCoMo turns (one document each), INT8 bge-small on CPU")
    print(table(["run", "embedder turns/s", "retain turns/s", "retain/embedder", "embedder peak MiB",
                 "retain peak MiB"], rows))
    if jrows:
        jrows.append(["median", *[statistics.median(col) for col in list(zip(*jrows))[1:]]])
        print("\nwhat the janitor, author and registry triggers add to retain time (rooms typed with variants)")
        print(table(["run", "retain turns/s (triggers on)", "retain turns/s (off)", "time added by triggers"],
                    jrows))


if __name__ == "__main__":
    main()
