"""Errors by code: every refusal carries RCLL's code, the field at fault and the fix, from the SQL
(SQLSTATE RC001..., the field in COLUMN) through rcll.errors to HTTP statuses and MCP error
results, all read from one table - and nothing anywhere is classified by its wording."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from fastapi.testclient import TestClient
from pglast.parser import scan

from conftest import Leg, MakeLoginRole
from rcll.auth import Caller, TokenMap
from rcll.db import connect
from rcll.errors import (
    CODES,
    REMOTE_NODE_HINT,
    SHARD_MOVING_HINT,
    Code,
    RcllError,
    from_database,
    unknown_bank,
)
from rcll.http import create_app
from rcll.mcp_server import build_server
from rcll.memory import Memory
from sqlcall import call, refused, scalar

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ROOT / "sql" / "functions"
SQL_CODES = {c.value for c in Code} - {Code.UNAUTHENTICATED.value, Code.UNAVAILABLE.value}
# Standard SQLSTATEs raised on purpose, each with why it is not one of RCLL's codes.
STANDARD = {
    ("170-in-database-models.sql", "0A000"): "feature_not_supported: the server has no plpython3u - the "
                                             "server's capability, raised only to a superuser enabling models",
}


# -- the SQL: every RAISE EXCEPTION in sql/functions ------------------------------------------------

@dataclass
class Raise:
    where: str                   # file:line
    file: str
    message: str | None          # the format string, when a literal
    params: list[str]            # the format's arguments, as written
    options: dict[str, str]      # USING name -> expression, as written (lower-case names)


def _literal(expr: str) -> str | None:
    if len(expr) >= 2 and expr[0] == expr[-1] == "'" and "'" not in expr[1:-1].replace("''", ""):
        return expr[1:-1].replace("''", "'")
    return None


def _split(text: str, tokens: list[Any]) -> list[str]:
    """The comma-separated expressions in `tokens` (commas inside parentheses belong to them)."""
    parts: list[list[Any]] = [[]]
    depth = 0
    for t in tokens:
        depth += t.name == "ASCII_40"
        depth -= t.name == "ASCII_41"
        if t.name == "ASCII_44" and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return [text[p[0].start:p[-1].end + 1] for p in parts if p]


def _raises_in(body: str, file: str, line0: int) -> Iterator[Raise]:
    tokens = list(scan(body))
    for i, t in enumerate(tokens[:-1]):
        if not (body[t.start:t.end + 1].upper() == "RAISE"
                and body[tokens[i + 1].start:tokens[i + 1].end + 1].upper() == "EXCEPTION"):
            continue
        j = i + 2
        while tokens[j].name != "ASCII_59":
            j += 1
        stmt = tokens[i + 2:j]
        using = next((k for k, x in enumerate(stmt) if x.name == "USING"), len(stmt))
        head = _split(body, stmt[:using])
        options: dict[str, str] = {}
        for opt in _split(body, stmt[using + 1:]):
            name, _, expr = opt.partition("=")
            options[name.strip().lower()] = expr.strip()
        yield Raise(f"{file}:{line0 + body.count(chr(10), 0, t.start)}", file,
                    _literal(head[0]) if head else None, head[1:], options)


def sql_raises() -> list[Raise]:
    """Every RAISE EXCEPTION in the function bodies of sql/functions, parsed with PostgreSQL's own
    scanner (pglast): quotes, doubled quotes and semicolons inside strings are what they are."""
    out: list[Raise] = []
    for path in sorted(FUNCTIONS.glob("*.sql")):
        text = path.read_text()
        for t in scan(text):
            token = text[t.start:t.end + 1]
            if t.name != "SCONST" or not token.startswith("$"):
                continue
            tag = token[:token.index("$", 1) + 1]
            body = token[len(tag):-len(tag)]
            if re.search(r"(?i)\braise\s+exception\b", body):
                out.extend(_raises_in(body, path.name, text.count("\n", 0, t.start) + 1))
    return out


def test_every_raise_in_sql_functions_carries_an_rcll_code_its_field_in_column_and_a_hint() -> None:
    raises = sql_raises()
    written = sum(len(re.findall(r"RAISE\s+EXCEPTION", p.read_text())) for p in FUNCTIONS.glob("*.sql"))
    assert len(raises) == written and written >= 60, (len(raises), written)    # none missed by the scan
    problems = []
    for r in raises:
        code = _literal(r.options.get("errcode", ""))
        if code not in SQL_CODES and (r.file, code) not in STANDARD:
            problems.append(f"{r.where}: ERRCODE {r.options.get('errcode')} is not an RCLL code nor a listed standard one")
        if "column" not in r.options:
            problems.append(f"{r.where}: no COLUMN naming the field")
        if "hint" not in r.options:
            problems.append(f"{r.where}: no HINT with the fix")
        # psql shows only the message: it starts with the field, the same one COLUMN names.
        column = _literal(r.options.get("column", ""))
        if column is not None:
            ok = r.message is not None and r.message.startswith(f"{column}: ")
        else:
            ok = r.message is not None and r.message.startswith("%: ") and r.params[:1] == [r.options.get("column")]
        if not ok:
            problems.append(f"{r.where}: the message {r.message!r} does not start with its COLUMN's field")
    assert not problems, "\n".join(problems)


def test_the_sql_scan_sees_through_quotes_and_semicolons() -> None:
    body = ("BEGIN RAISE EXCEPTION 'a: it''s; odd %', x USING ERRCODE = 'RC001', COLUMN = 'a', "
            "HINT = format('b; %s', f(1, 2)); y := 1; END")
    (r,) = _raises_in(body, "x.sql", 1)
    assert (r.message, r.params) == ("a: it's; odd %", ["x"])
    assert r.options == {"errcode": "'RC001'", "column": "'a'", "hint": "format('b; %s', f(1, 2))"}


# -- the table: one, documented ---------------------------------------------------------------------

def test_docs_errors_md_lists_every_code_with_its_kind_and_status() -> None:
    rows = re.findall(r"^\|\s*(RC\d{3})\s*\|\s*`?(\w+)`?\s*\|\s*(\d{3})\s*\|", (ROOT / "docs" / "errors.md").read_text(),
                      re.MULTILINE)
    assert sorted(rows) == sorted((c.value, c.kind, str(m.status)) for c, m in CODES.items())


def test_the_table_keeps_the_codes_other_work_relies_on() -> None:
    assert {c.value: (c.kind, CODES[c].status) for c in Code if c.value <= "RC008"} == {
        "RC001": ("invalid_input", 422), "RC002": ("unknown_bank", 404), "RC003": ("not_found", 404),
        "RC004": ("conflict", 409), "RC005": ("version_conflict", 409), "RC006": ("not_permitted", 403),
        "RC007": ("too_broad", 422), "RC008": ("invalid_stream", 422)}


# -- the database: codes and COLUMN on both legs ------------------------------------------------------

def test_sql_refusals_carry_code_column_and_hint(db: psycopg.Connection[Any]) -> None:
    scalar(db, "rcll.create_bank", name="b")
    with refused("RC002", "bank", 'unknown bank "nope"'):
        call(db, "rcll.rooms", bank="nope")
    with refused("RC001", "bank", "invalid bank name"):
        scalar(db, "rcll.create_bank", name="not a name!")
    assert scalar(db, "rcll.put_state", bank="b", room="r", key="k", value=json.dumps(1), expected_version=0) == 1
    with refused("RC005", "expected_version", "current version is 1"):
        scalar(db, "rcll.put_state", bank="b", room="r", key="k", value=json.dumps(2), expected_version=0)
    with refused("RC003", "unit_ids", "not in bank"):
        scalar(db, "rcll.move_units", bank="b", unit_ids=[424242], to_room="x", reason="test")
    with refused("RC004", "bank", "already exists"):
        scalar(db, "rcll.import_begin", bank_row=json.dumps({"name": "b"}))
    with refused("RC008", "import_begin", "no import in progress"):
        scalar(db, "rcll.import_rows", table_name="memory_units", rows=json.dumps([]))
    db.execute("SELECT set_config('rcll.agent', 'bot', false)")
    with refused("RC006", "agent", 'agent "bot" cannot approve'):
        scalar(db, "rcll.approve_room_merge", bank="b", from_room="x")


def test_the_mapping_reads_the_code_and_column_never_the_words(db: psycopg.Connection[Any]) -> None:
    # Words that once decided a status ("unknown bank", "already exists") under other codes.
    for code, field, words, statement in (
            ("RC001", "bank", "unknown bank, said the text",
             "DO $$ BEGIN RAISE EXCEPTION 'bank: unknown bank, said the text' USING ERRCODE = 'RC001', "
             "COLUMN = 'bank', HINT = 'the fix'; END $$"),
            ("RC003", "key", "already exists, said the text",
             "DO $$ BEGIN RAISE EXCEPTION 'key: already exists, said the text' USING ERRCODE = 'RC003', "
             "COLUMN = 'key', HINT = 'the fix'; END $$"),
            ("RC006", "room", "refused by the database, said the text",
             "DO $$ BEGIN RAISE EXCEPTION 'room: refused by the database, said the text' USING ERRCODE = 'RC006', "
             "COLUMN = 'room', HINT = 'the fix'; END $$")):
        with pytest.raises(psycopg.Error) as e:
            db.execute(statement)
        mapped = from_database(e.value)
        assert mapped is not None
        assert mapped.as_dict() == {"code": code, "field": field, "error": words, "hint": "the fix"}
    # The field is COLUMN's even when the text starts with another word and a colon.
    with pytest.raises(psycopg.Error) as e:
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'room: looks like a field' USING ERRCODE = 'RC001', "
                   "COLUMN = 'key', HINT = 'h'; END $$")
    mapped = from_database(e.value)
    assert mapped is not None and (mapped.field, mapped.message) == ("key", "room: looks like a field")
    # A standard error with a colon in its words is not rcll's to map.
    with pytest.raises(psycopg.Error) as e:
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'bank: unknown bank' USING ERRCODE = '22023'; END $$")
    assert from_database(e.value) is None


def test_the_unknown_bank_the_database_reports_is_the_one_answer_for_the_bank_asked(dsn: str) -> None:
    with Memory(dsn) as m:
        for verb in (lambda: m.rooms(bank="nope"), lambda: m.retain("x", bank="nope"),
                     lambda: m.put_state("r", "k", 1, bank="nope"), lambda: m.recall("x", bank="nope")):
            with pytest.raises(RcllError) as e:
                verb()
            assert e.value.as_dict() == unknown_bank("nope").as_dict()


def test_database_errors_a_user_can_cause_map_by_their_sqlstate(leg: Leg, dsn: str,
                                                                 login_role: MakeLoginRole) -> None:
    stranger = login_role().dsn                      # may log in, may use nothing of rcll
    with psycopg.connect(stranger, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        conn.execute("SELECT * FROM rcll.list_banks()")
    mapped = from_database(e.value)
    assert mapped is not None and (mapped.code, mapped.field) == (Code.NOT_PERMITTED, "dsn")

    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as e:
        conn.execute("SET TRANSACTION READ ONLY")
        conn.execute("SELECT rcll.create_bank('ro')")
    mapped = from_database(e.value, read_only=True)
    assert mapped is not None and (mapped.code, mapped.hint) == (Code.NOT_PERMITTED, "this server is read-only")

    bare = leg.new_database("template0")             # no rcll schema at all
    try:
        with psycopg.connect(leg.url(bare), autocommit=True) as conn, pytest.raises(psycopg.errors.InvalidSchemaName) as e:
            conn.execute("SELECT * FROM rcll.list_banks()")
        mapped = from_database(e.value)
        assert mapped is not None and (mapped.code, mapped.field) == (Code.UNAVAILABLE, "dsn")
        assert "rcll install" in (mapped.hint or "")
    finally:
        leg.drop_database(bare)

    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect("postgresql://rcll@127.0.0.1:9/none", connect_timeout=2)
    mapped = from_database(e.value)
    assert mapped is not None and (mapped.code, mapped.field) == (Code.UNAVAILABLE, "dsn")
    with pytest.raises(RcllError) as r:
        connect("postgresql://rcll@127.0.0.1:9/none", connect_timeout=2)
    assert (r.value.code, r.value.field) == (Code.UNAVAILABLE, "dsn")


def test_a_node_the_server_cannot_reach_is_unavailable_naming_it_and_the_fix(db: psycopg.Connection[Any]) -> None:
    # What a Citus coordinator (or a worker running a delegated recall) raises when the worker it
    # needs is down: an ERROR with SQLSTATE 08006 on a session that lives on (tests/test_citus_ops.py
    # meets the real one). Raised here as the server raises it, with Citus's words.
    with pytest.raises(psycopg.OperationalError) as e:
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'connection to the remote node postgres@127.0.0.1:9 failed with "
                   "the following error: Connection refused' USING ERRCODE = '08006'; END $$")
    mapped = from_database(e.value)
    assert mapped is not None and (mapped.code, mapped.field) == (Code.UNAVAILABLE, "dsn")
    assert "127.0.0.1:9" in mapped.message and mapped.hint == REMOTE_NODE_HINT
    assert db.execute("SELECT 1").fetchone() == (1,)       # the session itself is fine
    # A worker that dies mid-call: the coordinator passes on the worker's own "terminating connection
    # due to unexpected postmaster exit" (57P02) as an ERROR of a session that lives on.
    with pytest.raises(psycopg.OperationalError) as e:
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'terminating connection due to unexpected postmaster exit' "
                   "USING ERRCODE = '57P02'; END $$")
    died = from_database(e.value)
    assert died is not None and died.code is Code.UNAVAILABLE and died.hint == REMOTE_NODE_HINT
    assert "out of reach" in died.message
    # The caller's own connection lost (libpq's error, no SQLSTATE) keeps the connection hint.
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect("postgresql://rcll@127.0.0.1:9/none", connect_timeout=2)
    lost = from_database(e.value)
    assert lost is not None and lost.code is Code.UNAVAILABLE and lost.hint != REMOTE_NODE_HINT


def test_a_shard_caught_moving_is_unavailable_by_the_file_citus_names_not_its_words() -> None:
    # During a tenant isolation's switch-over Citus raises XX000 "could not find valid entry for shard"
    # from its shard metadata (bench.citus_ops meets the real one). Built here as psycopg hands it over.
    class Internal(psycopg.errors.InternalError):
        def __init__(self, source_file: str) -> None:
            super().__init__("could not find valid entry for shard 102008")
            self._file = source_file

        @property
        def sqlstate(self) -> str:  # type: ignore[override]
            return "XX000"

        @property
        def diag(self) -> Any:  # type: ignore[override]
            return type("Diag", (), {"source_file": self._file, "message_primary": str(self), "column_name": None,
                                     "message_hint": None, "severity_nonlocalized": "ERROR"})()

    moving = from_database(Internal("metadata_cache.c"))
    assert moving is not None and (moving.code, moving.field, moving.hint) == (Code.UNAVAILABLE, "bank", SHARD_MOVING_HINT)
    assert from_database(Internal("execMain.c")) is None     # another internal error stays what it is


# -- the surfaces: HTTP statuses and MCP results from the one table ---------------------------------

TOKEN = "errors-token-" + "e" * 24
READER = "reader-token-" + "r" * 24


def test_http_and_mcp_answer_each_code_from_the_one_table(dsn: str) -> None:
    from mcp import Client

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    svc = Memory(dsn)
    tm = TokenMap.from_pairs({TOKEN: "alice", READER: Caller("reader", ("b",), frozenset({"read"}))})
    try:
        http = TestClient(create_app(service=svc, tokens=tm))
        auth = {"Authorization": f"Bearer {TOKEN}"}
        http.put("/state", json={"bank": "b", "room": "r", "key": "k", "value": 1}, headers=auth)
        # (code, field, HTTP request, MCP tool call or None when the tool answers otherwise)
        cases: list[tuple[Code, str, Any, tuple[str, dict[str, Any]] | None]] = [
            (Code.UNKNOWN_BANK, "bank", lambda: http.post("/recall", json={"bank": "nope", "query": "x"}, headers=auth),
             ("memory_recall", {"bank": "nope", "query": "x"})),
            (Code.VERSION_CONFLICT, "expected_version",
             lambda: http.put("/state", json={"bank": "b", "room": "r", "key": "k", "value": 2}, headers=auth),
             ("memory_state_put", {"bank": "b", "room": "r", "key": "k", "value": 2, "expected_version": 0})),
            (Code.INVALID_INPUT, "content",
             lambda: http.post("/retain", json={"bank": "b", "content": "a\u0000b"}, headers=auth),
             ("memory_retain", {"bank": "b", "content": "a\x00b"})),
            (Code.INVALID_INPUT, "budget",
             lambda: http.post("/recall", json={"bank": "b", "query": "x", "budget": 0}, headers=auth),
             ("memory_recall", {"bank": "b", "query": "x", "budget": 0})),
            (Code.NOT_FOUND, "key",
             lambda: http.get("/state", params={"bank": "b", "room": "r", "key": "none"}, headers=auth), None),
            (Code.INVALID_STREAM, "body",
             lambda: http.post("/import", content=b"not json", headers=auth | {"Content-Type": "application/x-ndjson"}),
             None),
            (Code.NOT_PERMITTED, "authorization",
             lambda: http.post("/retain", json={"bank": "b", "content": "x"},
                               headers={"Authorization": f"Bearer {READER}"}), None),
            (Code.UNAUTHENTICATED, "authorization", lambda: http.post("/recall", json={"bank": "b", "query": "x"}),
             None),
        ]
        for code, field, request, _ in cases:
            r = request()
            body = r.json()
            assert (r.status_code, body["code"], body["field"]) == (CODES[code].status, code.value, field), r.text
            assert body["error"] and body["hint"], r.text

        async def go() -> list[Any]:
            async with Client(build_server(svc)) as client:
                return [await client.call_tool(*tool) for _, _, _, tool in cases if tool is not None]

        for (code, field, _, _), result in zip([c for c in cases if c[3] is not None], anyio.run(go), strict=True):
            assert result.is_error
            text = result.content[0].text
            body = json.loads(text[text.index("{"):])
            assert (body["code"], body["kind"], body["field"]) == (code.value, code.kind, field), text
            assert body["error"] and body["hint"], text
    finally:
        svc.close()


# -- Python: nothing classifies an error by its words -------------------------------------------------

_WORDS = re.compile(r"\.message(_primary|_detail|_hint)?\b|\bstr\((e|exc|err|error)\)|\bprimary\b")
_TEXT_TESTS = {"startswith", "endswith", "split", "rsplit", "partition", "rpartition", "find", "rfind", "index",
               "match", "search", "fullmatch"}


def test_no_python_classifies_an_error_by_its_words() -> None:
    """No startswith/in/==/split/regex over an error's message anywhere in python/: codes decide.
    (Turning the words into display text - a prefix dropped, the first line shown - is allowed.)"""
    found = []
    for path in sorted((ROOT / "python").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            subject: list[ast.expr] = []
            if isinstance(node, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn | ast.Eq | ast.NotEq)
                                                     for o in node.ops):
                subject = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TEXT_TESTS:
                subject = [node.func.value, *node.args]
            if any(_WORDS.search(ast.unparse(s)) for s in subject):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert not found, "\n".join(found)
