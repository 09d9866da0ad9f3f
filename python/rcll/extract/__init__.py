"""Extraction-mode retain: a document becomes typed, dated, entity-linked facts.

LLM_PROVIDER=anthropic extracts with Claude (rcll.extract.anthropic_extractor); LLM_PROVIDER=offline
with deterministic rules (rcll.extract.offline). Either way Python only extracts and embeds; the
write - document, facts, entities, links, supersession, ledger - is one call of rcll.retain_facts,
so one transaction.

When the LLM fails (after retries), settings.extraction_failure (RCLL_EXTRACTION_FAILURE) decides: `chunks` (default) stores the
document as chunks tagged extraction:failed (documents.extraction = 'failed'); `error` raises and
writes nothing but the ledger rows of the calls that were paid for. Never a "completed" retain with
nothing stored.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from rcll.chunking import chunk_text
from rcll.citus import named_call, own_statement
from rcll.document import Document, InBank, RetainResult
from rcll.errors import Code, RcllError, database_errors
from rcll.extract import anthropic_extractor, offline
from rcll.extract.anthropic_extractor import ExtractionFailed
from rcll.extract.schema import Fact
from rcll.models import get_embedder
from rcll.settings import DEFAULTS, Settings

# Offline supersession only has the fact's own text to go on, so it asks for a closer match.
SUPERSEDE_THRESHOLD = {"llm": 0.80, "offline": 0.75}

_client: Any = None


def set_client(client: Any) -> None:
    """Use this Anthropic client for extraction (tests pass one with a recorded transport)."""
    global _client
    _client = client


def _embed(texts: list[str], settings: Settings) -> np.ndarray[Any, np.dtype[np.float32]]:
    return get_embedder(settings).embed(texts)


def _db(call: Any) -> Any:
    with database_errors():
        return call()


_VECTORS = sql.SQL("vector[]")
_CASTS = {"embeddings": _VECTORS, "aux_embeddings": _VECTORS, "aux_texts": sql.SQL("text[]")}


def _write(conn: psycopg.Connection[Any], function: str, args: dict[str, Any],
           in_bank: InBank | None, carries: tuple[str, ...] = ("agent", "expires_at")) -> Any:
    """The first row of rcll.<function>(args by name) in a transaction of its own; with in_bank
    (a Citus cluster), of its *_in_bank twin sent as its own statement, which Citus runs whole
    on the bank's worker, with what the twin carries of the transaction (616-citus-delegated-verbs.sql)."""
    if in_bank is None:
        with conn.transaction():
            return _db(lambda: conn.execute(named_call(function, args, casts=_CASTS), args).fetchone())
    given = {"agent": in_bank.agent or None, "expires_at": in_bank.expires_at}
    params = {**args, **{k: given[k] for k in carries}, "bank_id": in_bank.bank_id}
    with own_statement(conn):
        return _db(lambda: conn.execute(named_call(function, [*args, *carries], in_bank=True, casts=_CASTS),
                                        params).fetchone())


def _read(conn: psycopg.Connection[Any], in_bank: InBank | None) -> AbstractContextManager[Any]:
    """A read before a delegated write goes as its own statement too (no transaction left open)."""
    return own_statement(conn) if in_bank is not None else nullcontext(conn)


def extract_facts(doc: Document, mode: str, client: Any = None,
                  settings: Settings = DEFAULTS) -> tuple[list[Fact], list[dict[str, Any]]]:
    """(facts, ledger calls) for a document; raises ExtractionFailed for the LLM."""
    if mode == "offline":
        return offline.extract(doc.content, doc.occurred_at), []
    if mode == "anthropic":
        result = anthropic_extractor.extract(doc.content, doc.occurred_at, client=client or _client,
                                             settings=settings)
        return result.facts, result.calls
    raise RcllError("LLM_PROVIDER", f"{mode!r} does not extract", "use offline or anthropic")


def retain_extracted(conn: psycopg.Connection[Any], bank: str, doc: Document, *, mode: str, via: str = "python",
                     client: Any = None, settings: Settings = DEFAULTS, in_bank: InBank | None = None) -> RetainResult:
    """Extract, embed and write one document (one transaction for its rows). in_bank: on a Citus
    cluster, each write is one call delegated whole to the bank's worker (rcll.retain_facts_in_bank)."""
    policy = settings.extraction_failure
    with _read(conn, in_bank):
        existing = _db(lambda: conn.execute(
            "SELECT document_id, unit_ids, extraction FROM rcll.find_document(bank => %(bank)s,"
            " content => %(content)s, thread => %(thread)s)",
            {"bank": bank, "content": doc.content, "thread": doc.thread}).fetchone())
    if existing is not None:                   # no model call, no duplicate facts
        return RetainResult(int(existing[0]), [int(u) for u in existing[1]], False, str(existing[2]))

    try:
        facts, calls = extract_facts(doc, mode, client, settings)
    except ExtractionFailed as failed:
        return _failed(conn, bank, doc, via, policy, str(failed), failed.calls, settings, in_bank)

    extraction = "llm" if mode == "anthropic" else "offline"
    if not facts:       # only trivial text may come back empty (else it failed): keep it verbatim
        facts = [Fact(text=doc.content.strip(), metadata={"extractor": "verbatim",
                                                           "reason": "no facts in trivial text"})]
    aux: list[str] = []
    for f in facts:
        aux += [e["name"] for e in f.entities] + [s for s in f.supersedes if s != f.text]
    aux = list(dict.fromkeys(a for a in aux if a.strip()))
    vectors = _embed([f.text for f in facts] + aux, settings)
    params = {"bank": bank, "content": doc.content, "facts": Jsonb([f.as_json() for f in facts]),
              "embeddings": list(vectors[:len(facts)]), "aux_texts": aux, "aux_embeddings": list(vectors[len(facts):]),
              "extraction": extraction, "llm_calls": Jsonb(calls), **doc.fields(via),
              "match_known_entities": extraction == "offline", "supersede_threshold": SUPERSEDE_THRESHOLD[extraction]}
    row = _write(conn, "retain_facts", params, in_bank)
    assert row is not None
    return RetainResult(int(row[0]), [int(u) for u in row[1]], bool(row[2]), extraction)


def _failed(conn: psycopg.Connection[Any], bank: str, doc: Document, via: str, policy: str, error: str,
            calls: list[dict[str, Any]], settings: Settings, in_bank: InBank | None) -> RetainResult:
    if policy == "error":
        if calls:                              # the tokens were spent: the ledger says so
            _write(conn, "record_llm_calls", {"bank": bank, "calls": Jsonb(calls)}, in_bank, carries=())
        raise RcllError("extraction", error, "retry later, or set RCLL_EXTRACTION_FAILURE=chunks to store "
                                             "failed documents as chunks tagged extraction:failed",
                        code=Code.UNAVAILABLE)
    chunks = chunk_text(doc.content)
    vectors = _embed(chunks, settings)
    row = _write(conn, "retain_chunks", {"bank": bank, "content": doc.content, "chunks": chunks,
                                         "embeddings": list(vectors), "extraction_error": error,
                                         "llm_calls": Jsonb(calls), **doc.fields(via)}, in_bank)
    assert row is not None
    return RetainResult(int(row[0]), [int(u) for u in row[1]], bool(row[2]), "failed")
