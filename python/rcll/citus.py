"""rcll on a Citus cluster: what the installer does differently on a coordinator.

The schema is installed as on one node, then `rcll.distribute_by_bank()` (sql/functions/
600-citus-distribution.sql) shards every bank-keyed table by bank_id and makes the global tables
reference tables, then the re-runnable files run once more so the triggers it set aside are made
on the distributed tables (Citus copies them to every shard). Two things differ in how the files
are sent: Citus forwards some DDL to the workers with the text of the statement that carried it,
through a protocol that takes one statement, so each file goes statement by statement (split by
PostgreSQL's own parser, pglast); and triggers on distributed tables need
citus.enable_unsafe_triggers (rcll's write triggers touch only rows of the same bank, which live
in the same shard group).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, tuple_row

from rcll.errors import Code, RcllError


class CitusError(RcllError):
    """The database cannot take a distributed install (no Citus, not the coordinator, no parser)."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        super().__init__(field, message, hint, code=Code.UNAVAILABLE)


def has_citus(conn: psycopg.Connection[Any]) -> bool:
    """Whether this database has the Citus extension (a coordinator or a worker)."""
    row = conn.execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')").fetchone()
    return bool(row and row[0])


def is_coordinator(conn: psycopg.Connection[Any]) -> bool:
    """Whether this database is a Citus coordinator with at least one worker registered: the
    installer distributes rcll there without being asked."""
    if not has_citus(conn):
        return False
    row = conn.execute("SELECT pg_catalog.citus_is_coordinator() "
                       "AND EXISTS (SELECT FROM pg_catalog.citus_get_active_worker_nodes())").fetchone()
    return bool(row and row[0])


def is_distributed(conn: psycopg.Connection[Any]) -> bool:
    """Whether rcll's tables are already distributed on this Citus database."""
    if not has_citus(conn):
        return False
    row = conn.execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition "
                       "WHERE logicalrelid = to_regclass('rcll.memory_units'))").fetchone()
    return bool(row and row[0])


def prepare_session(conn: psycopg.Connection[Any]) -> None:
    """The session settings an install on a Citus node needs: triggers on distributed tables."""
    conn.execute("SELECT pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', false)")


def statements(text: str) -> list[str]:
    """A SQL file's statements, one by one, as PostgreSQL's parser splits them."""
    try:
        # Only an install on Citus needs a SQL parser: rcll's other paths never load it.
        import pglast
    except ImportError as e:
        raise CitusError("dsn", "installing on Citus needs pglast (PostgreSQL's parser) to send "
                         "the schema statement by statement", "pip install 'rcll[citus]'") from e
    return [str(s) for s in pglast.split(text, with_parser=True)]


def distribute(conn: psycopg.Connection[Any]) -> str:
    """rcll.distribute_by_bank() on the coordinator: what it did (or that it was done before)."""
    row = conn.execute("SELECT rcll.distribute_by_bank()").fetchone()
    return str(row[0]) if row else ""


@contextmanager
def own_statement(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """`conn` in autocommit while the block runs: a call to a delegated *_in_bank function sent
    there is the client's top-level statement outside a transaction block, the only one Citus
    runs whole on the bank's worker (sql/functions/610 and 615)."""
    autocommit = conn.autocommit
    conn.autocommit = True
    try:
        yield conn
    finally:
        if not conn.closed:
            conn.autocommit = autocommit


def call_in_bank(conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any],
                 row_factory: RowFactory[Any] = tuple_row) -> list[Any]:
    """The rows of one call to a delegated *_in_bank function, sent as its own statement (own_statement)."""
    with own_statement(conn), conn.cursor(row_factory=row_factory) as cur:
        return cur.execute(query, params).fetchall()


def named_call(function: str, names: Iterable[str], *, in_bank: bool = False,
               casts: Mapping[str, sql.SQL] | None = None) -> sql.Composed:
    """SELECT * FROM rcll.<function>(<name> => %(<name>)s, ...): each argument by name, from a
    parameter of the same name (cast where `casts` says: an array of vectors is sent as text).
    in_bank: its twin, rcll.<function>_in_bank, with bank_id => %(bank_id)s first
    (sql/functions/616-citus-delegated-verbs.sql)."""
    cast = casts or {}
    args = [sql.SQL("{} => {}::{}").format(sql.Identifier(n), sql.Placeholder(n), cast[n]) if n in cast
            else sql.SQL("{} => {}").format(sql.Identifier(n), sql.Placeholder(n)) for n in names]
    if in_bank:
        args.insert(0, sql.SQL("bank_id => {}").format(sql.Placeholder("bank_id")))
    name = f"{function}_in_bank" if in_bank else function
    return sql.SQL("SELECT * FROM {}({})").format(sql.Identifier("rcll", name), sql.SQL(", ").join(args))
