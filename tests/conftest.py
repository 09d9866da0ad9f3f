"""Real PostgreSQL for every test: throwaway clusters on both legs, a fresh database per test.

Legs: pg18 (the embedded default: PG 18 + pgvector 0.8.6) and pg15 (Debian PG 15 + pgvector 0.8.0
+ plpython3u, prepared by scripts/install-pg15-leg.sh). A leg that cannot start fails the run;
it is never skipped. RCLL_TEST_LEGS=pg18 narrows a local run to one leg.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import fcntl
import hashlib
import itertools
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import conninfo, sql

import rcll
from rcll import citus_cluster, cluster, install
from rcll.db import configure
from rcll.sqlsource import extension_dir

# Starlette's TestClient sends Host: testserver; the HTTP app answers only the hosts it is told
# (rcll.http_guard), so the suite tells it this one. Tests of the Host rule set their own.
os.environ.setdefault("RCLL_ALLOWED_HOSTS", "testserver")

LEGS = [leg for leg in os.environ.get("RCLL_TEST_LEGS", "pg18,pg15").split(",") if leg]
PORTS = {"pg18": 55418, "pg15": 55415}
TEMPLATE = "rcll_template"
DROPPER = "rcll_dropper"     # the database the dropper thread connects to
_counter = itertools.count()


@contextlib.contextmanager
def connected(url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to url with the vector type registered: what a test reading or
    filling an rcll database (the db fixture, a template's build, a copy of one) opens."""
    with psycopg.connect(url, autocommit=True) as conn:
        configure(conn)
        yield conn


