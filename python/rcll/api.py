"""The verbs every interface serves (HTTP, MCP, CLI): one transaction each, as the caller's agent.

Each verb checks its input (every rejection is an RcllError naming the field), opens a pooled
connection, sets rcll.agent for the transaction to the identity the *server* resolved (never a
value from the request), and calls the named SQL function.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from rcll import __version__
from rcll.auth import act_as, can_write, identity_server_ok
from rcll.db import configure
from rcll.errors import RcllError, database_errors, from_database
from rcll.validate import check_bank

MAX_QUERY = 4000
MAX_NAME = 512
MAX_LIST = 256
MAX_BUDGET = 200_000


# -- input checks --------------------------------------------------------------------------------

def text_arg(value: Any, field: str, *, required: bool = False, limit: int = MAX_NAME) -> str | None:
    if value is None:
        if required:
            raise RcllError(field, "is required")
        return None
    if not isinstance(value, str):
        raise RcllError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise RcllError(field, "contains a NUL byte", "PostgreSQL text cannot hold NUL; strip it")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise RcllError(field, "contains an unpaired UTF-16 surrogate", "send valid Unicode text")
    if required and not value.strip():
        raise RcllError(field, "is empty")
    if len(value) > limit:
        raise RcllError(field, f"{len(value)} characters is over the limit of {limit}")
    return value


def list_arg(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise RcllError(field, f"must be a list of strings, got {type(value).__name__}")
    if len(value) > MAX_LIST:
        raise RcllError(field, f"{len(value)} items is over the limit of {MAX_LIST}")
    return [str(text_arg(v, f"{field}[{i}]", required=True)) for i, v in enumerate(value)]


def int_arg(value: Any, field: str, lo: int, hi: int, default: int | None = None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RcllError(field, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise RcllError(field, f"{value} is out of range", f"use {lo}..{hi}")
    return value


def time_arg(value: Any, field: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text_arg(value, field)
        try:
            dt = datetime.fromisoformat(value)
        except ValueError as e:
            raise RcllError(field, f"{value!r} is not an ISO 8601 timestamp", "e.g. 2024-05-01T00:00:00Z") from e
    else:
        raise RcllError(field, f"must be an ISO 8601 timestamp string, got {type(value).__name__}")
    if dt is not None and not 1 <= dt.year <= 9999:
        raise RcllError(field, "year out of range")
    return dt


def json_arg(value: Any, field: str, depth: int = 0) -> Any:
    """A JSON value PostgreSQL jsonb can hold (no NUL, finite numbers, bounded depth)."""
    if depth > 64:
        raise RcllError(field, "nested too deeply (over 64 levels)")
    if isinstance(value, str):
        text_arg(value, field, limit=1 << 20)
    elif isinstance(value, float) and not math.isfinite(value):
        raise RcllError(field, "numbers must be finite (no NaN or Infinity)")
    elif isinstance(value, dict):
        for k, v in value.items():
            text_arg(k, f"{field}.<key>", limit=1 << 16)
            json_arg(v, f"{field}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            json_arg(v, f"{field}[{i}]", depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise RcllError(field, f"not a JSON value ({type(value).__name__})")
    return value


def _bank(bank: Any) -> str:
    check_bank(bank)
    return str(text_arg(bank, "bank", required=True, limit=128))


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "lower") and hasattr(value, "upper") and hasattr(value, "bounds"):   # a Range
        return {"lower": _plain(value.lower), "upper": _plain(value.upper), "bounds": value.bounds}
    return value


def recall_dict(result: Any) -> dict[str, Any]:
    """A RecallResult as JSON-ready data (its as_dict() when it has one)."""
    if hasattr(result, "as_dict"):
        return dict(_plain(result.as_dict()))
    timings = _plain(result.timings)
    # context (the chunk before a fact, which the reranker read) stays out: the token budget
    # counts fact text only, and that chunk is returned on its own when it is relevant.
    facts = [{k: v for k, v in _plain(f).items() if k != "context"} for f in result.facts]
    return {"facts": facts, "candidates": result.candidates, "tokens": result.tokens, "timings_ms": timings}


# -- the service ---------------------------------------------------------------------------------

class Service:
    """A connection pool and the verbs. read_only: only the read verbs, over a role that cannot write."""

    def __init__(self, dsn: str, *, read_only: bool = False, pool_size: int = 4) -> None:
        self.dsn = dsn
        self.read_only = read_only
        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, configure=self._configure, open=False)
        self.identity_honoured = False

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        configure(conn)
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")
            conn.commit()

    def open(self) -> None:
        self.pool.open(wait=True)
        with self.pool.connection() as conn:
            if self.read_only and can_write(conn):
                self.pool.close()
                raise RcllError("dsn", "read-only mode connects as a role that can write",
                                "connect as a SELECT-only role (e.g. rcll_reader); see sql/migrations/006-reader-role.sql")
            self.identity_honoured = identity_server_ok(conn)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def tx(self, agent: str | None) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn:
            try:
                with conn.transaction():
                    act_as(conn, agent)
                    yield conn
            except psycopg.Error as e:
                mapped = from_database(e)
                if mapped is not None:
                    raise mapped from e
                if isinstance(e, psycopg.errors.InsufficientPrivilege | psycopg.errors.ReadOnlySqlTransaction):
                    raise RcllError("dsn", f"refused by the database: {e.diag.message_primary}",
                                    "this server is read-only" if self.read_only else None) from e
                raise

    def _check_bank(self, bank: Any) -> str:
        b = _bank(bank)
        with self.tx(None) as conn:
            conn.execute("SELECT rcll._bank_id(%s)", (b,))
        return b

    def _write(self) -> None:
        if self.read_only:
            raise RcllError("read_only", "this server is read-only", "send writes to a read-write RCLL server")

    # -- verbs --

    def health(self) -> dict[str, Any]:
        with self.tx(None) as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return {"status": "ok", "rcll": __version__, "pgvector": row[0] if row else None,
                "read_only": self.read_only}

    def retain(self, agent: str | None, bank: Any, content: Any, **fields: Any) -> dict[str, Any]:
        from rcll.retain import Document

        self._write()
        b = _bank(bank)
        text_arg(content, "content", required=True, limit=1 << 24)
        doc = Document(
            content=content,
            source=text_arg(fields.get("source"), "source"),
            occurred_at=time_arg(fields.get("occurred_at"), "occurred_at"),
            room=text_arg(fields.get("room"), "room"),
            thread=text_arg(fields.get("thread"), "thread"),
            tags=list_arg(fields.get("tags"), "tags") or [],
            hall=text_arg(fields.get("hall"), "hall"),
            layer=text_arg(fields.get("layer"), "layer"),
            metadata=json_arg(fields.get("metadata") or {}, "metadata"),
        )
        with self.pool.connection() as conn, database_errors():
            result = _retain_as(conn, agent, b, doc, str(fields.get("via") or "api"))
        return {"document_id": result.document_id, "unit_ids": result.unit_ids, "created": result.created,
                "mode": result.mode}

    def recall(self, agent: str | None, bank: Any, query: Any, **f: Any) -> dict[str, Any]:
        from rcll.recall import recall

        b = _bank(bank)
        q = str(text_arg(query, "query", required=True, limit=MAX_QUERY))
        filters: dict[str, Any] = {}
        for name in ("rooms", "authors", "halls", "layers", "tags_any", "tags_all"):
            v = list_arg(f.get(name), name)
            if v is not None:
                filters[name] = v
        if f.get("tags") is not None:
            filters["tags_any"] = list_arg(f.get("tags"), "tags")
        if f.get("thread") is not None:
            filters["thread"] = text_arg(f.get("thread"), "thread")
        if f.get("mine") is not None:
            if not isinstance(f["mine"], bool):
                raise RcllError("mine", "must be true or false")
            filters["mine"] = f["mine"]
        if f.get("include_unattributed") is not None:
            if not isinstance(f["include_unattributed"], bool):
                raise RcllError("include_unattributed", "must be true or false")
            filters["include_unattributed"] = f["include_unattributed"]
        as_of = time_arg(f.get("as_of"), "as_of")
        if as_of is not None:
            filters["as_of"] = as_of
        lo, hi = time_arg(f.get("time_from"), "time_from"), time_arg(f.get("time_to"), "time_to")
        if lo is not None or hi is not None:
            if lo is not None and hi is not None and lo > hi:
                raise RcllError("time_to", "is before time_from")
            filters["time_range"] = f"[{lo.isoformat() if lo else ''},{hi.isoformat() if hi else ''})"
        budget = int_arg(f.get("budget"), "budget", 1, MAX_BUDGET, 4096)
        if filters.get("mine") and agent is None:
            raise RcllError("mine", "this server has no identity for you",
                            "authenticate (bearer token or --agent), or filter by authors")
        with self.tx(agent) as conn:
            conn.execute("SELECT rcll._bank_id(%s)", (b,))     # an unknown bank is an error, not silence
            result = recall(conn, q, b, budget=budget, **filters)
        return recall_dict(result)

    def rooms(self, bank: Any, pattern: Any = None) -> list[dict[str, Any]]:
        b = _bank(bank)
        p = text_arg(pattern, "pattern") or "*"
        with self.tx(None) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.rooms(bank => %s, pattern => %s)", (b, p)).fetchall()
        return [_plain(r) for r in rows]

    def tags(self, bank: Any, pattern: Any = None) -> list[dict[str, Any]]:
        b = _bank(bank)
        p = text_arg(pattern, "q") or "*"
        with self.tx(None) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.tags(bank => %s, pattern => %s)", (b, p)).fetchall()
        return [_plain(r) for r in rows]

    def stats(self, bank: Any) -> dict[str, Any]:
        b = _bank(bank)
        with self.tx(None) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.stats(bank => %s)", (b,)).fetchall()
        out: dict[str, Any] = {"bank": b, "totals": {}, "kind": {}, "room": {}, "hall": {}, "layer": {},
                               "author": {}, "link_type": {}, "extraction": {}, "tokens": {}}
        for r in rows:
            if r["section"] == "tokens":
                out["tokens"][r["name"]] = {"calls": r["value"], "read_tokens": r["read_tokens"],
                                            "write_input_tokens": r["write_input_tokens"],
                                            "write_output_tokens": r["write_output_tokens"]}
            else:
                out.setdefault(r["section"], {})[r["name"]] = r["value"]
        return out

    def state_get(self, bank: Any, room: Any, key: Any, version: Any = None) -> dict[str, Any] | None:
        b = _bank(bank)
        r = text_arg(room, "room", required=True)
        k = text_arg(key, "key", required=True)
        v = int_arg(version, "version", 1, 2**31 - 1)
        with self.tx(None) as conn, conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute("SELECT * FROM rcll.get_state(bank => %s, room => %s, key => %s, at_version => %s)",
                              (b, r, k, v)).fetchone()
        return None if row is None else _plain(row)

    def state_put(self, agent: str | None, bank: Any, room: Any, key: Any, value: Any,
                  expected_version: Any) -> dict[str, Any]:
        self._write()
        b = _bank(bank)
        r = text_arg(room, "room", required=True)
        k = text_arg(key, "key", required=True)
        ev = int_arg(expected_version, "expected_version", 0, 2**31 - 1, 0)
        json_arg(value, "value")
        with self.tx(agent) as conn:
            row = conn.execute("SELECT rcll.put_state(bank => %s, room => %s, key => %s, value => %s, "
                               "expected_version => %s, via => 'api')", (b, r, k, Jsonb(value), ev)).fetchone()
        assert row is not None
        return {"room": r, "key": k, "version": row[0]}

    def session_start(self, agent: str | None, bank: Any, rooms: Any = None, thread: Any = None) -> list[dict[str, Any]]:
        b = _bank(bank)
        rs = list_arg(rooms, "rooms")
        t = text_arg(thread, "thread")
        with self.tx(agent) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.session_start(bank => %s, rooms => %s, thread => %s)",
                               (b, rs, t)).fetchall()
        return [_plain(r) for r in rows]


def _retain_as(conn: psycopg.Connection[Any], agent: str | None, bank: str, doc: Any, via: str) -> Any:
    """rcll.agent is transaction-local (a session setting would leak to the next user of the pooled
    connection), so retain() runs inside the transaction that sets it (its own block is a savepoint)."""
    from rcll.retain import retain

    with conn.transaction():
        act_as(conn, agent)
        return retain(conn, bank, doc, via=via)

