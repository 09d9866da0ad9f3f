"""The SQL phase of this tree against an earlier commit's, side by side on one store.

    .venv/bin/python -m bench.recall_ab --ref HEAD~1 [--size 100000] [--queries 60] [--repeat 5]
        [--files 120-channel-lexical.sql,150-recall-candidates.sql] [--side-by-side]

Builds the synthetic store of `bench.recall` (and draws its queries), then installs the functions
that `--files` (under sql/functions/) define at `--ref` beside today's, each renamed with an `_old`
suffix (calls between them renamed too), so `rcll.recall_candidates_old` is the old first stage reading the same tables.
Each query runs on both, warm, then --repeat timed rounds with the order alternating round by
round, so the machine's drift falls on both alike; a side's time for a query is its fastest round.
Prints p50 / p95 per side, the median of the per-query time ratios, and how many queries return
the same units in the same order with the same scores (to 1e-8: a tree from before BM25 rounded its
terms to a 2^-32 grid scores ~1e-9 apart).

--files names the files whose functions the old side runs as they were (default: every file of the
first stage; the channels call rcll._in_scope, so a change to it needs every channel's file too -
a function the old side did not load runs today's code on both sides). --side-by-side also times the
first stage as a recall with a spare connection runs it (rcll.recall.candidates with `side`, inside
a transaction on each connection as Memory.recall's are) against the old side's functions run the
way this tree's client runs them: rcll.recall_channels on both connections, both lists to the
client and back as arrays into rcll.fuse_candidates (the way to time a change to that path).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import recall as bench_recall
from bench._common import connect, create_database, embedded_cluster, pct, query_params, table
from rcll import recall as rcll_recall
from rcll.request import RecallRequest

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = "sql/functions"
# The files defining the first stage's functions, from the scope (rcll._in_scope, which every
# channel inlines) to the fusion.
RECALL_PATH = ("100-bank-stats.sql", "105-recall-scope.sql", "110-channel-dense.sql", "115-channel-context.sql",
               "120-channel-lexical.sql", "125-channel-entity.sql", "127-channel-session.sql", "130-channel-graph.sql",
               "140-temporal-parse.sql", "145-channel-temporal.sql", "147-channel-deadline.sql", "148-recall-channels.sql",
               "150-recall-candidates.sql")
# Both sides read the same units: the store's authors are self-declared (bench.recall writes them
# so), which today's scope leaves out unless include_self_declared, and a ref's _in_scope may not
# know the field at all (it ignores it) - without it, an author-filtered query would be an empty
# scope on one side only.
CALL = ("SELECT unit_id, fused_score FROM rcll.{fn}(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, "
        "authors => %(authors)s, include_self_declared => true), query_embedding => %(qe)s, reference_time => '2024-06-01')")


def old_functions(ref: str, files: list[str]) -> str:
    """The SQL of `files` at git `ref`, every function they define renamed NAME_old."""
    text = "\n".join(subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{FUNCTIONS}/{f}"], check=True,
                                    capture_output=True, text=True).stdout for f in files)
    names = sorted(set(re.findall(r"CREATE OR REPLACE FUNCTION rcll\.(\w+)\(", text)), key=len, reverse=True)
    for name in names:
        text = re.sub(rf"\brcll\.{name}\(", f"rcll.{name}_old(", text)      # definitions, calls, comments
        text = re.sub(rf"(?<![\w.]){name}\.", f"{name}_old.", text)         # parameters qualified by the name
    return text


def _same(a: list[Any], b: list[Any]) -> bool:
    """Both sides returned the same units in the same order with the same scores (to 1e-8)."""
    return len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) <= 1e-8 for x, y in zip(a, b, strict=True))


def _summary(times: dict[str, list[float]], same: int, queries: int) -> list[list[Any]]:
    """Each side's p50 and p95, the median per-query ratio, and how many answers were the same."""
    ratios = [x / y for x, y in zip(times["this tree"], times["old"], strict=True)]
    rows: list[list[Any]] = [[side, statistics.median(v), pct(v, 0.95)] for side, v in times.items()]
    rows.append(["median per-query ratio (this tree / old)", statistics.median(ratios), ""])
    rows.append(["same units, order and scores", f"{same}/{queries}", ""])
    return rows


def compare(conn: psycopg.Connection[Any], qs: list[dict[str, Any]], repeat: int = 5) -> list[list[Any]]:
    """Each query on both sides, warm, then `repeat` timed rounds (the sides alternating within
    and across rounds); a side's time for the query is its fastest round. One timed round per
    query left the per-query ratio ~2% apart between two runs of the same two trees on these
    shared cores; the fastest of 5 put two identical sides within 0.1% of each other."""
    sides = {"this tree": "recall_candidates", "old": "recall_candidates_old"}
    times: dict[str, list[float]] = {k: [] for k in sides}
    same = 0
    for i, q in enumerate(qs):
        p = query_params(q, bench_recall.BANK)
        best = dict.fromkeys(sides, float("inf"))
        got = {}
        for rnd in range(max(repeat, 1) + 1):                                   # round 0 warms
            order = list(sides) if (i + rnd) % 2 == 0 else list(sides)[::-1]
            for side in order:
                t = time.perf_counter()
                got[side] = conn.execute(CALL.format(fn=sides[side]), p).fetchall()
                if rnd:
                    best[side] = min(best[side], (time.perf_counter() - t) * 1000)
        for side in sides:
            times[side].append(best[side])
        same += _same(got["this tree"], got["old"])
    return _summary(times, same, len(qs))


