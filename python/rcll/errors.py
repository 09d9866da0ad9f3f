"""Errors RCLL raises to callers, the one table of their codes, and the one mapping of database
errors to them.

Every interface (the Python API, CLI, HTTP, MCP) shows an RcllError the same way: its code, the
field at fault, what is wrong, and the fix. rcll's SQL raises RCLL's own SQLSTATEs (RC001...) with
the field in the error's COLUMN slot and the fix in its HINT; from_database() reads those slots -
never the message's wording - and maps the few standard errors a user can cause and fix (cannot
connect, no schema, refused by the database's privileges or a read-only transaction) by their
SQLSTATE class. Anything else is a bug or an outage and passes unchanged.

CODES is the one table of what each code means: HTTP answers with its status, MCP with an error
result naming its code and kind (docs/errors.md is the users' copy; tests/test_errors.py holds them
equal).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

import psycopg


class Code(StrEnum):
    """RCLL's error codes. RC001-RC008 are SQLSTATEs rcll's SQL raises; RC009 and RC010 come from
    the servers and the client (a bearer token, a database out of reach)."""

    INVALID_INPUT = "RC001"
    UNKNOWN_BANK = "RC002"
    NOT_FOUND = "RC003"
    CONFLICT = "RC004"
    VERSION_CONFLICT = "RC005"
    NOT_PERMITTED = "RC006"
    TOO_BROAD = "RC007"
    INVALID_STREAM = "RC008"
    UNAUTHENTICATED = "RC009"
    UNAVAILABLE = "RC010"

    @property
    def kind(self) -> str:
        """The code's name for programs and agents: "unknown_bank"."""
        return self.name.lower()


@dataclass(frozen=True)
class Meaning:
    status: int      # the HTTP status
    text: str        # what it means, for docs/errors.md


CODES: dict[Code, Meaning] = {
    Code.INVALID_INPUT: Meaning(422, "invalid input: a field's value is wrong"),
    Code.UNKNOWN_BANK: Meaning(404, "unknown bank (or a bank outside the token's scope: the same answer)"),
    Code.NOT_FOUND: Meaning(404, "not found: a unit, document, state key, room, proposal or role"),
    Code.CONFLICT: Meaning(409, "already exists, or conflicts with what is there"),
    Code.VERSION_CONFLICT: Meaning(409, "version conflict: someone wrote since you read (compare-and-set)"),
    Code.NOT_PERMITTED: Meaning(403, "not permitted: the token's scope, a grant, the verb, or a read-only server"),
    Code.TOO_BROAD: Meaning(422, "refused as too broad: a destructive verb with no scope"),
    Code.INVALID_STREAM: Meaning(422, "invalid import stream: a bad line, header, trailer or reference"),
    Code.UNAUTHENTICATED: Meaning(401, "missing, malformed or unknown bearer token"),
    Code.UNAVAILABLE: Meaning(503, "unavailable: the server is busy, or the database is out of reach or not "
                                   "installed (retry after Retry-After, or as the hint says)"),
}
_SQLSTATES = frozenset(c.value for c in Code)


def status(code: Code) -> int:
    """The HTTP status of a code (CODES)."""
    return CODES[code].status


class RcllError(Exception):
    """A request RCLL refused. `code` says what kind of refusal (Code, CODES); `field` names the
    input at fault; `hint` says how to fix it. The code defaults to invalid input, what almost
    every check in rcll.validate raises."""

    def __init__(self, field: str, message: str, hint: str | None = None, *,
                 code: Code = Code.INVALID_INPUT) -> None:
        self.code = code
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(f"{field}: {message}" + (f" ({hint})" if hint else ""))

    def as_dict(self) -> dict[str, str | None]:
        return {"code": self.code.value, "field": self.field, "error": self.message, "hint": self.hint}


def unknown_bank(bank: str) -> RcllError:
    """The one answer for a bank the caller cannot reach: one that does not exist, and one outside
    a token's scope (rcll.auth), so that a scope does not reveal which banks exist. A bank the
    database reports unknown (RC002) while a verb acts on `bank` is answered with it too
    (from_database(bank=...))."""
    return RcllError("bank", f'unknown bank "{bank}"',
                     f"Create it first: SELECT rcll.create_bank('{bank}') or `rcll bank create {bank}`.",
                     code=Code.UNKNOWN_BANK)


