"""The fleet over two workers, through the coordinator, beside its biggest bank on one node:
`python -m bench.recall --fleet N --citus`.

Starts a Citus cluster (rcll.citus_cluster: a coordinator and two workers on loopback, ports
--port..--port+2) and one embedded node (--port+3), every node with the same shared_buffers and
durability settings; installs rcll on the coordinator (distributed by bank: 32 shards a table,
every bank's rows in one shard group). bench/fleet.py's fleet is generated once and written in one
pass: every bank through the coordinator, and the biggest bank alone into the node, the same rows
in the same order (COPY in batches of 20,000 units; each side's seconds count its own statements).
The coordinator routes each COPY row to its bank's shard; the write triggers run on the shards, on
the workers (memory_units' BEFORE triggers, then unit_lexicon's and room_count_queue's rows written
into the co-located shards there, and unit_lexicon's own trigger into document_lexicon's).

The HNSW index is left out of the load (the GIN index is rebuilt after it, as fleet.py does); then
the statistics and room counts (Memory.upkeep without the index step) and the dense-index plan
the periodic jobs apply (Memory.apply_dense_index_plan with min_units --split, CONCURRENTLY: every
bank of at least that many units its own HNSW index, the global one without them) build the HNSW
indexes on both: on the cluster Citus builds each index on every shard; on the node the biggest
bank is the whole store, so its own index is planned with max_share 1 (the same index, m 32,
ef_construction 128, WHERE bank_id = <its id>).

Then the same queries (bench.fleet.queries: the biggest bank under each filter kind) alternate
between the coordinator and the node (each query's first run on both, the order flipping each
query): full recall (rcll.recall.recall with the rerank over the query's given vector, the
query text embedded before, as bench.fleet measures it), through a store as Memory.recall uses
it: on the cluster the scope resolved and phases 2-3 delegated to the bank's worker, on the node
the channels side by side on two connections. Then bursts of one-unit retains into the biggest
bank, alternating (rcll.retain_chunks_in_bank through the coordinator, delegated as Memory.retain
sends it; rcll.retain_chunks on the node).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench import fleet
from bench._common import connect, create_database, pct, table, vacuum_analyze
from rcll import cluster, dense_indexes, install, models
from rcll.citus_cluster import CitusCluster
from rcll.defaults import CONTEXT_DEPTH, RERANK_DEPTH
from rcll.memory import Memory
from rcll.recall import Direct, recall
from rcll.request import RecallRequest as R

# The node gets the Citus nodes' durability settings (rcll.citus_cluster.SETTINGS), so the write
# rates compare like with like.
SAME = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "wal_level": "logical",
        "max_connections": "200"}


def units_per_worker(conn: psycopg.Connection[Any]) -> list[tuple[int, int, int, int]]:
    """(worker port, banks, units, the largest bank's units) per worker, from the placement of each
    bank's memory_units shard."""
    return [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in conn.execute(
        "SELECT s.nodeport, count(*), sum(u.n), max(u.n) "
        "FROM (SELECT bank_id, count(*) AS n FROM rcll.memory_units GROUP BY bank_id) u "
        "JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('rcll.memory_units', u.bank_id) "
        "GROUP BY s.nodeport ORDER BY 1").fetchall()]


def worker_of_bank(conn: psycopg.Connection[Any], bank_id: int) -> int:
    row = conn.execute("SELECT s.nodeport FROM citus_shards s WHERE s.shardid = "
                       "get_shard_id_for_distribution_column('rcll.memory_units', %s)", (bank_id,)).fetchone()
    assert row is not None
    return int(row[0])


def trigger_report(conn: psycopg.Connection[Any]) -> list[str]:
    """Where the write triggers ran: the user triggers on each worker's memory_units shards, and
    the rows they wrote (unit_lexicon, document_lexicon) against the units and documents."""
    lines = []
    for port, ok, result in conn.execute(
            "SELECT nodeport, success, result FROM run_command_on_workers($$SELECT count(*) || ' triggers on ' || "
            "count(DISTINCT c.relname) || ' memory_units shards' FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relname ~ '^memory_units_[0-9]+$' AND NOT t.tgisinternal$$) ORDER BY 1").fetchall():
        lines.append(f"worker :{port}: {result if ok else 'failed: ' + result}")
    counts = conn.execute("SELECT (SELECT count(*) FROM rcll.memory_units), (SELECT count(*) FROM rcll.unit_lexicon), "
                          "(SELECT count(*) FROM rcll.documents), (SELECT count(*) FROM rcll.document_lexicon)").fetchone()
    assert counts is not None
    lines.append(f"rows the triggers wrote: unit_lexicon {counts[1]:,} for {counts[0]:,} units, "
                 f"document_lexicon {counts[3]:,} for {counts[2]:,} documents")
    return lines


def retain_rate(conn: psycopg.Connection[Any], bank: str, bank_id: int | None, docs: int, seed: int) -> float:
    """One-unit retains (given embeddings, one transaction each) into `bank`: units/s. bank_id: by
    rcll.retain_chunks_in_bank, which a coordinator delegates whole to the bank's worker (what
    Memory.retain sends on a cluster); None: rcll.retain_chunks."""
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(docs, fleet.DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    t = time.perf_counter()
    for i in range(docs):
        text = f"write-rate probe {seed} {i} deploy pipeline"
        if bank_id is None:
            conn.execute("SELECT 1 FROM rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s], "
                         "embeddings => ARRAY[%s::vector], room => 'engineering', author => 'agent-1')",
                         (bank, text, text, vecs[i]))
        else:
            conn.execute("SELECT 1 FROM rcll.retain_chunks_in_bank(bank_id => %s, bank => %s, content => %s, "
                         "chunks => ARRAY[%s], embeddings => ARRAY[%s::vector], room => 'engineering', "
                         "author => 'agent-1')", (bank_id, bank, text, text, vecs[i]))
    return docs / (time.perf_counter() - t)


def own_index_used(conn: psycopg.Connection[Any], bank_id: int, vec: np.ndarray) -> str:
    """The index the bank's nearest-neighbour scan walks (EXPLAIN; through a coordinator, the
    plan of the task on the bank's shard)."""
    literal = "[" + ",".join(f"{x:.6f}" for x in vec) + "]"
    plan = conn.execute(f"EXPLAIN SELECT u.unit_id FROM rcll.memory_units u WHERE u.bank_id = {int(bank_id)} "
                        f"ORDER BY u.embedding OPERATOR(public.<=>) '{literal}'::public.vector LIMIT 300").fetchall()
    return next((r[0].split(" using ")[1].split(" ")[0] for r in plan if " using " in r[0]), "no index")


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} / {pct(xs, 0.95):.1f}"


def _ratio(a: list[float], b: list[float]) -> float:
    return statistics.median([x / y for x, y in zip(a, b)])


def run(cl: CitusCluster, node: cluster.Cluster, n: int, banks: int, per_case: int, split: int,
        rounds: int = 4, burst: int = 100) -> None:
    t_all = time.perf_counter()
    d = fleet.generate(n, banks)
    print(f"generated {n:,} units in {len(d['sizes'])} banks (largest {d['sizes'][0]:,}) in {d['generate_s']:.0f} s",
          flush=True)
    node_url = create_database(node, "fleet")
    only_biggest = np.zeros(len(d["sizes"]), dtype=bool)
    only_biggest[0] = True
    with ExitStack() as stack:
        cc = stack.enter_context(connect(cl.url(), autocommit=True))
        nc = stack.enter_context(connect(node_url, autocommit=True))
        nside = stack.enter_context(connect(node_url, autocommit=True))
        on_cluster, on_node = fleet.Target(cc), fleet.Target(nc, banks=only_biggest)
        fleet.load(d, [on_cluster, on_node], hnsw=False)
        print("\nwrite triggers (run on the shards, on the workers):")
        for line in trigger_report(cc):
            print(f"  {line}")

        # Statistics and the dense-index plan, as the periodic jobs run them.
        built: dict[str, list[list[Any]]] = {"cluster": [], "node": []}
        for side, url, tg, share in (("cluster", cl.url(), on_cluster, None), ("node", node_url, on_node, 1.0)):
            t = time.perf_counter()
            vacuum_analyze(tg.conn)
            if side == "cluster":              # ANALYZE without a table analyses the coordinator's own tables only
                for w in cl.workers:
                    with psycopg.connect(cl.url(w), autocommit=True) as wc:
                        wc.execute("ANALYZE")
            with Memory(url, install=False) as m:
                up = m.upkeep(dense_indexes=False)
                tg.seconds["analyze, statistics"] = time.perf_counter() - t

                def progress(s: dense_indexes.Step, seconds: float, side: str = side) -> None:
                    if s.statement.startswith("CREATE INDEX"):
                        built[side].append([s.why, seconds])
                        print(f"  {side}: {s.why}: {seconds:.0f} s", flush=True)
                t = time.perf_counter()
                steps = m.apply_dense_index_plan(min_units=split, max_share=share, progress=progress)
                tg.seconds["dense-index plan"] = time.perf_counter() - t
            tg.conn.execute("ANALYZE rcll.memory_units")
            print(f"{side}: upkeep {up.seconds:.1f} s ({up.banks} banks' statistics); the plan ran {len(steps)} "
                  f"steps in {tg.seconds['dense-index plan']:.0f} s", flush=True)

        cid, nid = on_cluster.bank_ids[0], on_node.bank_ids[0]
        port = worker_of_bank(cc, cid)
        probe = d["centers"][d["topic_of"][0]]
        print(f"\nthe biggest bank's nearest-neighbour scan: through the coordinator {own_index_used(cc, cid, probe)} "
              f"(its shard on worker :{port}); on the node {own_index_used(nc, nid, probe)}")
        print("indexes on the cluster: " + "; ".join(f"{g.index_name} ({g.kind}, {'valid' if g.valid else 'INVALID'})"
                                                  for g in dense_indexes.indexes(cc)))
        load_avg = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"\nbuilt in {time.perf_counter() - t_all:.0f} s; load average {load_avg}")
        print(table(["step", "cluster s", "node s"],
                    [[k, on_cluster.seconds.get(k, ""), on_node.seconds.get(k, "")]
                     for k in dict.fromkeys([*on_cluster.seconds, *on_node.seconds])]))
        print(table(["index built (the plan)", "seconds"], [[f"cluster: {w}", s] for w, s in built["cluster"]]
                    + [[f"node: {w}", s] for w, s in built["node"]]))
        workers = units_per_worker(cc)
        print("\nunits per worker")
        print(table(["worker", "banks", "units", "largest bank"], [[f":{p}", b, u, x] for p, b, u, x in workers]))
        copy_c = on_cluster.units / on_cluster.seconds["units"]
        copy_n = on_node.units / on_node.seconds["units"]

        compare(cc, nc, nside, d, per_case, (on_cluster.units, on_node.units), workers, copy_c, copy_n, rounds, burst)
    print(f"whole run {time.perf_counter() - t_all:.0f} s", flush=True)


