"""Where the SQL lives and how it is assembled: run-once migrations, then re-runnable functions.

The same sequence builds extension/rcll--X.Y.Z.sql (for CREATE EXTENSION) and is applied by
`rcll install` (for databases without extension privileges), so both produce the same objects.
Upgrades are built from the same sources: extension/rcll--A--B.sql holds the migrations released
after A, drops of the triggers that are gone and of the functions whose signature or result changed (CREATE
OR REPLACE cannot change them), then every re-runnable file; `rcll install` does the same against
the catalog.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SqlFile:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _root() -> Path:
    packaged = Path(__file__).parent
    if (packaged / "sql").is_dir():
        return packaged
    repo = Path(__file__).resolve().parents[2]
    if (repo / "sql").is_dir():
        return repo
    raise FileNotFoundError("rcll: SQL sources not found (expected sql/ next to the package or the repo root)")


def sql_dir() -> Path:
    return _root() / "sql"


def extension_dir() -> Path:
    return _root() / "extension"


@cache
def extension_version() -> str:
    control = (extension_dir() / "rcll.control").read_text()
    m = re.search(r"default_version\s*=\s*'([^']+)'", control)
    if not m:
        raise ValueError("extension/rcll.control has no default_version")
    return m.group(1)


def _files(kind: str) -> list[SqlFile]:
    return [SqlFile(p.name, p.read_text()) for p in sorted((sql_dir() / kind).glob("*.sql"))]


def migrations() -> list[SqlFile]:
    return _files("migrations")


def functions() -> list[SqlFile]:
    return _files("functions")


def record_migration(m: SqlFile) -> str:
    return f"INSERT INTO rcll.migrations (name, sha256) VALUES ('{m.name}', '{m.sha256}');\n"


def extension_script() -> str:
    """The install script for CREATE EXTENSION rcll (what `make extension` writes)."""
    parts = [
        "-- Generated from sql/ by `make extension`; do not edit.\n",
        '\\echo Use "CREATE EXTENSION rcll CASCADE" to load this file. \\quit\n',
    ]
    for m in migrations():
        parts += [f"\n-- migration {m.name}\n", m.text, "\n", record_migration(m)]
    for f in functions():
        parts += [f"\n-- functions {f.name}\n", f.text, "\n"]
    return "".join(parts)


# Upgrades ------------------------------------------------------------------------------------

_RECORDED = re.compile(r"^INSERT INTO rcll\.migrations \(name, sha256\) VALUES \('([^']+)', '([0-9a-f]{64})'\);$", re.M)
_FULL_SCRIPT = re.compile(r"^rcll--(\d+(?:\.\d+)*)\.sql$")
_INPUT_MODES = ("i", "b", "v")     # in, inout, variadic (the default mode is read as in)
_OUTPUT_MODES = ("o", "b", "t")    # out, inout, table


def released_versions() -> list[str]:
    """Versions with a frozen install script in extension/, older than the current one."""
    found = [m.group(1) for p in extension_dir().glob("rcll--*.sql") if (m := _FULL_SCRIPT.match(p.name))]
    current = extension_version()
    return sorted((v for v in found if v != current), key=lambda v: tuple(int(x) for x in v.split(".")))


def released_migrations(script: str) -> dict[str, str]:
    """Migration name -> sha256, as an install script records them in rcll.migrations."""
    return dict(_RECORDED.findall(script))


@dataclass(frozen=True)
class FunctionHeader:
    """A function as CREATE FUNCTION declares it, without its body: what CREATE OR REPLACE cannot
    change. Types are compared without the pg_catalog and public qualifiers and with the parser's
    spelling (integer and int4 are one type)."""

    name: str
    params: tuple[tuple[str, str, str, bool], ...]  # (mode, name, type, has a default)
    returns: str
    drop_types: tuple[str, ...] = field(compare=False)  # input types as written, for DROP FUNCTION
    written: tuple[str, ...] = field(compare=False, default=())  # every parameter's type as written
    written_returns: str = field(compare=False, default="")    # the result type as written ("" with OUT)

    @property
    def identity(self) -> tuple[str, tuple[str, ...]]:
        """Name and input types: what tells two functions apart."""
        return self.name, tuple(t for mode, _, t, _ in self.params if mode in _INPUT_MODES)

    def drop(self) -> str:
        return f"DROP FUNCTION {self.name}({', '.join(self.drop_types)});\n"


def _names(nodes: Any) -> list[str]:
    return [str(n.sval) for n in nodes]


def _type(t: Any) -> tuple[str, str]:
    """(the type as SQL, its comparison key) for a pglast TypeName."""
    names = _names(t.names)
    arrays = "[]" * len(t.arrayBounds or ())
    key = names[1:] if len(names) > 1 and names[0] in ("pg_catalog", "public") else names
    return ".".join(names) + arrays, ".".join(key) + arrays


def function_headers(text: str) -> dict[tuple[str, tuple[str, ...]], FunctionHeader]:
    """The functions a SQL script leaves defined, by identity (CREATE adds, DROP removes)."""
    from pglast import ast, parse_sql
    from pglast.enums import ObjectType

    body = "\n".join("" if line.startswith("\\") else line for line in text.splitlines())
    found: dict[tuple[str, tuple[str, ...]], FunctionHeader] = {}
    for raw in parse_sql(body):
        stmt = raw.stmt
        if isinstance(stmt, ast.CreateFunctionStmt):
            params: list[tuple[str, str, str, bool]] = []
            drop_types: list[str] = []
            for p in stmt.parameters or ():
                mode = "i" if p.mode.value == "d" else str(p.mode.value)
                written, key = _type(p.argType)
                params.append((mode, str(p.name or ""), key, p.defexpr is not None))
                if mode in _INPUT_MODES:
                    drop_types.append(written)
            setof = bool(stmt.returnType and stmt.returnType.setof)
            if any(mode in _OUTPUT_MODES for mode, *_ in params):
                returns, written_returns = "record", ""   # the OUT or TABLE parameters say what it returns
            elif stmt.returnType is not None:
                written_returns, returns = _type(stmt.returnType)
            else:
                returns, written_returns = "void", "pg_catalog.void"    # a procedure
            h = FunctionHeader(".".join(_names(stmt.funcname)), tuple(params),
                               ("setof " if setof else "") + returns, tuple(drop_types),
                               tuple(_type(p.argType)[0] for p in stmt.parameters or ()), written_returns)
            found[h.identity] = h
        elif isinstance(stmt, ast.DropStmt) and stmt.removeType in (ObjectType.OBJECT_FUNCTION,
                                                                       ObjectType.OBJECT_PROCEDURE):
            for obj in stmt.objects or ():
                ident = (".".join(_names(obj.objname)), tuple(_type(a)[1] for a in obj.objargs or ()))
                found.pop(ident, None)
    return found


def triggers(text: str) -> set[tuple[str, str]]:
    """The (trigger, table) pairs a SQL script leaves defined (CREATE adds, DROP removes)."""
    from pglast import ast, parse_sql
    from pglast.enums import ObjectType

    body = "\n".join("" if line.startswith("\\") else line for line in text.splitlines())
    found: set[tuple[str, str]] = set()
    for raw in parse_sql(body):
        stmt = raw.stmt
        if isinstance(stmt, ast.CreateTrigStmt) and stmt.relation is not None:
            found.add((str(stmt.trigname), f"{stmt.relation.schemaname}.{stmt.relation.relname}"))
        elif isinstance(stmt, ast.DropStmt) and stmt.removeType == ObjectType.OBJECT_TRIGGER:
            for obj in stmt.objects or ():
                *table, name = _names(obj)
                found.discard((name, ".".join(table)))
    return found


def stale_triggers(installed: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The installed triggers the current sources no longer create (CREATE OR REPLACE TRIGGER
    changes the others in place)."""
    return sorted(installed - triggers("\n".join(f.text for f in [*migrations(), *functions()])))