class Leg:
    def __init__(self, name: str, c: cluster.Cluster) -> None:
        self.name = name
        self.cluster = c
        self._templates: set[str] = set()
        self._ddl: psycopg.Connection[Any] | None = None
        self._ddl_lock = threading.Lock()
        self._doomed: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._dropper: threading.Thread | None = None
        self.undropped: list[str] = []
        self._maker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"maker-{name}")
        self._next: concurrent.futures.Future[str] | None = None

    def url(self, dbname: str = "postgres") -> str:
        return self.cluster.url(dbname)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(), autocommit=True)

    def _run_ddl(self, statement: sql.Composed) -> None:
        """CREATE/DROP DATABASE on one admin connection kept per leg and process (two backend
        start-ups less per test), opened again when a test restarted the server under it."""
        with self._ddl_lock:
            for attempt in (1, 2):
                if self._ddl is None or self._ddl.closed or self._ddl.broken:
                    self._ddl = self.admin()
                try:
                    self._ddl.execute(statement)
                    return
                except psycopg.OperationalError:
                    if attempt == 2 or not self._ddl.broken:
                        raise

    def _create_database(self, template: str, name: str | None = None) -> str:
        name = name or f"t_{os.getpid()}_{next(_counter)}"
        self._run_ddl(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
        return name

    def new_database(self, template: str = TEMPLATE) -> str:
        """A new database copied from template. Copies of the rcll template are made one ahead, in
        the background while a test runs, so the next test's is usually waiting for it."""
        if template != TEMPLATE:
            return self._create_database(template)
        made: str | None = None
        if self._next is not None:
            try:
                made = self._next.result()
            except psycopg.Error:          # the server was restarted under it: made again below
                made = None
        self._next = self._maker.submit(self._create_database, TEMPLATE)
        return made if made is not None else self._create_database(TEMPLATE)

    def drop_database(self, name: str) -> None:
        """Dropped by the leg's dropper thread, off the test's clock: a DROP DATABASE right after
        the test's last connection closed finds its backend still exiting and sleeps 100 ms
        (PostgreSQL's CountOtherDBBackends) - on every test. Names are never reused; a database
        the dropper could not drop goes with the cluster at the end of the session."""
        if self._dropper is None:
            self._dropper = threading.Thread(target=self._drop_doomed, name=f"dropper-{self.name}", daemon=True)
            self._dropper.start()
        self._doomed.put(name)

    def _drop_doomed(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while (name := self._doomed.get()) is not None:
            for attempt in range(3):       # a test may have restarted the server under the connection
                try:
                    if conn is None or conn.closed or conn.broken:   # not in postgres: tests copy that one
                        conn = psycopg.connect(self.url(DROPPER), autocommit=True)
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                    break
                except psycopg.OperationalError:
                    threading.Event().wait(0.5 * (attempt + 1))
                except psycopg.Error as e:     # left for the cluster's removal, and said at the end
                    self.undropped.append(f"{name}: {e}")
                    break
            else:
                self.undropped.append(f"{name}: no connection after 3 attempts")
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Stop making databases ahead, let the dropper finish its queue (for at most 10 s) and
        close the DDL connection."""
        self._maker.shutdown(wait=True, cancel_futures=True)
        if self._dropper is not None:
            self._doomed.put(None)
            self._dropper.join(timeout=10)
        if self._ddl is not None:
            self._ddl.close()
        for failure in self.undropped:
            print(f"conftest: {self.name}: a test database was not dropped: {failure}", file=sys.stderr)

    @contextlib.contextmanager
    def database(self, template: str = TEMPLATE) -> Iterator[str]:
        """The URL of a new database copied from template, dropped afterwards."""
        name = self.new_database(template)
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)

    def template(self, name: str, build: Callable[[psycopg.Connection[Any]], object]) -> str:
        """A database that build(conn) fills once per leg and session, starting from a fresh rcll
        database (autocommit, vector type registered), to copy with new_database(template=...): a
        corpus that several tests read, and may each change, costs its building once."""
        dbname = f"tpl_{name}"
        if dbname not in self._templates:
            self._run_ddl(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
            self._create_database(TEMPLATE, dbname)
            with connected(self.url(dbname)) as conn:
                build(conn)
            # nobody connects to it again: copying it needs it idle
            self._run_ddl(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
            self._templates.add(dbname)
        return dbname

    def install_extension_files(self) -> None:
        """`make install` of extension/ into this leg's server (every rcll--*.sql, upgrades
        included). Parallel test workers share the server's installation: under a lock, and
        skipped when the installed files are already these (a file being replaced could be read
        half-written by another worker's CREATE EXTENSION)."""
        pg_config = self.cluster.bindir / "pg_config"
        sharedir = Path(subprocess.run([str(pg_config), "--sharedir"], check=True, capture_output=True,
                                       text=True).stdout.strip()) / "extension"
        source = Path(extension_dir())
        lock = Path(tempfile.gettempdir()) / f"rcll-install-{hashlib.sha1(str(sharedir).encode()).hexdigest()[:10]}.lock"
        with lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            subprocess.run(["make", "-s", "-C", str(source), "scripts"], check=True, capture_output=True)
            ours = [p for p in source.iterdir() if p.name == "rcll.control" or
                    (p.name.startswith("rcll--") and p.suffix == ".sql")]
            if any(not (sharedir / p.name).exists() or (sharedir / p.name).read_bytes() != p.read_bytes()
                   for p in ours):
                subprocess.run(["make", "-s", "-C", str(source), "install", f"PG_CONFIG={pg_config}"],
                               check=True, capture_output=True)


def _start_leg(name: str, base: Path) -> Leg:
    settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    if name == "pg18":
        c = cluster.embedded(base / name, port=PORTS[name], **settings)
    elif name == "pg15":
        c = cluster.debian15(base / name, port=PORTS[name], **settings)
    else:
        raise ValueError(f"unknown test leg {name!r} (RCLL_TEST_LEGS)")
    c.start()
    leg = Leg(name, c)
    with leg.admin() as conn:
        for name in (TEMPLATE, DROPPER):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(leg.url(TEMPLATE)) as conn:
        install.install(conn)
        conn.commit()
    return leg


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's --dist loadfile hands out the files with the most tests first unless told not
    # to, which sends the files of one long test (the wheel, the soak, a fuzzer) out last, to finish
    # alone: it keeps the order pytest_collection_modifyitems gives instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked slow run first, then the others, those with more tests first:
    `make test` spreads files over parallel workers (pytest-xdist, --dist loadfile), and a long
    file handed out last would finish alone while the other worker waits."""
    def file(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]
    slow = {file(item) for item in items if item.get_closest_marker("slow")}
    tests = collections.Counter(file(item) for item in items)
    items.sort(key=lambda item: (file(item) not in slow, 0 if file(item) in slow else -tests[file(item)]))


# The test clusters' directories live in memory when the machine has one big enough: the suite
# makes and drops a database per test (~1,000 files each), and on /tmp's ext4 the kernel's search
# for a free inode among the recently deleted ones (find_inode_bit, recently_deleted) took a quarter
# of all the CPU of `make test` (perf record -a over a whole run). fsync is off in the test clusters,
# so a RAM file system changes nothing they test. RCLL_TEST_SCRATCH names another place.
SCRATCH_MIN_FREE = 8 * 1024**3


def scratch_dir() -> str:
    """/dev/shm when it has SCRATCH_MIN_FREE bytes free (a container's is often 64 MB), else /tmp."""
    override = os.environ.get("RCLL_TEST_SCRATCH", "").strip()
    if override:
        return override
    try:
        free = os.statvfs("/dev/shm")
    except OSError:
        return "/tmp"
    return "/dev/shm" if free.f_bavail * free.f_frsize >= SCRATCH_MIN_FREE else "/tmp"


@pytest.fixture(scope="session")
def test_root() -> Iterator[Path]:
    # Short path: it holds the clusters, and socket paths are limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="rcllt-", dir=scratch_dir()))
    yield root
    shutil.rmtree(root, ignore_errors=True)


_legs: dict[str, Leg] = {}


@pytest.fixture(scope="session")
def legs(test_root: Path) -> Iterator[dict[str, Leg]]:
    yield _legs
    for leg in _legs.values():
        leg.close()
        leg.cluster.destroy()


def _leg(name: str, legs: dict[str, Leg], test_root: Path) -> Leg:
    if name not in legs:
        legs[name] = _start_leg(name, test_root)
    return legs[name]


@pytest.fixture(params=LEGS)
def leg(request: pytest.FixtureRequest, legs: dict[str, Leg], test_root: Path) -> Leg:
    """Each test using this runs once per leg."""
    return _leg(str(request.param), legs, test_root)


@pytest.fixture
def pg18(legs: dict[str, Leg], test_root: Path) -> Leg:
    return _leg("pg18", legs, test_root)


@pytest.fixture
def pg15(legs: dict[str, Leg], test_root: Path) -> Leg:
    return _leg("pg15", legs, test_root)


@pytest.fixture
def dsn(leg: Leg) -> Iterator[str]:
    """A fresh database with rcll installed, on each leg."""
    with leg.database() as url:
        yield url


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to a fresh rcll database (vector type registered)."""
    with connected(dsn) as conn:
        yield conn


class LoginRole(NamedTuple):
    name: str
    dsn: str


TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
MakeLoginRole = Callable[..., LoginRole]


@pytest.fixture
def login_role(dsn: str) -> Iterator[MakeLoginRole]:
    """Makes plain (non-superuser) LOGIN roles on the test's database:
    `login_role("SELECT", "INSERT")` may use those privileges on every rcll table,
    `login_role(member_of="rcll_reader")` is a member of that role. Each is dropped, with
    everything granted to it, after the test."""
    made: list[str] = []

    def make(*privileges: str, member_of: str | None = None) -> LoginRole:
        assert set(privileges) <= set(TABLE_PRIVILEGES), privileges
        name = f"rcll_t_{uuid.uuid4().hex[:12]}"
        role = sql.Identifier(name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
            made.append(name)
            if member_of:
                conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(member_of), role))
            if privileges:
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA rcll TO {}").format(role))
                conn.execute(sql.SQL("GRANT {} ON ALL TABLES IN SCHEMA rcll TO {}").format(
                    sql.SQL(", ").join(map(sql.SQL, privileges)), role))
        return LoginRole(name, conninfo.make_conninfo(dsn, user=name))

    yield make
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def python_path() -> list[str]:
    """The venv's site-packages and the directory holding the rcll package."""
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    return [str(site), str(Path(rcll.__file__).resolve().parents[1])]


# For tests of the models inside PostgreSQL, which only the pg15 leg (plpython3u) has.
pg15_only = pytest.mark.parametrize("leg", ["pg15"], indirect=True)


@pytest.fixture
def models_dsn(leg: Leg) -> Iterator[str]:
    """A fresh rcll database on the test's leg with the models running inside PostgreSQL where the
    leg can run them (pg15: rcll.enable_in_database_models with this venv's site-packages and
    the rcll package); on pg18 the client embeds and reranks. Mark a test @pg15_only to run it
    there alone."""
    name = leg.new_database()
    try:
        if leg.name == "pg15":
            with psycopg.connect(leg.url(name), autocommit=True) as conn:
                conn.execute("SELECT rcll.enable_in_database_models(%s)", (python_path(),))
        yield leg.url(name)
    finally:
        leg.drop_database(name)


@pytest.fixture(scope="session")
def citus(test_root: Path) -> Iterator[citus_cluster.CitusCluster]:
    """A Citus cluster of the embedded PG 18 (rcll.citus_cluster): a coordinator and two
    workers on loopback, started once per test run (per pytest-xdist worker) and removed at its end.
    Skipped, with the reason, when Citus is not built (make citus)."""
    missing = citus_cluster.citus_missing()
    if missing:
        pytest.skip(missing)
    # Three loopback ports a pytest-xdist worker: gw0 56101-56103, gw1 56104-56106, ...
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    with citus_cluster.running(test_root / "citus", 56101 + 3 * (int(worker) if worker.isdigit() else 0)) as running:
        yield running
