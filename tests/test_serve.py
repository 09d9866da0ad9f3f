"""The main job: `rcll serve` on the embedded default database answers /retain then /recall."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    home = Path(tempfile.mkdtemp(prefix="rclls-", dir="/tmp"))
    env = {**os.environ, "RCLL_HOME": str(home), "LLM_PROVIDER": "none"}
    env.pop("RCLL_DSN", None)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"rcll serve exited: {proc.stdout.read() if proc.stdout else ''}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise AssertionError("rcll serve did not answer /health within 120 s")
        yield base
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
        subprocess.run([sys.executable, "-m", "rcll.cli", "db", "stop"], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", str(home)])


def test_serve_prints_where_it_listens_and_health_is_ok(server: str) -> None:
    body = httpx.get(f"{server}/health").json()
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
