"""Export and import a whole bank: every column of every table, streamed, round-trip exact.

An export is a directory:

    manifest.json            what is in it: format, bank, per table the file, row count and SHA-256
    pam/memory-store.json    the Portable AI Memory (PAM) v1.0 view: one memory per unit, one
                             relation per link (validates against the PAM SDK's schema)
    rcll/<table>.jsonl       the lossless RCLL sidecar: one line per row, every column, as
                             rcll.export_rows() prints it (room, hall, layer, link types and weights,
                             colon tags, embeddings, room registry and state, audit, llm_calls...)

Canonical order, which makes two exports of the same memory byte-identical: tables in
rcll.export_tables() order; rows by each table's key columns (text compared byte-wise); values
printed by PostgreSQL with TimeZone UTC and shortest-exact floats; PAM memories by id (ids are
zero-padded so that is unit_id order), JSON keys sorted. Nothing in an export records when it was
made. Memory stays bounded: each table is read through a server-side cursor in batches, and each
file is written as the rows arrive.

Import reads the sidecar (the PAM file is a view, not a source) and calls rcll.import_begin,
rcll.import_rows per batch and rcll.import_finish in one transaction: an export from elsewhere is
untrusted input, written into the one bank its banks row names with new ids (315-import.sql).
Restore (restore=True, the store's owner only) calls rcll.restore_* instead: the exact,
trigger-less load that keeps ids, authors and grants (310-restore.sql).

The NDJSON form (iter_export) ends with a trailer line, {"trailer": {"rows": {<table>: <count>},
"sha256": <hex>}}: every table's row count and the SHA-256 of every line before it (newline
included). A stream without a valid trailer - cut, a table missing, a line edited - is refused
and imports nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, LiteralString

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from rcll.auth import act_as
from rcll.citus import own_statement
from rcll.errors import Code, RcllError, database_errors
from rcll.sqlsource import extension_version
from rcll.validate import DEFAULT_MAX_IMPORT_LINE_BYTES, on_conflict_arg

FORMAT = "rcll-export"
FORMAT_VERSION = 1
PAM_FILE = "pam/memory-store.json"
MANIFEST = "manifest.json"
FETCH = 2000
IMPORT_BATCH_ROWS = 1000
IMPORT_BATCH_BYTES = 8 << 20
CANONICAL_ORDER = (
    "tables in rcll.export_tables() order; rows by each table's key columns, text compared byte-wise "
    "(COLLATE \"C\"); values as PostgreSQL prints them with TimeZone UTC, DateStyle ISO, extra_float_digits 1, "
    "bytea_output hex; jsonb keys in jsonb order; PAM memories by id, relations by (from, to, type), keys sorted"
)

Progress = Callable[[str, int], None]

# -- PAM mapping ---------------------------------------------------------------------------------

_PAM_TAG = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# hall -> PAM memory type; any other hall is a custom type named after it.
_HALL_TYPE = {"fact": "fact", "preference": "preference", "rule": "instruction", "procedure": "instruction",
              "event": "context", "goal": "goal", "skill": "skill", "project": "project"}
# link type -> PAM relation type (the exact link type is in the sidecar and the relation id).
_LINK_TYPE = {"supersedes": "supersedes", "consolidates": "derived_from", "causal": "supports",
              "entity": "related_to", "temporal": "related_to", "semantic": "related_to"}
_EXTRACTION = {"chunk": "explicit_user_input", "fact": "llm_inference", "observation": "llm_inference"}


def pam_memory_id(unit_id: int) -> str:
    return f"rcll-unit-{unit_id:020d}"


def _ts(value: str | None) -> str | None:
    """A PostgreSQL timestamp (ISO, or range-bound form) as RFC 3339; None for none or infinity."""
    if value is None or value in ("", "infinity", "-infinity"):
        return None
    return datetime.fromisoformat(value).isoformat()


def _range_bounds(valid: str) -> tuple[str | None, str | None]:
    if valid == "empty":
        return None, None
    lo, hi = valid[1:-1].split(",", 1)
    return _ts(lo.strip('"') or None), _ts(hi.strip('"') or None)


def pam_memory(unit: dict[str, Any]) -> dict[str, Any]:
    from portable_ai_memory import compute_content_hash

    hall = unit.get("hall")
    pam_type = _HALL_TYPE.get(hall or "", "custom")
    valid_from, valid_until = _range_bounds(unit["valid"])
    tags: list[str] = []
    for t in unit["tags"]:
        if _PAM_TAG.match(t) and t not in tags:
            tags.append(t)
    superseded = unit.get("superseded_by")
    memory: dict[str, Any] = {
        "id": pam_memory_id(unit["unit_id"]),
        "type": pam_type,
        "custom_type": (f"rcll-{hall}" if hall else f"rcll-{unit['kind']}") if pam_type == "custom" else None,
        "status": "superseded" if superseded is not None else "active",
        "content": unit["text"],
        "content_hash": compute_content_hash(unit["text"]),
        "tags": tags,
        "temporal": {
            "created_at": _ts(unit["created_at"]),
            "updated_at": _ts(unit["updated_at"]),
            "valid_from": valid_from,
            "valid_until": valid_until,
            "superseded_by": pam_memory_id(superseded) if superseded is not None else None,
        },
        "provenance": {
            "platform": "rcll",
            "platform_user_id": unit.get("author"),
            "extraction_method": _EXTRACTION.get(unit["kind"]),
            "extracted_at": _ts(unit["created_at"]),
            "extractor": f"rcll/{extension_version()}",
        },
        "embedding_ref": None,
        "metadata": {"rcll": {k: unit.get(k) for k in (
            "unit_id", "kind", "room", "hall", "layer", "author", "author_source", "thread", "tags",
            "document_id", "chunk_index", "occurred_start", "occurred_end", "mentioned_at",
            "consolidation_state")}},
    }
    return memory


def pam_relation(link: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"rcll-link-{link['from_unit']}-{link['to_unit']}-{link['link_type']}",
        "from": pam_memory_id(link["from_unit"]),
        "to": pam_memory_id(link["to_unit"]),
        "type": _LINK_TYPE.get(link["link_type"], "related_to"),
        "confidence": link["weight"],
        "created_at": _ts(link["created_at"]),
    }


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class _PamWriter:
    """Writes the PAM memory store as the units and links stream past, computing the integrity
    checksum (RFC 8785 over the memories sorted by id) on the way - memories arrive in id order."""

    def __init__(self, path: Path, bank: dict[str, Any]) -> None:
        import rfc8785

        self._jcs = rfc8785.dumps
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f: BinaryIO = path.open("wb")
        self.hash = hashlib.sha256()
        self.check = hashlib.sha256(b"[")
        self.memories = 0
        self.relations = 0
        self._last_id = ""
        head = {
            "schema": "portable-ai-memory",
            "schema_version": "1.0",
            "spec_uri": "https://portable-ai-memory.org/spec/v1.0",
            "exported_by": f"rcll/{extension_version()}",
            "export_type": "full",
            "owner": {"id": f"rcll-bank:{bank['name']}", "created_at": _ts(bank["created_at"])},
        }
        self._write(_dumps(head)[:-1] + ',\n"memories":[\n')
        self._section = "memories"

    def _write(self, s: str) -> None:
        b = s.encode()
        self.hash.update(b)
        self.f.write(b)

    def memory(self, raw: dict[str, Any]) -> None:
        from portable_ai_memory import MemoryObject

        # Written as the SDK serialises it, so the file, its checksum and the SDK's recomputation agree.
        m = MemoryObject.model_validate(raw).model_dump(mode="json", by_alias=True, exclude_none=True)
        if m["id"] <= self._last_id:
            raise AssertionError("PAM memories must arrive in id order")
        self._last_id = m["id"]
        if self.memories:
            self._write(",\n")
            self.check.update(b",")
        self._write(_dumps(m))
        self.check.update(self._jcs(m))
        self.memories += 1

    def start_relations(self) -> None:
        if self._section == "memories":
            self._write('\n],\n"relations":[\n')
            self._section = "relations"

    def relation(self, r: dict[str, Any]) -> None:
        self.start_relations()
        if self.relations:
            self._write(",\n")
        self._write(_dumps(r))
        self.relations += 1

    def close(self) -> str:
        self.start_relations()
        self.check.update(b"]")
        integrity = {"canonicalization": "RFC8785", "checksum": f"sha256:{self.check.hexdigest()}",
                     "total_memories": self.memories}
        self._write('\n],\n"integrity":' + _dumps(integrity) + "}\n")
        self.f.close()
        return self.hash.hexdigest()


# -- export --------------------------------------------------------------------------------------

@dataclass
class ExportSummary:
    bank: str
    path: Path
    tables: dict[str, int] = field(default_factory=dict)
    memories: int = 0
    relations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"bank": self.bank, "path": str(self.path), "tables": self.tables,
                "pam": {"memories": self.memories, "relations": self.relations}}


def _stream(conn: psycopg.Connection[Any], bank: str, table: str) -> Iterator[str]:
    """The canonical rows of one table as jsonb text, FETCH by FETCH from rcll.export_cursor."""
    cur = conn.cursor()
    cur.adapters.register_loader("jsonb", TextLoader)
    row = cur.execute("SELECT rcll.export_cursor(bank => %s, table_name => %s)", (bank, table)).fetchone()
    assert row is not None
    fetch = sql.SQL("FETCH FORWARD {} FROM {}").format(sql.Literal(FETCH), sql.Identifier(str(row[0])))
    close = sql.SQL("CLOSE {}").format(sql.Identifier(str(row[0])))
    while True:
        rows = cur.execute(fetch).fetchall()
        if not rows:
            break
        for (line,) in rows:
            yield str(line)
    cur.execute(close)


# On a Citus cluster (bank_id given): the whole export as one call delegated to the bank's worker,
# streamed from there row by row (sql/functions/616-citus-delegated-verbs.sql).
_EXPORT_IN_BANK = "SELECT table_name, row_data FROM rcll.export_stream_in_bank(bank_id => %s, bank => %s)"


@contextmanager
def _exported(conn: psycopg.Connection[Any], bank: str,
              bank_id: int | None) -> Iterator[tuple[list[str], Any, Iterator[tuple[str, str]]]]:
    """The tables of an export in order, the largest ids, and every (table, row as jsonb text),
    all from one snapshot: one REPEATABLE READ transaction reading each table by a cursor, or (on a
    Citus cluster, bank_id given) rcll.export_stream_in_bank, the whole export as one call sent as
    its own statement, which runs in one transaction on the worker holding the bank."""
    if bank_id is None:
        with _snapshot(conn):
            tables = [str(r[0]) for r in conn.execute(
                "SELECT table_name FROM rcll.export_tables() ORDER BY table_position").fetchall()]
            row = conn.execute("SELECT rcll.export_max_ids(bank => %s)", (bank,)).fetchone()
            yield tables, row[0] if row else {}, ((t, line) for t in tables for line in _stream(conn, bank, t))
        return
    with database_errors(), own_statement(conn):
        tables = [str(r[0]) for r in conn.execute(
            "SELECT table_name FROM rcll.export_tables() ORDER BY table_position").fetchall()]
        cur = conn.cursor()
        cur.adapters.register_loader("jsonb", TextLoader)
        rows = cur.stream(_EXPORT_IN_BANK, (bank_id, bank))
        first = next(rows, None)
        assert first is not None and first[0] is None, "rcll.export_stream starts with the largest ids"
        yield tables, json.loads(first[1]), ((str(t), str(line)) for t, line in rows)


def export_bank(conn: psycopg.Connection[Any], bank: str, out: Path | str, *,
                progress: Progress | None = None, bank_id: int | None = None) -> ExportSummary:
    """Write the bank to directory `out` (created; must not hold an export already) from one
    snapshot (bank_id: on a Citus cluster, delegated whole to the bank's worker; see _exported).
    `progress(table, rows)` is called as rows are written."""
    out = Path(out)
    if (out / MANIFEST).exists():
        raise RcllError("out", f"{out} already holds an export", "choose an empty or new directory", code=Code.CONFLICT)
    (out / "rcll").mkdir(parents=True, exist_ok=True)
    summary = ExportSummary(bank, out)
    manifest_tables: list[dict[str, Any]] = []
    with _exported(conn, bank, bank_id) as (tables, max_ids, rows):
        pam: _PamWriter | None = None
        for table, lines in _by_table(tables, rows):
            path = out / "rcll" / f"{table}.jsonl"
            h = hashlib.sha256()
            n = 0
            with path.open("wb") as f:
                for line in lines:
                    b = line.encode() + b"\n"
                    f.write(b)
                    h.update(b)
                    n += 1
                    if table == "banks":
                        pam = _PamWriter(out / PAM_FILE, json.loads(line))
                    elif table == "memory_units" and pam is not None:
                        pam.memory(pam_memory(json.loads(line)))
                    elif table == "links" and pam is not None:
                        pam.relation(pam_relation(json.loads(line)))
                    if progress and n % 500 == 0:
                        progress(table, 500)
            if progress and n % 500:
                progress(table, n % 500)
            summary.tables[table] = n
            manifest_tables.append({"name": table, "file": f"rcll/{table}.jsonl", "rows": n,
                                    "sha256": h.hexdigest()})
        assert pam is not None
        pam_sha = pam.close()
        summary.memories, summary.relations = pam.memories, pam.relations
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "rcll_version": extension_version(), "bank": bank,
        "canonical_order": CANONICAL_ORDER, "max_ids": max_ids, "tables": manifest_tables,
        "pam": {"file": PAM_FILE, "schema_version": "1.0", "memories": pam.memories,
                "relations": pam.relations, "sha256": pam_sha},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return summary


@contextmanager
def _snapshot(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """One REPEATABLE READ, read-only transaction: every table of an export from one snapshot."""
    was_autocommit = conn.autocommit
    if not conn.autocommit and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.commit()
    conn.autocommit = False
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        with database_errors(), conn.transaction():
            yield
    finally:
        conn.read_only = False
        conn.isolation_level = None
        conn.autocommit = was_autocommit


STREAM_FORMAT = "rcll-export-stream"


def _by_table(tables: list[str], rows: Iterator[tuple[str, str]]) -> Iterator[tuple[str, Iterator[str]]]:
    """Each table, in order, with its lines (rows: (table, line) in the tables' order; read each
    table's lines to the end before the next table's)."""
    ahead: list[tuple[str, str]] = []

    def lines(table: str) -> Iterator[str]:
        while True:
            got = ahead.pop() if ahead else next(rows, None)
            if got is None:
                return
            t, line = got
            if t != table:
                ahead.append((t, line))
                return
            yield line

    for table in tables:
        yield table, lines(table)
    left = ahead.pop() if ahead else next(rows, None)
    if left is not None:       # a row out of the tables' order: refused, never dropped
        raise RcllError("tables", f"the export's rows of {left[0]} came out of the tables' order",
                        "report it: rcll.export_stream lists the tables in rcll.export_tables() order",
                        code=Code.INVALID_STREAM)


def iter_export(conn: psycopg.Connection[Any], bank: str, *, bank_id: int | None = None) -> Iterator[bytes]:
    """The bank as NDJSON (the HTTP form of an export): a header line with the format, bank,
    tables and max_ids, one {"table": ..., "row": ...} line per row in the canonical order, then
    the trailer (per-table row counts and the SHA-256 of every line before it). A stream that
    stops early - a database error after the first line - has no trailer, and no import takes it.
    bank_id: on a Citus cluster, the export delegated whole to the bank's worker (_exported)."""
    with _exported(conn, bank, bank_id) as (tables, max_ids, rows):
        head = {"format": STREAM_FORMAT, "format_version": FORMAT_VERSION, "rcll_version": extension_version(),
                "bank": bank, "tables": tables, "max_ids": max_ids}
        digest = hashlib.sha256()
        counts = dict.fromkeys(tables, 0)
        line = (json.dumps(head, sort_keys=True) + "\n").encode()
        digest.update(line)
        yield line
        prefixes = {t: b'{"table":"' + t.encode() + b'","row":' for t in tables}
        for table, text in rows:
            line = prefixes[table] + text.encode() + b"}\n"
            digest.update(line)
            counts[table] += 1
            yield line
        yield (json.dumps({TRAILER: {"rows": counts, "sha256": digest.hexdigest()}}, sort_keys=True) + "\n").encode()


TRAILER = "trailer"


class _StreamCheck:
    """What the lines of an import stream add up to, for its trailer: the SHA-256 of every line
    before the trailer (newline included), and the trailer itself once read."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.trailer: dict[str, Any] | None = None

    def counts(self) -> dict[str, Any]:
        """The trailer's per-table counts, once the stream's checksum matched its trailer."""
        if self.trailer is None:
            raise _refused("trailer", "the stream ends without a trailer: it was cut, or is not an export",
                           "export again (GET /export, rcll export); a stream cut on the way has no trailer")
        rows, sha = self.trailer.get("rows"), self.trailer.get("sha256")
        if not isinstance(rows, dict):
            raise _refused("trailer.rows", "the trailer has no per-table row counts")
        if sha != self.digest.hexdigest():
            raise _refused("trailer.sha256", "the lines do not match the trailer's checksum: the stream was cut or edited",
                           "export again and import the stream unchanged")
        return rows


def _refused(field: str, message: str, hint: str | None = None) -> RcllError:
    """An import stream refused (SQLSTATE RC008 on the database side)."""
    return RcllError(field, message, hint or "import a whole, unedited export stream (GET /export, rcll export)",
                     code=Code.INVALID_STREAM)


def _stream_rows(it: Iterator[bytes], check: _StreamCheck, limit: int) -> Iterator[tuple[str, bytes]]:
    """(table, row JSON) per line of an NDJSON export after its header, each at most `limit` bytes;
    the trailer is read into `check`, and any line after it refused."""
    for n, raw in enumerate(it, 2):
        line = raw.rstrip(b"\r\n")
        if len(line) > limit:
            raise _refused(f"line {n}", f"longer than {limit} bytes", "import an export stream unchanged, or raise RCLL_MAX_IMPORT_LINE_BYTES")
        if check.trailer is not None:
            if line.strip():
                raise _refused(f"line {n}", "a line after the trailer", "the trailer is the stream's last line")
            continue
        if line.startswith(b'{"table":"') and line.endswith(b"}") and b'","row":' in line[:80]:
            check.digest.update(line + b"\n")
            table, _, rest = line[10:].partition(b'","row":')
            try:
                yield table.decode(), rest[:-1]
            except UnicodeDecodeError as e:
                raise _refused(f"line {n}", "not UTF-8") from e
            continue
        try:
            obj = json.loads(line) if line.strip() else None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _refused(f"line {n}", f"not valid JSON: {e}") from e
        if isinstance(obj, dict) and set(obj) == {TRAILER} and isinstance(obj[TRAILER], dict):
            check.trailer = obj[TRAILER]
            continue
        check.digest.update(line + b"\n")
        if obj is None:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("table"), str) or "row" not in obj:
            raise _refused(f"line {n}", 'expected {"table": ..., "row": {...}}')
        yield obj["table"], json.dumps(obj["row"]).encode()


def import_stream(conn: psycopg.Connection[Any], lines: Any, *, on_conflict: str = "error",
                  allow: Callable[[str], None] | None = None, agent: str | None = None,
                  restore: bool = False, max_line: int = DEFAULT_MAX_IMPORT_LINE_BYTES) -> ImportSummary:
    """Import the NDJSON form (iter_export's output) in one transaction, as `agent`. restore: the
    owner's exact restore (rcll.restore_*) instead of an import. max_line: the longest line taken
    (settings.max_import_line_bytes)."""
    it = iter(lines)
    check = _StreamCheck()
    try:
        first = next(it)
        head = json.loads(first)
    except StopIteration as e:
        raise RcllError("body", "empty import", "send the output of GET /export", code=Code.INVALID_STREAM) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RcllError("body", f"line 1 is not valid JSON: {e}", "send the output of GET /export",
                        code=Code.INVALID_STREAM) from e
    if not isinstance(head, dict) or head.get("format") != STREAM_FORMAT:
        raise RcllError("body", f"line 1 is not an {STREAM_FORMAT} header", "send the output of GET /export",
                        code=Code.INVALID_STREAM)
    check.digest.update(first.rstrip(b"\r\n") + b"\n")
    rows = _stream_rows(it, check, max_line)
    if restore:
        max_ids = head.get("max_ids")
        return _restore_rows(conn, rows, max_ids if isinstance(max_ids, dict) else {}, on_conflict, None, check.counts)
    return _import_rows(conn, rows, on_conflict, None, allow, agent, check.counts)


def _rows_json(table: str, batch: list[bytes]) -> str:
    try:
        return (b"[" + b",".join(batch) + b"]").decode()
    except UnicodeDecodeError as e:
        raise _refused(table, "a row is not UTF-8") from e


def _import_rows(conn: psycopg.Connection[Any], rows: Iterator[tuple[str, bytes]], on_conflict: str,
                 progress: Progress | None, allow: Callable[[str], None] | None, agent: str | None,
                 counts: Callable[[], Any]) -> ImportSummary:
    """The untrusted import: the stream staged batch by batch (rcll.import_rows), its trailer
    checked (`counts` raises when it does not hold), then written by rcll.import_finish."""
    on_conflict_arg(on_conflict)
    with _transaction(conn):
        act_as(conn, agent)      # the import is the caller's act (its audit row names the agent)
        first = next(rows, None)
        if first is None or first[0] != "banks":
            raise _refused("banks", "an import starts with the bank's row")
        if allow is not None:    # the bank the import would write to, before it is asked
            allow(_bank_row_name(first[1]))
        _execute(conn, "banks", "SELECT rcll.import_begin(bank_row => %s::jsonb, on_conflict => %s)",
                 (_rows_json("banks", [first[1]])[1:-1], on_conflict))
        for table, batch in _batched(rows):
            _execute(conn, table, "SELECT rcll.import_rows(table_name => %s, rows => %s::jsonb)",
                     (table, _rows_json(table, batch)))
            if progress:
                progress(table, len(batch))
        row = _execute(conn, "trailer", "SELECT rcll.import_finish(counts => %s::jsonb)", (json.dumps(counts()),))
    assert row is not None
    return ImportSummary.from_row(row[0])


def _restore_rows(conn: psycopg.Connection[Any], rows: Iterator[tuple[str, bytes]], max_ids: dict[str, Any],
                  on_conflict: str, progress: Progress | None, counts: Callable[[], Any]) -> ImportSummary:
    """The owner's exact restore (rcll.restore_*): ids, authors and grants as exported."""
    on_conflict_arg(on_conflict)
    with _transaction(conn):
        first = next(rows, None)
        if first is None or first[0] != "banks":
            raise _refused("banks", "a restore starts with the bank's row")
        conn.execute("SELECT rcll.restore_begin(bank_row => %s::jsonb, on_conflict => %s, max_ids => %s::jsonb)",
                     (_rows_json("banks", [first[1]])[1:-1], on_conflict, json.dumps(max_ids)))
        seen: dict[str, int] = {"banks": 1}
        for table, batch in _batched(rows):
            if table == "banks":
                raise _refused("banks", "a restore holds exactly one bank row")
            conn.execute("SELECT rcll.restore_rows(table_name => %s, rows => %s::jsonb)", (table, _rows_json(table, batch)))
            seen[table] = seen.get(table, 0) + len(batch)
            if progress:
                progress(table, len(batch))
        expected = counts()
        for table, n in expected.items():
            if seen.get(table, 0) != n:
                raise _refused(f"trailer.rows.{table}", f"the trailer says {n} rows, the stream holds {seen.get(table, 0)}")
        row = conn.execute("SELECT rcll.restore_finish()").fetchone()
    assert row is not None
    return ImportSummary.from_row(row[0])


@contextmanager
def _transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    was_autocommit = conn.autocommit
    if not conn.autocommit and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.commit()
    conn.autocommit = False
    try:
        with database_errors(), conn.transaction():
            yield
    finally:
        conn.autocommit = was_autocommit


def _execute(conn: psycopg.Connection[Any], field: str, query: LiteralString, params: tuple[Any, ...]) -> Any:
    """One call of the import; a row the database cannot even read as JSON refuses the stream."""
    try:
        return conn.execute(query, params).fetchone()
    except psycopg.DataError as e:
        raise _refused(field, f"not valid JSON: {e.diag.message_primary}") from e


def _batched(rows: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, list[bytes]]]:
    """Consecutive rows of one table, at most IMPORT_BATCH_ROWS rows or IMPORT_BATCH_BYTES bytes."""
    batch: list[bytes] = []
    size = 0
    current: str | None = None
    for table, raw in rows:
        if batch and (table != current or len(batch) >= IMPORT_BATCH_ROWS or size >= IMPORT_BATCH_BYTES):
            assert current is not None
            yield current, batch
            batch, size = [], 0
        current = table
        batch.append(raw)
        size += len(raw)
    if batch and current is not None:
        yield current, batch


# -- import --------------------------------------------------------------------------------------

def read_manifest(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        manifest: dict[str, Any] = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError as e:
        raise RcllError("path", f"{path} holds no {MANIFEST}", "pass the directory `rcll export` wrote",
                        code=Code.NOT_FOUND) from e
    except json.JSONDecodeError as e:
        raise RcllError(MANIFEST, f"not valid JSON: {e.msg}", code=Code.INVALID_STREAM) from e
    if manifest.get("format") != FORMAT:
        raise RcllError(f"{MANIFEST}.format", f"expected {FORMAT!r}, got {manifest.get('format')!r}",
                        code=Code.INVALID_STREAM)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise RcllError(f"{MANIFEST}.format_version", f"this rcll reads version {FORMAT_VERSION}, "
                        f"the export is version {manifest.get('format_version')!r}", "upgrade rcll", code=Code.INVALID_STREAM)
    return manifest


def _lines(path: Path, expected_sha: str, name: str) -> Iterator[bytes]:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for line in f:
            h.update(line)
            if line.strip():
                yield line.rstrip(b"\n")
    if h.hexdigest() != expected_sha:
        raise RcllError(name, "file does not match the manifest's SHA-256 (truncated or edited)",
                        "export again, or restore the file", code=Code.INVALID_STREAM)


@dataclass
class ImportSummary:
    bank: str
    bank_id: int
    fresh: bool
    rows: dict[str, int]

    not_imported: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"bank": self.bank, "bank_id": self.bank_id, "fresh": self.fresh, "rows": self.rows,
                "not_imported": self.not_imported}

    @classmethod
    def from_row(cls, res: dict[str, Any]) -> ImportSummary:
        return cls(res["bank"], int(res["bank_id"]), bool(res["fresh"]),
                   {k: int(v) for k, v in (res.get("rows") or {}).items()},
                   {k: int(v) for k, v in (res.get("not_imported") or {}).items()})


def import_bank(conn: psycopg.Connection[Any], path: Path | str, *, on_conflict: str = "error",
                progress: Progress | None = None, allow: Callable[[str], None] | None = None,
                agent: str | None = None, restore: bool = False) -> ImportSummary:
    """Load an export directory in one transaction (all or nothing), as `agent`: every file whole
    and as the manifest says (SHA-256, row counts) or nothing is written. restore: the owner's
    exact restore (rcll.restore_*) instead of an import."""
    on_conflict_arg(on_conflict)
    path = Path(path)
    manifest = read_manifest(path)
    tables = manifest["tables"]
    if not tables or tables[0]["name"] != "banks":
        raise RcllError(f"{MANIFEST}.tables", "the first table must be banks", code=Code.INVALID_STREAM)
    for t in tables:   # every file whole and as exported before anything is written
        for _ in _lines(path / t["file"], t["sha256"], t["file"]):
            pass

    def rows() -> Iterator[tuple[str, bytes]]:
        for t in tables:
            for line in _lines(path / t["file"], t["sha256"], t["file"]):
                yield t["name"], line

    def counts() -> dict[str, Any]:
        return {t["name"]: t.get("rows") for t in tables}

    if restore:
        return _restore_rows(conn, rows(), manifest.get("max_ids", {}), on_conflict, progress, counts)
    return _import_rows(conn, rows(), on_conflict, progress, allow, agent, counts)


def _bank_row_name(raw: bytes) -> str:
    """The name in an exported banks row ("" when it has none: rcll.import_begin refuses that)."""
    try:
        row = json.loads(raw)
    except json.JSONDecodeError:
        return ""
    name = row.get("name") if isinstance(row, dict) else None
    return name if isinstance(name, str) else ""


# -- PAM validation ------------------------------------------------------------------------------

def validate_pam(path: Path | str) -> list[str]:
    """Problems with the PAM file of an export (empty when valid): the SDK's JSON Schema, then the
    SDK's own deep checks (hashes, integrity checksum, cross-references, temporal order, status)."""
    import importlib.resources

    import jsonschema
    from portable_ai_memory import load, validate_memory_store

    path = Path(path)
    pam_path = path / PAM_FILE if path.is_dir() else path
    schema = json.loads(importlib.resources.files("portable_ai_memory.schemas")
                        .joinpath("portable-ai-memory.schema.json").read_text())
    data = json.loads(pam_path.read_text())
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    problems = [f"schema: {'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
                for e in validator.iter_errors(data)]
    if problems:
        return problems
    result = validate_memory_store(load(pam_path))  # type: ignore[arg-type]
    return [str(i) for i in result.errors]
