"""Peak memory of exporting a large bank: a child process exports N synthetic units (with 384-dim
embeddings, links, tags) and reports its peak RSS; the table shows it stays flat as N grows.

    PYTHONPATH=python .venv/bin/python bench/export_memory.py [--units 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import connect, fresh_database, table

CEILING_MB = 400


def populate(dsn: str, bank: str, n: int) -> None:
    with connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank(%s)", (bank,))
        b = conn.execute("SELECT rcll._bank_id(%s)", (bank,)).fetchone()[0]  # type: ignore[index]
        conn.execute("""
            INSERT INTO rcll.documents (bank_id, content, content_hash, provenance)
            SELECT %(b)s, 'doc ' || g, sha256(convert_to(%(bank)s || g, 'UTF8')), '{"via": "bench"}'
            FROM generate_series(1, %(docs)s) g""", {"b": b, "bank": bank, "docs": max(1, n // 10)})
        first = conn.execute("SELECT min(document_id) FROM rcll.documents WHERE bank_id = %s", (b,)).fetchone()[0]  # type: ignore[index]
        conn.execute("""
            INSERT INTO rcll.memory_units (bank_id, document_id, text, embedding, room, hall, tags, provenance)
            SELECT %(b)s, %(first)s + (g %% greatest(1, %(n)s / 10)),
                   'Unit ' || g || ' about deploys and schemas, note ' || md5(g::text),
                   (SELECT array_agg(random()::real)::vector FROM generate_series(1, 384) WHERE g > 0),
                   (ARRAY['deployment', 'schema', 'auth', NULL])[1 + g %% 4], 'fact',
                   ARRAY['bench', 'ticket:' || (g %% 97)], '{"via": "bench"}'
            FROM generate_series(1, %(n)s) g""", {"b": b, "n": n, "first": first})
        conn.execute("""
            INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight)
            SELECT %(b)s, u.unit_id, u.unit_id - 1, 'temporal', 0.5 FROM rcll.memory_units u
            WHERE u.bank_id = %(b)s AND u.unit_id - 1 IN (SELECT unit_id FROM rcll.memory_units WHERE bank_id = %(b)s)""",
                     {"b": b})


def child(dsn: str, bank: str, out: str) -> None:
    from rcll.export import export_bank

    with connect(dsn) as conn:
        t = time.perf_counter()
        s = export_bank(conn, bank, out)
        secs = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = sum(f.stat().st_size for f in Path(out).rglob("*") if f.is_file())
    print(json.dumps({"units": s.tables["memory_units"], "seconds": secs, "peak_rss_mb": peak_mb,
                      "export_mb": size / 2**20}))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--units", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--child", nargs=3, metavar=("DSN", "BANK", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return 0
    rows = []
    with fresh_database("exportmem", port=55492) as dsn:
        for n in args.units:
            bank = f"bench{n}"
            populate(dsn, bank, n)
            with tempfile.TemporaryDirectory(prefix="rclle-") as tmp:
                res = subprocess.run([sys.executable, __file__, "--child", dsn, bank, str(Path(tmp) / "x")],
                                     capture_output=True, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append([r["units"], r["seconds"], r["units"] / r["seconds"], r["export_mb"], r["peak_rss_mb"]])
    print(table(["units", "export s", "units/s", "export MB", "peak RSS MB"], rows))
    worst = max(r[4] for r in rows)
    print(f"ceiling {CEILING_MB} MB: {'held' if worst <= CEILING_MB else 'EXCEEDED'} (worst {worst:.0f} MB)")
    return 0 if worst <= CEILING_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