def source_headers() -> dict[tuple[str, tuple[str, ...]], FunctionHeader]:
    """The functions the current sources define (migrations, then re-runnable files)."""
    return function_headers("\n".join(f.text for f in [*migrations(), *functions()]))


def created_at_run_time() -> set[str]:
    """Functions the sources create from inside other functions (rcll.enable_in_database_models),
    which no script defines: an upgrade leaves them alone. Among them the *_in_bank twins, which
    rcll._make_in_bank_twin makes from the functions rcll._in_bank_twins() lists, and which it
    replaces itself when their function's signature changes."""
    text = "\n".join(f.text for f in functions())
    return ({f"rcll.{n}" for n in re.findall(r"CREATE\s+OR\s+REPLACE\s+FUNCTION\s+rcll\.(\w+)", text, re.I)}
            | {f"rcll.{n}_in_bank" for n in _IN_BANK_TWIN.findall(text)})


# An entry of rcll._in_bank_twins() (sql/functions/616-citus-delegated-verbs.sql): ('rcll.<name>', '{...}').
_IN_BANK_TWIN = re.compile(r"\('rcll\.(\w+)', '\{[\w,]*\}'\)")


def stale_functions(installed: dict[tuple[str, tuple[str, ...]], FunctionHeader]) -> list[FunctionHeader]:
    """The installed functions the current sources do not define identically: their signature or
    result changed, or they are gone. They must be dropped before the re-runnable files run."""
    current = source_headers()
    names = {h.name for h in current.values()}
    run_time = created_at_run_time() - names
    return sorted((h for ident, h in installed.items() if current.get(ident) != h and h.name not in run_time),
                  key=lambda h: (h.name, h.drop_types))


