"""Errors RCLL raises to callers, and the one mapping of database errors to them.

Every interface (the Python API, CLI, HTTP, MCP) shows an RcllError the same way: the field at
fault, what is wrong, and the fix. rcll's SQL raises "<field>: <message>" with a HINT;
from_database() turns those - and the few database errors a user can cause and fix (cannot
connect, no schema, refused by a read-only role) - into RcllError. Anything else is a bug or an
outage and passes unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


class RcllError(Exception):
    """A request RCLL refused. `field` names the input at fault; `hint` says how to fix it."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(f"{field}: {message}" + (f" ({hint})" if hint else ""))

    def as_dict(self) -> dict[str, str | None]:
        return {"field": self.field, "error": self.message, "hint": self.hint}


def from_database(e: BaseException, *, read_only: bool = False) -> RcllError | None:
    """The RcllError a database error stands for, or None when it is not the caller's to fix.

    read_only: the error came through a server that is read-only by configuration (the hint says so).
    """
    if not isinstance(e, psycopg.Error):
        return None
    diag = e.diag
    primary = diag.message_primary or ""
    if ": " in primary:
        field, message = primary.split(": ", 1)
        if field.replace("_", "").replace(".", "").isalnum():   # a column, or table.column
            return RcllError(field, message, diag.message_hint)
    if isinstance(e, psycopg.errors.InsufficientPrivilege | psycopg.errors.ReadOnlySqlTransaction):
        return RcllError("dsn", f"refused by the database: {primary}",
                         "this server is read-only" if read_only else None)
    if isinstance(e, psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedFunction) and "rcll" in primary:
        return RcllError("dsn", f"the rcll schema is missing or out of date ({primary})",
                         "run `rcll install` (or `rcll serve`, which installs it)")
    if isinstance(e, psycopg.OperationalError) and not primary:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return RcllError("dsn", f"cannot connect: {first}", "check RCLL_DSN or run `rcll db start`")
    return None


@contextmanager
def database_errors(*, read_only: bool = False) -> Iterator[None]:
    """Re-raise a database error as the RcllError it stands for (from_database); others pass."""
    try:
        yield
    except psycopg.Error as e:
        mapped = from_database(e, read_only=read_only)
        if mapped is not None:
            raise mapped from e
        raise
