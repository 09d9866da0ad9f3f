"""Recall latency on synthetic agent-fleet stores: p50/p95 per channel, fused, and per recall phase.

    .venv/bin/python -m bench.recall [--sizes 10000,100000] [--queries 60] [--configs DEPTH:CONTEXT_DEPTH,...]
                                     [--deadlines 150,300,500]
    .venv/bin/python -m bench.recall --fleet 1000000 [--banks 400] [--per-case 12] [--partial]
    .venv/bin/python -m bench.recall --fleet 1000000 --citus --port 26340 [--per-case 6] [--split 20000]

Builds a fresh embedded PG 18 cluster in /tmp, and for each size a store that looks like a fleet's:
clustered 384-d unit vectors (200 topics), text drawn from LoCoMo's real English vocabulary with its
Zipf frequencies plus per-topic words, Zipf-distributed entities (a few hubs, a long tail), skewed
rooms (three big rooms hold 80% of the units, 200 tiny ones the rest), ten authors, two years of
timestamps, semantic links. Data goes in with binary COPY; indexes are built afterwards.
Queries mix no filter, a big room, a tiny room and an author filter; a third name an entity,
a third a time. The embed phase runs the real bge model on the query text; the SQL phase gets a
vector drawn near the query's topic (the synthetic store's vectors are not bge's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg

from bench import fleet
from bench._common import (
    connect,
    cpu_ns,
    create_database,
    drop_indexes,
    embedded_cluster,
    pct,
    query_params,
    table,
    vacuum_analyze,
)
from bench.locomo.dataset import vocabulary
from rcll import models
from rcll.defaults import CANDIDATE_LIMIT, CONTEXT_DEPTH, RERANK_DEPTH
from rcll.recall import Direct, candidates, recall
from rcll.request import RecallRequest as R

TOPICS = 200
DIM = 384
BANK = "bench"
PRUNE = 0.05  # the BM25 channels' default prune_above


def zipf_weights(n: int, a: float, rng: np.random.Generator) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** a
    rng.shuffle(w)
    return w / w.sum()


def build(conn: psycopg.Connection[Any], n: int, seed: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    words, freq = vocabulary()
    conn.execute("SELECT rcll.create_bank(%s)", (BANK,))
    bank_id = conn.execute("SELECT rcll._bank_id(%s)", (BANK,)).fetchone()[0]  # type: ignore[index]

    centers = rng.normal(size=(TOPICS, DIM)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    topic_of = rng.choice(TOPICS, size=n, p=zipf_weights(TOPICS, 0.8, rng))
    vecs = centers[topic_of] + rng.normal(scale=0.045, size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    mid = words[200:4000]
    topic_words = [list(rng.choice(mid, size=25, replace=False)) for _ in range(TOPICS)]

    n_ent = max(200, n // 20)
    ent_names = [f"{rng.choice(words[300:3000]).title()} {rng.choice(['Project', 'Service', 'Team', 'Labs', 'Group', 'API'])}{i}"
                 for i in range(n_ent)]
    ent_p = 1.0 / np.arange(1, n_ent + 1) ** 1.1
    ent_p /= ent_p.sum()

    # Units come in documents of 1-19 consecutive chunks (a conversation, a long note), so the
    # rerank's context view reads the chunk before most of them; room and author are per document.
    doc_of = np.repeat(np.arange(n), rng.integers(1, 20, size=n))[:n]
    chunk_of = np.arange(n) - np.searchsorted(doc_of, doc_of)
    n_docs = int(doc_of[-1]) + 1
    rooms = ["engineering", "operations", "product"] + [f"room-{i}" for i in range(200)]
    room_p = np.array([0.40, 0.25, 0.15] + [0.20 / 200] * 200)
    room_of = rng.choice(len(rooms), size=n_docs, p=room_p)[doc_of]
    author_of = rng.integers(0, 10, size=n_docs)[doc_of]
    authors = [f"agent-{i}" for i in range(10)]
    t0 = np.datetime64("2024-06-01T00:00:00")
    ages = rng.integers(0, 730 * 86400, size=n)
    lengths = rng.integers(12, 40, size=n)

    unit_ents: list[list[int]] = []
    texts: list[str] = []
    body = rng.choice(len(words), size=int(lengths.sum()), p=freq)
    pos = 0
    for i in range(n):
        k = int(lengths[i])
        ws = [words[j] for j in body[pos:pos + k]]
        pos += k
        tw = topic_words[topic_of[i]]
        for j in rng.choice(k, size=max(1, k // 3), replace=False):
            ws[j] = tw[int(rng.integers(0, len(tw)))]
        ents = sorted({int(e) for e in rng.choice(n_ent, size=int(rng.integers(0, 4)), p=ent_p)})
        unit_ents.append(ents)
        if ents:
            ws.insert(int(rng.integers(0, k)), " and ".join(ent_names[e] for e in ents))
        texts.append(" ".join(ws).capitalize() + ".")

    indexes = drop_indexes(conn, fleet.BULK_LOAD_INDEXES)
    prov = json.dumps({"via": "bench"})
    starts = np.searchsorted(doc_of, np.arange(n_docs + 1))
    with conn.cursor() as cur, cur.copy("COPY rcll.documents (bank_id, content, content_hash, provenance) FROM STDIN") as cp:
        for d in range(n_docs):
            content = "\n".join(texts[starts[d]:starts[d + 1]])
            cp.write_row((bank_id, content, hashlib.sha256(content.encode()).digest(), prov))
    doc_ids = [r[0] for r in conn.execute("SELECT document_id FROM rcll.documents WHERE bank_id = %s ORDER BY document_id", (bank_id,))]
    with conn.cursor() as cur, cur.copy("COPY rcll.memory_units (bank_id, document_id, chunk_index, text, embedding, room, author, author_source, valid, mentioned_at, provenance) FROM STDIN") as cp:
        for i in range(n):
            when = str(t0 - np.timedelta64(int(ages[i]), "s")) + "+00"
            cp.write_row((bank_id, doc_ids[doc_of[i]], int(chunk_of[i]), texts[i], vecs[i], rooms[room_of[i]],
                          authors[author_of[i]], "self_declared", f"[{when},)", when, prov))
    ids = [r[0] for r in conn.execute("SELECT unit_id FROM rcll.memory_units WHERE bank_id = %s ORDER BY unit_id", (bank_id,))]
    with conn.cursor() as cur, cur.copy("COPY rcll.entities (bank_id, name, mention_count) FROM STDIN") as cp:
        mentions = Counter(e for es in unit_ents for e in es)
        for e, name in enumerate(ent_names):
            cp.write_row((bank_id, name, mentions[e]))
    ent_ids = [r[0] for r in conn.execute("SELECT entity_id FROM rcll.entities WHERE bank_id = %s ORDER BY entity_id", (bank_id,))]
    with conn.cursor() as cur:
        with cur.copy("COPY rcll.entity_aliases (bank_id, alias, entity_id) FROM STDIN") as cp:
            for e, name in enumerate(ent_names):
                cp.write_row((bank_id, name.lower(), ent_ids[e]))
        with cur.copy("COPY rcll.unit_entities (unit_id, entity_id, bank_id) FROM STDIN") as cp:
            for i, es in enumerate(unit_ents):
                for e in es:
                    cp.write_row((ids[i], ent_ids[e], bank_id))
        # Semantic links: a fifth of the units link to another unit of their topic.
        by_topic: dict[int, list[int]] = {}
        for i, t in enumerate(topic_of):
            by_topic.setdefault(int(t), []).append(i)
        seen: set[tuple[int, int]] = set()
        with cur.copy("COPY rcll.links (bank_id, from_unit, to_unit, link_type, weight) FROM STDIN") as cp:
            for i in rng.choice(n, size=n // 5, replace=False):
                peers = by_topic[int(topic_of[i])]
                j = peers[int(rng.integers(0, len(peers)))]
                if j != i and (i, j) not in seen:
                    seen.add((i, j))
                    cp.write_row((bank_id, ids[i], ids[j], "semantic", 0.8))
    t = time.perf_counter()
    conn.execute("SET max_parallel_maintenance_workers = 0")
    for ddl in indexes.values():
        conn.execute(ddl)
    vacuum_analyze(conn)
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (BANK,))
    index_s = time.perf_counter() - t
    return {"rng": rng, "centers": centers, "topic_of": topic_of, "texts": texts, "ent_names": ent_names,
            "unit_ents": unit_ents, "room_of": room_of, "rooms": rooms, "authors": authors, "index_s": index_s,
            "words": words}


def queries(d: dict[str, Any], count: int) -> list[dict[str, Any]]:
    rng: np.random.Generator = d["rng"]
    out = []
    times = ["last week", "in March 2024", "yesterday", "2 months ago", "before January 2024", "last year"]
    n = len(d["texts"])
    for q in range(count):
        i = int(rng.integers(0, n))
        words = [w for w in re.findall(r"[a-z']+", d["texts"][i].lower()) if len(w) > 3]
        text = " ".join(rng.choice(words, size=min(5, len(words)), replace=False)) if words else "status"
        if q % 3 == 0 and d["unit_ents"][i]:
            text += " about " + d["ent_names"][d["unit_ents"][i][0]]
        if q % 3 == 1:
            text += " " + times[q % len(times)]
        v = d["centers"][d["topic_of"][i]] + rng.normal(scale=0.05, size=DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        kind = ["none", "none", "big room", "tiny room", "author"][q % 5]
        f: dict[str, Any] = {}
        if kind == "big room":
            f["rooms"] = ["engineering"]
        elif kind == "tiny room":
            f["rooms"] = [d["rooms"][3 + int(rng.integers(0, 200))]]
        elif kind == "author":
            f["authors"] = [d["authors"][int(rng.integers(0, 10))]]
            f["include_self_declared"] = True   # the synthetic writers declared themselves
        out.append({"text": text, "qe": v.astype(np.float32), "filters": f, "kind": kind})
    return out


CHANNELS = {
    "dense": "SELECT count(*) FROM rcll.channel_dense(%(qe)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true))",
    "lexical": "SELECT count(*) FROM rcll.channel_lexical(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true))",
    "graph": "SELECT count(*) FROM rcll.channel_graph(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true))",
    "temporal": "SELECT count(*) FROM rcll.channel_temporal(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), reference_time => '2024-06-01', query_embedding => %(qe)s)",
    "entity": "SELECT count(*) FROM rcll.channel_entity(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), %(qe)s)",
    "session": "SELECT count(*) FROM rcll.channel_session(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), %(qe)s)",
    # as recall_candidates runs it: seeded with the dense channel's top 100
    "dense + context": "SELECT count(*) FROM rcll.channel_context(%(qe)s, ARRAY(SELECT unit_id FROM rcll.channel_dense(%(qe)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true)) WHERE rank <= 100), rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true))",
    "fused (6 channels, z-score sum)": "SELECT count(*) FROM rcll.recall_candidates(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), query_embedding => %(qe)s, reference_time => '2024-06-01')",
}
CHANNELS["dense"] = CHANNELS["dense"].replace(", reference_time => '2024-06-01'", "")


def _measure_recall(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], qs: list[dict[str, Any]],
                    backend: int, emb: Any, rerank_depth: int, context_depth: int) -> list[list[Any]]:
    """Full recall per phase, one rerank configuration, as rcll.Memory runs it with a spare
    pooled connection: the channels side by side on `conn` and `side` (backend CPU is both
    servers'). A recall's pages were last read many queries before (the channel rows); "sql again"
    repeats its SQL phase at once (the same call, its pages just read), so sql minus sql again is
    what reading them back costs - from the OS page cache when shared_buffers cannot hold the
    store's hot pages."""
    side_backend = side.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    rows: list[list[Any]] = []
    phases: dict[str, list[float]] = {"embed": [], "sql": [], "sql again": [], "rerank": [], "cut": [], "total": []}
    cpus: dict[str, list[float]] = {k: [] for k in phases}
    for q in qs:
        c0 = time.process_time()
        t = time.perf_counter()
        emb.embed_query(q["text"])
        embed_ms = (time.perf_counter() - t) * 1000
        embed_cpu = (time.process_time() - c0) * 1000
        b0 = cpu_ns(backend) + cpu_ns(side_backend)
        c0 = time.process_time()
        r = recall(Direct(conn, side=side), R(query=q["text"], bank=BANK, rerank_depth=rerank_depth, context_depth=context_depth, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"])
        client_cpu = (time.process_time() - c0) * 1000
        sql_cpu = (cpu_ns(backend) + cpu_ns(side_backend) - b0) / 1e6
        t = time.perf_counter()
        candidates(conn, R(query=q["text"], bank=BANK, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"], limit=max(CANDIDATE_LIMIT, rerank_depth), side=side)
        phases["sql again"].append((time.perf_counter() - t) * 1000)
        for k, v in (("embed", embed_ms), ("sql", r.timings.sql), ("rerank", r.timings.rerank), ("cut", r.timings.cut)):
            phases[k].append(v)
        phases["total"].append(embed_ms + r.timings.sql + r.timings.rerank + r.timings.cut)
        # Client CPU of recall() is almost all rerank (2 intra-op threads: CPU ms / 2 is about
        # the wall time on an idle machine).
        cpus["embed"].append(embed_cpu)
        cpus["sql"].append(sql_cpu)
        cpus["rerank"].append(client_cpu)
        cpus["total"].append(embed_cpu + sql_cpu + client_cpu)
    for k, v in phases.items():
        label = f"recall {k}" + (f" (depth {rerank_depth}, context view {context_depth})" if k == "rerank" else "")
        label += f" [{rerank_depth}:{context_depth}]" if k == "total" else ""
        rows.append([label, statistics.median(v), pct(v, 0.95), statistics.median(cpus[k]) if cpus[k] else "", ""])
    return rows


def timed_row(label: str, run: Callable[[dict[str, Any]], object], qs: list[dict[str, Any]],
              pids: list[int]) -> list[Any]:
    """One row of measure()'s table: `run(q)` for each query, warm, then timed - wall p50 / p95,
    the CPU of the server processes `pids` (p50), wall p50 by filter kind."""
    times: list[float] = []
    cpu: list[float] = []
    by_kind: dict[str, list[float]] = {}
    for q in qs:
        run(q)                                  # warm
        c0 = sum(cpu_ns(p) for p in pids)
        t = time.perf_counter()
        run(q)
        ms = (time.perf_counter() - t) * 1000
        cpu.append((sum(cpu_ns(p) for p in pids) - c0) / 1e6)
        times.append(ms)
        by_kind.setdefault(q["kind"], []).append(ms)
    return [label, statistics.median(times), pct(times, 0.95), statistics.median(cpu),
            " ".join(f"{k}:{statistics.median(v):.1f}" for k, v in sorted(by_kind.items()))]


def measure(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], qs: list[dict[str, Any]],
            configs: list[tuple[int, ...]]) -> list[list[Any]]:
    """Rows: phase, wall p50, wall p95, CPU p50 (the work itself, free of the machine's load),
    wall p50 by filter kind. Each channel as psql runs it, the fused first stage in one statement,
    and the same first stage with its channels side by side on two connections (rcll.recall.candidates
    with `side`: the BM25 channels on one, the rest on the other, fused by rcll.fuse_candidates; CPU
    summed over both servers); then full recall per rerank configuration."""
    backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    side_backend = side.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    rows = [timed_row(f"SQL {name}", lambda q, sql=sql: conn.execute(sql, query_params(q, BANK)).fetchone(),
                      qs, [backend])
            for name, sql in CHANNELS.items()]
    rows.append(timed_row(
        "SQL fused, channels side by side (2 connections)",
        lambda q: candidates(conn, R(query=q["text"], bank=BANK, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"], side=side),
        qs, [backend, side_backend]))
    emb = models.get_embedder()
    models.get_reranker()
    for depth, context_depth in configs:
        rows += _measure_recall(conn, side, qs, backend, emb, depth, context_depth)
    return rows


def deadlines(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], qs: list[dict[str, Any]],
              limits: list[int]) -> list[list[Any]]:
    """Full recall at each deadline, the clock started before the query embedding (as a server's
    starts at arrival): latency, how deep the cross-encoder read, how often the deadline cut it,
    and how many answers were partly reranked (at least two candidates read, so the top can move)."""
    emb = models.get_embedder()
    models.get_reranker()
    rows = []
    for ms in limits:
        lat, depth, cut, partly = [], [], 0, 0
        for q in qs:
            t = time.perf_counter()
            emb.embed_query(q["text"])      # the bench's embeddings are synthetic; the time is real
            r = recall(Direct(conn, side=side), R(query=q["text"], bank=BANK, deadline_ms=ms, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"], started=t)
            lat.append((time.perf_counter() - t) * 1000)
            depth.append(r.rerank_depth_reached)
            cut += r.deadline_cut
            partly += r.rerank_depth_reached >= 2
        rows.append([f"{ms} ms", statistics.median(lat), pct(lat, 0.95),
                     f"{statistics.median(depth):.0f} ({min(depth)}-{max(depth)})", f"{cut}/{len(qs)}",
                     f"{partly}/{len(qs)}"])
    return rows


PRUNED = {
    "lexical": "SELECT unit_id FROM rcll.channel_lexical(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), prune_above => %(prune)s) ORDER BY rank",
    "session": "SELECT unit_id FROM rcll.channel_session(%(q)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), %(qe)s, prune_above => %(prune)s) ORDER BY rank",
}


def pruning(conn: psycopg.Connection[Any], qs: list[dict[str, Any]], prune: float) -> list[list[Any]]:
    """The BM25 channels with their candidate pruning (terms in more than `prune` of the units
    generate no candidates; PRUNE is the shipped value) against exact BM25 (prune_above NULL): latency, and
    the pruned top 10's overlap with the exact top 10, per channel and kind of filter."""
    rows = []
    for channel, sql in PRUNED.items():
        for kind in ("tiny room", "author", "big room", "none", "all"):
            sel = [q for q in qs if kind in ("all", q["kind"])]
            if not sel:      # --queries below 5 draws no query of some kinds
                continue
            ms: dict[str, list[float]] = {"exact": [], "pruned": []}
            overlap = []
            for q in sel:
                p = query_params(q, BANK)
                res = {}
                for name, value in (("exact", None), ("pruned", prune)):
                    conn.execute(sql, {**p, "prune": value}).fetchall()
                    t = time.perf_counter()
                    res[name] = [r[0] for r in conn.execute(sql, {**p, "prune": value}).fetchall()]
                    ms[name].append((time.perf_counter() - t) * 1000)
                top = set(res["exact"][:10])
                if top:
                    overlap.append(len(top & set(res["pruned"][:10])) / len(top))
            rows.append([channel, kind, len(sel), statistics.median(ms["exact"]), statistics.median(ms["pruned"]),
                         statistics.mean(overlap) if overlap else ""])
    return rows


ROUTE = "SELECT unit_id FROM rcll.channel_dense(%(qe)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), exact_below => %(exact)s) ORDER BY rank"


def routing(conn: psycopg.Connection[Any], qs: list[dict[str, Any]]) -> list[list[Any]]:
    """Dense channel, exact scan vs HNSW iterative scan, per kind of filter: latency and the
    HNSW top-10's overlap with the exact top-10 (what route-by-size chooses between)."""
    rows = []
    for kind in ("tiny room", "author", "big room", "none"):
        sel = [q for q in qs if q["kind"] == kind]
        ex_ms, hn_ms, rec = [], [], []
        for q in sel:
            p = query_params(q, BANK)
            res = {}
            for name, exact in (("exact", 10**9), ("hnsw", 0)):
                conn.execute(ROUTE, {**p, "exact": exact}).fetchall()
                t = time.perf_counter()
                res[name] = [r[0] for r in conn.execute(ROUTE, {**p, "exact": exact}).fetchall()]
                (ex_ms if name == "exact" else hn_ms).append((time.perf_counter() - t) * 1000)
            top = set(res["exact"][:10])
            rec.append(len(top & set(res["hnsw"][:10])) / max(1, len(top)))
        if sel:
            rows.append([kind, len(sel), statistics.median(ex_ms), statistics.median(hn_ms), statistics.mean(rec)])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--configs", default=f"{RERANK_DEPTH}:{CONTEXT_DEPTH}",
                    help="rerank configurations to time, DEPTH:CONTEXT_DEPTH,... (default: the shipped one)")
    ap.add_argument("--port", type=int, default=55530)
    ap.add_argument("--deadlines", default="",
                    help="also time full recall at these deadlines (ms, e.g. 150,300,500): depth read, cuts")
    ap.add_argument("--keep", action="store_true", help="keep the cluster (in /tmp) for EXPLAIN")
    ap.add_argument("--fleet", type=int, default=0,
                    help="instead: a fleet store of this many units over --banks banks (bench/fleet.py), "
                         "recall in a small, a mid-size and the biggest bank")
    ap.add_argument("--banks", type=int, default=400)
    ap.add_argument("--per-case", type=int, default=12, help="fleet: queries per bank and filter")
    ap.add_argument("--no-rerank", action="store_true", help="fleet: time the SQL phase only (no models)")
    ap.add_argument("--partial", action="store_true", help="fleet: also try a partial HNSW index for the mid-size bank")
    ap.add_argument("--ef-search", default="",
                    help="fleet: also measure the dense channel's recall@10 vs exact and latency at these "
                         "hnsw.ef_search values (e.g. 400,800), on the cases that take the HNSW route")
    ap.add_argument("--split", type=int, default=0, metavar="UNITS",
                    help="fleet: then give every bank of at least UNITS units its own HNSW index, rebuild the "
                         "global one without them, and measure again")
    ap.add_argument("--ef-queries", type=int, default=20, help="fleet: queries per case for --ef-search")
    ap.add_argument("--upkeep", action="store_true",
                    help="fleet: then run one round of the periodic jobs (rcll upkeep, which gives big banks their own "
                         "HNSW indexes with the shipped settings) while writing into the biggest bank, and measure again")
    ap.add_argument("--citus", action="store_true",
                    help="fleet: load it into a Citus cluster (a coordinator and two workers, ports --port..--port+2) "
                         "through the coordinator, and its biggest bank alone into one node (--port+3); then the same "
                         "full recalls alternate between them (bench/fleet_citus.py; --split: the plan's min_units)")
    ap.add_argument("--shared-buffers", default="2GB", help="fleet --citus: every node's shared_buffers")
    ap.add_argument("--attach", default="", metavar="COORDINATOR_URL,NODE_URL",
                    help="fleet --citus: measure again on the cluster and node a --keep run left (no build)")
    args = ap.parse_args()

    if args.fleet and args.citus:
        try:
            fleet.bank_sizes(args.fleet, args.banks)
        except ValueError as e:
            ap.error(str(e))
        from bench import fleet_citus
        return fleet_citus.main(args)
    if args.fleet:
        try:
            fleet.bank_sizes(args.fleet, args.banks)
        except ValueError as e:
            ap.error(str(e))
        with embedded_cluster(args.port, prefix="rcllf-", keep=args.keep) as pg:
            dsn = create_database(pg, "fleet")
            with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as side:
                fleet.run(conn, side, args.fleet, args.banks, args.per_case, not args.no_rerank, args.partial,
                          [int(x) for x in args.ef_search.split(",") if x.strip()], args.ef_queries, args.split,
                          args.upkeep)
        return 0
    with embedded_cluster(args.port, prefix="rcllr-", keep=args.keep) as pg:
        for n in (int(s) for s in args.sizes.split(",")):
            dsn = create_database(pg, f"recall_{n}")
            with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as side:
                t = time.perf_counter()
                d = build(conn, n)
                load = " ".join(f"{x:.1f}" for x in os.getloadavg())
                print(f"\n{n:,} units: built in {time.perf_counter() - t:.0f} s (indexes {d['index_s']:.0f} s); load average {load}", flush=True)
                qs = queries(d, args.queries)
                configs = [tuple(int(x) for x in c.split(":")) for c in args.configs.split(",")]
                rows = measure(conn, side, qs, configs)
                print(table(["phase", "wall p50 ms", "wall p95 ms", "CPU p50 ms", "wall p50 by filter (ms)"], rows), flush=True)
                print("\ndense routing: exact scan vs HNSW iterative scan (300 results)")
                print(table(["filter", "queries", "exact p50 ms", "HNSW p50 ms", "HNSW recall@10 vs exact"],
                            routing(conn, qs)), flush=True)
                print(f"\nBM25 candidate pruning (prune_above {PRUNE}, shipped) vs exact BM25 (prune_above NULL)")
                print(table(["channel", "filter", "queries", "exact p50 ms", "pruned p50 ms", "top-10 overlap with exact"],
                            pruning(conn, qs, PRUNE)), flush=True)
                if args.deadlines:
                    print("\nfull recall at a deadline (counted from before the query embedding)")
                    print(table(["deadline", "latency p50 ms", "latency p95 ms", "rerank depth p50 (min-max)",
                                 "cut by the deadline", "partly reranked (>= 2 read)"],
                                deadlines(conn, side, qs, [int(x) for x in args.deadlines.split(",")])), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
