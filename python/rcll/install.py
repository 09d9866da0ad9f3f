"""Install or upgrade the rcll schema in a database, with or without CREATE EXTENSION rights."""

from __future__ import annotations

import psycopg
from psycopg import sql

from rcll.sqlsource import extension_version, functions, migrations, record_migration

# One advisory lock key for every installer, so two servers starting at once do not race.
_INSTALL_LOCK = 0x52434C4C  # "RCLL"


class InstallError(RuntimeError):
    pass


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
                f"dsn: the server has no {ext} extension available; install it on the server "
                f"({'pgvector' if ext == 'vector' else 'postgresql-contrib'}) and retry"
            )
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA public").format(sql.Identifier(ext)))
        row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = %s",
                           (ext,)).fetchone()
        if row is None or row[0] != "public":
            raise InstallError(
                f"dsn: extension {ext} is installed in schema {row[0] if row else '?'}; rcll's functions expect "
                f"it in public (ALTER EXTENSION {ext} SET SCHEMA public)"
            )


def install(conn: psycopg.Connection[tuple[object, ...]], *, use_extension: bool = False) -> str:
    """Install or upgrade rcll in one transaction; returns what was done.

    use_extension: CREATE EXTENSION rcll (needs `make install` on the server).
    Otherwise: apply run-once migrations not yet recorded in rcll.migrations (refusing any whose
    hash changed), then every re-runnable function file.
    """
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
                        f"migration {m.name} changed after it was applied (hash differs); released "
                        "migrations are frozen - add a new migration instead"
                    )
                continue
            conn.execute(m.text.encode())
            conn.execute(record_migration(m).encode())
            done += 1
        for f in functions():
            conn.execute(f.text.encode())
        return f"rcll {extension_version()}: {done} migration(s) applied, {len(functions())} function file(s) loaded"
