"""Install or upgrade the rcll schema in a database, with or without CREATE EXTENSION rights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import psycopg
from psycopg import sql

from rcll import citus as citus_cluster
from rcll.errors import Code, RcllError
from rcll.sqlsource import extension_version, functions, migrations, read_catalog_manifest, record_migration

# One advisory lock key for every installer, so two servers starting at once do not race.
_INSTALL_LOCK = 0x52434C4C  # "RCLL"


class InstallError(RcllError):
    """The database cannot hold rcll as it is (an extension missing or misplaced, a released
    migration edited): the server's state, not a request's (RC010, unavailable)."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        super().__init__(field, message, hint, code=Code.UNAVAILABLE)


def _has_table(conn: psycopg.Connection[tuple[object, ...]], name: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def installed_as_extension(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'rcll'").fetchone()
    return str(row[0]) if row else None


def ensure_required_extensions(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    for ext in ("vector", "pg_trgm"):
        row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (ext,)).fetchone()
        if row is None:
            raise InstallError(
                "dsn", f"the server has no {ext} extension available",
                f"install it on the server ({'pgvector' if ext == 'vector' else 'postgresql-contrib'}) and retry"
            )
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA public").format(sql.Identifier(ext)))
        row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = %s",
                           (ext,)).fetchone()
        if row is None or row[0] != "public":
            raise InstallError(
                "dsn", f"extension {ext} is installed in schema {row[0] if row else '?'}; rcll's functions expect "
                "it in public", f"ALTER EXTENSION {ext} SET SCHEMA public"
            )


def install(conn: psycopg.Connection[tuple[object, ...]], *, use_extension: bool = False,
            citus: bool | None = None) -> str:
    """Install or upgrade rcll in one transaction; returns what was done.

    use_extension: CREATE EXTENSION rcll (needs `make install` on the server).
    Otherwise: apply run-once migrations not yet recorded in rcll.migrations (refusing any whose
    hash changed), then every re-runnable function file.
    citus: on a Citus coordinator with workers (None: when detected, True: required, False:
    never), then distribute the tables by bank (rcll.citus) in a second transaction.
    """
    on_citus = citus is not False and citus_cluster.has_citus(conn)
    if citus and not citus_cluster.is_coordinator(conn):
        raise citus_cluster.CitusError("dsn", "this database is not a Citus coordinator with workers",
                                       "connect to the coordinator, after citus_add_node for each worker")
    if on_citus:
        citus_cluster.prepare_session(conn)
    done = _install(conn, use_extension=use_extension, split=citus_cluster.statements if on_citus else None)
    if on_citus and not use_extension and citus_cluster.is_coordinator(conn):
        placed = citus_cluster.is_distributed(conn)
        with conn.transaction():
            distributed = citus_cluster.distribute(conn)      # idempotent: delegates the functions again
        if not placed:
            # The triggers the distribution set aside, made again on the distributed tables.
            _install(conn, use_extension=False, split=citus_cluster.statements)
            # That run replaced the delegated *_in_bank twins, and CREATE OR REPLACE drops what
            # create_distributed_function recorded of them: delegated again.
            with conn.transaction():
                citus_cluster.distribute(conn)
        done = f"{done}; {distributed}"
    return done


def _install(conn: psycopg.Connection[tuple[object, ...]], *, use_extension: bool,
             split: Callable[[str], list[str]] | None) -> str:
    def run(text: str) -> None:
        for statement in split(text) if split else [text]:
            conn.execute(statement.encode())

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INSTALL_LOCK,))
        if use_extension or installed_as_extension(conn):
            version = installed_as_extension(conn)
            if version is None:
                ensure_required_extensions(conn)
                conn.execute("CREATE EXTENSION rcll CASCADE")
                return f"created extension rcll {extension_version()}"
            if version != extension_version():
                conn.execute(sql.SQL("ALTER EXTENSION rcll UPDATE TO {}").format(sql.Literal(extension_version())))
                return f"updated extension rcll {version} -> {extension_version()}"
            return f"extension rcll {version} already installed"

        ensure_required_extensions(conn)
        conn.execute("CREATE SCHEMA IF NOT EXISTS rcll")
        applied: dict[str, str] = {}
        if _has_table(conn, "rcll.migrations"):
            applied = {str(n): str(h) for n, h in conn.execute("SELECT name, sha256 FROM rcll.migrations")}
        done = 0
        for m in migrations():
            if m.name in applied:
                if applied[m.name] != m.sha256:
                    raise InstallError(
                        "migrations", f"migration {m.name} changed after it was applied (hash differs)",
                        "released migrations are frozen - add a new migration instead"
                    )
                continue
            run(m.text)
            conn.execute(record_migration(m).encode())
            done += 1
        dropped = _drop_stale(conn)
        for f in functions():
            run(f.text)
        return (f"rcll {extension_version()}: {done} migration(s) applied, {dropped} changed function(s) "
                f"dropped, {len(functions())} function file(s) loaded")