# The client's side by side, on the _old functions: both connections' lists through the client.
# The client's channel arguments but deadline_ms: an older ref's functions lack it, and a newer
# one's default it to NULL (no deadline), as the timed recalls here run.
_OLD_CHANNEL_ARGS = rcll_recall._named(["query_embedding", "entity_query_embedding", "time_range", "reference_time",
                                        "channel_limit"], {"time_range": "tstzrange", "reference_time": "timestamptz"})
_OLD_CHANNELS = sql.SQL("SELECT channel, unit_id, score, rank FROM rcll.recall_channels_old(query => %(query)s, "
                        "scope => {}, {}, {}, channels => %(channels)s::text[])").format(
    rcll_recall._SCOPE, _OLD_CHANNEL_ARGS, rcll_recall._WEIGHTS)
_OLD_FUSE = sql.SQL("SELECT unit_id, fused_score FROM rcll.fuse_candidates_old(scope => {}, channels => %(c)b::text[], "
                    "unit_ids => %(u)b::bigint[], scores => %(s)b::double precision[], ranks => %(k)b::integer[], {}, "
                    '"limit" => %(limit)s)').format(rcll_recall._SCOPE, rcll_recall._WEIGHTS)


def _old_side_by_side(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], r: RecallRequest,
                      qe: Any) -> list[Any]:
    p = rcll_recall._params(r, qe, None, None, None)
    other = rcll_recall._side_work.submit(lambda: side.execute(_OLD_CHANNELS, {**p, "channels": list(rcll_recall.SIDE_CHANNELS)}).fetchall())
    hits = conn.execute(_OLD_CHANNELS, {**p, "channels": list(rcll_recall.MAIN_CHANNELS)}).fetchall()
    hits += other.result()
    return conn.execute(_OLD_FUSE, {**p, "c": [h[0] for h in hits], "u": [h[1] for h in hits],
                                    "s": [h[2] for h in hits], "k": [h[3] for h in hits]}).fetchall()


def compare_side_by_side(conn: psycopg.Connection[Any], side: psycopg.Connection[Any],
                         qs: list[dict[str, Any]]) -> list[list[Any]]:
    def new(r: RecallRequest, qe: Any) -> list[Any]:
        return [(f.unit_id, f.fused_score) for f in rcll_recall.candidates(conn, r, query_embedding=qe, side=side)]
    sides = {"this tree": new, "old": lambda r, qe: _old_side_by_side(conn, side, r, qe)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    same = 0
    for i, q in enumerate(qs):
        r = RecallRequest(query=q["text"], bank=bench_recall.BANK, reference_time="2024-06-01",
                          **({"include_self_declared": True} | q["filters"]))
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]
        got = {}
        for rnd in range(2):                                                    # warm, then timed
            for name in order:
                t = time.perf_counter()
                with conn.transaction(), side.transaction():
                    got[name] = sides[name](r, q["qe"])
                if rnd:
                    times[name].append((time.perf_counter() - t) * 1000)
        same += _same(got["this tree"], got["old"])
    return _summary(times, same, len(qs))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True, help="git commit whose functions are the 'old' side")
    ap.add_argument("--files", default=",".join(RECALL_PATH),
                    help="files under sql/functions/ whose functions the old side runs as they were at --ref "
                         "(default: every file defining a function of the first stage)")
    ap.add_argument("--size", type=int, default=100000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=5,
                    help="timed rounds per query and side; each side's time for a query is its fastest (default 5)")
    ap.add_argument("--port", type=int, default=55531)
    ap.add_argument("--side-by-side", action="store_true",
                    help="also time the first stage side by side on two connections, new against old")
    args = ap.parse_args()
    old = old_functions(args.ref, [f for f in args.files.split(",") if f.strip()])
    search_path = (ROOT / FUNCTIONS / "990-search-path.sql").read_text()

    with embedded_cluster(args.port, prefix="rcllab-") as pg, \
            connect(dsn := create_database(pg, f"ab_{args.size}"), autocommit=True) as conn, \
            connect(dsn, autocommit=True) as side:
        d = bench_recall.build(conn, args.size)
        # A file at the ref may define a function whose body no longer compiles against today's
        # types (rcll.recall_scope gained a field): the old side never calls it, so it is created
        # unchecked rather than refused.
        conn.execute("SET check_function_bodies = off")
        conn.execute(old)
        conn.execute("RESET check_function_bodies")
        conn.execute(search_path)
        # 990 pins a search_path on every function but the helpers the planner must inline; their
        # _old copies are not in its list, and a pinned copy is a call per row (the old side would
        # be measured slower than it ran).
        inlined = re.findall(r"'(\w+)'", re.search(r"proname NOT IN \(([^)]*)\)", search_path).group(1))  # type: ignore[union-attr]
        for (fn,) in conn.execute("SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace "
                                  "AND p.proname = ANY (%s)", ([f"{n}_old" for n in inlined],)).fetchall():
            conn.execute(f"ALTER FUNCTION {fn} RESET search_path")
        qs = bench_recall.queries(d, args.queries)
        print(table(["SQL phase (recall_candidates), ms", "p50", "p95"], compare(conn, qs, args.repeat)), flush=True)
        if args.side_by_side:
            print(table(["SQL phase side by side (2 connections), ms", "p50", "p95"],
                        compare_side_by_side(conn, side, qs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
