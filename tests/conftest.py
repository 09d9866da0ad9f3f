"""Real PostgreSQL for every test: throwaway clusters on both legs, a fresh database per test.

Legs: pg18 (the embedded default: PG 18 + pgvector 0.8.6) and pg15 (Debian PG 15 + pgvector 0.8.0
+ plpython3u, prepared by scripts/install-pg15-leg.sh). A leg that cannot start fails the run;
it is never skipped. RCLL_TEST_LEGS=pg18 narrows a local run to one leg.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rcll import cluster, install
from rcll.db import configure

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
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
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
