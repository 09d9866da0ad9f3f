"""An import into one bank does not hold up writes into another: a 50k-unit export stream is
imported into bank A while a writer retains into bank B every 50 ms. Prints the B write latencies
during the import (p50 / p95 / max) and the import's rate.

    PYTHONPATH=python:tests:. .venv/bin/python -m bench.import_isolation [--units 50000]
                                                                (RCLL_BENCH_DSN to reuse a database)
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

from bench._common import fresh_database


def run(dsn: str, units: int) -> dict[str, float]:
    import psycopg

    from rcll.memory import Memory

    with psycopg.connect(dsn, autocommit=True) as conn:
        for bank in ("source", "b"):
            conn.execute("SELECT rcll.create_bank(%s)", (bank,))
        per = 500
        for start in range(0, units, per):
            chunks = [f"source note {i}: service {i % 97} deploys on day {i % 31} via tool {i % 13}."
                      for i in range(start, min(units, start + per))]
            conn.execute("SELECT rcll.retain_chunks(bank => 'source', content => %s, chunks => %s, embeddings => NULL, "
                         "room => 'deployment')", ("\n".join(chunks), chunks))
    with Memory(dsn) as memory:
        lines = list(memory.export_lines(bank="source"))
        head = json.loads(lines[0])
        head["bank"] = "a"
        rows = [json.loads(x) for x in lines[1:-1]]
        for r in rows:
            if r["table"] == "banks":
                r["row"]["name"] = "a"
        from harness.fuzz_import import seal
        stream = seal(head, rows).splitlines(keepends=True)

        done = threading.Event()
        result: dict[str, float] = {}

        def importer() -> None:
            t0 = time.perf_counter()
            res = memory.import_lines(stream)
            result["seconds"] = time.perf_counter() - t0
            result["units"] = res.rows.get("memory_units", 0)
            done.set()

        latencies: list[float] = []
        t = threading.Thread(target=importer)
        with psycopg.connect(dsn, autocommit=True) as writer:
            t.start()
            i = 0
            while not done.is_set():
                t0 = time.perf_counter()
                writer.execute("SELECT rcll.retain_chunks(bank => 'b', content => %s, chunks => ARRAY[%s], "
                               "embeddings => NULL)", (f"b write {i}", f"b write {i}"))
                latencies.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.05)
            t.join()
    latencies.sort()
    return {"units": result["units"], "import_s": result["seconds"], "rate": result["units"] / result["seconds"],
            "writes": len(latencies), "p50_ms": statistics.median(latencies) * 1000,
            "p95_ms": latencies[int(0.95 * (len(latencies) - 1))] * 1000, "max_ms": latencies[-1] * 1000}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--units", type=int, default=50_000)
    args = p.parse_args()
    with fresh_database("importiso", port=55491) as dsn:
        r = run(dsn, args.units)
    print(f"import of {r['units']:.0f} units into bank a: {r['import_s']:.1f} s ({r['rate']:.0f} units/s)")
    print(f"writes into bank b during it: {r['writes']:.0f}, p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, "
          f"max {r['max_ms']:.1f} ms ({'under' if r['max_ms'] < 1000 else 'OVER'} 1 s)")
    return 0 if r["max_ms"] < 1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
