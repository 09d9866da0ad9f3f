"""Recall never writes: proved from the source of every function on the recall path, by running it
as a role that can only read, inside read-only transactions, and by the absence of a transaction id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pglast
import psycopg
import pytest
from pglast.parser import parse_sql_json

from conftest import pg15_only
from rcll import models
from test_recall_seed import seed

ENTRY_POINTS = ["rcll.recall_scope", "rcll.recall", "rcll.recall_candidates", "rcll.recall_channels",
                "rcll.fuse_candidates", "rcll.channel_dense",
                "rcll.channel_context", "rcll.channel_lexical", "rcll.channel_graph", "rcll.channel_temporal",
                "rcll.preceding_units", "rcll.parse_time_range", "rcll.query_entities"]
WRITES = {"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt", "CopyStmt", "LockingClause"}
# The one function on the path allowed volatile calls: it talks to the model service over dblink
# (connect, send, poll, disconnect), sleeps between polls, reads the clock and keeps a session
# setting - none writes to the database (tests/test_model_service.py runs it on a hot standby and
# in a read-only transaction without a transaction id).
MODEL_SERVICE = "rcll._model_service_ask"
MODEL_SERVICE_CALLS = {("public", "dblink_get_connections"), ("public", "dblink_connect"),
                       ("public", "dblink_send_query"), ("public", "dblink_is_busy"),
                       ("public", "dblink_disconnect"), ("public", "dblink_get_result"),
                       ("pg_catalog", "pg_sleep"), ("pg_catalog", "clock_timestamp"), ("pg_catalog", "set_config")}
# The channel phase's deadline check keeps its statement's progress in a session setting (when the
# first channel started, how many did, whether the deadline ended the phase): it reads the clock and
# sets that one setting, and writes nothing to the database.
CHANNEL_CLOCK = "rcll._channel_starts"
CHANNEL_CLOCK_CALLS = {("pg_catalog", "set_config")}
# Reading the clock writes nothing: the deadline's arithmetic needs it anywhere on the path
# (rcll._recall_rerank gives the rerank what the channels left).
CLOCK = ("pg_catalog", "clock_timestamp")
PLPGSQL_FORBIDDEN = {"PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors", "PLpgSQL_stmt_commit",
                     "PLpgSQL_stmt_rollback", "PLpgSQL_stmt_call", "PLpgSQL_stmt_open"}


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _sql_statements(query: str, parse_mode: int) -> list[dict[str, Any]]:
    """Parse one SQL text from a function body (PL/pgSQL expressions are bare expressions or
    assignments: parse modes 2 and 3)."""
    if parse_mode == 3:
        query = "SELECT " + query.split(":=", 1)[1]
    elif parse_mode == 2:
        query = "SELECT " + query
    return [s["stmt"] for s in json.loads(parse_sql_json(query))["stmts"]]


def _function_statements(language: str, definition: str, source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(SQL statements in the body, PL/pgSQL statement kinds used)."""
    if language == "sql":
        return _sql_statements(source, 0), []
    # pglast's PL/pgSQL parser resolves names only in pg_catalog and public: read rcll's scope type unqualified.
    tree = pglast.parse_plpgsql(definition.replace("rcll.recall_scope", "recall_scope"))
    stmts: list[dict[str, Any]] = []
    kinds = [k for k, _ in _walk(tree) if k.startswith("PLpgSQL_stmt_")]
    for key, value in _walk(tree):
        if key == "PLpgSQL_expr":
            stmts += _sql_statements(value["query"], value.get("parseMode", 0))
    return stmts, kinds


