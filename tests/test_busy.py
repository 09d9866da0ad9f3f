"""At its limit of requests in progress a server refuses at once - HTTP 503 with Retry-After, MCP a clear
error - and it answers recall with the depths it read under its default deadline."""

from __future__ import annotations

import json
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
            assert r.json()["field"] == "server" and "busy" in r.json()["error"]
            # Writes have their own places: a full read side does not refuse them.
            assert client.post("/retain", json={"bank": "b", "content": "Canary first."}).status_code == 200
        with queue.admit(WRITE):
            r = client.post("/retain", json={"bank": "b", "content": "Refused for now."})
            assert r.status_code == 503 and "retry-after" in r.headers
        r = client.post("/recall", json={"bank": "b", "query": "deploy", "deadline_ms": 1})
        assert r.status_code == 200 and r.json()["deadline_cut"] and r.json()["facts"]


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
    assert error["field"] == "server" and "busy" in error["error"] and "retry after" in error["hint"]
