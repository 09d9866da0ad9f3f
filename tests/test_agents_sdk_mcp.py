"""The OpenAI Agents SDK attaches RCLL over MCP with its own client classes (agents.mcp's
MCPServerStdio and MCPServerStreamableHttp): it lists RCLL's tools, an Agent turns them into its
function tools, and calls retain and recall through them - no model is called (nothing leaves the
machine: the tool calls are the ones a model's answer would make)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psycopg
import pytest

from rcll.mcp_server import READ_TOOLS, WRITE_TOOLS

if TYPE_CHECKING:
    from agents.mcp import MCPServer

# The SDK is imported inside the tests: every pytest-xdist worker collects this file, and the
# import costs seconds of CPU that a worker not running these tests would spend for nothing.
ROOT = Path(__file__).resolve().parents[1]
TOKEN = "tok-" + "s" * 32


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "python"), "LLM_PROVIDER": "none", **extra}


@pytest.fixture
def bank(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    return dsn


def text(result: Any) -> Any:
    return json.loads(result.content[0].text) if result.structured_content is None else result.structured_content


async def use(server: MCPServer) -> dict[str, Any]:
    """What an agent does with RCLL's MCP server: list, retain, recall - directly and as the
    Agent's own function tools."""
    from agents import Agent, FunctionTool, RunContextWrapper, set_tracing_disabled
    from agents.tool_context import ToolContext

    set_tracing_disabled(True)      # the SDK's traces would go to OpenAI's servers: nothing leaves the machine
    async with server:
        names = {t.name for t in await server.list_tools()}
        r = await server.call_tool("memory_retain", {"bank": "b", "content": "We deploy the API with Argo CD.",
                                                     "room": "deployment"})
        assert not r.is_error, r.content
        r = await server.call_tool("memory_recall", {"bank": "b", "query": "how do we deploy?"})
        direct = text(r)["facts"][0]["text"]
        agent = Agent(name="assistant", instructions="Recall before you answer.", mcp_servers=[server])
        tools = {t.name: t for t in await agent.get_all_tools(RunContextWrapper(context=None))}
        recall = tools["memory_recall"]
        assert isinstance(recall, FunctionTool)
        args = json.dumps({"bank": "b", "query": "which tool deploys the API?"})
        out = await recall.on_invoke_tool(ToolContext(context=None, tool_name="memory_recall", tool_call_id="c1",
                                                      tool_arguments=args), args)
        return {"names": names, "direct": direct, "as_agent_tool": str(out), "agent_tools": set(tools)}


@pytest.mark.slow
def test_the_agents_sdk_stdio_client_lists_and_calls_rcll_tools(bank: str) -> None:
    from agents.mcp import MCPServerStdio

    server = MCPServerStdio(params={"command": sys.executable, "args": ["-m", "rcll.cli", "mcp", "--dsn", bank],
                                    "env": _env(RCLL_AGENT="assistant")},
                            client_session_timeout_seconds=120)
    out = anyio.run(use, server)
    assert set(READ_TOOLS + WRITE_TOOLS) <= out["names"] <= out["agent_tools"]
    assert "Argo CD" in out["direct"] and "Argo CD" in out["as_agent_tool"]


@pytest.fixture
def http_server(bank: str, tmp_path: Path) -> Iterator[str]:
    """`rcll mcp --transport http` as a person runs it, with one bearer token."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "mcp.log"
    with log.open("wb") as err, subprocess.Popen(
            [sys.executable, "-m", "rcll.cli", "mcp", "--transport", "http", "--port", str(port), "--dsn", bank],
            env=_env(RCLL_TOKENS=f"{TOKEN} assistant"), stdout=subprocess.DEVNULL, stderr=err) as proc:
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                assert proc.poll() is None, log.read_text()
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(20)


@pytest.mark.slow
def test_the_agents_sdk_streamable_http_client_lists_and_calls_rcll_tools_with_its_token_only(http_server: str) -> None:
    from agents.mcp import MCPServerStreamableHttp

    server = MCPServerStreamableHttp(params={"url": http_server, "headers": {"Authorization": f"Bearer {TOKEN}"},
                                             "timeout": 120, "sse_read_timeout": 120},
                                     client_session_timeout_seconds=120)
    out = anyio.run(use, server)
    assert set(READ_TOOLS + WRITE_TOOLS) <= out["names"] <= out["agent_tools"]
    assert "Argo CD" in out["direct"] and "Argo CD" in out["as_agent_tool"]
    # without the token it gets nothing
    anonymous = MCPServerStreamableHttp(params={"url": http_server, "timeout": 20}, client_session_timeout_seconds=20)

    async def go() -> None:
        async with anonymous:
            await anonymous.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error types
        anyio.run(go)
