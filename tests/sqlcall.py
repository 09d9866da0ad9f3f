"""Call a SQL function with named arguments, as a psql user would: `rcll.put_state(bank => ..., ...)`.

The statement is composed with psycopg.sql (identifiers for the function and its parameter names,
placeholders for the values); no test assembles SQL text from strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row


def statement(function: str, args: dict[str, Any]) -> sql.Composed:
    """`SELECT * FROM schema.function(name => %(name)s, ...)` for a schema-qualified function name."""
    schema, _, name = function.rpartition(".")
    if not schema:
        raise ValueError(f"function: {function!r} is not schema-qualified")
    named = sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in args)
    return sql.SQL("SELECT * FROM {}({})").format(sql.Identifier(schema, name), named)


def call(conn: psycopg.Connection[Any], function: str, **args: Any) -> list[dict[str, Any]]:
    """Every row the function returns, each a dict keyed by column name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(statement(function, args), args).fetchall()


def call_one(conn: psycopg.Connection[Any], function: str, **args: Any) -> dict[str, Any]:
    """The one row the function returns (it must return exactly one)."""
    rows = call(conn, function, **args)
    assert len(rows) == 1, f"{function} returned {len(rows)} rows, expected one"
    return rows[0]


def scalar(conn: psycopg.Connection[Any], function: str, **args: Any) -> Any:
    """The value a function returning one scalar gives back."""
    (value,) = call_one(conn, function, **args).values()
    return value


@contextmanager
def refused(code: str, field: str, match: str | None = None) -> Iterator[pytest.ExceptionInfo[psycopg.Error]]:
    """Expect rcll's SQL to refuse: SQLSTATE `code` (RC001...), the field at fault in the error's
    COLUMN slot, a HINT with the fix, and (optionally) words matching `match`."""
    with pytest.raises(psycopg.Error, match=match) as e:
        yield e
    assert (e.value.sqlstate, e.value.diag.column_name) == (code, field), e.value
    assert e.value.diag.message_hint, f"no HINT: {e.value}"
