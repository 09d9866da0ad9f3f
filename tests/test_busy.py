"""At its limit of requests in progress a server refuses at once - HTTP 503 with Retry-After, MCP a clear
error - and it answers recall with the depths it read under its default deadline."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anyio
import psycopg
import pytest
from fastapi.testclient import TestClient

from rcll import workqueue
from rcll.auth import TokenMap
from rcll.deadline import SERVER_DEADLINE_MS
from rcll.http import create_app
from rcll.mcp_server import build_server
from rcll.memory import Memory
from rcll.workqueue import READ, WRITE, WorkQueue


@pytest.fixture
def queue() -> Any:
    q = WorkQueue(2, read_limit=1, write_limit=1)
    previous = workqueue.install(q)
    yield q
    workqueue.install(previous)


def test_http_answers_503_with_retry_after_at_once_when_full(dsn: str, queue: WorkQueue) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    with TestClient(create_app(dsn, tokens=TokenMap())) as client:
        r = client.post("/retain", json={"bank": "b", "content": "We deploy with Argo CD."})
        assert r.status_code == 200, r.text
        r = client.post("/recall", json={"bank": "b", "query": "how do we deploy?"})
        body = r.json()
        assert r.status_code == 200 and body["deadline_ms"] == SERVER_DEADLINE_MS
        assert body["rerank_depth_reached"] + body["deadline_cut"] >= 1   # read the one candidate, or was cut
        with queue.admit(READ):          # the one recall place is taken
            started = time.perf_counter()
            r = client.post("/recall", json={"bank": "b", "query": "how do we deploy?"})
            assert r.status_code == 503 and time.perf_counter() - started < 1.0
            assert int(r.headers["retry-after"]) >= 1
            assert (r.json()["code"], r.json()["field"]) == ("RC010", "server") and "busy" in r.json()["error"]
            # Writes have their own places: a full read side does not refuse them.
            assert client.post("/retain", json={"bank": "b", "content": "Canary first."}).status_code == 200
        with queue.admit(WRITE):
            r = client.post("/retain", json={"bank": "b", "content": "Refused for now."})
            assert r.status_code == 503 and "retry-after" in r.headers
        r = client.post("/recall", json={"bank": "b", "query": "deploy", "deadline_ms": 1})
        assert r.status_code == 200 and r.json()["deadline_cut"] and r.json()["facts"]


def test_http_recall_keeps_its_deadline_while_writes_hold_every_model_slot(dsn: str, queue: WorkQueue) -> None:
    # Issue 13: with every model slot taken by writes, a recall used to wait for the query
    # embedding without bound (13 s under the soak). Now it answers the fused order by its
    # deadline; and when even the query embedding cannot start in time, 503 at once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    release, lane = threading.Event(), threading.Event()

    def bulk_write(first: bool) -> None:
        with queue.slot(WRITE, first=first):
            (lane if first else release).wait(10)

    body = {"bank": "b", "query": "how do we deploy?", "deadline_ms": 300}
    with TestClient(create_app(dsn, tokens=TokenMap())) as client:
        assert client.post("/retain", json={"bank": "b", "content": "We deploy with Argo CD."}).status_code == 200
        threads = [threading.Thread(target=bulk_write, args=(False,)) for _ in range(2)]
        for t in threads:
            t.start()
        while queue.snapshot().active[WRITE] < 2:
            time.sleep(0.002)
        try:
            started = time.perf_counter()
            r = client.post("/recall", json=body)
            took = time.perf_counter() - started
            assert r.status_code == 200 and took < 1.0, (r.status_code, took, r.text)
            assert r.json()["deadline_cut"] and r.json()["facts"] and r.json()["rerank_depth_reached"] == 0
            threads.append(threading.Thread(target=bulk_write, args=(True,)))     # the express lane too
            threads[-1].start()
            while queue.snapshot().express < 1:
                time.sleep(0.002)
            started = time.perf_counter()
            r = client.post("/recall", json=body)
            took = time.perf_counter() - started
        finally:
            release.set()
            lane.set()
            for t in threads:
                t.join()
        assert r.status_code == 503 and 0.25 < took < 1.0, (r.status_code, took, r.text)
        assert int(r.headers["retry-after"]) >= 1
        assert (r.json()["code"], r.json()["field"]) == ("RC010", "deadline_ms") and "busy" in r.json()["error"]
        body = client.post("/recall", json={"bank": "b", "query": "how do we deploy?", "deadline_ms": 60_000}).json()
        assert body["facts"] and body["timings_ms"]["queue"] >= 0 and body["elapsed_ms"] >= body["timings_ms"]["embed"]
    assert queue.snapshot().active == {READ: 0, WRITE: 0}


def test_mcp_refuses_with_a_clear_error_when_full(dsn: str, queue: WorkQueue) -> None:
    from mcp import Client

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    with Memory(dsn, bank="b") as memory:
        memory.retain("We deploy with Argo CD.")
        server = build_server(memory, default_bank="b")

        async def go() -> tuple[Any, Any]:
            async with Client(server) as client:
                ok = await client.call_tool("memory_recall", {"query": "how do we deploy?", "deadline_ms": 60000})
                with queue.admit(READ):
                    refused = await client.call_tool("memory_recall", {"query": "how do we deploy?"})
                return ok, refused

        ok, refused = anyio.run(go)
    body = ok.structured_content if ok.structured_content is not None else json.loads(ok.content[0].text)
    assert body["rerank_depth_reached"] == 1 and not body["deadline_cut"]
    assert refused.is_error
    text = refused.content[0].text
    error = json.loads(text[text.index("{"):])
    assert (error["code"], error["kind"], error["field"]) == ("RC010", "unavailable", "server")
    assert "busy" in error["error"] and "retry after" in error["hint"]
