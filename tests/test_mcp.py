"""MCP: the SDK's own client retains and recalls over stdio and streamable HTTP; read-only is real."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from conftest import MakeLoginRole
from rcll.auth import TokenMap
from rcll.errors import Code, RcllError
from rcll.mcp_server import READ_TOOLS, WRITE_TOOLS, build_server, http_app
from rcll.memory import Memory

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "tok-" + "a" * 32


def payload(result: Any) -> Any:
    """A tool result's JSON (structured content when present, else the text)."""
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def tool_error(result: Any) -> dict[str, Any]:
    """The {code, kind, field, error, hint} of a failed tool call (the SDK prefixes "Error executing tool X: ")."""
    text = result.content[0].text
    return dict(json.loads(text[text.index("{"):]))


async def _retain_and_recall(client: Any) -> dict[str, Any]:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(READ_TOOLS + WRITE_TOOLS) <= set(tools)
    for name in READ_TOOLS:
        assert tools[name].annotations.read_only_hint is True, name
    for name in WRITE_TOOLS:
        assert tools[name].annotations.read_only_hint is False, name
    r = await client.call_tool("memory_retain", {"bank": "b", "content": "We deploy the API with Argo CD since March.",
                                                 "room": "deployment", "tags": ["ops"]})
    assert not r.is_error, r.content
    assert payload(r)["unit_ids"]
    r = await client.call_tool("memory_recall", {"bank": "b", "query": "how do we deploy?", "rooms": ["deployment"],
                                                 "mine": True, "budget": 500})
    assert not r.is_error, r.content
    facts = payload(r)["facts"]
    assert facts and "Argo CD" in facts[0]["text"]
    r = await client.call_tool("memory_state_put", {"bank": "b", "room": "deployment", "key": "spread",
                                                    "value": {"n": 1}, "expected_version": 0})
    assert not r.is_error and payload(r)["version"] == 1
    r = await client.call_tool("memory_state_get", {"bank": "b", "room": "deployment", "key": "spread"})
    assert payload(r)["state"]["value"] == {"n": 1}
    r = await client.call_tool("memory_tags", {"bank": "b", "pattern": "author:*"})
    return {"authors": [t["tag"] for t in payload(r)["tags"]], "facts": facts}


def _bank(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")


def test_stdio_client_retains_and_recalls(dsn: str) -> None:
    from mcp import Client, StdioServerParameters

    _bank(dsn)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "RCLL_AGENT": "alice", "LLM_PROVIDER": "none"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "rcll.cli", "mcp", "--dsn", dsn, "--bank", "b"],
                                   env=env)

    async def go() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _retain_and_recall(client)

    out = anyio.run(go)
    assert out["authors"] == ["author:alice"]   # the server's identity, not the caller's
    with psycopg.connect(dsn) as conn:              # the state's provenance names the door it came in by
        assert conn.execute("SELECT provenance->>'via' FROM rcll.room_state").fetchall() == [("mcp",)]


@contextmanager
def _serve(app: Any) -> Iterator[str]:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(10)


def test_streamable_http_client_retains_and_recalls_as_its_token(dsn: str) -> None:
    import httpx
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    _bank(dsn)
    svc = Memory(dsn)
    svc.open()
    tokens = TokenMap.from_pairs({TOKEN: "bob"})
    try:
        with _serve(http_app(build_server(svc, tokens=tokens), tokens)) as base:
            assert httpx.post(f"{base}/mcp", json={}).status_code == 401
            assert httpx.post(f"{base}/mcp", json={}).json()["field"] == "authorization"

            async def go() -> dict[str, Any]:
                async with (httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http,
                            Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client):
                    return await _retain_and_recall(client)

            out = anyio.run(go)
    finally:
        svc.close()
    assert out["authors"] == ["author:bob"]


def test_read_only_serves_reads_and_the_database_refuses_writes(dsn: str, login_role: MakeLoginRole) -> None:
    from mcp import Client

    _bank(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.retain_chunks(bank => 'b', content => 'Rules: always run the tests.', "
                     "chunks => ARRAY['Rules: always run the tests.'], embeddings => NULL, hall => 'rule')")
    # A role that can write is refused in read-only mode.
    with pytest.raises(RcllError) as e:
        Memory(dsn, read_only=True).open()
    assert e.value.field == "dsn"

    # A SELECT-only login role: what sql/migrations/006-reader-role.sql's rcll_reader provides.
    reader = login_role(member_of="rcll_reader").dsn
    svc = Memory(reader, read_only=True)
    svc.open()
    try:
        with pytest.raises(RcllError) as e:
            build_server(svc, write_tools=True)
        assert (e.value.code, e.value.field) == (Code.NOT_PERMITTED, "write_tools")
        server = build_server(svc)

        async def go() -> tuple[set[str], Any, Any]:
            async with Client(server) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                rules = await client.call_tool("memory_session_start", {"bank": "b"})
                write = await client.call_tool("memory_retain", {"bank": "b", "content": "x"})
                return names, rules, write

        names, rules, write = anyio.run(go)
        assert names == set(READ_TOOLS)
        assert "memory_retain" not in names and write.is_error
        assert payload(rules)["rules"][0]["text"].startswith("Rules")
        # And the database itself refuses a write from the reader, whatever the server does.
        with psycopg.connect(reader, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT rcll.retain_chunks(bank => 'b', content => 'sneaky', chunks => ARRAY['sneaky'], "
                         "embeddings => NULL)")
        with pytest.raises(RcllError) as e:
            svc.retain("sneaky", bank="b")
        assert (e.value.code, e.value.field) == (Code.NOT_PERMITTED, "read_only")
    finally:
        svc.close()


def test_tool_errors_name_the_field(dsn: str) -> None:
    from mcp import Client

    _bank(dsn)
    svc = Memory(dsn)
    svc.open()
    try:
        server = build_server(svc)

        async def go() -> list[Any]:
            async with Client(server) as client:
                return [await client.call_tool("memory_recall", {"bank": "nope", "query": "x"}),
                        await client.call_tool("memory_retain", {"bank": "b", "content": "a\x00b"}),
                        await client.call_tool("memory_state_put", {"bank": "b", "room": "r", "key": "k",
                                                                    "value": 1, "expected_version": 5})]

        expected = [("RC002", "unknown_bank", "bank"), ("RC001", "invalid_input", "content"),
                    ("RC005", "version_conflict", "expected_version")]
        for r, (code, kind, field) in zip(anyio.run(go), expected, strict=True):
            assert r.is_error
            error = tool_error(r)
            assert (error["code"], error["kind"], error["field"]) == (code, kind, field), error
            assert error["error"] and error["hint"], error
    finally:
        svc.close()
