"""Forgotten means never retained, at LoCoMo scale.

    RCLL_LOCOMO=.../locomo10.json .venv/bin/python -m bench.forget_locomo [--port 55496] [--leg pg15] [--exact-only] [--citus]

Retains all ten LoCoMo conversations into one bank (chunk mode: one document per session, one
chunk per turn "[<date>] <speaker>: <text>", each conversation its own thread), forgets five of
them (0, 2, 4, 6, 8: interleaved, so survivors were written both before and after what goes), and
retains only the other five, in the same order, into a second bank that never held the rest. Then
every scored question of the five kept conversations is recalled in both banks, scoped to its
conversation's thread (about 600 units: the dense channel's exact route) with index scans off (so
no channel walks an HNSW graph: the temporal channel's planner may pick one for a wide time range),
and the two rankings - every candidate's text, fused score and every channel's rank, compared by
content, not ids - are compared byte for byte. Prints how many rankings are identical (the claim:
all of them), and the same count as the planner routes them, scoped and unscoped over the whole
bank (about 3,000 units, where the dense channel may take the approximate HNSW route, whose graph
keeps forgotten nodes until VACUUM: reported, not claimed), with where each differing ranking
parts. LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0.

--citus runs the same on a Citus cluster (needs `make citus`): a coordinator and two workers on
loopback (rcll.citus_cluster, ports --port..--port+2), rcll installed and distributed by bank, the
two banks on different workers (the second bank's shard group moved when hashing put both on one),
everything through the coordinator as Memory sends it there: each document by
rcll.retain_chunks_in_bank, the forget by rcll.forget_in_bank, each ranking by
rcll.recall_candidates_in_bank (each one call run whole on the bank's worker). A SET on the
coordinator does not reach a delegated call, so the exact routes run as a role whose own setting
turns index scans off (ALTER ROLE ... SET, which Citus copies to the workers; the coordinator
reaches them as that role).
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench._common import connect, create_database, embedded_cluster
from bench.locomo.dataset import Conversation, load
from rcll import citus_cluster, install, models
from rcll.citus_cluster import CitusCluster
from rcll.deadline import Deadline
from rcll.recall import Direct, candidates, entity_query
from rcll.request import RecallRequest

FORGOTTEN = (0, 2, 4, 6, 8)


def turn_text(t: Any) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


def retain(conn: psycopg.Connection[Any], bank: str, bank_id: int, convs: list[Conversation], vecs: dict[int, Any],
           *, in_bank: bool = False) -> None:
    """Each conversation's sessions as documents of `bank` (made before). in_bank: each by
    rcll.retain_chunks_in_bank, run whole on the bank's worker (what Memory.retain sends on a cluster)."""
    for c in convs:
        by_session: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(c.turns):
            by_session[t.session].append(i)
        for s, idx in sorted(by_session.items()):
            chunks = [turn_text(c.turns[i]) for i in idx]
            args = (bank, "\n".join(chunks), chunks, [vecs[c.index][i] for i in idx], c.turns[idx[0]].date,
                    f"{c.sample_id}/session_{s}", c.sample_id)
            if in_bank:
                conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(bank_id => %s, bank => %s, content => %s,"
                             " chunks => %s, embeddings => %s::vector[], occurred_at => %s, source => %s,"
                             " thread => %s, author => 'locomo')", (bank_id, *args))
            else:
                conn.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => %s, embeddings => %s::vector[],"
                             " occurred_at => %s, source => %s, thread => %s, author => 'locomo')", args)
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))


def forget(conn: psycopg.Connection[Any], bank: str, bank_id: int, thread: str, *, in_bank: bool = False) -> int:
    """Forget a thread (not a dry run); the units removed. in_bank: by rcll.forget_in_bank."""
    if in_bank:
        rows = conn.execute("SELECT kind, count FROM rcll.forget_in_bank(bank_id => %s, bank => %s, thread => %s,"
                            " dry_run => false, reason => 'bench')", (bank_id, bank, thread)).fetchall()
    else:
        rows = conn.execute("SELECT kind, count FROM rcll.forget(bank => %s, thread => %s,"
                            " dry_run => false, reason => 'bench')", (bank, thread)).fetchall()
    return int(dict(rows)["units"])


FIELDS = ("text", "fused_score", "rank_dense", "rank_lexical", "rank_graph", "rank_temporal", "rank_entity",
          "rank_session", "rank_context", "context")


