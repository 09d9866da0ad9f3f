"""LoCoMo on Citus: ten conversations as ten banks over two workers, every default recall equal to one node's.

    RCLL_LOCOMO=.../locomo10.json .venv/bin/python -m bench.citus_locomo [--per-conversation N] [--port 26110] [--routed]

Needs Citus built into the embedded PostgreSQL (`make citus`). Starts a Citus cluster (a
coordinator and two workers, rcll.citus_cluster, loopback ports --port..--port+2) and one
embedded node (--port+3); installs rcll on both (the coordinator distributes it by bank); retains
each LoCoMo conversation into its own bank on both (chunk mode, as bench.forget_locomo: one
document per session, one chunk per turn "[<date>] <speaker>: <text>", the embeddings computed
once), then asks each scored question (the first N of each conversation, all with 0) through
`Memory.recall` with its defaults - the rerank included - on the coordinator and on the node, in
the question's bank, and compares the two answers by content, byte for byte: every fact's text,
fused and rerank score and channel ranks. Prints the banks per worker, the retain times, the
database's size on each node before and after the retain (and so bytes a unit), each side's
recall latency (p50, p95: the whole Memory.recall, the rerank included, asked one after the other
on the shared machine), and how many answers are identical, with where each differing one parts.
LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

from bench._common import create_database, embedded_cluster
from bench.locomo.dataset import Conversation, load
from rcll import Memory, citus_cluster, install, models
from rcll.db import configure

FIELDS = ("text", "fused_score", "rerank_score", "rank_dense", "rank_lexical", "rank_graph", "rank_temporal",
          "rank_entity", "rank_session", "rank_context")


def turn_text(t: Any) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


def retain(url: str, convs: list[Conversation], vecs: dict[int, Any], *, delegated: bool = False) -> float:
    """Each conversation into bank conv<index>; seconds taken. delegated: each document by
    rcll.retain_chunks_in_bank, which a Citus coordinator runs whole on the bank's worker (what
    Memory.retain sends on a cluster); otherwise rcll.retain_chunks."""
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        configure(conn)
        for c in convs:
            bank = f"conv{c.index}"
            bank_id = conn.execute("SELECT rcll.create_bank(%s)", (bank,)).fetchone()
            by_session: dict[int, list[int]] = defaultdict(list)
            for i, t in enumerate(c.turns):
                by_session[t.session].append(i)
            for s, idx in sorted(by_session.items()):
                chunks = [turn_text(c.turns[i]) for i in idx]
                args = (bank, "\n".join(chunks), chunks, [vecs[c.index][i] for i in idx], c.turns[idx[0]].date,
                        f"{c.sample_id}/session_{s}", c.sample_id)
                if delegated:
                    conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(bank_id => %s, bank => %s, content => %s,"
                                 " chunks => %s, embeddings => %s::vector[], occurred_at => %s, source => %s, thread => %s,"
                                 " author => 'locomo')", (bank_id[0] if bank_id else None, *args))
                else:
                    conn.execute("SELECT * FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s,"
                                 " embeddings => %s::vector[], occurred_at => %s, source => %s, thread => %s,"
                                 " author => 'locomo')", args)
            conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))
        conn.execute("ANALYZE")
    return time.perf_counter() - t0


def answer(memory: Memory, bank: str, question: str) -> list[tuple[Any, ...]]:
    return [tuple(getattr(f, k) for k in FIELDS) for f in memory.recall(question, bank=bank).facts]


def first_difference(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"position {i}: " + ", ".join(f"{k} {p!r} / {q!r}" for k, p, q in zip(FIELDS, x, y, strict=True) if p != q)
    return f"lengths {len(a)} / {len(b)}"


def database_sizes(urls: dict[str, str]) -> dict[str, int]:
    """pg_database_size of each node's database (by its label), in bytes, after a CHECKPOINT (the
    WAL is not counted; the heap and index files are what a checkpoint has written)."""
    sizes = {}
    for label, url in urls.items():
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            sizes[label] = int(row[0]) if row else 0
    return sizes


def percentiles(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20) if len(ms) > 1 else ms * 19
    return f"p50 {statistics.median(ms):.0f} ms, p95 {q[18]:.0f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=26110, help="the coordinator's; workers +1, +2; the node +3")
    ap.add_argument("--per-conversation", type=int, default=0, help="the first N scored questions of each (0: all)")
    ap.add_argument("--routed", action="store_true",
                    help="retain on the cluster by rcll.retain_chunks, each of its statements routed to the bank's "
                         "worker apart, instead of the delegated rcll.retain_chunks_in_bank (for comparison)")
    args = ap.parse_args()
    missing = citus_cluster.citus_missing()
    if missing:
        print(missing)
        return 2
    convs, questions = load()
    emb = models.get_embedder()
    t0 = time.perf_counter()
    vecs = {c.index: emb.embed([turn_text(t) for t in c.turns]) for c in convs}
    print(f"embedded {sum(len(c.turns) for c in convs)} turns in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.per_conversation:
        by_conv: dict[int, list[Any]] = defaultdict(list)
        for q in questions:
            by_conv[q.conv].append(q)
        questions = [q for qs in by_conv.values() for q in qs[:args.per_conversation]]
    with (tempfile.TemporaryDirectory(prefix="rcllcitus-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as base,
          citus_cluster.running(Path(base), args.port) as cl, embedded_cluster(args.port + 3, prefix="rcllcitusnode-") as node):
        with psycopg.connect(cl.url()) as conn:
            print(install.install(conn), flush=True)
            conn.commit()
        one = create_database(node, "citus_locomo")
        urls = {**{f":{n.port}" + (" (coordinator)" if n is cl.coordinator else ""): cl.url(n) for n in cl.nodes},
                "one node": one}
        empty = database_sizes(urls)
        on_cluster = retain(cl.url(), convs, vecs, delegated=not args.routed)
        on_node = retain(one, convs, vecs)
        filled = database_sizes(urls)
        with psycopg.connect(cl.url(), autocommit=True) as conn:
            placed = conn.execute(
                "SELECT s.nodeport, array_agg(b.name ORDER BY b.name), sum(u.n) "
                "FROM rcll.banks b JOIN citus_shards s "
                "ON s.shardid = get_shard_id_for_distribution_column('rcll.memory_units', b.bank_id) "
                "JOIN (SELECT bank_id, count(*) AS n FROM rcll.memory_units GROUP BY bank_id) u ON u.bank_id = b.bank_id "
                "WHERE b.name LIKE 'conv%%' GROUP BY s.nodeport ORDER BY 1").fetchall()
        for port, banks, units in placed:
            print(f"worker :{port}: {units} units in {', '.join(banks)}")
        total = sum(len(c.turns) for c in convs)
        held = {f":{port}": int(units) for port, _, units in placed}
        for label in urls:
            grown = filled[label] - empty[label]
            units = held.get(label, total if label == "one node" else 0)
            per_unit = f", {grown / units:.0f} bytes for each of its {units} units" if units else ""
            print(f"database on {label}: {empty[label] / 2**20:.1f} MB empty, {filled[label] / 2**20:.1f} MB after the "
                  f"retain (+{grown / 2**20:.1f} MB{per_unit})")
        cluster_grown = sum(filled[k] - empty[k] for k in urls if k != "one node")
        print(f"the cluster grew {cluster_grown / total:.0f} bytes a unit in all, one node "
              f"{(filled['one node'] - empty['one node']) / total:.0f}", flush=True)
        how = "rcll.retain_chunks, routed" if args.routed else "rcll.retain_chunks_in_bank, delegated"
        print(f"retained {len(convs)} conversations: {on_cluster:.0f} s through the coordinator ({how}), "
              f"{on_node:.0f} s on one node",
              flush=True)
        same = 0
        t0 = time.perf_counter()
        took: dict[str, list[float]] = {"cluster": [], "node": []}
        with Memory(cl.url()) as a, Memory(one) as b:
            answer(a, "conv0", "warm up")          # the models loaded, each pool's first connections made
            answer(b, "conv0", "warm up")
            for q in questions:
                t = time.perf_counter()
                x = answer(a, f"conv{q.conv}", q.question)
                took["cluster"].append((time.perf_counter() - t) * 1000.0)
                t = time.perf_counter()
                y = answer(b, f"conv{q.conv}", q.question)
                took["node"].append((time.perf_counter() - t) * 1000.0)
                if repr(x).encode() == repr(y).encode():
                    same += 1
                else:
                    print(f"  differs: conv{q.conv} {q.question!r} - {first_difference(x, y)}", flush=True)
        print(f"{len(questions)} questions, two recalls each, in {time.perf_counter() - t0:.0f} s")
        print(f"Memory.recall (defaults, rerank included) through the coordinator: {percentiles(took['cluster'])}; "
              f"on one node: {percentiles(took['node'])}; median ratio per question "
              f"{statistics.median(c / n for c, n in zip(took['cluster'], took['node'], strict=True)):.2f}")
        print(f"identical default recalls (rerank included), cluster vs one node: {same}/{len(questions)}")
    return 0 if same == len(questions) else 1


if __name__ == "__main__":
    raise SystemExit(main())
