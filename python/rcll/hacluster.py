"""A highly available RCLL database on one machine: etcd and three PostgreSQL 18 nodes under Patroni.

For the failover tests, the failover bench (bench/failover.py) and anyone who wants to see
failover work before running it on three machines (docs/scaling.md, "High availability").
Everything listens on 127.0.0.1 only, on ports from `base_port` up (etcd clients base+0..,
etcd peers base+10.., PostgreSQL base+20.., Patroni's REST API base+30..), and lives in one
directory that stop() removes.

- etcd: three members by default, Patroni node i talking only to member i (`use_proxies`: no
  discovery of the others), so one node can be cut off from the consensus store by stopping its
  member while the other two keep a quorum - the partition drill. One member (members=1) is
  enough for a kill or a stop of a PostgreSQL node: the store itself never fails there.
- Patroni: synchronous_mode on (a commit is acknowledged once the synchronous standby has it;
  synchronous_commit = on), use_pg_rewind with wal_log_hints (a demoted leader rejoins as a
  replica), ttl 20 s (Patroni's minimum), loop_wait 1 s, retry_timeout 5 s.
- The servers run as `os_user` when root starts them (PostgreSQL refuses root): Patroni's venv
  and the embedded binaries must be readable by that user, hence a venv made from Debian's
  /usr/bin/python3 in /var/cache/rcll (the default interpreter may live under /root, mode 700).

scripts/ha-cluster installs etcd and Patroni (`install`), then runs this module (`start`, `status`, `stop`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from rcll import cluster
from rcll.settings import Settings

PATRONI_VERSION = "4.1.5"
PATRONI_PYTHON = "/usr/bin/python3"
ETCD = Path("/usr/bin/etcd")
SCOPE = "rcll-ha"
# Below Linux's range of ephemeral ports (32768-60999): there, some outgoing connection's source
# port, or its TIME_WAIT, took the cluster's ports now and then (a full test run: 4 of 33).
DEFAULT_BASE_PORT = 26200
# The servers' OS user when root starts them: the embedded cluster's (`main` reads RCLL_SERVER_USER
# through the settings), so that one user owns every server of a run.
DEFAULT_OS_USER = cluster.SERVER_USER
# Patroni's timing: ttl is its minimum; a leader that cannot renew its key within retry_timeout
# demotes itself before the key expires, and the others elect a new one once it has (ttl).
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 1, 5

# The PostgreSQL settings every node gets through Patroni (on top of rcll.cluster.BASE_SETTINGS'
# reasons: jit off, no parallel HNSW builds). synchronous_commit on: an acknowledged commit is on
# the synchronous standby (RCLL's test legs run with it off). wal_log_hints: pg_rewind needs it.
NODE_SETTINGS: dict[str, Any] = {
    "jit": "off",
    "max_parallel_maintenance_workers": 0,
    "max_connections": 100,
    "shared_buffers": "128MB",
    "synchronous_commit": "on",
    "wal_log_hints": "on",
    "hot_standby": "on",
    "max_wal_senders": 10,
    "max_replication_slots": 10,
    "wal_keep_size": "128MB",
    "unix_socket_permissions": "0700",
}


class HAError(RuntimeError):
    pass


def default_venv() -> Path:
    """Where Patroni's venv is cached: /var/cache/rcll when root (readable by the servers' user),
    else the user's cache directory."""
    base = Path("/var/cache/rcll") if os.geteuid() == 0 else Path(platformdirs.user_cache_dir("rcll"))
    return base / f"patroni-{PATRONI_VERSION}"


@dataclass
class Ports:
    base: int

    def etcd(self, i: int) -> int:
        return self.base + i

    def etcd_peer(self, i: int) -> int:
        return self.base + 10 + i

    def postgres(self, i: int) -> int:
        return self.base + 20 + i

    def rest(self, i: int) -> int:
        return self.base + 30 + i


