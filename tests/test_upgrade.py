"""Upgrades happen in place: a 0.1.0 store with memories in it becomes the current version - by
ALTER EXTENSION rcll UPDATE or by `rcll install` - with the catalog of a fresh install, every row
kept, and the same recall as a store this version wrote (this release fuses differently and links
chunks to their keyless entities at retain: an upgraded store recalls the same once
rcll.link_keyless_entities has linked its old chunks)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from conftest import Leg
from rcll import install
from rcll.sqlsource import extension_dir, extension_version, released_versions
from test_backup import columns, fill, install_extension_files, recalls, retain_after, snapshot
from test_schema import CATALOG

BASELINE = "0.1.0"

# What the extension owns and which of its tables and sequences pg_dump keeps (and with what filter).
MEMBERS = """
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) FROM pg_depend d, pg_extension e
WHERE e.extname = 'rcll' AND d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid AND d.deptype = 'e'
UNION ALL
SELECT 'dumped ' || c.relid::regclass::text || ' ' || c.filter
FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS c(relid, filter) WHERE e.extname = 'rcll'
ORDER BY 1
"""


def baseline_body() -> bytes:
    """rcll--0.1.0.sql as `rcll install` of 0.1.0 applied it: the script without its \\echo guard."""
    text = (extension_dir() / f"rcll--{BASELINE}.sql").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("\\echo")).encode()


@pytest.fixture
def databases(leg: Leg) -> Iterator[tuple[str, str]]:
    """An empty database to upgrade and an empty one for a fresh install (template0: no extensions)."""
    old, fresh = leg.new_database("template0"), leg.new_database("template0")
    yield old, fresh
    leg.drop_database(old)
    leg.drop_database(fresh)


def _kept(before: dict[str, list[str]], after: dict[str, list[str]]) -> None:
    """Every table the old version had holds the same rows in the columns it had (rcll.migrations
    aside: an upgrade records its migrations there; tables and columns it adds may be filled from
    the others)."""
    for table, rows in before.items():
        if table != "rcll.migrations":
            assert after.get(table) == rows, f"{table} changed in the upgrade"


def _backfilled_recalls(conn: psycopg.Connection[tuple[object, ...]]) -> list[list[str]]:
    """The recalls of an upgraded store once its old chunks have their keyless entity links."""
    linked = conn.execute("SELECT sum(rcll.link_keyless_entities(name)) FROM rcll.banks").fetchone()
    assert linked is not None and linked[0] > 0
    return recalls(conn)


def test_the_baseline_is_released_and_the_current_version_upgrades_from_it() -> None:
    assert BASELINE in released_versions()
    assert (extension_dir() / f"rcll--{BASELINE}--{extension_version()}.sql").exists()


def test_alter_extension_update_from_the_baseline_keeps_memories_and_recall(
        leg: Leg, databases: tuple[str, str]) -> None:
    install_extension_files(leg)
    old, fresh = databases
    with psycopg.connect(leg.url(old), autocommit=True) as conn:
        install.ensure_required_extensions(conn)
        conn.execute(f"CREATE EXTENSION rcll VERSION '{BASELINE}'")
        fill(conn)
        rows, recalled, old_columns = snapshot(conn), recalls(conn), columns(conn)
        conn.execute("ALTER EXTENSION rcll UPDATE")
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'rcll'").fetchone()
        assert version == (extension_version(),)
        upgraded, upgraded_members = conn.execute(CATALOG).fetchall(), conn.execute(MEMBERS).fetchall()
        _kept(rows, snapshot(conn, only=old_columns))
        upgraded_recall = _backfilled_recalls(conn)
        retain_after(conn)
    with psycopg.connect(leg.url(fresh), autocommit=True) as conn:
        install.install(conn, use_extension=True)
        assert conn.execute(CATALOG).fetchall() == upgraded
        assert conn.execute(MEMBERS).fetchall() == upgraded_members
        fill(conn)
        assert all(recalled) and recalls(conn) == upgraded_recall


def test_rcll_install_upgrades_a_baseline_install_without_the_extension(
        leg: Leg, databases: tuple[str, str]) -> None:
    old, fresh = databases
    with psycopg.connect(leg.url(old), autocommit=True) as conn:
        install.ensure_required_extensions(conn)
        conn.execute("CREATE SCHEMA rcll")
        conn.execute(baseline_body())
        fill(conn)
        rows, recalled, old_columns = snapshot(conn), recalls(conn), columns(conn)
        done = install.install(conn)
        assert "migration(s) applied" in done
        upgraded = conn.execute(CATALOG).fetchall()
        _kept(rows, snapshot(conn, only=old_columns))
        upgraded_recall = _backfilled_recalls(conn)
        retain_after(conn)
        # Run again, it finds nothing to do.
        assert "0 migration(s) applied, 0 changed function(s) dropped" in install.install(conn)
    with psycopg.connect(leg.url(fresh), autocommit=True) as conn:
        install.install(conn)
        assert conn.execute(CATALOG).fetchall() == upgraded
        fill(conn)
        assert all(recalled) and recalls(conn) == upgraded_recall


def test_the_update_script_drops_what_create_or_replace_cannot_change() -> None:
    """A function whose arguments or result changed since the baseline is dropped by the update
    script, before the re-runnable files recreate it; the re-runnable files drop nothing."""
    from pglast import ast, parse_sql
    from pglast.enums import ObjectType

    from rcll.sqlsource import function_headers, functions, source_headers, update_script

    baseline = function_headers((extension_dir() / f"rcll--{BASELINE}.sql").read_text())
    current = source_headers()
    changed = {h.name for ident, h in baseline.items() if current.get(ident) != h}
    script = update_script(BASELINE)
    drops = {line.split("(")[0].removeprefix("DROP FUNCTION ") for line in script.splitlines()
             if line.startswith("DROP FUNCTION ")}
    assert drops == changed
    for f in functions():
        dropping = [s for s in parse_sql(f.text) if isinstance(s.stmt, ast.DropStmt)
                    and s.stmt.removeType in (ObjectType.OBJECT_FUNCTION, ObjectType.OBJECT_PROCEDURE)]
        assert dropping == [], f"{f.name} drops a function: signatures that change are dropped by the upgrade"


def test_headers_compare_types_as_the_server_does_not_as_they_are_spelled() -> None:
    from rcll.sqlsource import function_headers

    def one(sql: str) -> object:
        (h,) = function_headers(sql).values()
        return h

    spelled = one("CREATE FUNCTION rcll.f(a int, b timestamp with time zone, c public.vector DEFAULT NULL, "
                  "OUT d double precision) LANGUAGE sql AS 'SELECT 1'")
    same = one("CREATE OR REPLACE FUNCTION rcll.f(a integer, b timestamptz, c vector DEFAULT NULL::vector, "
               "OUT d float8) RETURNS float8 LANGUAGE sql AS 'SELECT 2'")
    assert spelled == same
    for changed in ("CREATE FUNCTION rcll.f(a int, b timestamptz, c vector, OUT d float8) LANGUAGE sql AS ''",
                    "CREATE FUNCTION rcll.f(a int, b timestamptz, c vector = NULL, OUT e float8) LANGUAGE sql AS ''",
                    "CREATE FUNCTION rcll.f(x int, b timestamptz, c vector = NULL, OUT d float8) LANGUAGE sql AS ''",
                    "CREATE FUNCTION rcll.f(a int, b timestamptz, c vector = NULL) RETURNS SETOF float8 "
                    "LANGUAGE sql AS ''"):
        assert one(changed) != spelled, changed


def test_rcll_install_drops_what_the_sources_no_longer_define(leg: Leg) -> None:
    """A function whose result changed, a function and a trigger the sources dropped go; the
    functions rcll.enable_in_database_models creates at run time stay."""
    name = leg.new_database()
    try:
        with psycopg.connect(leg.url(name), autocommit=True) as conn:
            conn.execute("DROP FUNCTION rcll.list_banks()")
            conn.execute("""CREATE FUNCTION rcll.list_banks() RETURNS integer LANGUAGE sql AS 'SELECT 1'""")
            conn.execute("""CREATE FUNCTION rcll.retired(n integer) RETURNS integer LANGUAGE sql AS 'SELECT n'""")
            conn.execute("""CREATE TRIGGER retired_trigger BEFORE UPDATE ON rcll.banks
                            FOR EACH ROW EXECUTE FUNCTION rcll._units_lexical()""")
            conn.execute("""CREATE FUNCTION rcll._model_count_tokens(texts text[]) RETURNS integer[]
                            LANGUAGE sql AS 'SELECT ARRAY[1]'""")
            assert "2 changed function(s) dropped" in install.install(conn)
            left = conn.execute("""SELECT p.oid::regprocedure::text || ' ' || pg_get_function_result(p.oid)
                                   FROM pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace
                                     AND p.proname IN ('list_banks', 'retired', '_model_count_tokens')
                                   ORDER BY 1""").fetchall()
            assert [r[0].split(" ")[0].removeprefix("rcll.") for r in left] == [
                "_model_count_tokens(text[])", "list_banks()"]
            assert "TABLE(" in left[1][0]
            assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'retired_trigger'").fetchone() == (0,)
    finally:
        leg.drop_database(name)


ISOLATED = """SELECT t::text, c.relrowsecurity, count(p.polname) FROM rcll._bank_tables() t
              JOIN pg_class c ON c.oid = t LEFT JOIN pg_policy p ON p.polrelid = t AND p.polname = 'bank_isolation'
              GROUP BY 1, 2 ORDER BY 1"""


@pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "rcll_install"])
def test_an_upgrade_isolates_the_tables_it_adds_when_bank_isolation_is_on(
        leg: Leg, databases: tuple[str, str], use_extension: bool) -> None:
    """A 0.1.0 store with bank isolation on: the tables this release adds (the BM25 copies, which
    hold every unit's lexemes) come with row-level security and the policy, not readable by every
    role granted SELECT; a store with isolation off stays off."""
    old, plain = databases
    for name, isolate in ((old, True), (plain, False)):
        with psycopg.connect(leg.url(name), autocommit=True) as conn:
            install.ensure_required_extensions(conn)
            if use_extension:
                install_extension_files(leg)
                conn.execute(f"CREATE EXTENSION rcll VERSION '{BASELINE}'")
            else:
                conn.execute("CREATE SCHEMA rcll")
                conn.execute(baseline_body())
            fill(conn)
            if isolate:
                conn.execute("SELECT rcll.enable_bank_isolation()")
            before = len(conn.execute(ISOLATED).fetchall())
            if use_extension:
                conn.execute("ALTER EXTENSION rcll UPDATE")
            else:
                install.install(conn)
            after = conn.execute(ISOLATED).fetchall()
            names = {t for t, _, _ in after}
            assert {"rcll.unit_lexicon", "rcll.document_lexicon"} <= names and len(after) > before
            assert all((on, n) == ((True, 1) if isolate else (False, 0)) for _, on, n in after), after