_Header = tuple[str, tuple[tuple[str, str, int, bool], ...], bool, int]  # name, params, setof, result type


def _header(name: str, modes: list[str], names: list[str], types: list[int], ndefaults: int,
            setof: bool, result: int, record: int) -> _Header:
    """A function's header as the catalog has it: (mode, name, type, has a default) per
    parameter, whether it returns a set, and its result type (record when OUT or TABLE parameters
    say what it returns). Defaults are the last ndefaults input parameters."""
    inputs = [i for i, m in enumerate(modes) if m in ("i", "b", "v")]
    defaulted = set(inputs[len(inputs) - ndefaults:]) if ndefaults else set()
    params = tuple((m, n, ty, i in defaulted) for i, (m, n, ty) in enumerate(zip(modes, names, types, strict=True)))
    if any(m in ("o", "b", "t") for m in modes):
        result = record
    return name, params, setof, result


def _drop_stale(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Drop the rcll triggers the current sources no longer create, and the rcll functions in the
    catalog that they do not define identically (arguments, their names and defaults, or result
    changed, or gone): CREATE OR REPLACE cannot change those. What an update script does for an
    extension install, read from the catalog and extension/catalog.json (the sources' functions
    and triggers, written by `make extension`). Returns the number of functions dropped."""
    manifest = read_catalog_manifest()
    wanted_triggers = {(str(name), str(table)) for name, table in manifest["triggers"]}
    for name, table in conn.execute(
            "SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t "
            "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid "
            "WHERE c.relnamespace = 'rcll'::regnamespace AND p.pronamespace = 'rcll'::regnamespace "
            "AND NOT t.tgisinternal ORDER BY 2, 1").fetchall():
        if (str(name), f"rcll.{table}") not in wanted_triggers:
            conn.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(str(name)),
                                                                  sql.Identifier("rcll", str(table))))

    # The types the sources name, as this server resolves them (after the migrations, which may create some).
    written = sorted({ty for f in manifest["functions"] for *_, ty, _ in f["params"]}
                     | {f["returns"] for f in manifest["functions"] if f["returns"]} | {"pg_catalog.record"})
    oids = {str(ty): int(cast(int, oid)) if oid is not None else -1 for ty, oid in conn.execute(
        "SELECT t, to_regtype(t)::oid::int8 FROM unnest(%s::text[]) AS t", (written,))}
    record = oids["pg_catalog.record"]
    wanted = {_header(f["name"], [m for m, *_ in f["params"]], [n for _, n, _, _ in f["params"]],
                      [oids[ty] for *_, ty, _ in f["params"]], sum(1 for *_, d in f["params"] if d),
                      bool(f["setof"]), oids[f["returns"]] if f["returns"] else record, record)
              for f in manifest["functions"]}
    keep = set(manifest["created_at_run_time"])
    dropped = 0
    for row in conn.execute(
            "SELECT p.oid::regprocedure::text, 'rcll.' || p.proname, "
            "coalesce(p.proargmodes::text[], array_fill('i'::text, ARRAY[p.pronargs])), "
            "coalesce(p.proargnames, array_fill(''::text, ARRAY[cardinality(coalesce(p.proallargtypes, p.proargtypes::oid[]))])), "
            "coalesce(p.proallargtypes, p.proargtypes::oid[])::int8[], p.pronargdefaults, p.proretset, p.prorettype::int8 "
            "FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'rcll'::regnamespace AND p.prokind IN ('f', 'p') "
            "ORDER BY 1").fetchall():
        regprocedure, name, modes, names, types, ndefaults, setof, result = cast("tuple[Any, ...]", row)
        header = _header(str(name), list(modes), list(names), [int(x) for x in types], int(ndefaults),
                         bool(setof), int(result), record)
        if header in wanted or str(name) in keep:
            continue
        # regprocedure output is the server's own quoting of the function's name and argument types.
        conn.execute(sql.SQL("DROP FUNCTION {}").format(sql.SQL(str(regprocedure))))
        dropped += 1
    return dropped
