"""A first start cannot race: processes that open `Memory()` on one fresh home at the same moment
all succeed - as root, with a server OS user no machine has seen (created once, by whichever gets
there first), and as a user without root - and leave one OS user, one cluster and one schema.

The suite itself runs every leg as an OS user made for the run (tests/conftest.py), so the path a
fresh machine takes, two workers starting their first clusters at once, is taken on every run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from clicall import rcll
from conftest import python_path
from rcll import cluster
from rcll.errors import RcllError
from rcll.model_service import ModelService, socket_path
from rcll.settings import Settings

PROCESSES = 4
# Each process imports rcll, says it is ready, waits for the word, then opens Memory() on the home.
OPEN = """
import sys, time
from pathlib import Path
from rcll import Memory
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.002)
with Memory() as memory:
    print(memory.dsn, sorted(b.name for b in memory.banks()))
"""
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating an OS user needs root")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory other OS users can be given, removed afterwards: in the run's temporary
    directory, not under pytest's own (any pytest starting meanwhile makes /tmp/pytest-of-<user>
    private again, and a server or process of another user could no longer reach its files)."""
    path = Path(tempfile.mkdtemp(prefix="first-start-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def open_at_once(tmp: Path, env: dict[str, str], python: str = sys.executable,
                 user: pwd.struct_passwd | None = None) -> list[subprocess.CompletedProcess[str]]:
    """PROCESSES processes opening Memory() at the same moment (a file each says it is ready, then
    one file says go), as `user` when given."""
    kwargs: dict[str, object] = {}
    if user is not None:
        kwargs.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd=str(tmp))
    go = tmp / "go"
    procs = [subprocess.Popen([python, "-c", OPEN, str(tmp / f"ready{i}"), str(go)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]
             for i in range(PROCESSES)]
    deadline = time.monotonic() + 120
    while not all((tmp / f"ready{i}").exists() for i in range(PROCESSES)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    done = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RCLL_DSN"}
    return {**env, "RCLL_HOME": str(home)}


def assert_one_start(results: list[subprocess.CompletedProcess[str]], home: Path) -> None:
    failed = [r.stderr for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of {PROCESSES} failed; the first said:\n{failed[0] if failed else ''}"
    assert len({r.stdout for r in results}) == 1, [r.stdout for r in results]   # one database, one default bank
    assert "['default']" in results[0].stdout
    assert sorted(p.name for p in home.iterdir() if not p.name.startswith(".")) == ["pg18", "pg18.log"]


@needs_root
def test_processes_opening_a_fresh_home_at_once_as_root_create_a_never_seen_server_user_once(
        tmp_path: Path) -> None:
    user = f"rcllf{uuid.uuid4().hex[:10]}"
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    home = tmp_path / "home"
    try:
        results = open_at_once(tmp_path, {**base_env(home), cluster.SERVER_USER_ENV: user})
        assert_one_start(results, home)
        entries = [line for line in Path("/etc/passwd").read_text().splitlines() if line.startswith(f"{user}:")]
        assert len(entries) == 1, entries
        uid = pwd.getpwnam(user).pw_uid
        assert (home / "pg18").stat().st_uid == uid
        with psycopg.connect(cluster.embedded(home / "pg18", os_user=user).url("rcll")) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None and os.stat(f"/proc/{row[0]}").st_uid == uid     # the server runs as it
    finally:
        cluster.embedded(home / "pg18", os_user=user).destroy()
        remove_os_user(user)


def remove_os_user(name: str) -> None:
    """userdel, once the user's last process (a server's backend exiting) is gone: a user left
    behind would make the next run's 'never seen' untrue."""
    deadline = time.monotonic() + 30
    while (proc := subprocess.run(["userdel", name], capture_output=True, text=True)).returncode != 0:
        assert time.monotonic() < deadline, f"userdel {name}: {proc.stderr.strip()}"
        time.sleep(0.2)


def test_processes_opening_a_fresh_home_at_once_without_root_start_one_cluster(tmp_path: Path) -> None:
    home = tmp_path / "home"
    if os.geteuid() != 0:
        results = open_at_once(tmp_path, base_env(home))
        user = None
    else:
        # As root: the run's OS user plays the user without root. The venv's interpreter lives
        # under /root (mode 0700), so it runs Debian's python3 on the venv's packages, as the pg15
        # leg's plpython3u does.
        user = cluster.ensure_os_user(cluster.server_user(Settings.from_env()))
        paths = python_path()
        for path in (*paths, str(tmp_path)):
            cluster._open_path_for_others(Path(path))
        os.chown(tmp_path, user.pw_uid, user.pw_gid)
        env = {**base_env(home), "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(paths),
               "PATH": "/usr/bin:/bin"}
        env.pop(cluster.SERVER_USER_ENV, None)
        results = open_at_once(tmp_path, env, python="/usr/bin/python3", user=user)
    try:
        assert_one_start(results, home)
        if user is not None:
            assert (home / "pg18").stat().st_uid == user.pw_uid
    finally:
        c = cluster.embedded(home / "pg18", os_user=user.pw_name if user else None)
        c.destroy()


def test_rcll_db_stop_removes_the_socket_directory(tmp_path: Path) -> None:
    env = {**base_env(tmp_path / "home")}
    c = cluster.embedded(tmp_path / "home" / "pg18", config=Settings.from_env(env))
    try:
        assert rcll("db", "start", env=env).returncode == 0
        assert c.socket_dir.is_dir()
        assert rcll("db", "stop", env=env).returncode == 0
        assert not c.socket_dir.exists()
    finally:
        c.destroy()


def test_a_closed_model_service_removes_its_socket_directory() -> None:
    socket_dir = Path(tempfile.gettempdir()) / f"rcll-models-t{uuid.uuid4().hex[:8]}"
    service = ModelService(socket_dir, port=50432).start()
    assert socket_dir.is_dir()
    service.close()
    assert not socket_dir.exists()


def test_a_model_service_refused_beside_a_live_one_leaves_that_ones_socket() -> None:
    socket_dir = Path(tempfile.gettempdir()) / f"rcll-models-t{uuid.uuid4().hex[:8]}"
    live = ModelService(socket_dir, port=50433).start()
    try:
        with pytest.raises(RcllError) as refused:
            ModelService(socket_dir, port=50433).start()
        assert "another model service is listening" in str(refused.value)
        assert socket_path(socket_dir, 50433).is_socket()          # the live one's, untouched
    finally:
        live.close()
    assert not socket_dir.exists()
