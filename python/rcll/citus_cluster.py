"""A local Citus cluster: a coordinator and two workers (or N) of the embedded PostgreSQL 18 (with
Citus built in by scripts/build-citus.sh, `make citus`), on loopback - what the tests (once per
run), the Citus benchmarks and `rcll serve --citus-workers N` (`make run WORKERS=N`) start.

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
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from rcll import cluster
from rcll.settings import DEFAULTS, Settings

DATABASE = "rcll"
HOST = "127.0.0.1"
# shared_buffers small: three servers (and the other clusters of a test run) share one machine's
# memory, and each would take an eighth of it by default (rcll.cluster.shared_buffers).
# wal_level logical: Citus moves a shard while it takes writes (citus_move_shard_placement,
# citus_rebalance_start with shard_transfer_mode auto or force_logical) by logical replication
# from the old placement to the new; with replica it can only block the shard's writes for the copy.
# output_plugin_libraries (PostgreSQL 18.6: the decoding plugins a slot may name) adds citus:
# isolate_tenant_to_new_shard and citus_split_shard_by_split_points decode through it.
SETTINGS = {"shared_preload_libraries": "citus", "listen_addresses": HOST, "shared_buffers": "256MB",
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "max_connections": "200", "wal_level": "logical", "max_wal_senders": "10",
            "max_replication_slots": "10", "output_plugin_libraries": "pgoutput,citus"}
# The coordinator's limit on opening a connection to a worker (Citus's default is 30 s): a worker
# whose host is gone (no refusal comes back) fails the statements that need it after this long,
# not after half a minute. A worker whose server died but whose host answers is refused at once.
NODE_CONNECTION_TIMEOUT_MS = 2000
COORDINATOR_SETTINGS = {"citus.node_connection_timeout": str(NODE_CONNECTION_TIMEOUT_MS)}


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
    # The postgres role's password on every node (the nodes' TCP connections to each other): a
    # worker added later is given it too.
    password: str = field(default="", repr=False)
    config: Settings = DEFAULTS
    settings: dict[str, str] = field(default_factory=dict)     # start()'s, for a worker added later

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


def kill(node: cluster.Cluster) -> None:
    """kill -9 of node's postmaster (a crashed server; its backends exit as they notice). The
    node's data stays: restart() brings it back (crash recovery replays its WAL)."""
    pid = _postmaster_pid(node)
    if pid is not None and _our_postmaster(pid, node):
        os.kill(pid, signal.SIGKILL)


def restart(node: cluster.Cluster, timeout: float = 60.0) -> None:
    """Start a node kill() stopped: pg_ctl refuses while the dead postmaster's backends still hold
    its shared memory, so it is tried again until they have gone (or timeout seconds)."""
    end = time.monotonic() + timeout
    while True:
        try:
            node.start()
            return
        except cluster.ClusterError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


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


def start(base: Path, first_port: int, config: Settings = DEFAULTS, settings: dict[str, str] | None = None,
          workers: int = 2) -> CitusCluster:
    """A coordinator and `workers` workers (two by default) under base, on loopback ports
    first_port, +1, +2, ..., the workers registered with citus_add_node and the coordinator with
    citus_set_coordinator_host, in database DATABASE (Citus created on each node). rcll is not
    installed: the caller does that on the coordinator. config: whose OS user runs the servers when
    root starts them. settings: server settings over SETTINGS on every node (e.g. synchronous_commit
    on, for a drill that kills one)."""
    if workers < 1:
        raise ValueError(f"a Citus cluster needs at least one worker, not {workers}")
    names = ["coordinator", *(f"worker{i}" for i in range(1, workers + 1))]
    extra = dict(settings or {})
    nodes = [_node(base / name, first_port + i, config, extra, coordinator=i == 0) for i, name in enumerate(names)]
    citus = CitusCluster(nodes[0], nodes[1:], secrets.token_hex(16), config, extra)
    try:
        for node in nodes:
            _prepare(citus, node)
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


def _node(datadir: Path, port: int, config: Settings, extra: dict[str, str], *,
          coordinator: bool = False) -> cluster.Cluster:
    return cluster.Cluster(datadir, cluster.embedded_bindir(), os_user=cluster.server_user(config), port=port,
                           settings={**SETTINGS, **(COORDINATOR_SETTINGS if coordinator else {}), **extra})


