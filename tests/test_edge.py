"""Safe by default at the edge: without tokens the servers listen on loopback only, unless the
operator says --allow-anonymous-network; the Docker image therefore needs a token to start."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rcll
from rcll.auth import TokenMap, check_listen, is_loopback
from rcll.errors import RcllError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(rcll.__file__).resolve().parents[1]      # the rcll these tests import, for the subprocesses
NOWHERE = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2"   # a server that refused first never sees it
TOKEN = "edge-token-" + "e" * 24


def rcll(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rcll.cli", *args], env=clean_env(**(env or {})),
                          capture_output=True, text=True, timeout=timeout)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RCLL_TOKENS", "RCLL_TOKENS_FILE", "RCLL_ALLOW_ANONYMOUS_NETWORK", "RCLL_HOST", "RCLL_DSN")}
    return {**env, "PYTHONPATH": str(PACKAGE), "LLM_PROVIDER": "none", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port (a connect, no request sent)."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LocalHost", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("192.168.1.2", False),
    ("rcll.example.com", False), ("localhost.example.com", False),
])
def test_only_127_0_0_0_8_ipv6_loopback_and_localhost_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_listen_check_refuses_anonymous_network_and_nothing_else() -> None:
    anonymous, with_tokens = TokenMap(), TokenMap.from_pairs({TOKEN: "ops"})
    check_listen("127.0.0.1", anonymous, allow_anonymous=False)
    check_listen("0.0.0.0", with_tokens, allow_anonymous=False)
    check_listen("0.0.0.0", anonymous, allow_anonymous=True)
    with pytest.raises(RcllError) as e:
        check_listen("0.0.0.0", anonymous, allow_anonymous=False)
    assert e.value.field == "host" and "--allow-anonymous-network" in str(e.value) and "RCLL_TOKENS" in str(e.value)


@pytest.mark.parametrize("args, env", [
    (["serve", "--host", "0.0.0.0"], {}),
    (["serve", "--host", "::"], {}),
    (["serve"], {"RCLL_HOST": "0.0.0.0"}),                                   # what docker/Dockerfile sets
    (["mcp", "--transport", "http", "--host", "0.0.0.0"], {}),
    (["serve", "--host", "0.0.0.0"], {"RCLL_ALLOW_ANONYMOUS_NETWORK": "0"}),
])
def test_a_server_without_tokens_refuses_a_non_loopback_address_in_one_line(args: list[str],
                                                                             env: dict[str, str]) -> None:
    port = free_port()
    started = time.monotonic()
    r = rcll(*args, "--port", str(port), "--dsn", NOWHERE, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("rcll: host: refusing to listen on"), lines
    assert "RCLL_TOKENS" in lines[0] and "--allow-anonymous-network" in lines[0]
    assert "listening" not in r.stdout.lower() and not listening(port)
    assert time.monotonic() - started < 60       # refused before touching the database or the models


@pytest.mark.parametrize("env", [{"RCLL_TOKENS": f"{TOKEN} ops banks=ops-* can=read"},
                                 {"RCLL_ALLOW_ANONYMOUS_NETWORK": "1"}])
def test_tokens_or_the_anonymous_flag_let_it_past_the_check(env: dict[str, str]) -> None:
    # It then goes on to the database (unreachable here): the error is the database's, not the host's.
    r = rcll("serve", "--host", "0.0.0.0", "--port", str(free_port()), "--dsn", NOWHERE, env=env)
    assert r.returncode != 0 and "refusing to listen" not in r.stderr, r.stderr


def test_with_the_anonymous_flag_it_starts_on_every_interface(dsn: str) -> None:
    # Binds 0.0.0.0 only to see it start, sends nothing but a TCP connect to 127.0.0.1, and stops.
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "serve", "--host", "0.0.0.0", "--port", str(port),
                             "--dsn", dsn, "--allow-anonymous-network"], env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not listening(port):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "rcll serve did not start within 180 s"
            time.sleep(0.5)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "RCLL listening on http://0.0.0.0:" in out
    assert re.search(r"warning: .*anonymous.*0\.0\.0\.0", err), err


def test_the_docker_image_needs_a_token_to_start() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    env = dict(re.findall(r"(RCLL_[A-Z_]+)=(\S+)", " ".join(line for line in dockerfile.splitlines()
                                                             if line.startswith("ENV"))))
    # It listens on every interface, names no token and does not opt out: `rcll serve` refuses to
    # start until the operator passes RCLL_TOKENS or RCLL_TOKENS_FILE (the refusal is tested above).
    assert env.get("RCLL_HOST") == "0.0.0.0"
    assert not {"RCLL_TOKENS", "RCLL_TOKENS_FILE", "RCLL_ALLOW_ANONYMOUS_NETWORK"} & set(env)
    assert re.search(r'^CMD \[.*"rcll", "serve"\]', dockerfile, re.M) or re.search(r'^CMD \[".*/rcll", "serve"\]',
                                                                                  dockerfile, re.M)
    readme = (ROOT / "docker" / "README.md").read_text()
    assert "RCLL_TOKENS" in readme and "--allow-anonymous-network" in readme


def test_mcp_over_http_beyond_loopback_accepts_its_public_host_name(dsn: str) -> None:
    # In process (no socket): on loopback the SDK refuses a Host that is not loopback (DNS
    # rebinding); listening beyond it, with tokens, a client's public host name must work.
    import anyio
    import httpx

    from rcll.mcp_server import build_server, http_app
    from rcll.memory import Memory

    tokens = TokenMap.from_pairs({TOKEN: "ops"})
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "edge", "version": "1"}}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    with Memory(dsn) as memory:
        async def status(host: str) -> int:
            server = build_server(memory, tokens=tokens)
            app = http_app(server, tokens, host=host)
            async with server.session_manager.run(), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://rcll.example.com:8766") as client:
                return (await client.post("/mcp", json=body, headers=headers)).status_code

        assert anyio.run(status, "127.0.0.1") == 421
        assert anyio.run(status, "0.0.0.0") == 200