# The server ended the session: shut down (a failover's demotion or a restart: 57P01), crashed
# (57P02) or is still starting (57P03). Unavailable and retryable, as a lost connection is.
GOING_AWAY = frozenset({"57P01", "57P02", "57P03"})


REMOTE_NODE_HINT = ("retry after Retry-After: a Citus worker this bank lives on is down or unreachable (the "
                    "banks on the other workers still answer); the operator restarts it (docs/scaling.md)")


SHARD_MOVING_HINT = ("retry after Retry-After: the bank's shard is being moved or split on the Citus cluster (a "
                     "rebalance or a tenant isolation switching over); the write was not made")
# Citus's shard-metadata lookups (metadata_cache.c, metadata_utility.c) raise an internal error for a
# shard that is mid-move: told apart by the source file the server names, never by the words.
_CITUS_SHARD_METADATA = frozenset({"metadata_cache.c", "metadata_utility.c"})


def from_database(e: BaseException, *, read_only: bool = False, bank: str | None = None) -> RcllError | None:
    """The RcllError a database error stands for, or None when it is not the caller's to fix.

    read_only: the error came through a server that is read-only by configuration (the hint says so).
    bank: the bank the failing call acted on; an RC002 is then unknown_bank(bank).
    """
    if not isinstance(e, psycopg.Error):
        return None
    diag = e.diag
    state = e.sqlstate
    if state in _SQLSTATES:
        code = Code(state)
        if code is Code.UNKNOWN_BANK and bank is not None:
            return unknown_bank(bank)
        field = diag.column_name or ""
        # rcll's SQL writes "<field>: <what is wrong>" so that psql shows the field; the field
        # itself is read from COLUMN, and only its echo is dropped from the text shown beside it.
        message = (diag.message_primary or "").removeprefix(f"{field}: ")
        return RcllError(field, message, diag.message_hint, code=code)
    primary = diag.message_primary or ""
    if isinstance(e, psycopg.errors.InsufficientPrivilege | psycopg.errors.ReadOnlySqlTransaction):
        return RcllError("dsn", f"refused by the database: {primary}",
                         "this server is read-only" if read_only else None, code=Code.NOT_PERMITTED)
    if isinstance(e, psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedFunction):
        # rcll's client calls only rcll's functions: one missing means the schema is missing or
        # older than this package.
        return RcllError("dsn", f"the rcll schema is missing or out of date ({primary})",
                         "run `rcll install` (or `rcll serve`, which installs it)", code=Code.UNAVAILABLE)
    if state == "XX000" and (diag.source_file or "") in _CITUS_SHARD_METADATA:
        return RcllError("bank", f"the bank's shard is moving: {primary}", SHARD_MOVING_HINT, code=Code.UNAVAILABLE)
    if isinstance(e, psycopg.OperationalError) and (state is None or state[:2] == "08" or state in GOING_AWAY):
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if state is not None and diag.severity_nonlocalized == "ERROR":
            # A connection error, or a server going away, that the server raised while this session
            # lives on: another server it needed could not be reached or ended the work - on a Citus
            # cluster, the worker holding the bank (Citus raises 08006 naming it, or passes on the
            # worker's own 57P02 when the worker dies mid-call). The caller's own connection ends
            # with FATAL, or in libpq.
            return RcllError("dsn", f"a database node is out of reach: {first}", REMOTE_NODE_HINT, code=Code.UNAVAILABLE)
        return RcllError("dsn", f"cannot connect: {first}", "check RCLL_DSN or run `rcll db start`",
                         code=Code.UNAVAILABLE)
    return None


@contextmanager
def database_errors(*, read_only: bool = False, bank: str | None = None) -> Iterator[None]:
    """Re-raise a database error as the RcllError it stands for (from_database); others pass.
    bank: the one bank the work inside acts on. An unknown bank raised inside, mapped here or
    already by an inner database_errors that was not told the bank, is then unknown_bank(bank)."""
    try:
        yield
    except psycopg.Error as e:
        mapped = from_database(e, read_only=read_only, bank=bank)
        if mapped is not None:
            raise mapped from e
        raise
    except RcllError as e:
        if bank is not None and e.code is Code.UNKNOWN_BANK:
            raise unknown_bank(bank) from e
        raise
