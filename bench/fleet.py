"""A fleet-shaped store of many banks (one holding a third of the units, hundreds of small ones),
and recall measured in a small, a mid-size and the biggest bank: `python -m bench.recall --fleet N`.

Each bank looks like bench/recall.py's single store, scaled to its size: clustered 384-d vectors
(topics drawn from a shared pool, each bank talking about its own subset), text drawn from LoCoMo's
vocabulary with its Zipf frequencies plus per-topic words, Zipf entities per bank, skewed rooms
(three big rooms hold 80% of a bank, the rest spread over small ones), ten authors, documents of
1-19 consecutive chunks. Documents of all banks are interleaved, as a fleet writes them, so a bank's
rows are spread over the whole heap. No model is needed to build it. Units go in by COPY through
the write triggers; the HNSW and GIN indexes are built afterwards (as a restore or bulk load would).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench._common import cpu_ns, drop_indexes, pct, query_params, table, vacuum_analyze
from bench.locomo.dataset import vocabulary

DIM = 384
TOPIC_POOL = 1000
T0 = np.datetime64("2024-06-01T00:00:00")
CASES = ("none", "big room", "tiny room", "author")       # the filter kinds each picked bank is asked under
# Dropped for the COPY and rebuilt after from their installed definitions (as a restore would).
BULK_LOAD_INDEXES = ("memory_units_embedding_hnsw", "unit_lexicon_bank_lexemes")


def _zipf_rest(n: int, banks: int, a: float) -> np.ndarray | None:
    """Sizes of banks 2..banks (Zipf, at least 50 units each), or None when they do not fit."""
    big = n // 3
    if banks < 2:
        return None
    w = 1.0 / np.arange(2, banks + 1) ** a
    rest = np.maximum(50, np.floor(w / w.sum() * (n - big))).astype(int)
    rest[0] += (n - big) - int(rest.sum())
    return rest if rest[0] >= rest.max() else None


def bank_sizes(n: int, banks: int, a: float = 1.0) -> list[int]:
    """The biggest bank holds a third of the units; the others follow a Zipf law (exponent a)."""
    rest = _zipf_rest(n, banks, a)
    if rest is None:
        fit = next((b for b in range(banks, 1, -1) if _zipf_rest(n, b, a) is not None), None)
        hint = f"pass --banks {fit} or fewer" if fit else "pass a bigger --fleet"
        raise ValueError(f"banks: {banks} Zipf-sized banks of at least 50 units each, the biggest a third, "
                         f"do not fit in {n:,} units; {hint}")
    return [n // 3, *sorted((int(x) for x in rest), reverse=True)]


def _texts(rng: np.random.Generator, words: list[str], freq: np.ndarray, topic_words: np.ndarray,
           topic_of: np.ndarray) -> list[str]:
    """Text of each unit: 12-39 vocabulary words, a third replaced by its topic's words."""
    n = len(topic_of)
    lengths = rng.integers(12, 40, size=n)
    total = int(lengths.sum())
    body = rng.choice(len(words), size=total, p=freq)
    owner = np.repeat(np.arange(n), lengths)
    swap = rng.random(total) < 1 / 3
    body[swap] = topic_words[topic_of[owner[swap]], rng.integers(0, topic_words.shape[1], size=int(swap.sum()))]
    arr = np.array(words, dtype=object)[body]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return [" ".join(arr[s:e]) for s, e in zip(starts, ends)]


@dataclass
class Target:
    """A database the fleet is written into: the whole fleet, or only some of its banks (`banks`: a
    mask over the fleet's banks; None: all). load() fills in the rest: the banks' ids there (by
    fleet bank; -1 where absent), the documents' and units' ids (-1 where absent), the seconds of
    each step, the bulk-load index definitions dropped."""

    conn: psycopg.Connection[Any]
    banks: np.ndarray | None = None
    bank_ids: list[int] = field(default_factory=list)
    doc_id: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    seconds: dict[str, float] = field(default_factory=dict)
    indexes: dict[str, str] = field(default_factory=dict)

    def holds(self, bank: int) -> bool:
        return self.banks is None or bool(self.banks[bank])

    @property
    def units(self) -> int:
        return int((self.ids >= 0).sum())


