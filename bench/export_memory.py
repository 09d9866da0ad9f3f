"""Peak memory of `rcll export` on a large bank: for each N, a bank of N synthetic units (384-dim
normalised embeddings, documents, entities, aliases, unit-entity mentions, temporal and entity links,
supersessions, room-state versions) is bulk-loaded, then a child process runs `rcll export` (the CLI
entry point, in-process) and reports its peak RSS (ru_maxrss). The table shows memory staying flat
as N grows.

    .venv/bin/python -m bench.export_memory [--units 1000 10000 100000]

Loading: set-based INSERT ... SELECT generate_series, with the embeddings built in SQL
(l2_normalize of 384 random() values per row). The HNSW index is dropped for the load - maintaining
it row by row was what made the setup slow - and is NOT rebuilt by default: an export reads each
table by bank and key (ORDER BY unit_id), never by vector distance, so the index cannot change what
is measured (pass --rebuild-hnsw to rebuild it anyway; it is always rebuilt on a database reused
through RCLL_BENCH_DSN). The row triggers on memory_units (lexical, author, janitor) and the
statement trigger (room registry) stay enabled, so units look as the engine writes them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import connect, drop_indexes, fresh_database, table

ROOT = Path(__file__).resolve().parents[1]   # the child runs as -m bench.export_memory from here

# Peak RSS of the exporting process that docs/benchmarks.md promises at every size measured (MB): 81 MB was
# measured at both 10k and 100k units (it plateaus once a FETCH batch of 2000 rows is full).
CEILING_MB = 100
HNSW = "memory_units_embedding_hnsw"
STATE_VERSIONS = 10


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def drop_hnsw(conn: Any) -> str | None:
    """Drop the HNSW index; returns its definition (None if it was already gone)."""
    return drop_indexes(conn, [HNSW]).get(HNSW)


def rebuild_hnsw(conn: Any, indexdef: str) -> float:
    t = time.perf_counter()
    conn.execute("SET max_parallel_maintenance_workers = 0")
    conn.execute("SET maintenance_work_mem = '256MB'")
    conn.execute(indexdef)
    return time.perf_counter() - t


def populate(dsn: str, bank: str, n: int) -> dict[str, float]:
    """Bulk-load bank `bank` with n units and their satellites; returns seconds per phase."""
    times: dict[str, float] = {}
    docs = max(1, n // 10)
    ents = max(10, n // 50)
    keys = max(5, n // 1000)
    with connect(dsn, autocommit=True) as conn:
        b = conn.execute("SELECT rcll.create_bank(%s)", (bank,)).fetchone()[0]  # type: ignore[index]
        p = {"b": b, "bank": bank, "n": n, "docs": docs, "ents": ents, "keys": keys, "versions": STATE_VERSIONS}

        def step(name: str, query: str) -> None:
            t = time.perf_counter()
            conn.execute(query, p)
            times[name] = times.get(name, 0.0) + time.perf_counter() - t

        with conn.transaction():
            step("documents", """
                INSERT INTO rcll.documents (bank_id, content, content_hash, source, provenance, occurred_at)
                SELECT %(b)s, 'Document ' || g || ': notes from the deploy review, ' || md5(g::text),
                       sha256(convert_to(%(bank)s || ':' || g, 'UTF8')), 'bench://doc/' || g,
                       '{"via": "bench"}', timestamptz '2026-01-01' + g * interval '1 minute'
                FROM generate_series(1, %(docs)s) g""")
            p["d0"] = conn.execute("SELECT min(document_id) FROM rcll.documents WHERE bank_id = %s",
                                   (b,)).fetchone()[0]  # type: ignore[index]
            # One statement, so unit ids are consecutive: u0 + g - 1. Embeddings: 384 uniform values
            # in [-0.5, 0.5), L2-normalised (pgvector's l2_normalize), a fresh draw per row.
            step("memory_units", """
                INSERT INTO rcll.memory_units (bank_id, document_id, kind, text, embedding, room, hall, author,
                                               tags, chunk_index, occurred_start, mentioned_at, provenance, metadata)
                SELECT %(b)s, %(d0)s + (g %% %(docs)s), (ARRAY['chunk', 'fact', 'fact', 'observation'])[1 + g %% 4],
                       'Unit ' || g || ' about deploys, schemas and the auth service; note ' || md5(g::text),
                       public.l2_normalize(v.a::public.vector),
                       (ARRAY['deployment', 'schema', 'auth', 'Deployments', NULL])[1 + g %% 5],
                       (ARRAY['fact', 'decision', 'event', 'preference', 'rule'])[1 + g %% 5],
                       'agent-' || (g %% 7), ARRAY['bench', 'ticket:' || (g %% 97)], (g / %(docs)s)::int,
                       timestamptz '2026-01-01' + g * interval '1 minute',
                       timestamptz '2026-01-01' + g * interval '1 minute', '{"via": "bench"}',
                       jsonb_build_object('seq', g)
                FROM generate_series(1, %(n)s) g
                CROSS JOIN LATERAL (SELECT array_agg((random() - 0.5)::real) AS a
                                    FROM generate_series(1, 384) WHERE g > 0) v""")
            p["u0"] = conn.execute("SELECT min(unit_id) FROM rcll.memory_units WHERE bank_id = %s",
                                   (b,)).fetchone()[0]  # type: ignore[index]
            step("supersessions", """
                UPDATE rcll.memory_units SET superseded_by = unit_id + 1,
                       valid = tstzrange(lower(valid), lower(valid) + interval '1 day'), updated_at = now()
                WHERE bank_id = %(b)s AND (unit_id - %(u0)s) %% 50 = 49 AND unit_id - %(u0)s < %(n)s - 1""")
            step("entities", """
                INSERT INTO rcll.entities (bank_id, name, entity_type, embedding, mention_count)
                SELECT %(b)s, 'Service ' || e, (ARRAY['service', 'person', 'project'])[1 + e %% 3],
                       public.l2_normalize(v.a::public.vector), 0
                FROM generate_series(1, %(ents)s) e
                CROSS JOIN LATERAL (SELECT array_agg((random() - 0.5)::real) AS a
                                    FROM generate_series(1, 384) WHERE e > 0) v""")
            p["e0"] = conn.execute("SELECT min(entity_id) FROM rcll.entities WHERE bank_id = %s",
                                   (b,)).fetchone()[0]  # type: ignore[index]
            step("entity_aliases", """
                INSERT INTO rcll.entity_aliases (bank_id, alias, entity_id, source)
                SELECT %(b)s, a.alias, %(e0)s + e - 1, a.source
                FROM generate_series(1, %(ents)s) e,
                     LATERAL (VALUES ('service ' || e, 'extractor'), ('svc-' || e, 'resolver')) a(alias, source)""")
            # Every unit mentions one entity, every third a second one.
            step("unit_entities", """
                INSERT INTO rcll.unit_entities (unit_id, entity_id, bank_id, role)
                SELECT %(u0)s + g - 1, %(e0)s + x.e, %(b)s, x.role
                FROM generate_series(1, %(n)s) g,
                     LATERAL (VALUES (g %% %(ents)s, 'subject'), ((g * 7 + 1) %% %(ents)s, 'object')) x(e, role)
                WHERE x.role = 'subject' OR (g %% 3 = 0 AND (g * 7 + 1) %% %(ents)s <> g %% %(ents)s)""")
            step("entities", """
                UPDATE rcll.entities e SET mention_count = c.n
                FROM (SELECT entity_id, count(*) AS n FROM rcll.unit_entities WHERE bank_id = %(b)s
                      GROUP BY entity_id) c
                WHERE e.entity_id = c.entity_id""")
            # A temporal chain through all units; an entity link from every fifth unit to the previous
            # unit mentioning the same entity; the supersedes links matching superseded_by.
            step("links", """
                INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight, provenance)
                SELECT %(b)s, %(u0)s + g - 1, %(u0)s + g - 2, 'temporal', 0.5, '{"via": "bench"}'::jsonb
                FROM generate_series(2, %(n)s) g
                UNION ALL
                SELECT %(b)s, %(u0)s + g - 1, %(u0)s + g - 1 - %(ents)s, 'entity', 0.8, '{"via": "bench"}'::jsonb
                FROM generate_series(%(ents)s + 1, %(n)s) g WHERE g %% 5 = 0
                UNION ALL
                SELECT %(b)s, superseded_by, unit_id, 'supersedes', 1.0, '{"via": "bench"}'::jsonb
                FROM rcll.memory_units WHERE bank_id = %(b)s AND superseded_by IS NOT NULL""")
            step("room_state", """
                INSERT INTO rcll.room_state (bank_id, room, key, version, value, provenance)
                SELECT %(b)s, r, 'key-' || k, v,
                       jsonb_build_object('spread', k * v, 'note', 'version ' || v || ' of key ' || k),
                       jsonb_build_object('via', 'bench', 'expected_version', v - 1)
                FROM unnest(ARRAY['deployment', 'schema', 'auth']) r, generate_series(1, %(keys)s) k,
                     generate_series(1, %(versions)s) v""")
        t = time.perf_counter()
        conn.execute("ANALYZE rcll.memory_units")
        times["analyze"] = time.perf_counter() - t
    return times


def child(dsn: str, bank: str, out: str) -> None:
    """Run `rcll export` in this process and report its peak RSS."""
    # Import what the export will import, so the baseline is the interpreter plus the code.
    import portable_ai_memory  # noqa: F401
    import rfc8785  # noqa: F401
    import tqdm  # noqa: F401

    import rcll.export  # noqa: F401
    from rcll.cli import main

    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    buf = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = main(["export", "--dsn", dsn, "--bank", bank, "--out", out, "--json"])
    secs = time.perf_counter() - t
    if rc != 0:
        raise SystemExit(f"rcll export exited {rc}: {buf.getvalue()[-500:]}")
    summary = json.loads(buf.getvalue())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = sum(f.stat().st_size for f in Path(out).rglob("*") if f.is_file())
    print(json.dumps({"units": summary["tables"]["memory_units"], "rows": sum(summary["tables"].values()),
                      "seconds": secs, "base_rss_mb": base_mb, "peak_rss_mb": peak_mb,
                      "export_mb": size / 2**20}))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--units", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--rebuild-hnsw", action="store_true",
                   help="rebuild the HNSW index after loading (export does not use it)")
    p.add_argument("--child", nargs=3, metavar=("DSN", "BANK", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return 0
    reused = bool(os.environ.get("RCLL_BENCH_DSN"))
    rows = []
    with fresh_database("exportmem", port=55492) as dsn:
        with connect(dsn, autocommit=True) as conn:
            indexdef = drop_hnsw(conn)
        try:
            for n in args.units:
                bank = f"bench{n}-{int(time.time())}" if reused else f"bench{n}"
                t = time.perf_counter()
                phases = populate(dsn, bank, n)
                load = time.perf_counter() - t
                _log(f"loaded {n} units in {load:.1f} s (" +
                     ", ".join(f"{k} {v:.1f}" for k, v in phases.items()) + ")")
                with tempfile.TemporaryDirectory(prefix="rclle-") as tmp:
                    res = subprocess.run([sys.executable, "-m", "bench.export_memory", "--child", dsn, bank, str(Path(tmp) / "x")],
                                         check=False, capture_output=True, text=True, cwd=ROOT)
                if res.returncode != 0:
                    _log(res.stderr[-2000:])
                    return 2
                r = json.loads(res.stdout.strip().splitlines()[-1])
                _log(f"exported {r['units']} units: {r}")
                rows.append([r["units"], r["rows"], load, r["seconds"], round(r["units"] / r["seconds"]),
                             r["export_mb"], r["base_rss_mb"], r["peak_rss_mb"]])
        finally:
            if indexdef and (reused or args.rebuild_hnsw):
                with connect(dsn, autocommit=True) as conn:
                    _log(f"rebuilt {HNSW} in {rebuild_hnsw(conn, indexdef):.1f} s")
    print(table(["units", "rows (all tables)", "load s", "export s", "units/s", "export MB",
                 "RSS before export MB", "peak RSS MB"], rows))
    worst = max(r[-1] for r in rows)
    print(f"ceiling {CEILING_MB} MB: {'held' if worst <= CEILING_MB else 'EXCEEDED'} (worst {worst:.0f} MB)")
    return 0 if worst <= CEILING_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
