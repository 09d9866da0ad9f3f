"""A local Citus cluster: a coordinator and two workers of the embedded PostgreSQL 18 (with Citus
built in by scripts/build-citus.sh, `make citus`), on loopback - what the tests (once per run) and
the Citus benchmarks start.

Each node is an rcll.cluster.Cluster (the server's own OS user when root, private socket
directory, scram-sha-256 on TCP) with `shared_preload_libraries = citus` and listening on
127.0.0.1. The nodes reach each other over TCP as postgres with a password made for the run and
kept in each node's pg_dist_authinfo (Citus's table of connection secrets, superuser-only): no
TCP line trusts anyone. Tests connect to the coordinator through its Unix socket, as to any
test cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from rcll import cluster
from rcll.settings import DEFAULTS, Settings

DATABASE = "rcll"
HOST = "127.0.0.1"
# shared_buffers small: three servers (and the other clusters of a test run) share one machine's
# memory, and each would take an eighth of it by default (rcll.cluster.shared_buffers).
SETTINGS = {"shared_preload_libraries": "citus", "listen_addresses": HOST, "shared_buffers": "256MB",
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "max_connections": "200"}


def citus_missing() -> str | None:
    """Why the embedded PostgreSQL cannot run Citus, or None when it can."""
    try:
        bindir = cluster.embedded_bindir()
    except cluster.ClusterError as e:
        return str(e)
    if not (bindir.parent / "lib" / "citus.so").exists():
        return "Citus is not built into the embedded PostgreSQL 18: run `make citus` (scripts/build-citus.sh, as root)"
    return None


@dataclass
class CitusCluster:
    coordinator: cluster.Cluster
    workers: list[cluster.Cluster]

    @property
    def nodes(self) -> list[cluster.Cluster]:
        return [self.coordinator, *self.workers]

    def url(self, node: cluster.Cluster | None = None) -> str:
        """The URL of the rcll database on node (the coordinator by default), through its socket."""
        return (node or self.coordinator).url(DATABASE)

    def connect(self, node: cluster.Cluster | None = None) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(node), autocommit=True)

    def worker_of(self, port: int) -> cluster.Cluster:
        return next(w for w in self.workers if w.port == port)


def _postmaster_pid(node: cluster.Cluster) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((node.datadir / "postmaster.pid").read_text().splitlines()[0])
    return None


def _our_postmaster(pid: int, node: cluster.Cluster) -> bool:
    """Whether pid is still the postmaster serving node's data directory (not a reused PID)."""
    try:
        return str(node.datadir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def stop(citus: CitusCluster) -> None:
    """Stop every node (fast: an immediate stop leaves its shared memory in /dev/shm) and remove
    its data directory, socket directory and log; a postmaster that pg_ctl could not stop is
    killed by the PID its data directory recorded, when that PID is still it."""
    for node in citus.nodes:
        pid = _postmaster_pid(node)
        try:
            node.stop("fast")
        except cluster.ClusterError:
            if pid is not None and _our_postmaster(pid, node):
                os.kill(pid, signal.SIGKILL)
        node.destroy()


def start(base: Path, first_port: int, config: Settings = DEFAULTS) -> CitusCluster:
    """A coordinator and two workers under base, on loopback ports first_port, +1, +2, the
    workers registered with citus_add_node and the coordinator with citus_set_coordinator_host, in
    database DATABASE (Citus created on each node). rcll is not installed: the caller does that on
    the coordinator. config: whose OS user runs the servers when root starts them."""
    ports = [first_port, first_port + 1, first_port + 2]
    nodes = [cluster.Cluster(base / name, cluster.embedded_bindir(), os_user=cluster.server_user(config), port=port,
                             settings=dict(SETTINGS))
             for name, port in zip(("coordinator", "worker1", "worker2"), ports, strict=True)]
    citus = CitusCluster(nodes[0], nodes[1:])
    password = secrets.token_hex(16)
    try:
        for node in nodes:
            node.start()
            with psycopg.connect(node.url(), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
                conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
            with citus.connect(node) as conn:
                conn.execute("CREATE EXTENSION citus")
                conn.execute("INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, 'postgres', %s)",
                             (f"password={password}",))
        with citus.connect() as conn:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (HOST, citus.coordinator.port))
            for worker in citus.workers:
                conn.execute("SELECT citus_add_node(%s, %s)", (HOST, worker.port))
    except cluster.ClusterError as e:
        # The logs go with the nodes: say what the failing one wrote first.
        told = "\n".join(f"{n.log.name}: {n.log.read_text()[-600:]}" for n in nodes if n.log.exists() and n.log.stat().st_size)
        stop(citus)
        raise cluster.ClusterError(f"{e}\n{told}") from e
    except BaseException:
        stop(citus)
        raise
    return citus


@contextlib.contextmanager
def running(base: Path, first_port: int, config: Settings = DEFAULTS) -> Iterator[CitusCluster]:
    citus = start(base, first_port, config)
    try:
        yield citus
    finally:
        stop(citus)