def ranking(conn: psycopg.Connection[Any], bank: str, question: str, qvec: Any, thread: str | None,
            reference: Any, exact: bool = False, *, in_bank: bool = False,
            exact_conn: psycopg.Connection[Any] | None = None) -> list[tuple[Any, ...]]:
    """exact: with index scans off for the statement, so no channel walks an HNSW graph (the
    temporal channel's planner may pick one for a wide time range even in a small scope); the
    btree and GIN indexes still serve, as bitmap scans. in_bank (a Citus cluster): the candidates
    by rcll.recall_candidates_in_bank, as Memory.recall sends them, the exact ones on exact_conn
    (a role whose sessions, on every node, have index scans off)."""
    request = RecallRequest(query=question, bank=bank, thread=thread, reference_time=reference)
    rest = entity_query(conn, request)
    evec = models.get_embedder().embed_query(rest) if rest else None
    if in_bank:
        on = exact_conn if exact and exact_conn is not None else conn
        facts = Direct(on, in_bank=True).candidates(request, qvec, evec, request.limit, Deadline(None))
        return [tuple(getattr(f, k) for k in FIELDS) for f in facts]
    if exact:
        conn.execute("SET enable_indexscan = off")
    try:
        facts = candidates(conn, request, query_embedding=qvec, entity_query_embedding=evec)
    finally:
        if exact:
            conn.execute("RESET enable_indexscan")
    return [tuple(getattr(f, k) for k in FIELDS) for f in facts]


EXACT_ROLE = "rcll_bench_exact"


def exact_role(cl: CitusCluster) -> str:
    """A reader whose sessions have index scans off on every node (ALTER ROLE ... SET, which Citus
    copies to the workers), with its password for the coordinator's connections to the workers
    (pg_dist_authinfo, on every node, as rcll.citus_cluster keeps postgres's); its URL."""
    password = secrets.token_hex(16)
    with cl.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(EXACT_ROLE), sql.Literal(password)))
        conn.execute(sql.SQL("GRANT rcll_reader TO {}").format(sql.Identifier(EXACT_ROLE)))
        conn.execute(sql.SQL("ALTER ROLE {} SET enable_indexscan = off").format(sql.Identifier(EXACT_ROLE)))
    for node in cl.nodes:
        with cl.connect(node) as conn:
            conn.execute("INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, %s, %s)",
                         (EXACT_ROLE, f"password={password}"))
    return cl.url().replace("postgres@", f"{EXACT_ROLE}@", 1)


def worker_of(conn: psycopg.Connection[Any], bank_id: int) -> tuple[int, int]:
    """The shard (of rcll.memory_units) holding a bank, and its worker's port."""
    row = conn.execute("SELECT shardid, nodeport FROM citus_shards WHERE shardid = "
                       "get_shard_id_for_distribution_column('rcll.memory_units', %s)", (bank_id,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def place_apart(cl: CitusCluster, conn: psycopg.Connection[Any], first: int, second: int) -> str:
    """The second bank on the other worker than the first: its shard group moved when hashing put
    both on one (citus_move_shard_placement moves every co-located shard with it). Says where."""
    _, port = worker_of(conn, first)
    shard, other = worker_of(conn, second)
    moved = ""
    if other == port:
        target = next(w.port for w in cl.workers if w.port != port)
        conn.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, shard_transfer_mode => 'block_writes')",
                     (shard, citus_cluster.HOST, other, citus_cluster.HOST, target))
        moved = f" (its shard group moved from :{other})"
        other = target
    return f"worker :{port} and worker :{other}{moved}"


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[tuple[str, CitusCluster | None]]:
    """The database to write in: one node's (embedded, --leg), or a Citus coordinator's with rcll
    installed and distributed by bank (--citus)."""
    if not args.citus:
        with embedded_cluster(args.port, prefix="rcllforget-", leg=args.leg) as node:
            yield create_database(node, "forget_locomo"), None
        return
    shm = Path("/dev/shm")
    with (tempfile.TemporaryDirectory(prefix="rcllforgetcitus-", dir=shm if shm.is_dir() else None) as base,
          citus_cluster.running(Path(base), args.port) as cl):
        with psycopg.connect(cl.url()) as conn:
            print(install.install(conn), flush=True)
            conn.commit()
        yield cl.url(), cl