def generate(n: int, banks: int = 400, seed: int = 11) -> dict[str, Any]:
    """The fleet's units, documents, rooms, authors and entities, in memory (no database)."""
    rng = np.random.default_rng(seed)
    words, freq = vocabulary()
    sizes = bank_sizes(n, banks)
    names = [f"fleet-{i:03d}" for i in range(len(sizes))]

    centers = rng.normal(size=(TOPIC_POOL, DIM)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    mid = np.arange(200, 4000)
    topic_words = np.stack([rng.choice(mid, size=25, replace=False) for _ in range(TOPIC_POOL)])
    authors = [f"agent-{i}" for i in range(10)]

    t = time.perf_counter()
    # Per bank: its topics, units grouped into documents, rooms and authors per document.
    bank_of = np.repeat(np.arange(len(sizes)), sizes)
    topic_of = np.empty(n, dtype=np.int64)
    room_name: list[str] = []
    rooms_by_bank: list[list[str]] = []
    doc_of = np.empty(n, dtype=np.int64)
    doc_bank: list[int] = []
    doc_room: list[int] = []
    doc_author: list[int] = []
    ent_names: list[list[str]] = []
    unit_ents: list[list[int]] = [[] for _ in range(n)]
    pos = 0
    for b, size in enumerate(sizes):
        k = int(np.clip(size // 1500, 5, 200))
        topics = rng.choice(TOPIC_POOL, size=k, replace=False)
        w = 1.0 / np.arange(1, k + 1) ** 0.8
        topic_of[pos:pos + size] = topics[rng.choice(k, size=size, p=w / w.sum())]
        tiny = int(np.clip(size // 500, 2, 200))
        rooms = ["engineering", "operations", "product"] + [f"room-{i}" for i in range(tiny)]
        rooms_by_bank.append(rooms)
        room_p = np.array([0.40, 0.25, 0.15] + [0.20 / tiny] * tiny)
        per_doc = np.repeat(np.arange(size), rng.integers(1, 20, size=size))[:size]
        nd = int(per_doc[-1]) + 1
        doc_of[pos:pos + size] = per_doc + len(doc_bank)
        doc_bank += [b] * nd
        doc_room += list(rng.choice(len(rooms), size=nd, p=room_p))
        doc_author += list(rng.integers(0, 10, size=nd))
        n_ent = max(20, size // 20)
        suffix = ["Project", "Service", "Team", "Labs", "Group", "API"]
        ent_names.append([f"{words[int(rng.integers(300, 3000))].title()} {suffix[i % 6]}{b}x{i}" for i in range(n_ent)])
        cdf = np.cumsum(1.0 / np.arange(1, n_ent + 1) ** 1.1)
        cdf /= cdf[-1]
        counts = rng.integers(0, 4, size=size)
        picks = np.searchsorted(cdf, rng.random(int(counts.sum())))
        at = 0
        for i, c in enumerate(counts):
            if c:
                unit_ents[pos + i] = sorted({int(e) for e in picks[at:at + c]})
                at += c
        pos += size
    room_idx = np.array(doc_room)[doc_of]
    for i in range(n):
        room_name.append(rooms_by_bank[bank_of[i]][room_idx[i]])
    texts = _texts(rng, words, freq, topic_words, topic_of)
    for i, es in enumerate(unit_ents):
        if es:
            names_i = ent_names[bank_of[i]]
            ws = texts[i].split(" ")
            ws.insert(int(rng.integers(0, len(ws))), " and ".join(names_i[e] for e in es))
            texts[i] = " ".join(ws)
        texts[i] = texts[i].capitalize() + "."
    return {"rng": rng, "n": n, "sizes": sizes, "names": names, "centers": centers, "topic_of": topic_of,
            "bank_of": bank_of, "texts": texts, "room_name": room_name, "rooms_by_bank": rooms_by_bank,
            "authors": authors, "doc_of": doc_of, "doc_bank": doc_bank, "doc_author": doc_author,
            "ent_names": ent_names, "unit_ents": unit_ents, "generate_s": time.perf_counter() - t}


def load(d: dict[str, Any], targets: list[Target], hnsw: bool = True) -> None:
    """Write the generated fleet `d` into every target (each its banks), step by step: every target
    gets the same rows, in the same order, from one pass over the data; each target's seconds
    count its own statements only. The bulk-load indexes are dropped first and built again after
    (hnsw False: the GIN index only, the HNSW index left to rcll.dense_index_plan)."""
    rng: np.random.Generator = d["rng"]
    n, sizes, names, bank_of, texts = d["n"], d["sizes"], d["names"], d["bank_of"], d["texts"]
    doc_of, doc_bank, doc_author, room_name = d["doc_of"], d["doc_bank"], d["doc_author"], d["room_name"]
    ent_names, unit_ents, topic_of, centers = d["ent_names"], d["unit_ents"], d["topic_of"], d["centers"]
    authors = d["authors"]
    for tg in targets:
        tg.seconds["generate"] = d["generate_s"]
        held = [i for i in range(len(sizes)) if tg.holds(i)]
        for i in held:
            tg.conn.execute("SELECT rcll.create_bank(%s)", (names[i],))
        by_name = dict(tg.conn.execute("SELECT name, bank_id FROM rcll.banks WHERE name LIKE 'fleet-%%'").fetchall())
        tg.bank_ids = [int(by_name[names[i]]) if tg.holds(i) else -1 for i in range(len(sizes))]
        tg.indexes = drop_indexes(tg.conn, BULK_LOAD_INDEXES)

    # Fleet order: documents of every bank interleaved, as many agents write at once.
    n_docs = len(doc_bank)
    order = rng.permutation(n_docs)
    starts = np.searchsorted(doc_of, np.arange(n_docs + 1))
    ages = rng.integers(0, 730 * 86400, size=n)
    prov = json.dumps({"via": "bench"})
    doc_bank_arr = np.array(doc_bank)
    for tg in targets:
        t = time.perf_counter()
        mine = order if tg.banks is None else order[tg.banks[doc_bank_arr[order]]]
        with tg.conn.cursor() as cur, cur.copy("COPY rcll.documents (bank_id, content, content_hash, provenance) FROM STDIN") as cp:
            for doc in mine:
                content = "\n".join(texts[starts[doc]:starts[doc + 1]])
                cp.write_row((tg.bank_ids[doc_bank[doc]], content, hashlib.sha256(content.encode()).digest(), prov))
        first, last, count = tg.conn.execute(
            "SELECT min(document_id), max(document_id), count(*) FROM rcll.documents d JOIN rcll.banks b USING (bank_id) "
            "WHERE b.name LIKE 'fleet-%%'").fetchone()  # type: ignore[misc]
        assert last - first + 1 == count == len(mine), "document ids not consecutive in COPY order"
        tg.doc_id = np.full(n_docs, -1, dtype=np.int64)
        tg.doc_id[mine] = first + np.arange(len(mine))
        tg.seconds["documents"] = time.perf_counter() - t

    # Units in batches of documents (each batch one COPY through the write triggers).
    unit_order = np.concatenate([np.arange(starts[doc], starts[doc + 1]) for doc in order])
    chunk_of = np.arange(n) - starts[doc_of]
    batch = 20_000
    copy_s = [0.0] * len(targets)
    copied = [0] * len(targets)
    t0 = time.perf_counter()
    for s in range(0, n, batch):
        sel = unit_order[s:s + batch]
        vecs = centers[topic_of[sel]] + rng.normal(scale=0.045, size=(len(sel), DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        for k, tg in enumerate(targets):
            keep = np.arange(len(sel)) if tg.banks is None else np.flatnonzero(tg.banks[bank_of[sel]])
            if not len(keep):
                continue
            t = time.perf_counter()
            with tg.conn.cursor() as cur, cur.copy(
                    "COPY rcll.memory_units (bank_id, document_id, chunk_index, text, embedding, room, author, "
                    "author_source, valid, mentioned_at, provenance) FROM STDIN") as cp:
                for j in keep:
                    i = sel[j]
                    when = str(T0 - np.timedelta64(int(ages[i]), "s")) + "+00"
                    cp.write_row((tg.bank_ids[bank_of[i]], int(tg.doc_id[doc_of[i]]), int(chunk_of[i]), texts[i], vecs[j],
                                  room_name[i], authors[doc_author[doc_of[i]]], "self_declared", f"[{when},)", when, prov))
            copy_s[k] += time.perf_counter() - t
            copied[k] += len(keep)
        if s // batch % 10 == 9:
            print(f"  {s + len(sel):,} units generated, {time.perf_counter() - t0:.0f} s; copied "
                  + ", ".join(f"{c:,} at {c / max(x, 1e-9):.0f}/s" for c, x in zip(copied, copy_s)), flush=True)
    for k, tg in enumerate(targets):
        tg.seconds["units"] = copy_s[k]

    # Semantic links: a fifth of the units link to another unit of their bank and topic.
    peers: dict[tuple[int, int], np.ndarray] = {}
    key = bank_of.astype(np.int64) * TOPIC_POOL + topic_of
    srt = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[srt], np.unique(key))
    for a, z in zip(bounds, [*bounds[1:], n]):
        kk = int(key[srt[a]])
        peers[(kk // TOPIC_POOL, kk % TOPIC_POOL)] = srt[a:z]
    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for pick in rng.choice(n, size=n // 5, replace=False):
        src = int(pick)
        p = peers[(int(bank_of[src]), int(topic_of[src]))]
        dst = int(p[int(rng.integers(0, len(p)))])
        if dst != src and (src, dst) not in seen:
            seen.add((src, dst))
            pairs.append((src, dst))

    for tg in targets:
        t = time.perf_counter()
        conn = tg.conn
        # unit ids in COPY order
        mine_units = unit_order if tg.banks is None else unit_order[tg.banks[bank_of[unit_order]]]
        tg.ids = np.full(n, -1, dtype=np.int64)
        got = [r[0] for r in conn.execute("SELECT unit_id FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id) "
                                          "WHERE b.name LIKE 'fleet-%%' ORDER BY unit_id")]
        assert len(got) == len(mine_units)
        tg.ids[mine_units] = np.array(got)
        ids = tg.ids
        with conn.cursor() as cur:
            with cur.copy("COPY rcll.entities (bank_id, name, mention_count) FROM STDIN") as cp:
                for b, bank_ents in enumerate(ent_names):
                    if tg.holds(b):
                        for ent_name in bank_ents:
                            cp.write_row((tg.bank_ids[b], ent_name, 1))
            rows = conn.execute("SELECT e.bank_id, e.entity_id FROM rcll.entities e JOIN rcll.banks b USING (bank_id) "
                                "WHERE b.name LIKE 'fleet-%%' ORDER BY e.entity_id").fetchall()
            by_bank: dict[int, list[int]] = {}
            for bid, eid in rows:
                by_bank.setdefault(bid, []).append(eid)
            ent_ids = [by_bank[tg.bank_ids[b]] if tg.holds(b) else [] for b in range(len(sizes))]
            with cur.copy("COPY rcll.entity_aliases (bank_id, alias, entity_id) FROM STDIN") as cp:
                for b, bank_ents in enumerate(ent_names):
                    if tg.holds(b):
                        for e, ent_name in enumerate(bank_ents):
                            cp.write_row((tg.bank_ids[b], ent_name.lower(), ent_ids[b][e]))
            with cur.copy("COPY rcll.unit_entities (unit_id, entity_id, bank_id) FROM STDIN") as cp:
                for i, es in enumerate(unit_ents):
                    if es and tg.holds(bank_of[i]):
                        for e in es:
                            cp.write_row((int(ids[i]), ent_ids[bank_of[i]][e], tg.bank_ids[bank_of[i]]))
            with cur.copy("COPY rcll.links (bank_id, from_unit, to_unit, link_type, weight) FROM STDIN") as cp:
                for src, dst in pairs:
                    if tg.holds(bank_of[src]):
                        cp.write_row((tg.bank_ids[bank_of[src]], int(ids[src]), int(ids[dst]), "semantic", 0.8))
        tg.seconds["graph"] = time.perf_counter() - t

    for tg in targets:
        t = time.perf_counter()
        conn = tg.conn
        conn.execute("SET maintenance_work_mem = '4GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        for name, ddl in tg.indexes.items():
            if not hnsw and name == "memory_units_embedding_hnsw":
                continue
            t1 = time.perf_counter()
            conn.execute(ddl)
            tg.seconds[f"build {name}"] = time.perf_counter() - t1
            print(f"  {name} built in {tg.seconds[f'build {name}']:.0f} s", flush=True)
        tg.seconds["indexes"] = time.perf_counter() - t


def build(conn: psycopg.Connection[Any], n: int, banks: int = 400, seed: int = 11) -> dict[str, Any]:
    """Write the fleet into conn's database; returns what the queries and the report need."""
    d = generate(n, banks, seed)
    tg = Target(conn)
    load(d, [tg])
    t = time.perf_counter()
    vacuum_analyze(conn)
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(NULL)")
    conn.execute("SELECT rcll.fold_room_counts()")
    tg.seconds["analyze, statistics"] = time.perf_counter() - t
    return {**d, "bank_ids": tg.bank_ids, "ids": tg.ids, "seconds": tg.seconds}


def queries(d: dict[str, Any], bank: int, kind: str, count: int) -> list[dict[str, Any]]:
    """count queries in one bank under one filter kind: a few words of one of its units, a vector
    near that unit's topic."""
    import re
    rng: np.random.Generator = d["rng"]
    members = np.flatnonzero(d["bank_of"] == bank)
    rooms = d["rooms_by_bank"][bank]
    out = []
    for _ in range(count):
        i = int(members[int(rng.integers(0, len(members)))])
        ws = [w for w in re.findall(r"[a-z']+", d["texts"][i].lower()) if len(w) > 3]
        text = " ".join(rng.choice(ws, size=min(5, len(ws)), replace=False)) if ws else "status"
        v = d["centers"][d["topic_of"][i]] + rng.normal(scale=0.05, size=DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        f: dict[str, Any] = {}
        if kind == "big room":
            f["rooms"] = ["engineering"]
        elif kind == "tiny room":
            f["rooms"] = [rooms[3 + int(rng.integers(0, len(rooms) - 3))]]
        elif kind == "author":
            f["authors"] = [d["authors"][int(rng.integers(0, 10))]]
            f["include_self_declared"] = True   # the synthetic writers declared themselves
        out.append({"text": text, "qe": v.astype(np.float32), "filters": f})
    return out


DENSE = ("SELECT unit_id FROM rcll.channel_dense(%(qe)s, rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true), "
         "exact_below => %(exact)s) ORDER BY rank LIMIT 10")


def measure_case(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], bank: str,
                 qs: list[dict[str, Any]], emb: Any, rerank: bool) -> dict[str, Any]:
    """Per-phase wall times of full recall, and the dense channel's recall@10 against exact search.
    The channels run side by side on `conn` and `side`, as rcll.Memory runs them with a spare
    pooled connection; SQL CPU is both servers'."""
    from rcll.defaults import CONTEXT_DEPTH, RERANK_DEPTH
    from rcll.recall import Direct, candidates, recall
    from rcll.request import RecallRequest as R
    pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (conn, side)]  # type: ignore[index]

    def backend_cpu() -> int:
        return sum(cpu_ns(p) for p in pids)
    phases: dict[str, list[float]] = {"embed": [], "sql": [], "rerank": [], "cut": [], "total": [], "sql cpu": []}
    overlap: list[float] = []
    for q in qs:
        p = query_params(q, bank)
        routed = [r[0] for r in conn.execute(DENSE, {**p, "exact": 3000})]
        exact = [r[0] for r in conn.execute(DENSE, {**p, "exact": 10**9})]
        if exact:
            overlap.append(len(set(routed) & set(exact)) / len(exact))
        if rerank:
            t = time.perf_counter()
            emb.embed_query(q["text"])
            embed_ms = (time.perf_counter() - t) * 1000
            b0 = backend_cpu()
            r = recall(Direct(conn, side=side), R(query=q["text"], bank=bank, rerank_depth=RERANK_DEPTH, context_depth=CONTEXT_DEPTH, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"])
            phases["sql cpu"].append((backend_cpu() - b0) / 1e6)
            for k, v in (("embed", embed_ms), ("sql", r.timings.sql), ("rerank", r.timings.rerank), ("cut", r.timings.cut)):
                phases[k].append(v)
            phases["total"].append(embed_ms + r.timings.sql + r.timings.rerank + r.timings.cut)
        else:
            candidates(conn, R(query=q["text"], bank=bank, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"], side=side)
            b0 = backend_cpu()
            t = time.perf_counter()
            candidates(conn, R(query=q["text"], bank=bank, reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"], side=side)
            phases["sql"].append((time.perf_counter() - t) * 1000)
            phases["sql cpu"].append((backend_cpu() - b0) / 1e6)
    out: dict[str, Any] = {k: (statistics.median(v), pct(v, 0.95)) for k, v in phases.items() if v}
    out["recall@10"] = statistics.mean(overlap) if overlap else float("nan")
    return out


DENSE_SIGNATURE = "rcll.channel_dense(public.vector, rcll.recall_scope, integer, integer)"


@contextmanager
def dense_ef_search(conn: psycopg.Connection[Any]) -> Iterator[Callable[[int], None]]:
    """A setter of hnsw.ef_search on rcll.channel_dense itself (ALTER FUNCTION: throwaway stores
    only), so what is measured is the shipped function; the shipped value is restored on exit."""
    shipped = conn.execute("SELECT split_part(c, '=', 2) FROM pg_proc p, unnest(p.proconfig) c "
                           "WHERE p.oid = %s::regprocedure AND c LIKE 'hnsw.ef_search=%%'",
                           (DENSE_SIGNATURE,)).fetchone()[0]  # type: ignore[index]

    def set_ef(ef: int) -> None:
        conn.execute(f"ALTER FUNCTION {DENSE_SIGNATURE} SET hnsw.ef_search = {int(ef)}")
    try:
        yield set_ef
    finally:
        set_ef(int(shipped))


def exact_top10(conn: psycopg.Connection[Any], ps: list[dict[str, Any]]) -> list[list[int]]:
    """The dense channel's top 10 by exact search, per query (DENSE parameters)."""
    return [[r[0] for r in conn.execute(DENSE, {**p, "exact": 10**9})] for p in ps]


def dense_recall(conn: psycopg.Connection[Any], ps: list[dict[str, Any]], exact: list[list[int]]) -> list[float]:
    """The routed dense channel over these queries: recall@10 against `exact` (mean, worst query)
    and the latency of a warm second run (p50, p95 ms)."""
    rec, ms = [], []
    for p, ex in zip(ps, exact):
        conn.execute(DENSE, {**p, "exact": 3000})          # warm: the timed run reads cached pages
        t = time.perf_counter()
        got = [r[0] for r in conn.execute(DENSE, {**p, "exact": 3000})]
        ms.append((time.perf_counter() - t) * 1000)
        if ex:
            rec.append(len(set(got) & set(ex)) / len(ex))
    return [statistics.mean(rec), min(rec), statistics.median(ms), pct(ms, 0.95)]


def ef_sweep(conn: psycopg.Connection[Any], d: dict[str, Any], picks: dict[str, int], efs: list[int],
             count: int) -> list[list[Any]]:
    """The dense channel's recall@10 against exact search and its latency, at each hnsw.ef_search,
    for the cases that take the HNSW route: the same `count` queries per case at every value."""
    cases = []
    for label, b in picks.items():
        if d["sizes"][b] < 3000:                       # the exact route: recall 1.0 at any ef_search
            continue
        for kind in CASES:
            qs = queries(d, b, kind, count)
            ps = [query_params(q, d["names"][b]) for q in qs]
            in_scope = conn.execute(
                "SELECT count(*) FROM rcll.memory_units u WHERE u.embedding IS NOT NULL "
                "AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, "
                "rcll.recall_scope(%(bank)s, rooms => %(rooms)s, authors => %(authors)s, include_self_declared => true))", ps[0]).fetchone()[0]  # type: ignore[index]
            cases.append((f"{label} ({d['sizes'][b]:,})", kind, in_scope, ps, exact_top10(conn, ps)))
    rows: list[list[Any]] = []
    with dense_ef_search(conn) as set_ef:
        for ef in efs:
            set_ef(ef)
            for name, kind, in_scope, ps, exact in cases:
                rows.append([ef, name, kind, in_scope, *dense_recall(conn, ps, exact)])
                print(f"  ef_search {ef}, {name} {kind}: recall@10 {rows[-1][4]:.3f}, p50 {rows[-1][6]:.1f} ms", flush=True)
    return rows


def sizes_on_disk(conn: psycopg.Connection[Any], n: int) -> list[list[Any]]:
    rows = []
    for rel, in conn.execute("SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
                             "AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 8").fetchall():
        heap, toast = conn.execute("SELECT pg_relation_size(%s::regclass), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) "
                                   "FROM pg_class c WHERE c.oid = %s::regclass", (rel, rel)).fetchone()  # type: ignore[misc]
        rows.append([rel, "heap", heap / 2**20, heap / n])
        if toast:
            rows.append([rel, "TOAST", toast / 2**20, toast / n])
        for idx, size in conn.execute("SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid) FROM pg_index i "
                                      "WHERE i.indrelid = %s::regclass ORDER BY 2 DESC", (rel,)):
            rows.append([rel, idx, size / 2**20, size / n])
    total = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]  # type: ignore[index]
    rows.append(["database", "total", total / 2**20, total / n])
    return rows


def server_memory(conn: psycopg.Connection[Any]) -> str:
    """Proportional set size of every server process (shared buffers counted once), and settings."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    ppid = int(Path(f"/proc/{pid}/stat").read_text().split()[3])
    pids = [ppid] + [int(p) for p in Path(f"/proc/{ppid}/task/{ppid}/children").read_text().split()]
    pss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    sb = conn.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
    return f"{pss / 2**20:.0f} MiB PSS over {len(pids)} server processes (shared_buffers {sb})"


def write_rate(conn: psycopg.Connection[Any], bank: str, docs: int, seed: int = 5) -> float:
    """retain_chunks of `docs` one-chunk documents with given embeddings (no model): units/s,
    one transaction each, as a fleet's writers commit."""
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(docs, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    t = time.perf_counter()
    for i in range(docs):
        conn.execute("SELECT 1 FROM rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s], "
                     "embeddings => ARRAY[%s::vector], room => 'engineering', author => 'agent-1')",
                     (bank, f"write-rate probe {seed} {i} deploy pipeline", f"write-rate probe {seed} {i} deploy pipeline", vecs[i]))
    return docs / (time.perf_counter() - t)


def pick_banks(d: dict[str, Any]) -> dict[str, int]:
    """The biggest bank, a mid-size one (~3% of the units) and a small one (~1,000 units)."""
    sizes = np.array(d["sizes"])
    total = sizes.sum()
    mid = int(np.argmin(np.abs(sizes - 0.03 * total)))
    small = int(np.argmin(np.abs(sizes - 1000)))
    return {"small": small, "mid": mid, "biggest": 0}


def recall_table(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], d: dict[str, Any], picks: dict[str, int],
                 asked: dict[tuple[int, str], list[dict[str, Any]]], emb: Any, rerank: bool, title: str, note: str,
                 prefix: str = "") -> None:
    """measure_case for every picked bank and filter kind on the `asked` queries: a line each as it
    goes, then the table under `title` (`note`; the load average)."""
    rows = []
    for label, b in picks.items():
        for kind in CASES:
            m = measure_case(conn, side, d["names"][b], asked[(b, kind)], emb, rerank)
            rows.append([f"{label} ({d['sizes'][b]:,})", kind,
                         *[f"{m[k][0]:.1f} / {m[k][1]:.1f}" if k in m else "" for k in ("sql", "sql cpu", "rerank", "total")],
                         m["recall@10"]])
            print(f"  {prefix}{label} bank, {kind}: {rows[-1][2:]}", flush=True)
    print(f"\n{title} ({note}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print(table(["bank (units)", "filter", "SQL p50/p95 ms", "SQL backend CPU p50/p95 ms", "rerank p50/p95 ms",
                 "total p50/p95 ms", "dense recall@10 vs exact"], rows), flush=True)


def run(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], n: int, banks: int, per_case: int, rerank: bool,
        partial: bool, efs: list[int] | None = None, ef_queries: int = 20, split: int = 0, upkeep: bool = False) -> None:
    t = time.perf_counter()
    d = build(conn, n, banks)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{n:,} units in {len(d['sizes'])} banks (largest {d['sizes'][0]:,}, median "
          f"{int(statistics.median(d['sizes'])):,}, smallest {d['sizes'][-1]:,}): built in "
          f"{time.perf_counter() - t:.0f} s; load average {load}", flush=True)
    print(table(["step", "seconds"], [[k, v] for k, v in d["seconds"].items()]))
    print(f"units COPY rate through the write triggers: {n / d['seconds']['units']:.0f} units/s")
    print("\nbytes on disk")
    print(table(["table", "part", "MiB", "bytes per unit"], sizes_on_disk(conn, n)), flush=True)
    print(f"\nserver memory: {server_memory(conn)}")

    from rcll import models
    emb = models.get_embedder() if rerank else None
    if rerank:
        models.get_reranker()
    picks = pick_banks(d)
    asked = {(b, kind): queries(d, b, kind, per_case) for b in picks.values() for kind in CASES}
    recall_table(conn, side, d, picks, asked, emb, rerank, "recall per bank and filter",
                 f"{per_case} queries each; channels side by side on two connections")
    if efs:
        rows = ef_sweep(conn, d, picks, efs, ef_queries)
        print(f"\ndense channel at each hnsw.ef_search, the HNSW-route cases ({ef_queries} queries each, "
              f"the same at every value; latency of a warm second run; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
        print(table(["ef_search", "bank (units)", "filter", "units in scope (first query)", "recall@10 vs exact (mean)",
                     "worst query", "dense p50 ms", "dense p95 ms"], rows), flush=True)
    rate = write_rate(conn, d["names"][0], 300)
    print(f"\nwrite rate (retain_chunks, one unit per transaction, given embeddings) into the biggest bank: {rate:.0f} units/s")

    if partial:
        for label in ("mid", "biggest"):
            b = picks[label]
            bid = d["bank_ids"][b]
            conn.execute("SET maintenance_work_mem = '2GB'")
            t = time.perf_counter()
            conn.execute(f"CREATE INDEX fleet_{label}_hnsw ON rcll.memory_units USING hnsw (embedding vector_cosine_ops) "
                         f"WITH (m = 16, ef_construction = 64) WHERE bank_id = {int(bid)}")
            conn.execute("ANALYZE rcll.memory_units")
            built = time.perf_counter() - t
            prows = []
            for kind in CASES:
                m = measure_case(conn, side, d["names"][b], asked[(b, kind)], emb, False)
                prows.append([kind, m["sql"][0], m["sql cpu"][0], m["recall@10"]])
            print(f"\nper-bank partial HNSW index for the {label} bank: built in {built:.0f} s for "
                  f"{d['sizes'][b]:,} units; the same queries as above")
            print(table(["filter", "SQL p50 ms (no rerank)", "SQL backend CPU p50 ms", "dense recall@10 vs exact"], prows))
            rate = write_rate(conn, d["names"][b], 300, seed=6 + len(label))
            print(f"write rate into the {label} bank with its partial index too: {rate:.0f} units/s", flush=True)

    if split:
        split_indexes(conn, side, d, picks, asked, split, emb)
    if upkeep:
        upkeep_dense_indexes(conn, side, d, picks, asked, emb)


def upkeep_dense_indexes(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], d: dict[str, Any],
                  picks: dict[str, int], asked: dict[tuple[int, str], list[dict[str, Any]]], emb: Any) -> None:
    """One round of the periodic jobs (rcll.Memory.upkeep, as `rcll upkeep` and `rcll serve` run it,
    with the shipped settings: RCLL_AUTO_DENSE_INDEXES on, the plan's min_units) on a thread, while
    writes go into the biggest bank in batches of 50 one-unit transactions; the write rate
    while an index build was under way (rcll.dense_index_builds), then after the round, and the
    same queries as the first table once it is done. No manual step: the round applies the plan."""
    import threading

    from rcll import dense_indexes
    from rcll.memory import Memory
    biggest = d["names"][0]
    with Memory(conn.info.dsn, pool_size=2) as m:
        done: dict[str, Any] = {}

        def round_() -> None:
            try:
                done["upkeep"] = m.upkeep()
            except Exception as e:  # noqa: BLE001 - reported below
                done["error"] = e
        t = time.perf_counter()
        thread = threading.Thread(target=round_)
        thread.start()
        during: list[float] = []
        seed = 100
        while thread.is_alive():
            building = bool(dense_indexes.builds(side))
            rate = write_rate(conn, biggest, 50, seed=seed)
            seed += 1
            if building and dense_indexes.builds(side):
                during.append(rate)
        thread.join()
        took = time.perf_counter() - t
    if "error" in done:
        raise done["error"]
    steps = done["upkeep"].index_steps or []
    print(f"\none upkeep round (statistics, room counts, the dense-index plan) in {took:.0f} s, {len(steps)} step(s):")
    for why in steps:
        print(f"  {why}")
    listed = dense_indexes.indexes(conn)
    print("indexes after it: " + "; ".join(f"{g.index_name} ({g.kind}, {'valid' if g.valid else 'INVALID'})" for g in listed))
    if during:
        print(f"write rate into the biggest bank ({d['sizes'][0]:,}) while an index was built: median "
              f"{statistics.median(during):.0f} units/s over {len(during)} batches of 50 (min {min(during):.0f}, max {max(during):.0f})")
    rate = write_rate(conn, biggest, 300, seed=7)
    print(f"write rate into the biggest bank after the round: {rate:.0f} units/s", flush=True)
    conn.execute("ANALYZE rcll.memory_units")
    recall_table(conn, side, d, picks, asked, emb, emb is not None, "recall per bank and filter after one upkeep round",
                 "the same queries as the first table; the indexes the round built", prefix="after upkeep, ")


def split_indexes(conn: psycopg.Connection[Any], side: psycopg.Connection[Any], d: dict[str, Any],
                 picks: dict[str, int], asked: dict[tuple[int, str], list[dict[str, Any]]], min_units: int,
                 emb: Any) -> None:
    """`rcll dense-indexes --apply --min-units N` on the store: every bank of at least `min_units` units
    (and at most half the store) gets its own HNSW index, and the global index is rebuilt without
    them, so each unit is in exactly one index; then the same queries as the main table, and the
    write rates, again."""
    from rcll import dense_indexes
    built: list[list[Any]] = []
    by_id = {int(b): i for i, b in enumerate(d["bank_ids"])}

    def progress(s: dense_indexes.Step, seconds: float) -> None:
        if s.statement.startswith("CREATE INDEX"):
            bank = re.search(r"WHERE bank_id = ([0-9]+)$", s.statement)
            i = by_id[int(bank.group(1))] if bank else None
            units = d["sizes"][i] if i is not None else sum(d["sizes"]) - sum(r[1] for r in built)
            built.append([d["names"][i] if i is not None else "global index without them", units, seconds])
            print(f"  {built[-1][0]} ({units:,} units) built in {seconds:.0f} s", flush=True)
    dense_indexes.apply(conn.info.dsn, min_units, progress, maintenance_work_mem="3GB")
    conn.execute("ANALYZE rcll.memory_units")
    for label, b in picks.items():                      # which index a bank's nearest-neighbour scan walks
        plan = conn.execute(f"EXPLAIN SELECT u.unit_id FROM rcll.memory_units u WHERE u.bank_id = {int(d['bank_ids'][b])} "
                            f"ORDER BY u.embedding OPERATOR(public.<=>) (SELECT embedding FROM rcll.memory_units LIMIT 1) "
                            "LIMIT 300").fetchall()
        used = next((r[0].split(" using ")[1].split(" ")[0] for r in plan if " using " in r[0]), "no index")
        print(f"  {label} bank's nearest-neighbour scan uses: {used}", flush=True)
    print(f"\nown HNSW indexes for the {len(built) - 1} banks of at least {min_units:,} units, the global index rebuilt "
          "without them (each unit in one index; rcll dense-indexes --apply)")
    print(table(["index", "units", "build s"], built), flush=True)
    recall_table(conn, side, d, picks, asked, emb, emb is not None, "recall per bank and filter with split indexes",
                 "the same queries as the first table", prefix="split indexes, ")
    for label, b in picks.items():
        rate = write_rate(conn, d["names"][b], 300, seed=20 + b)
        print(f"write rate into the {label} bank ({d['sizes'][b]:,}) with split indexes: {rate:.0f} units/s", flush=True)
