"""Real PostgreSQL for every test: throwaway clusters on both legs, a fresh database per test.

Legs: pg18 (the embedded default: PG 18 + pgvector 0.8.6) and pg15 (Debian PG 15 + pgvector 0.8.0
+ plpython3u, prepared by scripts/install-pg15-leg.sh). A leg that cannot start fails the run;
it is never skipped. RCLL_TEST_LEGS=pg18 narrows a local run to one leg.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import conninfo, sql

import rcll
from rcll import cluster, install
from rcll.db import configure

# Starlette's TestClient sends Host: testserver; the HTTP app answers only the hosts it is told
# (rcll.http_guard), so the suite tells it this one. Tests of the Host rule set their own.
os.environ.setdefault("RCLL_ALLOWED_HOSTS", "testserver")

LEGS = [leg for leg in os.environ.get("RCLL_TEST_LEGS", "pg18,pg15").split(",") if leg]
PORTS = {"pg18": 55418, "pg15": 55415}
TEMPLATE = "rcll_template"
_counter = itertools.count()


class Leg:
    def __init__(self, name: str, c: cluster.Cluster) -> None:
        self.name = name
        self.cluster = c

    def url(self, dbname: str = "postgres") -> str:
        return self.cluster.url(dbname)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(), autocommit=True)

    def new_database(self, template: str = TEMPLATE) -> str:
        name = f"t_{os.getpid()}_{next(_counter)}"
        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


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
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    with psycopg.connect(leg.url(TEMPLATE)) as conn:
        install.install(conn)
        conn.commit()
    return leg


@pytest.fixture(scope="session")
def test_root() -> Iterator[Path]:
    # Short path: it holds the clusters, and socket paths are limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="rcllt-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


_legs: dict[str, Leg] = {}


@pytest.fixture(scope="session")
def legs(test_root: Path) -> Iterator[dict[str, Leg]]:
    yield _legs
    for leg in _legs.values():
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
    name = leg.new_database()
    yield leg.url(name)
    leg.drop_database(name)


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to a fresh rcll database (vector type registered)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        configure(conn)
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