def first_difference(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> str:
    """Where two rankings part: the first position and the fields that differ there."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"position {i}: " + ", ".join(f"{k} {p!r} / {q!r}" for k, p, q in zip(FIELDS, x, y) if p != q)
    return f"lengths {len(a)} / {len(b)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=55496, help="the node's; with --citus the coordinator's, workers +1, +2")
    ap.add_argument("--leg", choices=["pg18", "pg15"], default="pg18",
                    help="the embedded PG 18 (default) or Debian's PostgreSQL 15, the tests' two legs")
    ap.add_argument("--exact-only", action="store_true",
                    help="only the claimed comparison (scoped, exact routes): a third of the recalls")
    ap.add_argument("--citus", action="store_true",
                    help="on a local Citus cluster (a coordinator and two workers), through the coordinator")
    ap.add_argument("--per-conversation", type=int, default=0,
                    help="the first N scored questions of each kept conversation (0: all)")
    args = ap.parse_args()
    if args.citus:
        missing = citus_cluster.citus_missing()
        if missing:
            print(missing)
            return 2
    convs, questions = load()
    kept = [c for c in convs if c.index not in FORGOTTEN]
    emb = models.get_embedder()
    t0 = time.perf_counter()
    vecs = {c.index: emb.embed([turn_text(t) for t in c.turns]) for c in convs}
    print(f"embedded {sum(len(c.turns) for c in convs)} turns in {time.perf_counter() - t0:.0f} s", flush=True)
    in_bank = args.citus
    with database(args) as (dsn, cl), connect(dsn, autocommit=True) as conn, contextlib.ExitStack() as stack:
        ids = {}
        for bank in ("all_ten", "five_only"):
            row = conn.execute("SELECT rcll.create_bank(%s)", (bank,)).fetchone()
            assert row is not None
            ids[bank] = int(row[0])
        exact_conn = None
        if cl is not None:
            print(f"banks all_ten and five_only on {place_apart(cl, conn, ids['all_ten'], ids['five_only'])}", flush=True)
            exact_conn = stack.enter_context(connect(exact_role(cl), autocommit=True))
            shown = exact_conn.execute("SELECT nodeport, result FROM run_command_on_workers('SHOW enable_indexscan')").fetchall()
            print(f"{EXACT_ROLE}'s enable_indexscan on the workers: {dict(shown)}", flush=True)
        t0 = time.perf_counter()
        retain(conn, "all_ten", ids["all_ten"], convs, vecs, in_bank=in_bank)
        t1 = time.perf_counter()
        forgotten = sum(forget(conn, "all_ten", ids["all_ten"], c.sample_id, in_bank=in_bank)
                        for c in convs if c.index in FORGOTTEN)
        t2 = time.perf_counter()
        retain(conn, "five_only", ids["five_only"], kept, vecs, in_bank=in_bank)
        conn.execute("ANALYZE")
        print(f"retained ten ({t1 - t0:.0f} s), forgot five ({forgotten} units, {t2 - t1:.1f} s), "
              f"retained the five alone ({time.perf_counter() - t2:.0f} s)"
              + (" - through the coordinator, each call run whole on the bank's worker" if in_bank else ""), flush=True)
        sizes = conn.execute("SELECT b.name, count(u.unit_id) FROM rcll.banks b JOIN rcll.memory_units u"
                             " USING (bank_id) GROUP BY b.name ORDER BY 1").fetchall()
        print("units per bank:", dict(sizes))
        stats = [conn.execute("SELECT unit_count, total_length, document_count FROM rcll.bank_stats"
                              " WHERE bank_id = %s", (ids[b],)).fetchone() for b in ("all_ten", "five_only")]
        print(f"bank_stats equal: {stats[0] == stats[1]} {stats}")
        asked = [q for q in questions if q.conv not in FORGOTTEN]
        if args.per_conversation:
            by_conv: dict[int, list[Any]] = defaultdict(list)
            for q in asked:
                by_conv[q.conv].append(q)
            asked = [q for qs in by_conv.values() for q in qs[:args.per_conversation]]
        last = {c.index: max(t.date for t in c.turns) + timedelta(days=1) for c in convs}
        sample = {c.index: c.sample_id for c in convs}
        same_scoped = same_routed = same_all = 0
        t0 = time.perf_counter()
        for q in asked:
            qvec = emb.embed_query(q.question)
            both = [ranking(conn, bank, q.question, qvec, sample[q.conv], last[q.conv], exact=True, in_bank=in_bank,
                            exact_conn=exact_conn) for bank in ("all_ten", "five_only")]
            same_scoped += repr(both[0]).encode() == repr(both[1]).encode()
            if both[0] != both[1]:
                print(f"  scoped, exact, differs: {q.question!r} - {first_difference(*both)}", flush=True)
            if args.exact_only:
                continue
            both = [ranking(conn, bank, q.question, qvec, sample[q.conv], last[q.conv], in_bank=in_bank)
                    for bank in ("all_ten", "five_only")]
            same_routed += repr(both[0]).encode() == repr(both[1]).encode()
            if both[0] != both[1]:
                print(f"  scoped, differs: {q.question!r} - {first_difference(*both)}", flush=True)
            both = [ranking(conn, bank, q.question, qvec, None, last[q.conv], in_bank=in_bank)
                    for bank in ("all_ten", "five_only")]
            same_all += repr(both[0]).encode() == repr(both[1]).encode()
            if both[0] != both[1]:
                print(f"  unscoped, differs: {q.question!r} - {first_difference(*both)}", flush=True)
        print(f"{len(asked)} questions of the five kept conversations ({time.perf_counter() - t0:.0f} s)")
        print(f"identical rankings, scoped to the conversation, exact routes (no index scan): {same_scoped}/{len(asked)}")
        if not args.exact_only:
            print(f"identical rankings, scoped to the conversation, as planned (a channel may walk HNSW): "
                  f"{same_routed}/{len(asked)}")
            print(f"identical rankings, unscoped over the bank (dense may route through HNSW): {same_all}/{len(asked)}")
    return 0 if same_scoped == len(asked) else 1


if __name__ == "__main__":
    raise SystemExit(main())
