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
from psycopg_pool.base import AttemptWithBackoff

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


def hosts(dsn: str) -> int:
    """How many hosts a connection string names (libpq's host=a,b,c or postgresql://a,b,c/)."""
    params = conninfo.conninfo_to_dict(dsn)
    return max(len(str(params.get("host") or "").split(",")), len(str(params.get("hostaddr") or "").split(",")))


def writer_dsn(dsn: str) -> str:
    """The connection string a read-write pool uses: a multi-host DSN (an HA cluster's nodes)
    that names no target_session_attrs gets read-write, so that every connection - and every
    reconnection after a failover - lands on the primary, wherever it now is. libpq's default
    (any) would take the first node that answers, a standby as often as not."""
    params = conninfo.conninfo_to_dict(dsn)
    if hosts(dsn) < 2 or params.get("target_session_attrs"):
        return dsn
    return conninfo.make_conninfo(dsn, target_session_attrs="read-write")


def standby_dsn(dsn: str) -> str:
    """The connection string recall uses when the caller lets it read a standby
    (Memory(recall_from_standby=True)): the same hosts with target_session_attrs=prefer-standby -
    a standby when one answers, else the primary, so recall is never less available than writes."""
    return conninfo.make_conninfo(dsn, target_session_attrs="prefer-standby")


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


# The longest wait between two attempts to reconnect. psycopg_pool doubles its wait after every
# failed attempt (1, 2, 4, 8, 16 s...): after a 20 s failover its next attempt could come 30 s
# later, and the server would stay unavailable for that long on a primary that is up.
RECONNECT_MAX_DELAY = 1.0


class _CappedBackoff(AttemptWithBackoff):
    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY)


class _Shared(ConnectionPool[psycopg.Connection[Any]]):
    """psycopg_pool's pool with reconnection attempts at most RECONNECT_MAX_DELAY apart (through
    its one hook for them, _add_connection)."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _CappedBackoff(timeout=self.reconnect_timeout), growing)


def pool(dsn: str, *, max_size: int, configure: Callable[[psycopg.Connection[Any]], None],
         min_size: int = 1) -> ConnectionPool[psycopg.Connection[Any]]:
    """A connection pool that survives a restarted database or a failover: every connection is
    checked (a round trip) as it leaves the pool, so one broken by a restart is replaced there
    and then instead of failing the request that drew it, and lost connections are made again
    at most RECONNECT_MAX_DELAY apart (through a multi-host DSN's target_session_attrs, on the
    new primary). Only the requests in flight when the database went away fail. Not opened."""
    return _Shared(dsn, min_size=min_size, max_size=max_size, configure=configure, open=False,
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
