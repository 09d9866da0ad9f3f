"""Real PostgreSQL for every test: throwaway clusters on both legs, a fresh database per test.

Legs: pg18 (the embedded default: PG 18 + pgvector 0.8.6) and pg15 (Debian PG 15 + pgvector 0.8.0
+ plpython3u, prepared by scripts/install-pg15-leg.sh). A leg that cannot start fails the run; the
one exception is a run without root on a machine where nobody installed the pg15 leg (it needs
root), which runs pg18 alone and says so in one line. RCLL_TEST_LEGS=pg18 narrows a local run.

Every run is a first run: as root, the clusters run as an OS user made for this run (a new name,
RCLL_SERVER_USER, created by the first cluster that starts - on two workers at once - and removed
when the run ends), so the path a fresh machine takes is the one every run takes. When the run
ends, the suite fails if anything of it is left: a process, or a /tmp or /dev/shm entry named rcll.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import fcntl
import itertools
import os
import pwd
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
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
from rcll.settings import Settings
from rcll.sqlsource import extension_dir

# Starlette's TestClient sends Host: testserver; the HTTP app answers only the hosts it is told
# (rcll.http_guard), so the suite tells it this one. Tests of the Host rule set their own.
os.environ.setdefault("RCLL_ALLOWED_HOSTS", "testserver")
# The same for a test that passes its settings instead of reading the environment: the defaults,
# and that host answered.
SETTINGS = Settings(allowed_hosts="testserver")

PG15_READY = (cluster.DEBIAN_PG15_BIN / "postgres").exists() and \
    Path("/usr/share/postgresql/15/extension/vector.control").exists()
# Without root the pg15 leg cannot be installed (apt): such a run takes the leg it has and says so.
PG15_SKIPPED = (None if PG15_READY or os.geteuid() == 0 or "RCLL_TEST_LEGS" in os.environ else
                "pg15 leg skipped: Debian's PostgreSQL 15 with pgvector is not installed and installing it "
                "needs root (as root: make pg15-leg); running pg18 alone")
LEGS = [leg for leg in os.environ.get("RCLL_TEST_LEGS", "pg18" if PG15_SKIPPED else "pg18,pg15").split(",") if leg]
PORTS = {"pg18": 55418, "pg15": 55415}
# The tests of the extension route need rcll's scripts in the server's extension directory.
EXTENSION_SKIPPED = ("{leg}: the extension-route tests skipped: installing rcll's extension files into "
                     "{sharedir} needs root (as root: make install PG_CONFIG=...)")
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
        if not os.access(sharedir, os.W_OK):        # Debian's, without root: CREATE EXTENSION cannot be tried
            pytest.skip(EXTENSION_SKIPPED.format(leg=self.name, sharedir=sharedir))
        # The lock is the extension directory itself (flock on its descriptor): no lock file to leave.
        held = os.open(sharedir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            subprocess.run(["make", "-s", "-C", str(source), "scripts"], check=True, capture_output=True)
            ours = [p for p in source.iterdir() if p.name == "rcll.control" or
                    (p.name.startswith("rcll--") and p.suffix == ".sql")]
            if any(not (sharedir / p.name).exists() or (sharedir / p.name).read_bytes() != p.read_bytes()
                   for p in ours):
                subprocess.run(["make", "-s", "-C", str(source), "install", f"PG_CONFIG={pg_config}"],
                               check=True, capture_output=True)
        finally:
            os.close(held)


def _start_leg(name: str, base: Path) -> Leg:
    settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    if name == "pg18":
        c = cluster.embedded(base / name, port=PORTS[name], config=Settings.from_env(), **settings)
    elif name == "pg15":
        c = cluster.debian15(base / name, port=PORTS[name], os_user=cluster.server_user(Settings.from_env()), **settings)
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


# -- the run: its OS user, its directories, and what it must not leave behind -------------------

RUN_ENV = "RCLL_TEST_RUN"            # every process of the run inherits it: how leftovers are found


def _is_controller(config: pytest.Config) -> bool:
    """The process that runs the session (pytest itself, or pytest-xdist's controller), not a worker."""
    return not hasattr(config, "workerinput")


class _Run(NamedTuple):
    id: str
    made_user: str | None          # the OS user made for this run (removed at its end)
    dirs: tuple[Path, ...]         # the run's temporary directory (TMPDIR) and scratch directory
    started: float                 # when (time.time()): an entry older than the run is not the run's


_RUN = pytest.StashKey[_Run]()


def _run_dir(parent: str, run: str, mode: int) -> Path:
    path = Path(parent) / f"rcll-run-{run}"
    path.mkdir(mode=mode)
    path.chmod(mode)                 # past the umask
    return path


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's --dist loadfile hands out the files with the most tests first unless told not
    # to, which sends the files of one long test (the wheel, the soak, a fuzzer) out last, to finish
    # alone: it keeps the order pytest_collection_modifyitems gives instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if not _is_controller(config) or RUN_ENV in os.environ:
        return                       # the workers inherit the controller's environment
    run = uuid.uuid4().hex[:10]
    os.environ[RUN_ENV] = run
    # Everything the run's processes put in the temporary directory (socket directories, the model
    # service's) and the clusters' scratch space live in directories of the run, so that what it
    # leaves behind is told apart from what other users of the machine have there. The temporary
    # one is shared like /tmp (servers running as other users make their socket directories in it).
    # pytest's own temporary folders stay where they were (kept, as pytest keeps them).
    tmp = _run_dir(tempfile.gettempdir(), run, 0o1777)
    scratch = _run_dir(scratch_dir(), run, 0o755) if scratch_dir() != tempfile.gettempdir() else tmp
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    os.environ["TMPDIR"], os.environ["RCLL_TEST_SCRATCH"] = str(tmp), str(scratch)
    tempfile.tempdir = None          # gettempdir() reads TMPDIR again
    user = None
    if os.geteuid() == 0 and cluster.SERVER_USER_ENV not in os.environ:
        # A name no machine has seen: the workers' first clusters create it at the same moment.
        user = os.environ[cluster.SERVER_USER_ENV] = f"rcllt{run}"
    config.stash[_RUN] = _Run(run, user, tuple(dict.fromkeys((tmp, scratch))), time.time())


def _run_processes(run: str, uid: int | None) -> list[str]:
    """Processes of this run still alive, but this one and its ancestors: those carrying
    RUN_ENV=run in their environment, and any of the run's OS user."""
    found = []
    marker = f"{RUN_ENV}={run}".encode()
    ours, pid = set(), os.getpid()           # this process and its ancestors (make, a shell)
    while pid > 1:
        ours.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    for pid_ in filter(str.isdigit, os.listdir("/proc")):
        pid = int(pid_)
        if pid in ours:
            continue
        try:
            st = os.stat(f"/proc/{pid}")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in env or (uid is not None and st.st_uid == uid):
            found.append(f"{pid} {cmd.strip()[:120]}")
    return found


# What a server killed with kill -9 cannot remove (the tests that crash PostgreSQL on purpose):
# its dynamic shared memory. The run removes its own; they are not counted as left behind.
CRASH_RESIDUE = "PostgreSQL."


def _left_in(run: _Run, uid: int | None) -> list[str]:
    """What the run left: rcll entries in its directories, and what its OS user made in the
    machine's own /tmp and /dev/shm (written past TMPDIR) - since the run began: an earlier run's
    user may have had the same uid."""
    left = [str(entry) for d in run.dirs for entry in d.iterdir() if "rcll" in entry.name]
    if uid is not None:
        for place in {Path(os.environ.get("PYTEST_DEBUG_TEMPROOT", "/tmp")), Path("/tmp"), Path("/dev/shm")}:
            with contextlib.suppress(OSError):
                for e in place.iterdir():
                    st = e.lstat()
                    if st.st_uid != uid or st.st_ctime < run.started:
                        continue
                    if place == Path("/dev/shm") and e.name.startswith(CRASH_RESIDUE):
                        e.unlink(missing_ok=True)
                        continue
                    left.append(str(e))
    return left


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """As the run ends (after pytest-xdist's workers are gone): nothing of it may remain - no
    process, no rcll entry in its directories - then its directories and its OS user go."""
    if not _is_controller(session.config) or _RUN not in session.config.stash:
        return
    run = session.config.stash[_RUN]
    uid = None
    if run.made_user:
        with contextlib.suppress(KeyError):
            uid = pwd.getpwnam(run.made_user).pw_uid
    left: list[str] = []
    for _ in range(50):              # the workers' processes may take a moment to exit
        left = _run_processes(run.id, uid)
        if not left:
            break
        threading.Event().wait(0.2)
    left += _left_in(run, uid)
    if left:
        print("\nconftest: the run left these behind:\n  " + "\n  ".join(left), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        for line in left:
            if line[0].isdigit():
                with contextlib.suppress(OSError):
                    os.kill(int(line.split()[0]), 9)
    for d in run.dirs:
        shutil.rmtree(d, ignore_errors=True)
    if run.made_user and uid is not None:
        for _ in range(50):          # userdel refuses while a killed process of the user lingers
            proc = subprocess.run(["userdel", run.made_user], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            threading.Event().wait(0.2)
        else:
            print(f"conftest: could not remove the run's OS user {run.made_user}: {proc.stderr.strip()}", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    if PG15_SKIPPED:
        lines.append(PG15_SKIPPED)
    elif "pg15" in LEGS and PG15_READY and not os.access("/usr/share/postgresql/15/extension", os.W_OK):
        lines.append(EXTENSION_SKIPPED.format(leg="pg15", sharedir="/usr/share/postgresql/15/extension"))
    if os.geteuid() == 0:
        lines.append(f"clusters run as the OS user {cluster.server_user(Settings.from_env())} (made for this run)")
    if BROWSER_SKIPPED:
        lines.append(BROWSER_SKIPPED)
    return lines


# -- the browser: Debian's Chromium driven by Selenium (scripts/install-browser.sh) ---------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
BROWSER_SKIPPED = (None if CHROMIUM.exists() and CHROMEDRIVER.exists() or os.geteuid() == 0 else
                   "browser tests skipped: Debian's chromium and chromium-driver are not installed and "
                   "installing them needs root (as root: make browser)")


def require_browser() -> None:
    """Skip (a run without root on a machine without the browser) or fail (anywhere else) when
    Chromium or its driver is missing."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing and BROWSER_SKIPPED:
        pytest.skip(BROWSER_SKIPPED)
    if missing:
        pytest.fail(f"{missing[0]} is missing: run `make browser` (scripts/install-browser.sh) first")


@contextlib.contextmanager
def chromium(tmp_path_factory: pytest.TempPathFactory, *args: str, log: bool = False) -> Iterator[Any]:
    """A headless Chromium (Selenium's driver) with args beside the usual ones; log=True keeps the
    page's console log for get_log("browser"). Quit when the block ends."""
    require_browser()
    # only the browser tests' workers import Selenium
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", *args):
        options.add_argument(arg)
    if log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves its singleton socket's folder in TMPDIR: one under pytest's temporary folders,
    # not a new org.chromium.Chromium.* in /tmp per run.
    service = DriverService(str(CHROMEDRIVER), env={**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))})
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


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


# Shards a distributed table gets on the tests' cluster (Citus's default is 32): a bank still lives
# whole on one worker and both workers hold banks, while each distribution, policy change and
# multi-shard statement has an eighth of the shards to touch (test_citus*.py: -11 s on one worker).
CITUS_SHARD_COUNT = 4


@pytest.fixture(scope="session")
def citus(test_root: Path) -> Iterator[citus_cluster.CitusCluster]:
    """A Citus cluster of the embedded PG 18 (rcll.citus_cluster): a coordinator and two
    workers on loopback, started once per test run (per pytest-xdist worker) and removed at its end.
    A run without root on a machine where nobody built Citus (it needs root's packages) skips,
    saying why; anywhere else a missing Citus fails, as a leg that cannot start does."""
    missing = citus_cluster.citus_missing()
    if missing and os.geteuid() != 0:
        pytest.skip(missing)
    if missing:
        pytest.fail(missing)
    # Three loopback ports a pytest-xdist worker: gw0 26101-26103, gw1 26104-26106, ...
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 26101 + 3 * (int(worker) if worker.isdigit() else 0)
    with citus_cluster.running(test_root / "citus", first, Settings.from_env(),
                                {"citus.shard_count": str(CITUS_SHARD_COUNT)}) as running:
        yield running