def catalog_manifest() -> str:
    """extension/catalog.json: the functions (headers, types as written) and triggers the current
    sources define, and the functions they create at run time. `rcll install` reads it to find what
    an upgrade must drop, comparing it with the catalog - no SQL parser needed at run time."""
    headers = sorted(source_headers().values(), key=lambda h: (h.name, h.drop_types))
    manifest = {
        "version": extension_version(),
        "functions": [{"name": h.name,
                       "params": [[mode, name, written, default]
                                  for (mode, name, _, default), written in zip(h.params, h.written, strict=True)],
                       "returns": h.written_returns, "setof": h.returns.startswith("setof ")}
                      for h in headers],
        "triggers": sorted(triggers("\n".join(f.text for f in [*migrations(), *functions()]))),
        "created_at_run_time": sorted(created_at_run_time() - {h.name for h in headers}),
    }
    # One function or trigger per line: a change to the sources reads as a one-line diff.
    lines = [f' "version": {json.dumps(manifest["version"])},']
    for key in ("functions", "triggers", "created_at_run_time"):
        items = [f"  {json.dumps(item, ensure_ascii=False)}" for item in manifest[key]]
        lines.append(f' "{key}": [\n' + ",\n".join(items) + "\n ]" + ("," if key != "created_at_run_time" else ""))
    return "{\n" + "\n".join(lines) + "\n}\n"


def read_catalog_manifest() -> dict[str, Any]:
    path = extension_dir() / "catalog.json"
    if not path.exists():
        # A source checkout that was never built (the wheel carries it).
        raise FileNotFoundError(f"{path} is missing: it is built from sql/ by `make extension`")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def update_script(from_version: str) -> str:
    """extension/rcll--<from_version>--<current>.sql: the migrations released since from_version,
    drops of the functions CREATE OR REPLACE cannot change, then every re-runnable file."""
    old = (extension_dir() / f"rcll--{from_version}.sql").read_text()
    released = released_migrations(old)
    sources = {m.name: m for m in migrations()}
    for name, sha in released.items():
        if name not in sources:
            raise ValueError(f"migration {name} was released in {from_version} but is missing from sql/migrations")
        if sources[name].sha256 != sha:
            raise ValueError(f"migration {name} changed after it was released in {from_version} "
                             "(hash differs); released migrations are frozen - add a new migration instead")
    to_version = extension_version()
    parts = [
        "-- Generated from sql/ by `make extension`; do not edit.\n",
        f"\\echo Use \"ALTER EXTENSION rcll UPDATE TO '{to_version}'\" to load this file. \\quit\n",
    ]
    for m in migrations():
        if m.name not in released:
            parts += [f"\n-- migration {m.name}\n", m.text, "\n", record_migration(m)]
    gone = stale_triggers(triggers(old))
    if gone:
        parts.append(f"\n-- triggers of {from_version} that are gone\n")
        parts += [f"DROP TRIGGER {name} ON {table};\n" for name, table in gone]
    stale = stale_functions(function_headers(old))
    if stale:
        parts.append(f"\n-- functions of {from_version} whose signature or result changed, or that are gone\n")
        parts += [h.drop() for h in stale]
    for f in functions():
        parts += [f"\n-- functions {f.name}\n", f.text, "\n"]
    return "".join(parts)


def generated_scripts() -> dict[str, str]:
    """File name in extension/ -> content: the current install script, an update script from
    every released version, and the catalog manifest `rcll install` upgrades with."""
    current = extension_version()
    scripts = {f"rcll--{current}.sql": extension_script(), "catalog.json": catalog_manifest()}
    for v in released_versions():
        scripts[f"rcll--{v}--{current}.sql"] = update_script(v)
    return scripts