def compare(cc: psycopg.Connection[Any], nc: psycopg.Connection[Any], nside: psycopg.Connection[Any], d: dict[str, Any],
            per_case: int, units: tuple[int, int], workers: list[tuple[int, int, int, int]], copy_c: float | None,
            copy_n: float | None, rounds: int = 4, burst: int = 100, seed: int = 100) -> None:
    """The same full recalls in the biggest bank alternating between the coordinator (cc) and the
    node (nc, nside: its channels side by side), then bursts of one-unit retains; the table."""
    n = d["n"]
    big = d["names"][0]
    cid = int(cc.execute("SELECT rcll._bank_id(%s)", (big,)).fetchone()[0])  # type: ignore[index]
    # Full recall in the biggest bank, alternating.
    emb = models.get_embedder()
    models.get_reranker()
    qs = [(kind, q) for kind in fleet.CASES for q in fleet.queries(d, 0, kind, per_case)]
    sides = {"cluster": (Direct(cc, in_bank=True), big), "node": (Direct(nc, side=nside), big)}
    res: dict[str, dict[str, list[float]]] = {s: {"total": [], "sql": [], "rerank": []} for s in sides}
    kinds: list[str] = []
    overlap: list[float] = []
    for k, (kind, q) in enumerate(qs):
        got: dict[str, list[str]] = {}
        for s in (("cluster", "node") if k % 2 == 0 else ("node", "cluster")):
            store, bank = sides[s]
            t = time.perf_counter()
            emb.embed_query(q["text"])
            embed_ms = (time.perf_counter() - t) * 1000
            r = recall(store, R(query=q["text"], bank=bank, rerank_depth=RERANK_DEPTH, context_depth=CONTEXT_DEPTH,
                                reference_time="2024-06-01", **q["filters"]), query_embedding=q["qe"])
            res[s]["total"].append(embed_ms + r.timings.sql + r.timings.rerank + r.timings.cut)
            res[s]["sql"].append(r.timings.sql)
            res[s]["rerank"].append(r.timings.rerank)
            got[s] = [f.text for f in r.facts[:10]]
        kinds.append(kind)
        if got["node"]:
            overlap.append(len(set(got["cluster"]) & set(got["node"])) / len(got["node"]))
        print(f"  {k + 1}/{len(qs)} {kind}: cluster {res['cluster']['total'][-1]:.0f} ms "
              f"(SQL {res['cluster']['sql'][-1]:.0f}), node {res['node']['total'][-1]:.0f} ms "
              f"(SQL {res['node']['sql'][-1]:.0f})", flush=True)
    load_avg = " ".join(f"{x:.1f}" for x in os.getloadavg())

    rates: dict[str, list[float]] = {"cluster": [], "node": []}
    for i in range(rounds):
        for s in (("cluster", "node") if i % 2 == 0 else ("node", "cluster")):
            rates[s].append(retain_rate(cc, big, cid, burst, seed + i) if s == "cluster"
                            else retain_rate(nc, big, None, burst, seed + i))

    c, o = res["cluster"], res["node"]
    rows: list[list[Any]] = [
        ["units", f"{units[0]:,} over {len(workers)} workers ("
         + ", ".join(f":{p} {u:,}" for p, _, u, _ in workers) + ")", f"{units[1]:,}", ""]]
    if copy_c and copy_n:
        rows.append(["bulk COPY through the write triggers, units/s", f"{copy_c:.0f}", f"{copy_n:.0f}", f"{copy_c / copy_n:.2f}"])
    rows += [
        [f"one-unit retains into the biggest bank, units/s (median of {rounds} bursts of {burst})",
         f"{statistics.median(rates['cluster']):.0f}", f"{statistics.median(rates['node']):.0f}",
         f"{statistics.median(rates['cluster']) / statistics.median(rates['node']):.2f}"],
        ["biggest bank full recall p50 / p95 ms", _ms(c["total"]), _ms(o["total"]),
         f"**{_ratio(c['total'], o['total']):.3f}** (median per query)"],
        ["its SQL phase p50 / p95 ms", _ms(c["sql"]), _ms(o["sql"]), f"{_ratio(c['sql'], o['sql']):.3f}"],
        ["its rerank p50 / p95 ms", _ms(c["rerank"]), _ms(o["rerank"]), f"{_ratio(c['rerank'], o['rerank']):.3f}"],
    ]
    for kind in fleet.CASES:
        sel = [i for i, x in enumerate(kinds) if x == kind]
        ct, nt = [c["total"][i] for i in sel], [o["total"][i] for i in sel]
        cs, ns = [c["sql"][i] for i in sel], [o["sql"][i] for i in sel]
        rows.append([f"  {kind}: full recall p50 ms (SQL p50)", f"{statistics.median(ct):.1f} ({statistics.median(cs):.1f})",
                     f"{statistics.median(nt):.1f} ({statistics.median(ns):.1f})",
                     f"{_ratio(ct, nt):.3f} (SQL {_ratio(cs, ns):.3f})"])
    print(f"\n{n:,} units over two workers through the coordinator, against the biggest bank ({d['sizes'][0]:,}) "
          f"alone on one node ({len(qs)} queries, {per_case} per filter, alternating, each query's first run; "
          f"load average {load_avg} after the recalls)")
    print(table(["", "coordinator + 2 workers", "one node", "ratio cluster / node"], rows))
    print(f"top-10 facts the same on both (by text): {statistics.mean(overlap):.3f} of each top ten (mean)")




