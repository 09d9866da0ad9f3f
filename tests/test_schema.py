"""The schema is its own reference manual, and both install paths build the same thing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from conftest import Leg
from rcll import install
from rcll.db import configure
from rcll.errors import Code


def test_every_table_and_column_has_a_comment(db: psycopg.Connection[Any]) -> None:
    missing = db.execute("""
        SELECT c.relname || coalesce('.' || a.attname, '')
        FROM pg_class c
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p')
          AND (CASE WHEN a.attname IS NULL THEN obj_description(c.oid, 'pg_class')
                    ELSE col_description(c.oid, a.attnum) END) IS NULL
        ORDER BY 1""").fetchall()
    assert missing == []


def test_every_public_function_has_a_comment(db: psycopg.Connection[Any]) -> None:
    missing = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = 'rcll'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
        ORDER BY 1""").fetchall()
    assert missing == []


def test_every_function_runs_with_a_pinned_search_path_but_the_inlined_helpers(db: psycopg.Connection[Any]) -> None:
    # sql/functions/990-search-path.sql sets it once for the schema; a SET clause on the inlined
    # helpers would stop the planner from inlining them (tests/test_channel_plans.py).
    rows = db.execute("""
        SELECT p.proname, p.oid::regprocedure::text,
               coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
        FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace ORDER BY 2""").fetchall()
    inlined = {"_in_scope", "_in_time_range", "_keyless_link", "_bm25_term", "_last_words", "_weight_array",
               "_weight_of", "_channel_runs"}
    assert len(rows) > 100
    assert [sig for name, sig, pinned in rows if not pinned and name not in inlined] == []
    assert sorted(name for name, _, pinned in rows if not pinned) == sorted(inlined)


def test_every_call_of_the_inlined_unit_tests_passes_one_units_columns_in_their_order(db: psycopg.Connection[Any]) -> None:
    # rcll._in_scope and rcll._in_time_range take a unit's columns, not its row (the planner copied
    # memory_units' row descriptor for every (u).column of an inlined body: 105-recall-scope.sql);
    # a call that swapped two text columns (room for hall) would still run. Every call in sql/
    # and bench/ passes X.<parameter> for one alias X, in the parameters' order.
    root = Path(__file__).resolve().parent.parent
    sources = {p: p.read_text() for p in [*sorted((root / "sql" / "functions").glob("*.sql")), *sorted((root / "bench").glob("*.py"))]}
    for fn, after in (("_in_scope", ["scope"]), ("_in_time_range", ["lo", "hi", "hi_mentioned"])):
        names = db.execute("SELECT proargnames FROM pg_proc WHERE proname = %s AND pronamespace = 'rcll'::regnamespace",
                           (fn,)).fetchall()
        assert len(names) == 1, names
        columns = [n for n in names[0][0] if n not in after]
        assert names[0][0] == [*columns, *after]
        call = re.compile(rf"rcll\.{fn}\(([^()]*)")
        # every occurrence but the definition and its COMMENT ON FUNCTION
        calls = [(p.name, m.group(1)) for p, text in sources.items() for m in call.finditer(text)
                 if not text[max(m.start() - 40, 0):m.start()].rstrip().endswith("FUNCTION")]
        assert len(calls) >= (15 if fn == "_in_scope" else 2), calls
        for where, args in calls:
            alias = args.split(".", 1)[0].strip()
            expected = ", ".join(f"{alias}.{c}" for c in columns) + ", "
            assert args.startswith(expected), (where, args)


CATALOG = """
SELECT kind, name, detail FROM (
    SELECT 'relation' AS kind, c.relname AS name,
           c.relkind::text || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '') AS detail
    FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'column', c.relname || '.' || a.attname,
           format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
           || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || coalesce(col_description(c.oid, a.attnum), '')
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relnamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'index', i.relname, pg_get_indexdef(i.oid)
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE i.relnamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text,
           md5(pg_get_functiondef(p.oid)) || ' ' || coalesce(obj_description(p.oid, 'pg_proc'), '')
    FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'trigger', tgrelid::regclass::text || '.' || tgname, pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'rcll'::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT 'type', t.typname, format_type(t.oid, NULL)
    FROM pg_type t WHERE t.typnamespace = 'rcll'::regnamespace AND t.typrelid = 0 AND t.typelem = 0
    UNION ALL
    SELECT 'row', 'migrations', string_agg(name || '=' || sha256, ',' ORDER BY name) FROM rcll.migrations
    UNION ALL
    SELECT 'privileges', c.relname, c.relrowsecurity || ' ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text)
                                                                      FROM unnest(c.relacl) a), '')
    FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'privileges', p.oid::regprocedure::text, coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text)
                                                              FROM unnest(p.proacl) a), '')
    FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace
    UNION ALL
    SELECT 'policy', p.polrelid::regclass::text || '.' || p.polname,
           p.polcmd::text || ' ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '') || ' ' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
    FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = 'rcll'::regnamespace
) catalog ORDER BY kind, name
"""


def test_create_extension_and_rcll_install_build_the_same_objects(leg: Leg) -> None:
    leg.install_extension_files()
    via_extension = leg.new_database("postgres")
    via_install = leg.new_database("postgres")
    try:
        with psycopg.connect(leg.url(via_extension)) as conn:
            install.install(conn, use_extension=True)
            configure(conn)
            ext_rows = conn.execute(CATALOG).fetchall()
        with psycopg.connect(leg.url(via_install)) as conn:
            install.install(conn)
            inst_rows = conn.execute(CATALOG).fetchall()
        assert len(ext_rows) > 100
        assert ext_rows == inst_rows
    finally:
        leg.drop_database(via_extension)
        leg.drop_database(via_install)


def test_reinstall_is_idempotent_and_refuses_edited_migrations(db: psycopg.Connection[Any]) -> None:
    db.autocommit = False
    assert "0 migration(s) applied" in install.install(db)
    db.execute("UPDATE rcll.migrations SET sha256 = 'x' WHERE name LIKE '001%'")
    try:
        install.install(db)
    except install.InstallError as e:
        assert (e.code, e.field) == (Code.UNAVAILABLE, "migrations") and "changed after it was applied" in e.message
    else:
        raise AssertionError("an edited migration was accepted")