def _prepare(citus: CitusCluster, node: cluster.Cluster) -> None:
    """Start node and give it the database, Citus and the cluster's password for its peers."""
    node.start()
    with psycopg.connect(node.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(citus.password)))
    _database(citus, node, DATABASE)


def _database(citus: CitusCluster, node: cluster.Cluster, database: str) -> None:
    """The database on node, with Citus and the cluster's password for its peers (Citus keeps its
    metadata per database: each is a cluster of its own)."""
    with psycopg.connect(node.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    with psycopg.connect(node.url(database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION citus")
        conn.execute("INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, 'postgres', %s)",
                     (f"password={citus.password}",))


def add_database(citus: CitusCluster, database: str) -> str:
    """Another database on every node, a Citus cluster of its own over the same servers (the
    coordinator's host and the workers registered in it), without rcll; its URL on the coordinator."""
    for node in citus.nodes:
        _database(citus, node, database)
    with psycopg.connect(citus.coordinator.url(database), autocommit=True) as conn:
        conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (HOST, citus.coordinator.port))
        for worker in citus.workers:
            conn.execute("SELECT citus_add_node(%s, %s)", (HOST, worker.port))
    return citus.coordinator.url(database)


def add_worker(citus: CitusCluster, datadir: Path, port: int) -> cluster.Cluster:
    """A new worker at datadir on loopback port, started and registered with citus_add_node (Citus
    copies the metadata and the reference tables to it; no shard moves until a rebalance)."""
    node = _node(datadir, port, citus.config, citus.settings)
    citus.workers.append(node)          # stop() removes it with the others, even if this fails
    _prepare(citus, node)
    with citus.connect() as conn:
        conn.execute("SELECT citus_add_node(%s, %s)", (HOST, port))
    return node


def add_login_role(citus: CitusCluster, name: str, password: str, member_of: str | None = None,
                   database: str = DATABASE) -> str:
    """A login role with a password made on the coordinator (Citus creates it on every worker, with
    its password, and its membership of member_of), and its password given to Citus on every node
    (pg_dist_authinfo): the coordinator connects to the workers as the role for its queries, and a
    worker running a delegated call connects to the other nodes as the role. What a DBA does,
    docs/scaling.md ("SQL roles on a cluster"). The URL of database on the coordinator as it."""
    role = sql.Identifier(name)
    with citus.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(password)))
        if member_of:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(member_of), role))
    with psycopg.connect(citus.coordinator.url(database), autocommit=True) as conn:
        done = conn.execute("SELECT nodeid, success, result FROM pg_catalog.run_command_on_all_nodes(format("
                            "'INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, %%L, %%L)', "
                            "%s::text, %s::text))", (name, f"password={password}")).fetchall()
    if not all(ok for _, ok, _ in done):
        raise cluster.ClusterError(f"pg_dist_authinfo for {name}: {done}")
    return conninfo.make_conninfo(citus.coordinator.url(database), user=name)


def drop_login_role(citus: CitusCluster, name: str, database: str = DATABASE) -> None:
    """A role add_login_role made, gone from every node with its pg_dist_authinfo rows."""
    with psycopg.connect(citus.coordinator.url(database), autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.run_command_on_all_nodes(format("
                     "'DELETE FROM pg_dist_authinfo WHERE rolename = %%L', %s::text))", (name,))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@contextlib.contextmanager
def running(base: Path, first_port: int, config: Settings = DEFAULTS,
            settings: dict[str, str] | None = None, workers: int = 2) -> Iterator[CitusCluster]:
    citus = start(base, first_port, config, settings, workers)
    try:
        yield citus
    finally:
        stop(citus)


@contextlib.contextmanager
def throwaway(workers: int, first_port: int, config: Settings = DEFAULTS) -> Iterator[CitusCluster]:
    """A cluster to try distribution with (`rcll serve --citus-workers N`): a coordinator and
    `workers` workers on loopback ports first_port, +1, ..., in a new directory of the temporary
    directory; stopped and removed - data directories, sockets, logs and the directory - when the
    block ends (by an error or a signal too). Citus must be built in (citus_missing)."""
    missing = citus_missing()
    if missing:
        raise cluster.ClusterError(missing)
    with tempfile.TemporaryDirectory(prefix="rcll-citus-") as base, running(Path(base), first_port, config,
                                                                            workers=workers) as citus:
        yield citus
