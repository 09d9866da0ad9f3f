"""The main job: `rcll serve` on the embedded default database answers /retain then /recall."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import psycopg
import pytest

from conftest import scratch_dir
from serving import Serving

ENV: dict[str, str] = {}   # the server's environment (its RCLL_HOME), for the tests that reach its database


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server(NamedTuple):
    base: str
    output: list[str]   # what `rcll serve` printed so far, line by line (stdout and stderr)


@pytest.fixture(scope="module")
def serving() -> Iterator[Server]:
    home = Path(tempfile.mkdtemp(prefix="rclls-", dir=scratch_dir()))
    env = {**os.environ, "RCLL_HOME": str(home), "LLM_PROVIDER": "none"}
    env.pop("RCLL_DSN", None)
    ENV.clear()
    ENV.update(env)
    port = free_port()
    server = Serving(["--port", str(port)], env)
    base = f"http://127.0.0.1:{port}"
    try:
        server.wait_healthy(base, 120)
        yield Server(base, server.output)
    finally:
        server.stop(30)
        subprocess.run([sys.executable, "-m", "rcll.cli", "db", "stop"], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", str(home)])


@pytest.fixture(scope="module")
def server(serving: Server) -> str:
    return serving.base


def test_serve_prints_where_it_listens_and_health_is_ok(serving: Server) -> None:
    # Printed before it listens (flushed): there by the time /health answered.
    lines = [line.rstrip("\n") for line in serving.output]
    [listening] = [line for line in lines if line.startswith("RCLL listening on ")]
    assert listening.startswith(f"RCLL listening on {serving.base}  (database: postgresql://"), listening
    assert f"  console: {serving.base}/" in lines
    assert any(line.startswith(f"  try: curl -s {serving.base}/retain ") for line in lines), lines
    body = httpx.get(f"{serving.base}/health").json()
    assert body["status"] == "ok" and body["pgvector"]


def test_retain_then_recall_returns_the_text(server: str) -> None:
    text = "We moved all deploys to Argo CD in March; Helm charts are kept only for local dev."
    r = httpx.post(f"{server}/retain", json={"bank": "default", "content": text, "room": "deployment"}, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{server}/recall", json={"bank": "default", "query": "how do we deploy?"}, timeout=60)
    assert r.status_code == 200, r.text
    assert text in [f["text"] for f in r.json()["facts"]]


def test_bad_retain_names_the_field(server: str) -> None:
    r = httpx.post(f"{server}/retain", json={"bank": "default", "content": "   "}, timeout=30)
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "RC001", "content")
    r = httpx.post(f"{server}/retain", json={"bank": "nope", "content": "hello"}, timeout=30)
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (404, "RC002", "bank")
    r = httpx.post(f"{server}/retain", json={"bank": "default"}, timeout=30)
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "RC001", "content")


def test_psql_recall_is_complete_beside_rcll_serve(server: str) -> None:
    # rcll serve registers its model service in the database (rcll.use_model_service): a DBA's
    # SELECT * FROM rcll.recall(...) gets dense ranks and rerank scores, and no NOTICE.
    text = "Backups run nightly at 02:00 UTC to the object store, kept for 30 days."
    r = httpx.post(f"{server}/retain", json={"bank": "default", "content": text, "room": "ops"}, timeout=60)
    assert r.status_code == 200, r.text
    url = subprocess.run([sys.executable, "-m", "rcll.cli", "db", "url"], env=ENV, capture_output=True, text=True,
                         check=True).stdout.strip()
    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as db:
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows = db.execute("SELECT text, rank_dense, rerank_score FROM rcll.recall('when do backups run', "
                          "rcll.recall_scope('default'))").fetchall()
    assert notices == []
    assert rows[0][0] == text and rows[0][1] is not None and rows[0][2] is not None
