"""Another local OS user cannot reach the embedded database (rcll.cluster): the socket sits in a
directory of mode 0700 owned by the server's OS user, no TCP line trusts anyone, the data
directory and the log are the server user's alone - and a cluster an earlier release left open
is closed when it starts. The owner (here root, as `rcll` run by root) still connects with no
set-up: every other test in the suite does."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest

from conftest import Leg
from rcll import cluster
from rcll.settings import Settings

STRANGER = "nobody"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another OS user needs root "
                                                         "(subprocess user=nobody); run the suite as root")


def connect_as_stranger(c: cluster.Cluster) -> subprocess.CompletedProcess[str]:
    """psql from the cluster's own binaries, run as `nobody`, to the cluster's socket as postgres."""
    return subprocess.run([str(c.bindir / "psql"), "-h", str(c.socket_dir), "-p", str(c.port), "-U", "postgres",
                           "-d", "postgres", "-Atc", "SELECT current_user"],
                          user=STRANGER, group="nogroup", extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)


def assert_private(c: cluster.Cluster) -> None:
    uid = os.stat(c.datadir).st_uid
    for path, mode in ((c.socket_dir, 0o700), (c.datadir, 0o700), (c.log, 0o600)):
        st = os.stat(path)
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (mode, uid), (path, oct(st.st_mode), st.st_uid)


@needs_root
def test_another_os_user_cannot_connect_to_the_embedded_database(leg: Leg) -> None:
    with leg.admin() as conn:                               # the owner: no password, no set-up
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    r = connect_as_stranger(leg.cluster)
    assert r.returncode != 0 and "postgres" not in r.stdout, (r.stdout, r.stderr)
    assert "Permission denied" in r.stderr, r.stderr


def test_the_socket_directory_data_directory_and_log_are_the_server_users_alone(leg: Leg) -> None:
    assert_private(leg.cluster)
    with leg.admin() as conn:
        assert conn.execute("SHOW unix_socket_permissions").fetchone() == ("0700",)


def test_no_tcp_line_trusts_anyone(leg: Leg) -> None:
    with leg.admin() as conn:
        rules = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules WHERE error IS NULL").fetchall()
    assert rules and ("local", "trust") in rules
    assert not [r for r in rules if r[0].startswith("host") and r[1] == "trust"], rules


@needs_root
def test_a_cluster_left_open_by_an_earlier_release_is_closed_when_it_starts(test_root: Path) -> None:
    # The way 0.2 made it: initdb --auth=trust (trust on TCP lines too), a socket directory of 755,
    # a world-readable log.
    c = cluster.embedded(test_root / "old", port=55490, config=Settings.from_env())
    try:
        c.socket_dir.mkdir(mode=0o755)
        c._prepare_dirs()
        c._run("initdb", "-D", str(c.datadir), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
               "--locale=C.UTF-8", "--no-instructions")
        c.socket_dir.chmod(0o755)
        c.log.chmod(0o644)
        assert "trust" in (c.datadir / "pg_hba.conf").read_text().split("host ", 1)[1]
        c.start()
        assert_private(c)
        r = connect_as_stranger(c)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (r.stdout, r.stderr)
        with psycopg.connect(c.url(), autocommit=True) as conn:
            rules = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall()
        assert not [x for x in rules if x[0].startswith("host") and x[1] == "trust"], rules
    finally:
        c.destroy()


@needs_root
def test_a_socket_directory_another_user_made_first_is_refused(test_root: Path) -> None:
    # The directory's name is predictable and /tmp is shared: a stranger who creates it first must
    # not get the socket (they could put their own server behind it).
    c = cluster.embedded(test_root / "squatted", port=55491, config=Settings.from_env())
    stranger = 65534
    c.socket_dir.mkdir(mode=0o777)
    os.chown(c.socket_dir, stranger, stranger)
    try:
        with pytest.raises(cluster.ClusterError, match="belongs to uid 65534"):
            c.start()
        assert not (c.datadir / "PG_VERSION").exists()
    finally:
        c.destroy()


def test_an_old_pg_hba_keeps_its_socket_lines_and_loses_trust_on_tcp() -> None:
    old = ("# comment host all all 0.0.0.0/0 trust\n"
           "local   all             all                                     trust\n"
           "host    all             all             127.0.0.1/32            trust\n"
           "hostssl all  all ::1/128 trust  # kept comment\n"
           "local   replication     all                                     trust\n"
           "host    replication     all             ::1/128                 md5\n")
    new = cluster.close_host_trust(old)
    assert new.splitlines()[0:2] == old.splitlines()[0:2]
    assert new.splitlines()[2].endswith("scram-sha-256")
    assert new.splitlines()[3] == "hostssl all  all ::1/128 scram-sha-256  # kept comment"
    assert new.splitlines()[4:] == old.splitlines()[4:]