@dataclass
class HACluster:
    """One HA cluster in `root` (created by start(), removed by stop())."""

    root: Path
    os_user: str = DEFAULT_OS_USER
    base_port: int = DEFAULT_BASE_PORT
    nodes: int = 3
    members: int = 3
    venv: Path = field(default_factory=default_venv)
    bindir: Path = field(default_factory=cluster.embedded_bindir)
    password: str = ""

    @staticmethod
    def installed(venv: Path | None = None) -> bool:
        """Whether etcd and Patroni's venv are in place (`scripts/ha-cluster install`)."""
        return ETCD.exists() and ((venv or default_venv()) / ".rcll-complete").exists()   # written last

    def __post_init__(self) -> None:
        self.ports = Ports(self.base_port)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}    # the ones this process started, to reap
        if self.members not in (1, self.nodes):
            raise HAError(f"members: 1 or {self.nodes} (one etcd member per Patroni node)")

    # -- paths and state -----------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def _save(self, pids: dict[str, int]) -> None:
        self.state_file.write_text(json.dumps({"pids": pids, "password": self.password, "base_port": self.base_port,
                                               "nodes": self.nodes, "members": self.members}))
        self.state_file.chmod(0o600)

    def _load(self) -> dict[str, int]:
        if not self.state_file.exists():
            return {}
        state = json.loads(self.state_file.read_text())
        self.password = state["password"]
        return {k: int(v) for k, v in state["pids"].items()}

    @classmethod
    def attach(cls, root: Path, **kwargs: Any) -> HACluster:
        """The cluster a start() in another process left in root (its ports and password)."""
        state = json.loads((root / "state.json").read_text())
        c = cls(root, base_port=int(state["base_port"]), nodes=int(state["nodes"]),
                members=int(state["members"]), **kwargs)
        c._load()
        return c

    def datadir(self, i: int) -> Path:
        return self.root / f"pg{i}"

    def socket_dir(self, i: int) -> Path:
        return self.root / f"s{i}"

    def all_ports(self) -> list[int]:
        p = self.ports
        return ([p.etcd(i) for i in range(self.members)] + [p.etcd_peer(i) for i in range(self.members)]
                + [p.postgres(i) for i in range(self.nodes)] + [p.rest(i) for i in range(self.nodes)])

    # -- DSNs ----------------------------------------------------------------------------------

    def dsn(self, dbname: str = "rcll", *, target: str = "read-write", nodes: list[int] | None = None) -> str:
        """libpq's multi-host connection string over the nodes (all of them by default):
        target_session_attrs picks the primary (read-write) or a standby when there is one
        (prefer-standby)."""
        idx = list(range(self.nodes)) if nodes is None else nodes
        hosts = ",".join("127.0.0.1" for _ in idx)
        ports = ",".join(str(self.ports.postgres(i)) for i in idx)
        return (f"host={hosts} port={ports} dbname={dbname} user=postgres password={self.password} "
                f"target_session_attrs={target} connect_timeout=2")

    def node_dsn(self, i: int, dbname: str = "rcll") -> str:
        return self.dsn(dbname, target="any", nodes=[i])

    # -- processes -----------------------------------------------------------------------------

    def _ids(self) -> tuple[int, int]:
        """The uid and gid the servers run as: os_user when root starts them (made if missing, as
        rcll.cluster makes the embedded cluster's), else ours."""
        if os.geteuid() != 0:
            return os.geteuid(), os.getegid()
        e = cluster.ensure_os_user(self.os_user)
        return e.pw_uid, e.pw_gid

    def _spawn(self, name: str, args: list[str]) -> int:
        uid, gid = self._ids()
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            kwargs: dict[str, Any] = {}
            if os.geteuid() == 0:
                kwargs.update(user=uid, group=gid, extra_groups=[])
            env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "LANG": "C.UTF-8"}
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.root, env=env, start_new_session=True, **kwargs)
        self._procs[proc.pid] = proc
        return proc.pid

    def _etcd_args(self, i: int) -> list[str]:
        peers = ",".join(f"e{j}=http://127.0.0.1:{self.ports.etcd_peer(j)}" for j in range(self.members))
        return [str(ETCD), "--name", f"e{i}", "--data-dir", str(self.root / f"etcd{i}"),
                "--listen-client-urls", f"http://127.0.0.1:{self.ports.etcd(i)}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.ports.etcd(i)}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.ports.etcd_peer(i)}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.ports.etcd_peer(i)}",
                "--initial-cluster", peers, "--initial-cluster-token", f"{SCOPE}-{self.base_port}",
                "--initial-cluster-state", "new", "--logger", "zap", "--log-level", "warn"]

    def _patroni_config(self, i: int) -> dict[str, Any]:
        member = i if self.members > 1 else 0
        auth = {"superuser": {"username": "postgres", "password": self.password},
                "replication": {"username": "replicator", "password": self.password},
                "rewind": {"username": "rewinder", "password": self.password}}
        return {
            "scope": SCOPE, "name": f"node{i}",
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{self.ports.rest(i)}",
                        "connect_address": f"127.0.0.1:{self.ports.rest(i)}"},
            # use_proxies: this node talks to its own member only (no discovery of the others),
            # so stopping that member cuts this node alone off from the consensus store.
            "etcd3": {"hosts": [f"127.0.0.1:{self.ports.etcd(member)}"], "use_proxies": True},
            "bootstrap": {
                "dcs": {"ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                        "maximum_lag_on_failover": 1 << 20, "synchronous_mode": True,
                        "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": NODE_SETTINGS}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, {"auth-local": "trust"},
                           {"auth-host": "scram-sha-256"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.ports.postgres(i)}",
                "connect_address": f"127.0.0.1:{self.ports.postgres(i)}",
                "data_dir": str(self.datadir(i)), "bin_dir": str(self.bindir),
                "pgpass": str(self.root / f"pgpass{i}"),
                "authentication": auth,
                "parameters": {"unix_socket_directories": str(self.socket_dir(i))},
                # Local connections trust the socket, behind its 0700 directory (as rcll.cluster's);
                # TCP only with a password.
                "pg_hba": ["local all all trust",
                           "host replication replicator 127.0.0.1/32 scram-sha-256",
                           "host all all 127.0.0.1/32 scram-sha-256"],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def start(self, timeout: float = 120.0) -> None:
        """Start etcd and the Patroni nodes, wait for a leader and a synchronous standby with every
        replica streaming, and install RCLL's schema through the leader (database `rcll`)."""
        if not self.installed(self.venv):
            raise HAError("Patroni or etcd is missing: run `scripts/ha-cluster install` (as root)")
        if self.state_file.exists():
            raise HAError(f"{self.root} holds a cluster already: stop it first")
        # Another cluster on these ports would share its etcd with this one's Patroni nodes. A port
        # may also be held for a moment by a connection that just closed: wait a little for it.
        wait_until = time.monotonic() + 15
        while (taken := [p for p in self.all_ports() if not _port_free(p)]) and time.monotonic() < wait_until:
            time.sleep(0.5)
        if taken:
            raise HAError(f"ports {taken} on 127.0.0.1 are in use: stop what holds them, or pass another base port")
        uid, gid = self._ids()
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(self.root, uid, gid)
        self.root.chmod(0o700)
        cluster._open_path_for_others(self.root.parent)
        cluster._open_path_for_others(self.bindir)
        self.password = self.password or secrets.token_hex(16)
        pids: dict[str, int] = {}
        try:
            for i in range(self.members):
                pids[f"etcd{i}"] = self._spawn(f"etcd{i}", self._etcd_args(i))
            self._save(pids)
            deadline = time.monotonic() + timeout
            for i in range(self.members):
                self._wait(lambda i=i: _http(f"http://127.0.0.1:{self.ports.etcd(i)}/health") is not None,
                           deadline, f"etcd member {i}")
            for i in range(self.nodes):
                self.start_node(i, pids)
            self.wait_healthy(deadline)
            self._install_schema()
        except BaseException:
            self.stop()
            raise

    def start_node(self, i: int, pids: dict[str, int] | None = None) -> None:
        """Start (or start again) node i's Patroni."""
        pids = pids if pids is not None else self._load()
        uid, gid = self._ids()
        conf = self.root / f"node{i}.yml"
        conf.write_text(json.dumps(self._patroni_config(i), indent=1))   # JSON is YAML
        conf.chmod(0o600)
        self.socket_dir(i).mkdir(mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(conf, uid, gid)
            os.chown(self.socket_dir(i), uid, gid)
        pids[f"patroni{i}"] = self._spawn(f"patroni{i}", [str(self.venv / "bin" / "patroni"), str(conf)])
        self._save(pids)

    def start_etcd(self, i: int) -> None:
        """Start etcd member i again (after the partition drill stopped it)."""
        pids = self._load()
        args = self._etcd_args(i)
        args[args.index("new")] = "existing"
        pids[f"etcd{i}"] = self._spawn(f"etcd{i}", args)
        self._save(pids)

    def pid(self, name: str) -> int | None:
        return self._load().get(name)

    def postmaster_pid(self, i: int) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.datadir(i) / "postmaster.pid").read_text().split()[0])
        return None

    def kill(self, name: str, sig: int = signal.SIGKILL, wait: float = 30.0) -> None:
        """Signal one of our processes (etcdN, patroniN) by its recorded PID and wait for it to end."""
        pid = self.pid(name)
        if pid is None:
            return
        self._signal_and_wait(pid, sig, wait)

    def _signal_and_wait(self, pid: int, sig: int, wait: float) -> None:
        proc = self._procs.pop(pid, None)
        _signal_and_wait(pid, sig, wait)
        if proc is not None:
            proc.wait()          # reaped already: this records its status in the Popen

    def kill_postgres(self, i: int) -> None:
        """kill -9 of node i's postmaster and every process it started (a crash, the OOM killer)."""
        pid = self.postmaster_pid(i)
        if pid is None:
            return
        victims = [pid, *_children(pid)]
        for p in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in victims):
            time.sleep(0.05)

    # -- state ---------------------------------------------------------------------------------

    def members_state(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (GET /cluster on the first node that answers)."""
        for i in range(self.nodes):
            body = _http(f"http://127.0.0.1:{self.ports.rest(i)}/cluster")
            if body is not None:
                return list(json.loads(body).get("members", []))
        return []

    def leader(self) -> int | None:
        for m in self.members_state():
            if m.get("role") == "leader" and m.get("state") == "running":
                return int(str(m["name"]).removeprefix("node"))
        return None

    def sync_standby(self) -> int | None:
        for m in self.members_state():
            if m.get("role") == "sync_standby":
                return int(str(m["name"]).removeprefix("node"))
        return None

    def healthy(self) -> bool:
        """A running leader, a synchronous standby, every node up and every replica streaming."""
        ms = self.members_state()
        roles = [m.get("role") for m in ms]
        return (len(ms) == self.nodes and roles.count("leader") == 1 and "sync_standby" in roles
                and all(m.get("state") in ("running", "streaming") for m in ms)
                and all(m.get("state") == "streaming" for m in ms if m.get("role") != "leader"))

    def wait_healthy(self, deadline: float) -> None:
        self._wait(self.healthy, deadline, "a leader, a synchronous standby and streaming replicas")

    def wait_leader(self, deadline: float, other_than: int | None = None) -> int:
        self._wait(lambda: self.leader() not in (None, other_than), deadline, "a new leader")
        leader = self.leader()
        assert leader is not None
        return leader

    def _wait(self, ready: Any, deadline: float, what: str) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise HAError(f"timed out waiting for {what}; logs in {self.root}")
            time.sleep(0.2)

    def _install_schema(self) -> None:
        import psycopg

        from rcll import install as rcll_install  # deferred: the schema's files load only when installing

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE rcll")
        with psycopg.connect(self.dsn("rcll"), autocommit=True) as conn:
            rcll_install.install(conn)

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this cluster started (Patroni stops its PostgreSQL; a postmaster left
        behind is stopped by its own PID), then remove the directory."""
        pids = self._load()
        for name, pid in pids.items():
            if name.startswith("patroni"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for name, pid in pids.items():
            if name.startswith("patroni"):
                self._signal_and_wait(pid, signal.SIGTERM, 20.0)
        for i in range(self.nodes):
            pm = self.postmaster_pid(i)
            if pm is not None and _alive(pm):
                for p in [pm, *_children(pm)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
                _signal_and_wait(pm, signal.SIGKILL, 10.0)
        for name, pid in pids.items():
            if name.startswith("etcd"):
                self._signal_and_wait(pid, signal.SIGTERM, 10.0)
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signal_and_wait(pid: int, sig: int, wait: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while _alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)    # our own child: reap it
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + wait
        time.sleep(0.05)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # as the servers bind: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _http(url: str, timeout: float = 1.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:   # noqa: S310 - loopback URLs we built
            return bytes(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


@contextlib.contextmanager
def running(root: Path, **kwargs: Any) -> Iterator[HACluster]:
    """A started HA cluster for the length of a with block, stopped and removed after it."""
    c = HACluster(root, **kwargs)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/ha-cluster", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("start", "start etcd and three Patroni nodes, install RCLL through the leader"),
                       ("status", "Patroni's members and the DSNs"),
                       ("stop", "stop every process by PID and remove the directory")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--root", type=Path, default=Path("/tmp/rcll-ha"))
        if name == "start":
            s.add_argument("--os-user", default=cluster.server_user(Settings.from_env()),
                           help="the servers' OS user when run as root (default: $RCLL_SERVER_USER, else "
                                f"{DEFAULT_OS_USER})")
            s.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT)
            s.add_argument("--etcd-members", type=int, default=3, choices=(1, 3))
    args = p.parse_args(argv)
    if args.command == "start":
        c = HACluster(args.root, os_user=args.os_user, base_port=args.base_port, members=args.etcd_members)
        c.start()
        print(f"leader: node{c.leader()}\nwrites: {c.dsn()}\nrecall: {c.dsn(target='prefer-standby')}")
        return 0
    c = HACluster.attach(args.root)
    if args.command == "status":
        for m in c.members_state():
            print(m.get("name"), m.get("role"), m.get("state"), m.get("lag", ""))
        print(f"writes: {c.dsn()}")
    else:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
