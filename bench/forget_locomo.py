"""Forgotten means never retained, at LoCoMo scale.

    RCLL_LOCOMO=.../locomo10.json .venv/bin/python -m bench.forget_locomo [--port 55496] [--leg pg15] [--exact-only]

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
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import psycopg

from bench._common import connect, create_database, embedded_cluster
from bench.locomo.dataset import Conversation, load
from rcll import models
from rcll.recall import candidates, entity_query
from rcll.request import RecallRequest

FORGOTTEN = (0, 2, 4, 6, 8)


def turn_text(t: Any) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


def retain(conn: psycopg.Connection[Any], bank: str, convs: list[Conversation], vecs: dict[int, Any]) -> None:
    conn.execute("SELECT rcll.create_bank(%s)", (bank,))
    for c in convs:
        by_session: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(c.turns):
            by_session[t.session].append(i)
        for s, idx in sorted(by_session.items()):
            chunks = [turn_text(c.turns[i]) for i in idx]
            conn.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => %s, embeddings => %s::vector[],"
                         " occurred_at => %s, source => %s, thread => %s, author => 'locomo')",
                         (bank, "\n".join(chunks), chunks, [vecs[c.index][i] for i in idx], c.turns[idx[0]].date,
                          f"{c.sample_id}/session_{s}", c.sample_id))
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))


FIELDS = ("text", "fused_score", "rank_dense", "rank_lexical", "rank_graph", "rank_temporal", "rank_entity",
          "rank_session", "rank_context", "context")


def ranking(conn: psycopg.Connection[Any], bank: str, question: str, qvec: Any, thread: str | None,
            reference: Any, exact: bool = False) -> list[tuple[Any, ...]]:
    """exact: with index scans off for the statement, so no channel walks an HNSW graph (the
    temporal channel's planner may pick one for a wide time range even in a small scope); the
    btree and GIN indexes still serve, as bitmap scans."""
    request = RecallRequest(query=question, bank=bank, thread=thread, reference_time=reference)
    rest = entity_query(conn, request)
    evec = models.get_embedder().embed_query(rest) if rest else None
    if exact:
        conn.execute("SET enable_indexscan = off")
    try:
        facts = candidates(conn, request, query_embedding=qvec, entity_query_embedding=evec)
    finally:
        if exact:
            conn.execute("RESET enable_indexscan")
    return [tuple(getattr(f, k) for k in FIELDS) for f in facts]


def first_difference(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> str:
    """Where two rankings part: the first position and the fields that differ there."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"position {i}: " + ", ".join(f"{k} {p!r} / {q!r}" for k, p, q in zip(FIELDS, x, y) if p != q)
    return f"lengths {len(a)} / {len(b)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=55496)
    ap.add_argument("--leg", choices=["pg18", "pg15"], default="pg18",
                    help="the embedded PG 18 (default) or Debian's PostgreSQL 15, the tests' two legs")
    ap.add_argument("--exact-only", action="store_true",
                    help="only the claimed comparison (scoped, exact routes): a third of the recalls")
    args = ap.parse_args()
    convs, questions = load()
    kept = [c for c in convs if c.index not in FORGOTTEN]
    emb = models.get_embedder()
    t0 = time.perf_counter()
    vecs = {c.index: emb.embed([turn_text(t) for t in c.turns]) for c in convs}
    print(f"embedded {sum(len(c.turns) for c in convs)} turns in {time.perf_counter() - t0:.0f} s", flush=True)
    with embedded_cluster(args.port, prefix="rcllforget-", leg=args.leg) as cl:
        dsn = create_database(cl, "forget_locomo")
        with connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            retain(conn, "all_ten", convs, vecs)
            t1 = time.perf_counter()
            forgotten = 0
            for c in convs:
                if c.index in FORGOTTEN:
                    rows = conn.execute("SELECT kind, count FROM rcll.forget(bank => 'all_ten', thread => %s,"
                                        " dry_run => false, reason => 'bench')", (c.sample_id,)).fetchall()
                    forgotten += dict(rows)["units"]
            t2 = time.perf_counter()
            retain(conn, "five_only", kept, vecs)
            conn.execute("ANALYZE")
            print(f"retained ten ({t1 - t0:.0f} s), forgot five ({forgotten} units, {t2 - t1:.1f} s), "
                  f"retained the five alone ({time.perf_counter() - t2:.0f} s)", flush=True)
            sizes = conn.execute("SELECT b.name, count(u.unit_id) FROM rcll.banks b JOIN rcll.memory_units u"
                                 " USING (bank_id) GROUP BY b.name ORDER BY 1").fetchall()
            print("units per bank:", dict(sizes))
            stats = [conn.execute("SELECT unit_count, total_length, document_count FROM rcll.bank_stats"
                                  " WHERE bank_id = rcll._bank_id(%s)", (b,)).fetchone() for b in ("all_ten", "five_only")]
            print(f"bank_stats equal: {stats[0] == stats[1]} {stats}")
            asked = [q for q in questions if q.conv not in FORGOTTEN]
            last = {c.index: max(t.date for t in c.turns) + timedelta(days=1) for c in convs}
            sample = {c.index: c.sample_id for c in convs}
            same_scoped = same_routed = same_all = 0
            t0 = time.perf_counter()
            for q in asked:
                qvec = emb.embed_query(q.question)
                a = ranking(conn, "all_ten", q.question, qvec, sample[q.conv], last[q.conv], exact=True)
                b = ranking(conn, "five_only", q.question, qvec, sample[q.conv], last[q.conv], exact=True)
                same_scoped += repr(a).encode() == repr(b).encode()
                if a != b:
                    print(f"  scoped, exact, differs: {q.question!r} - {first_difference(a, b)}", flush=True)
                if args.exact_only:
                    continue
                a = ranking(conn, "all_ten", q.question, qvec, sample[q.conv], last[q.conv])
                b = ranking(conn, "five_only", q.question, qvec, sample[q.conv], last[q.conv])
                same_routed += repr(a).encode() == repr(b).encode()
                if a != b:
                    print(f"  scoped, differs: {q.question!r} - {first_difference(a, b)}", flush=True)
                a = ranking(conn, "all_ten", q.question, qvec, None, last[q.conv])
                b = ranking(conn, "five_only", q.question, qvec, None, last[q.conv])
                same_all += repr(a).encode() == repr(b).encode()
                if a != b:
                    print(f"  unscoped, differs: {q.question!r} - {first_difference(a, b)}", flush=True)
            print(f"{len(asked)} questions of the five kept conversations ({time.perf_counter() - t0:.0f} s)")
            print(f"identical rankings, scoped to the conversation, exact routes (no index scan): {same_scoped}/{len(asked)}")
            if not args.exact_only:
                print(f"identical rankings, scoped to the conversation, as planned (a channel may walk HNSW): "
                      f"{same_routed}/{len(asked)}")
                print(f"identical rankings, unscoped over the bank (dense may route through HNSW): {same_all}/{len(asked)}")
    return 0 if same_scoped == len(asked) else 1


if __name__ == "__main__":
    raise SystemExit(main())
