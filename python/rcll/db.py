"""Connections: RCLL_DSN when set, otherwise the embedded default cluster (started on demand)."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import conninfo

from rcll import cluster
from rcll.errors import RcllError

DEFAULT_DBNAME = "rcll"


def check_dsn(dsn: str) -> str:
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise RcllError("dsn", f"malformed connection string: {e}",
                        "use postgresql://user@host:port/dbname or 'host=... dbname=...'") from e
    return dsn


def embedded_dsn(start: bool = True) -> str:
    """The URL of the embedded default cluster's rcll database, starting the cluster if asked."""
    c = cluster.embedded()
    if start:
        c.start()
        with psycopg.connect(c.url(), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DEFAULT_DBNAME,)).fetchone() is None:
                conn.execute(f"CREATE DATABASE {DEFAULT_DBNAME}")
    return c.url(DEFAULT_DBNAME)


def resolve_dsn(dsn: str | None = None) -> str:
    dsn = dsn or os.environ.get("RCLL_DSN")
    if dsn:
        return check_dsn(dsn)
    return embedded_dsn()


def connect(dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
    target = resolve_dsn(dsn)
    try:
        conn = psycopg.connect(target, **kwargs)
    except psycopg.OperationalError as e:
        raise RcllError("dsn", f"cannot connect: {str(e).strip()}", "check RCLL_DSN or run `rcll db start`") from e
    configure(conn)
    return conn


def configure(conn: psycopg.Connection[Any]) -> None:
    """Register the vector type (if the schema is installed) on a connection."""
    row = conn.execute("SELECT to_regtype('vector') IS NOT NULL").fetchone()
    if row and row[0]:
        register_vector(conn)
    if not conn.autocommit:
        conn.commit()
