"""Errors RCLL raises to callers: each names the field at fault and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


class RcllError(Exception):
    """A request RCLL refused. `field` names the input at fault."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(f"{field}: {message}" + (f" ({hint})" if hint else ""))

    def as_dict(self) -> dict[str, str | None]:
        return {"field": self.field, "error": self.message, "hint": self.hint}


def from_database(e: Exception) -> RcllError | None:
    """An RcllError for a database error raised by rcll's SQL ("<field>: <message>", with a hint)."""
    diag = getattr(e, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if not primary or ": " not in primary:
        return None
    field, message = primary.split(": ", 1)
    if not field.replace("_", "").isalnum():
        return None
    return RcllError(field, message, getattr(diag, "message_hint", None))


@contextmanager
def database_errors() -> Iterator[None]:
    """Re-raise a database error from rcll's SQL as the RcllError it describes; others pass."""
    try:
        yield
    except psycopg.Error as e:
        mapped = from_database(e)
        if mapped is not None:
            raise mapped from e
        raise
