"""Keyless chunk-mode retain: documents land whole or not at all, and bad input names its field."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from clicall import rcll
from rcll.chunking import chunk_text
from rcll.errors import Code, RcllError
from rcll.retain import Document, retain, retain_many
from rcll.validate import decode_text
from sqlcall import refused


@pytest.fixture
def bank(db: psycopg.Connection[Any]) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


def counts(db: psycopg.Connection[Any]) -> tuple[int, int]:
    row = db.execute("SELECT (SELECT count(*) FROM rcll.documents), (SELECT count(*) FROM rcll.memory_units)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_retain_stores_document_and_embedded_chunks(db: psycopg.Connection[Any], bank: str) -> None:
    text = "We deploy with Argo CD.\n\n" + "The staging cluster runs in eu-west-1. " * 60
    result = retain(db, bank, Document(content=text, source="notes.md", room="deployment"))
    assert result.created and len(result.unit_ids) >= 2
    rows = db.execute("SELECT text, vector_dims(embedding), chunk_index, provenance->>'via', lexical_length > 0"
                      " FROM rcll.memory_units ORDER BY chunk_index").fetchall()
    assert [r[2] for r in rows] == list(range(len(rows)))
    assert all(r[1] == 384 and r[3] == "python" and r[4] for r in rows)
    assert rows[0][0].startswith("We deploy with Argo CD.")


def test_re_retaining_the_same_content_creates_nothing(db: psycopg.Connection[Any], bank: str) -> None:
    first = retain(db, bank, Document(content="Mia prefers tea."))
    second = retain(db, bank, Document(content="Mia prefers tea."))
    assert not second.created and second.unit_ids == first.unit_ids
    assert counts(db) == (1, 1)


def test_bulk_retain_writes_every_document(db: psycopg.Connection[Any], bank: str) -> None:
    docs = [Document(content=f"Fact number {i}: the service {i} owns queue q{i}.") for i in range(150)]
    results = retain_many(db, bank, docs, batch_size=64)
    assert len(results) == 150 and all(r.created for r in results)
    assert counts(db) == (150, 150)


@pytest.mark.parametrize(("content", "field", "message"), [
    ("", "content", "empty"),
    ("   \n\t ", "content", "empty"),
    ("abc\x00def", "content", "NUL byte"),
    ("x" * 2_000_001, "content", "over the limit"),
])
def test_bad_content_is_refused_and_nothing_is_written(db: psycopg.Connection[Any], bank: str,
                                                        content: str, field: str, message: str) -> None:
    with pytest.raises(RcllError) as e:
        retain(db, bank, Document(content=content))
    assert e.value.field == field and message in e.value.message
    assert counts(db) == (0, 0)


def test_invalid_utf8_names_the_byte() -> None:
    with pytest.raises(RcllError) as e:
        decode_text(b"caf\xc3(")
    assert e.value.field == "content" and "byte 3" in e.value.message


def test_unknown_bank_says_how_to_create_it(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(RcllError) as e:
        retain(db, "nobank", Document(content="hello"))
    assert (e.value.code, e.value.field, e.value.message) == (Code.UNKNOWN_BANK, "bank", 'unknown bank "nobank"')
    assert e.value.hint is not None and "create_bank" in e.value.hint
    assert counts(db) == (0, 0)


def test_sql_refuses_empty_and_oversized_documents(db: psycopg.Connection[Any], bank: str) -> None:
    with refused("RC001", "content", "content: empty"):
        db.execute("SELECT * FROM rcll.retain_chunks(bank => 'b', content => ' ', chunks => '{x}', embeddings => NULL)")
    db.execute("SET rcll.max_document_bytes = 10")
    with refused("RC001", "content", "content: 11 bytes is over the limit of 10"):
        db.execute("SELECT * FROM rcll.retain_chunks(bank => 'b', content => 'hello world', chunks => '{x}',"
                   " embeddings => NULL)")
    with refused("RC001", "embeddings", "embeddings: 0 embeddings for 1 chunks"):
        db.execute("SELECT * FROM rcll.retain_chunks(bank => 'b', content => 'hello', chunks => '{x}',"
                   " embeddings => '{}')")
    assert counts(db) == (0, 0)


def test_a_failed_bulk_batch_writes_nothing(db: psycopg.Connection[Any], bank: str) -> None:
    docs = [Document(content="good one"), Document(content="  ")]
    with pytest.raises(RcllError):
        retain_many(db, bank, docs)
    assert counts(db) == (0, 0)


def test_malformed_dsn_names_the_field() -> None:
    proc = rcll("bank", "list", "--dsn", "host=x port=notanumber ==")
    assert proc.returncode == 2
    assert proc.stderr.startswith("rcll: dsn: malformed connection string")


def test_cli_jsonl_error_names_the_line(dsn: str, tmp_path: Any) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"content": "fine"}\n{"content": ""}\n')
    assert rcll("bank", "create", "b", "--dsn", dsn).returncode == 0
    proc = rcll("retain", "--bank", "b", "--jsonl", str(path), "--dsn", dsn)
    assert proc.returncode == 2 and "line 2.content: empty" in proc.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM rcll.documents").fetchone() == (0,)


def test_chunks_are_bounded_and_keep_order() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "word " * (i * 40) for i in range(8))
    chunks = chunk_text(text, max_chars=300)
    assert all(0 < len(c) <= 300 for c in chunks)
    assert "".join(chunks).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")


def test_cli_recall_prints_the_retained_text(dsn: str) -> None:
    assert rcll("bank", "create", "b", "--dsn", dsn).returncode == 0
    assert rcll("retain", "--bank", "b", "--dsn", dsn, "We deploy with Argo CD.").returncode == 0
    proc = rcll("recall", "--bank", "b", "--dsn", dsn, "how do we deploy?")
    assert proc.returncode == 0, proc.stderr
    assert "We deploy with Argo CD." in proc.stdout
    proc = rcll("recall", "--bank", "b", "--dsn", dsn, "--json", "how do we deploy?")
    assert proc.returncode == 0, proc.stderr
    assert '"We deploy with Argo CD."' in proc.stdout


# The fields every retain takes about its document, in this order, with these defaults: SQL has no
# shared parameter list, so the two retain functions spell them each, and this holds them equal.
DOCUMENT_FIELDS = ["source", "occurred_at", "room", "thread", "tags", "hall", "layer", "metadata", "via", "author"]


def _document_parameters(db: psycopg.Connection[Any], function: str) -> list[tuple[str, str, str | None]]:
    rows = db.execute("""
        SELECT a.name, format_type(a.type, NULL), pg_get_function_arg_default(p.oid, a.n::integer)
        FROM pg_proc p, unnest(p.proargnames, p.proargtypes::oid[]) WITH ORDINALITY AS a(name, type, n)
        WHERE p.oid = %s::regproc ORDER BY a.n""", (function,)).fetchall()
    return [r for r in rows if r[0] in DOCUMENT_FIELDS]


def test_every_retain_takes_the_same_document_fields(db: psycopg.Connection[Any]) -> None:
    chunks = _document_parameters(db, "rcll.retain_chunks")
    assert [name for name, _, _ in chunks] == DOCUMENT_FIELDS
    assert _document_parameters(db, "rcll.retain_facts") == chunks
    # ... and Python writes them from one place, which names each.
    assert list(Document("x").fields("api")) == DOCUMENT_FIELDS


def test_a_failed_extraction_is_kept_as_tagged_chunks_with_its_calls(db: psycopg.Connection[Any], bank: str) -> None:
    calls = '[{"purpose": "extract", "provider": "anthropic", "model": "m", "input_tokens": 5, "outcome": "failed"}]'
    doc, ids, created = db.execute(
        "SELECT * FROM rcll.retain_chunks('b', 'Kim runs nightly.', ARRAY['Kim runs nightly.'], NULL, tags => ARRAY['ops'],"
        " extraction_error => 'timeout', llm_calls => %s)", (calls,)).fetchone()  # type: ignore[misc]
    assert created and len(ids) == 1
    assert db.execute("SELECT extraction, metadata ->> 'extraction_error' FROM rcll.documents WHERE document_id = %s",
                      (doc,)).fetchone() == ("failed", "timeout")
    assert db.execute("SELECT tags FROM rcll.memory_units").fetchone() == (["extraction:failed", "ops"],)
    assert db.execute("SELECT count(*) FROM rcll.llm_calls WHERE document_id = %s", (doc,)).fetchone() == (1,)
