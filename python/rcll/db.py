"""Connections: the DSN given (RCLL_DSN, read into rcll.settings), otherwise the embedded default cluster
(started on demand)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from rcll import cluster
from rcll.errors import Code, RcllError
from rcll.settings import DEFAULTS, Settings

DEFAULT_DBNAME = "rcll"
# How long a request waits for a pooled connection before it is answered "unavailable" (503):
# while PostgreSQL restarts, requests fail fast instead of queueing for psycopg_pool's 30 s.
POOL_TIMEOUT = 5.0

P = ParamSpec("P")
T = TypeVar("T")


def check_dsn(dsn: str) -> str:
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise RcllError("dsn", f"malformed connection string: {e}",
                        "use postgresql://user@host:port/dbname or 'host=... dbname=...'") from e
    return dsn


SECRET_PARAMETERS = ("password", "sslpassword")


def redacted(dsn: str) -> str:
    """The connection string to print: any password in it replaced by ***. (The start-up line of
    `rcll serve` goes to logs that more people read than the secret was meant for.)"""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(a malformed connection string)"
    if not any(k in params for k in SECRET_PARAMETERS):
        return dsn
    return conninfo.make_conninfo("", **{k: "***" if k in SECRET_PARAMETERS else v for k, v in params.items()})


def embedded_dsn(start: bool = True, settings: Settings = DEFAULTS) -> str:
    """The URL of the embedded default cluster's rcll database (where settings put it), starting
    the cluster if asked."""
    c = cluster.embedded(config=settings)
    if start:
        c.start()
        with psycopg.connect(c.url(), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DEFAULT_DBNAME,)).fetchone() is None:
                # Another process opening the same fresh home may create it first: that is success.
                with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    conn.execute(f"CREATE DATABASE {DEFAULT_DBNAME}")
    return c.url(DEFAULT_DBNAME)


def resolve_dsn(dsn: str | None = None, settings: Settings = DEFAULTS) -> str:
    """dsn, checked; None: the embedded database of these settings, started if needed."""
    if dsn:
        return check_dsn(dsn)
    return embedded_dsn(settings=settings)


def connect(dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
    target = resolve_dsn(dsn)
    try:
        conn = psycopg.connect(target, **kwargs)
    except psycopg.OperationalError as e:
        raise RcllError("dsn", f"cannot connect: {str(e).strip()}", "check RCLL_DSN or run `rcll db start`",
                        code=Code.UNAVAILABLE) from e
    configure(conn)
    return conn


def configure(conn: psycopg.Connection[Any]) -> None:
    """Register the vector type (if the schema is installed) on a connection."""
    row = conn.execute("SELECT to_regtype('vector') IS NOT NULL").fetchone()
    if row and row[0]:
        register_vector(conn)
    if not conn.autocommit:
        conn.commit()


def pool(dsn: str, *, max_size: int, configure: Callable[[psycopg.Connection[Any]], None],
         min_size: int = 1) -> ConnectionPool[psycopg.Connection[Any]]:
    """A connection pool that survives a restarted database: every connection is checked
    (a round trip) as it leaves the pool, so one broken by a restart is replaced there and then
    instead of failing the request that drew it. Only the requests in flight when the database
    went away fail. Not opened."""
    return ConnectionPool(dsn, min_size=min_size, max_size=max_size, configure=configure, open=False,
                          check=ConnectionPool.check_connection, timeout=POOL_TIMEOUT,
                          reconnect_timeout=24 * 3600.0)


def retried_once(fn: Callable[P, T]) -> Callable[P, T]:
    """Run an idempotent read again, once, when its connection broke under it (OperationalError:
    the database restarted or the network dropped). Not when no connection could be had at all
    (PoolTimeout): that already waited."""
    @functools.wraps(fn)
    def again(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except (psycopg.OperationalError, RcllError) as e:
            cause = e if isinstance(e, psycopg.OperationalError) else e.__cause__   # as rcll.errors maps it
            if not isinstance(cause, psycopg.OperationalError) or isinstance(cause, PoolTimeout):
                raise
            return fn(*args, **kwargs)
    return again
