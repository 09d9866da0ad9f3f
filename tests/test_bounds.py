"""Bounded inputs and resources, and no secret where it does not belong: the request body cap
(before parsing and before authentication), caps on metadata and state values, export streams on
a connection budget of their own, /health without a token, the start-up line, the tokens file,
and the Docker image."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import conninfo

import rcll
from conftest import SETTINGS, Leg
from rcll.auth import TokenMap
from rcll.errors import RcllError
from rcll.http import create_app
from rcll.memory import Memory
from rcll.workqueue import Busy

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bounds-token-" + "b" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CAPPED = SETTINGS.replace(max_body_bytes=4096, max_import_bytes=8192)


@pytest.fixture
def tokened(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, tokens=TokenMap.from_pairs({TOKEN: "agent"}), settings=CAPPED)) as c:
        yield c


# -- the body cap ------------------------------------------------------------------------------------

def test_a_body_over_the_cap_is_refused_before_it_is_read_or_authenticated(tokened: TestClient) -> None:
    big = json.dumps({"bank": "default", "content": "x" * 10_000}).encode()
    for headers in ({}, AUTH, {"Authorization": "Bearer wrong-token-wrong-token"}):
        r = tokened.post("/retain", content=big, headers=headers | {"Content-Type": "application/json"})
        assert (r.status_code, r.json()["field"]) == (413, "body"), r.text
        assert "4096" in r.json()["error"]
    # Not valid JSON either: refused for its size, so it was never parsed.
    r = tokened.put("/state", content=b"{" * 5000, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    # Chunked (no Content-Length): refused as soon as the count passes the cap.
    r = tokened.post("/retain", content=iter([b"{" + b" " * 1000] * 10), headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["field"]) == (413, "body"), r.text
    # Under the cap the request goes on to authentication as before.
    small = tokened.post("/retain", json={"bank": "default", "content": "x"})
    assert small.status_code == 401, small.text


def test_the_import_route_has_its_own_cap(tokened: TestClient) -> None:
    ndjson = {"Content-Type": "application/x-ndjson"}
    r = tokened.post("/import", content=b"{}\n" * 2000, headers=ndjson | AUTH)          # 6 kB: over 4096
    assert r.status_code != 413, r.text
    r = tokened.post("/import", content=b"{}\n" * 3000, headers=ndjson | AUTH)          # 9 kB: over 8192
    assert (r.status_code, r.json()["field"]) == (413, "body"), r.text


def test_an_import_line_over_its_cap_is_refused_as_it_is_read(dsn: str) -> None:
    ndjson = {"Content-Type": "application/x-ndjson"}
    settings = CAPPED.replace(max_import_line_bytes=1024)
    with TestClient(create_app(dsn, tokens=TokenMap.from_pairs({TOKEN: "agent"}), settings=settings)) as tokened:
        r = tokened.post("/import", content=b"{}\n" + b'{"table":"x","row":"' + b"y" * 2000 + b'"}\n',
                         headers=ndjson | AUTH)
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "RC008", "line 2"), r.text
    assert "RCLL_MAX_IMPORT_LINE_BYTES" in r.json()["hint"]


def test_the_mcp_server_over_http_caps_the_body_before_the_token(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio
    import httpx

    from rcll.mcp_server import build_server, http_app

    tokens = TokenMap.from_pairs({TOKEN: "agent"})
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"padding": "x" * 10_000}}
    with Memory(dsn, settings=SETTINGS.replace(max_body_bytes=4096)) as memory:
        async def status(headers: dict[str, str]) -> int:
            server = build_server(memory, tokens=tokens)
            app = http_app(server, tokens, settings=memory.settings)
            async with server.session_manager.run(), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766") as client:
                return (await client.post("/mcp", json=body, headers=headers | {
                    "Accept": "application/json, text/event-stream"})).status_code

        assert anyio.run(status, {}) == 413
        assert anyio.run(status, AUTH) == 413


# -- /health ------------------------------------------------------------------------------------------

def test_health_says_only_alive_without_a_token(tokened: TestClient) -> None:
    assert tokened.get("/health").json() == {"status": "alive"}
    assert tokened.get("/health", headers={"Authorization": "Bearer not-a-token-at-all-x"}).status_code == 401
    detail = tokened.get("/health", headers=AUTH).json()
    assert detail["status"] == "ok" and detail["rcll"] and "upkeep" in detail


# -- metadata and state values --------------------------------------------------------------------------

def test_oversized_metadata_is_refused_naming_the_field(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Memory(dsn, settings=SETTINGS) as m:
        with pytest.raises(RcllError) as e:
            m.retain("A short fact.", bank="default", metadata={"blob": "x" * 70_000})
        assert e.value.field == "metadata" and "65536" in e.value.message and "RCLL_MAX_METADATA_BYTES" in str(e.value.hint)
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM rcll.documents").fetchone() == (0,)
    with TestClient(create_app(dsn, tokens=TokenMap(), settings=SETTINGS)) as c:
        r = c.post("/retain", json={"bank": "default", "content": "A short fact.", "metadata": {"blob": "x" * 70_000}})
        assert r.status_code in (400, 422) and r.json()["field"] == "metadata", r.text


def test_an_oversized_state_value_is_refused_naming_the_field(dsn: str) -> None:
    with Memory(dsn) as m:
        with pytest.raises(RcllError) as e:
            m.put_state("r", "k", {"blob": "x" * (1 << 20)}, bank="default")
        assert e.value.field == "value" and "RCLL_MAX_STATE_BYTES" in str(e.value.hint)
        assert m.get_state("r", "k", bank="default") is None
        assert m.put_state("r", "k", {"ok": "x" * 1000}, bank="default").version == 1


# -- export streams and the pool ------------------------------------------------------------------------

def test_slow_export_downloads_cannot_starve_the_pool(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Memory(dsn, pool_size=2, settings=SETTINGS.replace(max_exports=2)) as m:
        held = [m.export_lines(bank="default") for _ in range(2)]
        for lines in held:
            next(lines)                       # a client that read the first line and stopped
        started = time.monotonic()
        assert [b.name for b in m.banks()] == ["default"]
        assert time.monotonic() - started < 2, "a request waited for a connection an export held"
        with pytest.raises(Busy) as e:
            m.export_lines(bank="default")
        assert e.value.retry_after > 0 and "RCLL_MAX_EXPORTS" in str(e.value.hint)
        held.pop().close()                    # a finished (or dropped) download frees its slot
        assert b"".join(m.export_lines(bank="default")).startswith(b"{")
        held.pop().close()


def test_an_export_over_the_budget_is_a_503_with_retry_after(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(create_app(dsn, tokens=TokenMap(), settings=SETTINGS.replace(max_exports=1))) as c:
        svc: Memory = c.app.state.memory  # type: ignore[attr-defined]
        lines = svc.export_lines(bank="default")
        next(lines)
        r = c.get("/export", params={"bank": "default"})
        assert r.status_code == 503 and r.headers.get("retry-after"), r.text
        assert c.get("/banks").status_code == 200
        lines.close()
        assert c.get("/export", params={"bank": "default"}).status_code == 200


def test_a_stalled_export_gives_its_snapshot_back(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Memory(dsn, settings=SETTINGS.replace(export_idle_seconds=1)) as m:
        lines = m.export_lines(bank="default")
        next(lines)
        time.sleep(2.5)                       # the client stopped reading
        with psycopg.connect(dsn, autocommit=True) as conn:
            idle = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND state LIKE 'idle in transaction%'").fetchone()
        assert idle == (0,)
        with pytest.raises((psycopg.Error, RcllError)):
            list(lines)


# -- no secret printed at start-up -----------------------------------------------------------------------

def test_the_start_line_never_prints_the_database_password(pg18: Leg) -> None:
    name = pg18.new_database()
    secret = "S3cret-Passw0rd-" + "p" * 8
    parts = conninfo.conninfo_to_dict(pg18.url(name))
    dsn = conninfo.make_conninfo(**{k: str(v) for k, v in parts.items() if v is not None}, password=secret)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCLL_TOKENS")}
    env |= {"PYTHONPATH": str(Path(rcll.__file__).resolve().parents[1]), "LLM_PROVIDER": "none"}
    proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "serve", "--port", str(free_port()), "--dsn", dsn],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()        # the start line, after the models are loaded
        assert first.startswith("RCLL listening on"), (first, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        pg18.drop_database(name)
    assert secret not in first + out + err
    assert "password=***" in first


def test_a_password_is_masked_in_every_form_of_connection_string() -> None:
    from rcll.db import redacted

    for dsn in ("postgresql://u:hunter2hunter2@db.example/x", "host=db.example user=u password=hunter2hunter2",
                "postgresql://u@db.example/x?password=hunter2hunter2&sslmode=require"):
        shown = redacted(dsn)
        assert "hunter2" not in shown and "***" in shown and "db.example" in shown, shown
    assert redacted("postgresql://u@db.example/x") == "postgresql://u@db.example/x"


# -- the tokens file ---------------------------------------------------------------------------------

T = "t" * 24


@pytest.mark.parametrize("line, words, hint", [
    (f"{T} ci-bot bank=team-a can=read", "'bank=team-a'", "did you mean banks=?"),
    (f"{T} ci-bot bank=team-a", "'bank=team-a'", "did you mean banks=?"),
    (f"{T} ci-bot banks=team-a cans=read", "'cans=read'", "did you mean can=?"),
    (f"{T} ci-bot banks=team-a can=read extra", "'extra'", "an agent name is one word"),
    (f"{T} ci bot", "'bot'", "an agent name is one word"),
    (f"{T} ci-bot banks:team-a", "'banks:team-a'", "an agent name is one word"),
])
def test_a_misspelled_tokens_line_is_refused_naming_the_line(tmp_path: Path, line: str, words: str, hint: str) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text(f"# token agent scope\n{'g' * 24} auditor banks=team-a can=read\n{line}\n")
    with pytest.raises(RcllError) as e:
        TokenMap.from_env({"RCLL_TOKENS_FILE": str(path)})
    assert e.value.field == "RCLL_TOKENS_FILE line 3", e.value
    assert words in e.value.message and hint in str(e.value.hint), e.value
    assert T not in str(e.value) and T not in str(e.value.hint)          # the token is never repeated


# -- the Docker image --------------------------------------------------------------------------------

def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns leave `path` (or a directory above it) out of the context."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        p = pattern.rstrip("/")
        if p.startswith("**/"):
            rest = p[3:]
            if any(fnmatch.fnmatchcase("/".join(parts[i:j]), rest)
                   for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)):
                return True
        elif any(fnmatch.fnmatchcase(c, p) for c in candidates):
            return True
    return False


def test_the_docker_image_runs_as_a_non_root_user_and_bakes_in_no_secret() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    lines = [x.strip() for x in dockerfile.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    users = [i for i, x in enumerate(lines) if x.upper().startswith("USER ")]
    assert users, "the Dockerfile has no USER line: the server would run as root"
    user = lines[users[-1]].split()[1].split(":")[0]
    assert user not in ("root", "0")
    cmd = max(i for i, x in enumerate(lines) if x.upper().startswith("CMD"))
    assert users[-1] < cmd and not any(x.upper().startswith("RUN ") for x in lines[users[-1]:])
    assert re.search(rf"useradd\b.*\b{user}\b", dockerfile), "the USER is created in the image"

    ignore = ROOT / ".dockerignore"            # beside the build context's root: `docker build -f docker/Dockerfile .`
    assert ignore.exists()
    patterns = [x.strip() for x in ignore.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "no exception re-includes a secret"
    for secret in ("tokens.txt", "tokens", "docker/tokens.txt", "deploy/tokens.json", ".env", "docker/.env",
                   ".env.production", ".git/config", ".venv/bin/python", "python/.venv/x", "server.key",
                   "certs/server.pem", "id_rsa", "home/.ssh/id_ed25519", ".pgpass", "secrets/db", "run/secrets/x"):
        assert _ignored(secret, patterns), f"{secret} would be copied into the image"
    for kept in ("python/rcll/auth.py", "docker/Dockerfile", "README.md", "sql/migrations/001-schema.sql",
                 "scripts/bootstrap", "extension/rcll.control", "python/rcll/console/app.js"):
        assert not _ignored(kept, patterns), f"{kept} is needed in the image"
