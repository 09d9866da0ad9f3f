"""`make run WORKERS=2` (`rcll serve --citus-workers 2`): the main job on a throwaway local Citus
cluster - a coordinator and two workers on loopback - answers /retain then /recall through the
coordinator, with the schema distributed by bank and the model service registered on every node;
and when the server stops, nothing is left: no server process, no directory in the temporary
directory (the test gives the server a temporary directory of its own and finds nothing of the
cluster's in it)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import httpx
import psycopg
import pytest

from conftest import scratch_dir
from rcll import citus_cluster
from serving import Serving

# Tens of seconds: three servers started, the schema installed and distributed, the models loaded.
pytestmark = pytest.mark.slow

WORKERS = 2
ONNXRUNTIME_FILE = ".ses"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> int:
    """The first of n consecutive loopback ports free now (from the ephemeral range, as the other
    serve tests' HTTP port: no fixed range a pytest-xdist worker or a bench might also use)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = int(s.getsockname()[1])
        if first + n <= 65535 and all(_free(first + i) for i in range(n)):
            return first
    raise AssertionError(f"no {n} consecutive free loopback ports")


def _processes_under(path: str) -> list[str]:
    """Command lines of running processes that name path (a postmaster names its data directory)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if path in cmdline:
                found.append(f"{pid}: {cmdline}")
    return found


def test_serve_on_a_local_citus_cluster_answers_and_leaves_nothing_behind() -> None:
    missing = citus_cluster.citus_missing()
    if missing and os.geteuid() != 0:
        pytest.skip(missing)
    assert missing is None, missing
    tmp = tempfile.mkdtemp(prefix="rcllsc-", dir=scratch_dir())
    http_port, first = free_ports(1), free_ports(WORKERS + 1)
    env = {**os.environ, "TMPDIR": tmp, "LLM_PROVIDER": "none"}
    env.pop("RCLL_DSN", None)
    server = Serving(["--port", str(http_port), "--citus-workers", str(WORKERS), "--citus-port", str(first)], env)
    output = server.output
    base = f"http://127.0.0.1:{http_port}"
    try:
        server.wait_healthy(base, 240, "rcll serve --citus-workers")
        text = "We deploy the API with Argo CD since March."
        r = httpx.post(f"{base}/retain", json={"bank": "default", "content": text}, timeout=60)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{base}/recall", json={"bank": "default", "query": "how do we deploy?"}, timeout=60)
        assert r.status_code == 200, r.text
        [fact] = r.json()["facts"]
        assert fact["text"] == text and fact["rank_dense"] == 1 and fact["rerank_score"] is not None
        [url] = [line.split("psql: ", 1)[1].strip() for line in output if "Citus cluster up; psql: " in line]
        with psycopg.connect(url, autocommit=True) as conn:
            nodes = conn.execute("SELECT nodeport FROM pg_dist_node ORDER BY 1").fetchall()
            banked = conn.execute("SELECT count(*) FROM pg_dist_partition WHERE partmethod = 'h'").fetchone()
            # The delegated SQL recall runs on the bank's worker, and reaches the model service from there.
            bank_id = conn.execute("SELECT (s).bank_id FROM rcll.recall_scope('default') s").fetchone()
            rows = conn.execute("SELECT text, rank_dense, rerank_score FROM rcll.recall_in_bank("
                                "%s, 'how do we deploy', rcll.recall_scope('default'))",
                                (bank_id[0] if bank_id else None,)).fetchall()
        assert nodes == [(first + i,) for i in range(WORKERS + 1)]
        assert banked is not None and banked[0] > 10
        assert rows and rows[0][0] == text and rows[0][1] is not None and rows[0][2] is not None
    finally:
        code = server.stop(120)
    said = "".join(output)
    # onnxruntime writes .ses (a session id) into the temporary directory when it is imported, as
    # every process that loads the models does (plain `rcll serve` too); it is not the cluster's.
    left_running, left_files = _processes_under(tmp), sorted(set(os.listdir(tmp)) - {ONNXRUNTIME_FILE})
    if not left_files:
        shutil.rmtree(tmp)
    assert "Citus cluster stopped and removed" in said, said
    assert code in (0, 128 + signal.SIGTERM), said
    assert left_running == [] and left_files == [], (left_running, left_files)