def attached(coordinator: str, node_url: str, n: int, banks: int, per_case: int) -> None:
    """compare() on a cluster and a node an earlier --keep run left (the fleet generated again; the
    queries are drawn before the load's draws, so they differ from that run's, and are the same on
    every attached run)."""
    d = fleet.generate(n, banks)
    with connect(coordinator, autocommit=True) as cc, connect(node_url, autocommit=True) as nc, \
            connect(node_url, autocommit=True) as nside:
        units = tuple(int(c.execute("SELECT count(*) FROM rcll.memory_units").fetchone()[0])  # type: ignore[index]
                      for c in (cc, nc))
        # retains of new content (the same content again would be found, not written)
        compare(cc, nc, nside, d, per_case, (units[0], units[1]), units_per_worker(cc), None, None,
                seed=int(time.time()))


def main(args: Any) -> int:
    from rcll import citus_cluster
    if args.attach:
        coordinator, node_url = args.attach.split(",")
        attached(coordinator, node_url, args.fleet, args.banks, args.per_case)
        return 0
    missing = citus_cluster.citus_missing()
    if missing:
        print(missing)
        return 2
    same = {"shared_buffers": args.shared_buffers, "maintenance_work_mem": "2GB"}
    root = Path(tempfile.mkdtemp(prefix="rcllfc-", dir="/tmp"))
    (root / "citus").mkdir()
    cl = citus_cluster.start(root / "citus", args.port, settings=same)
    node = cluster.embedded(root / "node", port=args.port + 3, **{**SAME, **same})
    try:
        node.start()
        with psycopg.connect(cl.url()) as conn:
            print(install.install(conn), flush=True)
            conn.commit()
        run(cl, node, args.fleet, args.banks, args.per_case, args.split or 20000)
    finally:
        if args.keep:
            print(f"kept: coordinator {cl.url()}, node {node.url('fleet')} (stop: rcll.citus_cluster.stop, "
                  f"pg_ctl -D {node.datadir} stop; then rm -r {root})")
        else:
            citus_cluster.stop(cl)
            node.destroy()
            shutil.rmtree(root, ignore_errors=True)
    return 0