def _recall_path(db: psycopg.Connection[Any]) -> dict[str, tuple[str, str, str, str]]:
    """Every rcll function reachable from the recall entry points: name -> (language,
    volatility, definition, source), over all overloads."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    todo = list(ENTRY_POINTS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        schema, fn = name.split(".")
        rows = db.execute("""
            SELECT l.lanname, p.provolatile::text, pg_get_functiondef(p.oid), p.prosrc
            FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.pronamespace = %s::regnamespace AND p.proname = %s""", (schema, fn)).fetchall()
        if not rows:
            assert fn.startswith("_model_"), f"{name} is called on the recall path but does not exist"
            continue
        for lang, vol, definition, source in rows:
            seen[name] = (lang, vol, definition, source)
            if lang in ("sql", "plpgsql"):
                stmts, _ = _function_statements(lang, definition, source)
                for key, value in _walk(stmts):
                    if key == "FuncCall":
                        parts = [p["String"]["sval"] for p in value["funcname"]]
                        if len(parts) == 2 and parts[0] == "rcll":
                            todo.append(".".join(parts))
    return seen


def test_recall_path_contains_no_write_and_no_volatile_call(db: psycopg.Connection[Any]) -> None:
    path = _recall_path(db)
    assert {"rcll.channel_dense", "rcll.channel_context", "rcll.preceding_units", "rcll.recall_scope",
            "rcll._expand_rooms", "rcll._in_scope", "rcll._bm25_corpus", "rcll._recall_embeddings",
            "rcll._recall_rerank"} <= path.keys()
    problems: list[str] = []
    assert MODEL_SERVICE in path and "rcll._model_service_answer" in path
    for name, (lang, vol, definition, source) in sorted(path.items()):
        if vol == "v":
            problems.append(f"{name} is VOLATILE")
        if lang not in ("sql", "plpgsql"):
            problems.append(f"{name} is {lang}; only SQL and PL/pgSQL can be checked")
            continue
        stmts, kinds = _function_statements(lang, definition, source)
        problems += [f"{name} uses {k}" for k in sorted(set(kinds) & PLPGSQL_FORBIDDEN)]
        for stmt in stmts:
            if next(iter(stmt)) != "SelectStmt":
                problems.append(f"{name} runs {next(iter(stmt))}")
            for key, value in _walk(stmt):
                if key in WRITES:
                    problems.append(f"{name} contains {key}")
                if key == "FuncCall":
                    parts = [p["String"]["sval"] for p in value["funcname"]]
                    schema, fn = (parts if len(parts) == 2 else ["pg_catalog", parts[0]])
                    if ((name == MODEL_SERVICE and (schema, fn) in MODEL_SERVICE_CALLS) or f"{schema}.{fn}" == MODEL_SERVICE
                            or (name == CHANNEL_CLOCK and (schema, fn) in CHANNEL_CLOCK_CALLS)
                            or (schema, fn) == CLOCK):
                        continue
                    row = db.execute("""SELECT bool_and(provolatile = 'v') FROM pg_proc
                                        WHERE pronamespace = %s::regnamespace AND proname = %s""", (schema, fn)).fetchone()
                    if row and row[0]:
                        problems.append(f"{name} calls volatile {schema}.{fn}")
    assert problems == []


def test_recall_functions_are_declared_stable(db: psycopg.Connection[Any]) -> None:
    rows = db.execute("""SELECT p.proname, p.provolatile::text FROM pg_proc p
                         WHERE p.pronamespace = 'rcll'::regnamespace
                           AND (p.proname LIKE '%channel\\_%' OR p.proname IN ('recall', 'recall_candidates', 'recall_scope',
                                                                                '_recall_embedding', '_recall_rerank',
                                                                                'recall_channels', 'fuse_candidates'))
                           -- immutable, reading nothing (tests/test_defaults.py): the names, the weights'
                           -- constructor, and whether the weights and channels asked for run a channel
                           AND p.proname NOT IN ('recall_channel_names', 'channel_weights', '_channel_runs')""").fetchall()
    assert len(rows) >= 7
    assert {vol for _, vol in rows} == {"s"}


QUERIES = [
    ("SELECT count(*) FROM rcll.recall_candidates('helm deploy carol last week', rcll.recall_scope('b'), query_embedding => %(qe)s)", 1),
    ("SELECT count(*) FROM rcll.recall('helm deploy carol last week', scope => rcll.recall_scope('b'), query_embedding => %(qe)s)", 1),
    ("SELECT count(*) FROM rcll.channel_graph('carol', rcll.recall_scope('b'))", 1),
    ("SELECT count(*) FROM rcll.recall_channels('helm deploy carol last week', rcll.recall_scope('b'), query_embedding => %(qe)s)", 1),
    # under a deadline already spent: the channel phase's check keeps its setting, and writes nothing
    ("SELECT count(*) FROM rcll.recall_channels('helm deploy carol last week', rcll.recall_scope('b'), query_embedding => %(qe)s, deadline_ms => 1)", 1),
]


def _recall_as_reader(db: psycopg.Connection[Any]) -> list[int]:
    qe = models.get_embedder().embed_query("helm deploy carol last week")
    counts = []
    db.autocommit = False
    try:
        db.execute("SET ROLE rcll_reader")
        db.execute("SET TRANSACTION READ ONLY")
        for sql, _ in QUERIES:
            row = db.execute(sql, {"qe": qe}).fetchone()
            assert row is not None
            counts.append(int(row[0]))
        # No transaction id was ever assigned: nothing at all was written, not even a temp table.
        assert db.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
    finally:
        db.rollback()
        db.autocommit = True
        db.execute("RESET ROLE")
    return counts


def test_recall_runs_as_a_role_that_can_only_read(db: psycopg.Connection[Any]) -> None:
    seed(db)
    row = db.execute("""SELECT has_table_privilege('rcll_reader', 'rcll.memory_units', 'SELECT'),
                               has_table_privilege('rcll_reader', 'rcll.memory_units', 'INSERT'),
                               has_table_privilege('rcll_reader', 'rcll.memory_units', 'UPDATE'),
                               has_schema_privilege('rcll_reader', 'rcll', 'CREATE')""").fetchone()
    assert row == (True, False, False, False)
    counts = _recall_as_reader(db)
    assert all(c > 0 for c in counts)


@pg15_only
def test_in_database_models_are_read_only_too(models_dsn: str) -> None:
    with psycopg.connect(models_dsn, autocommit=True) as db:
        from rcll.db import configure
        configure(db)
        seed(db)
        path = _recall_path(db)
        models_fns = {n: v for n, v in path.items() if n.startswith("rcll._model_") and v[0] == "plpython3u"}
        # embed, rerank, rerank under a deadline, count tokens, the first view's windows, the budget cut
        assert len(models_fns) == 6
        for n, (lang, vol, _, source) in models_fns.items():
            assert (lang, vol) == ("plpython3u", "s"), n
            assert "plpy.execute" not in source and "plpy.prepare" not in source and "plpy.cursor" not in source
        assert all(c > 0 for c in _recall_as_reader(db))
        db.autocommit = False
        db.execute("SET ROLE rcll_reader")
        db.execute("SET TRANSACTION READ ONLY")
        rows = db.execute("SELECT rerank_score FROM rcll.recall('where did carol move?', scope => rcll.recall_scope('b'))").fetchall()
        assert rows and all(r[0] is not None for r in rows[:5])
        assert db.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
        db.rollback()


@pytest.mark.parametrize("statement", ["INSERT INTO rcll.banks (name) VALUES ('x')", "SELECT rcll.create_bank('x')"])
def test_the_reader_role_cannot_write(db: psycopg.Connection[Any], statement: str) -> None:
    db.autocommit = False
    try:
        db.execute("SET ROLE rcll_reader")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute(statement)
    finally:
        db.rollback()
        db.autocommit = True
