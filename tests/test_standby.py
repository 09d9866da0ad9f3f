"""Recall runs on a streaming hot standby and returns what the primary returns."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import conninfo

from conftest import PORTS, Leg
from rcll import cluster, models
from rcll.db import configure
from test_recall_seed import seed

Q = "how do we deploy with helm, and where did carol move last year?"
CALLS = [
    "SELECT * FROM rcll.recall_candidates(%(q)s, rcll.recall_scope('b', as_of => '2024-06-01'), query_embedding => %(qe)s, reference_time => '2024-05-15')",
    "SELECT unit_id, rerank_score IS NULL FROM rcll.recall(%(q)s, scope => rcll.recall_scope('b', as_of => '2024-06-01'), query_embedding => %(qe)s, reference_time => '2024-05-15')",
    "SELECT * FROM rcll.channel_dense(%(qe)s, rcll.recall_scope('b', as_of => '2024-06-01'), exact_below => 0)",
    "SELECT * FROM rcll.channel_lexical(%(q)s, rcll.recall_scope('b', as_of => '2024-06-01'))",
    "SELECT * FROM rcll.channel_graph(%(q)s, rcll.recall_scope('b', as_of => '2024-06-01'))",
    "SELECT * FROM rcll.channel_temporal(%(q)s, rcll.recall_scope('b', as_of => '2024-06-01'), reference_time => '2024-05-15')",
]


def _results(url: str) -> list[list[tuple[Any, ...]]]:
    qe = models.get_embedder().embed_query(Q)
    with psycopg.connect(url, autocommit=True) as conn:
        configure(conn)
        return [conn.execute(sql, {"q": Q, "qe": qe}).fetchall() for sql in CALLS]


def test_recall_on_a_hot_standby_returns_the_primarys_rows(leg: Leg, models_dsn: str) -> None:
    name = conninfo.conninfo_to_dict(models_dsn)["dbname"]
    standby: cluster.Cluster | None = None
    try:
        with psycopg.connect(models_dsn, autocommit=True) as db:
            configure(db)
            seed(db)
        standby = cluster.replica(leg.cluster, leg.cluster.datadir.parent / f"{leg.name}-standby",
                                  port=PORTS[leg.name] + 100)
        with psycopg.connect(leg.url(name), autocommit=True) as db:
            lsn = db.execute("SELECT pg_current_wal_lsn()").fetchone()
        with psycopg.connect(standby.url(name), autocommit=True) as sb:
            assert sb.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            deadline = time.monotonic() + 30
            while sb.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn).fetchone() != (True,):
                assert time.monotonic() < deadline, "the standby did not catch up"
                time.sleep(0.1)
        on_primary = _results(leg.url(name))
        on_standby = _results(standby.url(name))
        assert all(on_primary), "every call returns rows on the primary"
        assert on_standby == on_primary
        if leg.name == "pg15":
            # All five phases in the standby's own backends: embed and rerank inside PostgreSQL.
            with psycopg.connect(standby.url(name), autocommit=True) as sb:
                rows = sb.execute("SELECT unit_id, rerank_score FROM rcll.recall('how do we roll back a release?', scope => rcll.recall_scope('b'))").fetchall()
                assert rows and rows[0][1] is not None
    finally:
        if standby is not None:
            standby.destroy()
