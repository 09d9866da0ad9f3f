"""Any language's client runs the complete recall through SQL: Node.js with node-postgres (pg).

`make test` installs tests/node's locked dependencies first (make node-client: npm ci).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import psycopg
from psycopg import conninfo

from test_model_service import Q, service, service_dsn  # noqa: F401 - fixtures

NODE_DIR = Path(__file__).parent / "node"


def test_a_node_client_runs_the_complete_sql_recall(service_dsn: str) -> None:  # noqa: F811
    node = shutil.which("node")
    assert node, "Node.js is required (Debian: apt-get install nodejs npm)"
    assert (NODE_DIR / "node_modules" / "pg").is_dir(), "run `make node-client` (npm ci in tests/node)"
    params = conninfo.conninfo_to_dict(service_dsn)
    env = {**os.environ, "PGHOST": str(params["host"]), "PGPORT": str(params["port"]),
           "PGDATABASE": str(params["dbname"]), "PGUSER": str(params["user"])}
    out = subprocess.run([node, str(NODE_DIR / "recall.mjs"), Q, "b"], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    got = json.loads(out.stdout)
    with psycopg.connect(service_dsn, autocommit=True) as db:
        rows = db.execute("SELECT unit_id, rerank_score, rank_dense, rank_lexical FROM rcll.recall(%s, rcll.recall_scope('b'))",
                          (Q,)).fetchall()
    assert got["notices"] == []
    assert [int(r["unit_id"]) for r in got["rows"]] == [r[0] for r in rows]
    assert [np.float32(r["rerank_score"]) for r in got["rows"]] == [np.float32(r[1]) for r in rows]
    assert [(r["rank_dense"], r["rank_lexical"]) for r in got["rows"]] == [(r[2], r[3]) for r in rows]
    assert got["rows"][0]["rerank_score"] is not None and any(r["rank_dense"] for r in got["rows"])
