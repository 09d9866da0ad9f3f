"""Retain: store documents as memory units.

settings.llm_provider (LLM_PROVIDER) none, the default, is chunk mode: a document is split into chunks, embedded locally
and written by rcll.retain_chunks() in one statement. Extraction modes (offline, anthropic) live in
rcll.extract and are dispatched from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import numpy as np
import psycopg

from rcll.chunking import chunk_text
from rcll.citus import own_statement
from rcll.document import Document, InBank, RetainResult
from rcll.errors import database_errors
from rcll.extract import retain_extracted
from rcll.models import get_embedder
from rcll.settings import DEFAULTS, PROVIDERS, Settings
from rcll.validate import check_bank
from rcll.workqueue import WRITE, installed

__all__ = ["PROVIDERS", "Document", "InBank", "Prepared", "RetainResult", "prepare", "retain", "retain_in_bank",
           "retain_many"]

# Under a model-work queue (rcll.workqueue, installed by the servers) texts are embedded this many
# at a time, one slot each, so a bulk retain never holds a slot for long.
EMBED_STEP = 32
Prepared = tuple[list[str], np.ndarray[Any, np.dtype[np.float32]]]


def _embed(texts: list[str], settings: Settings) -> np.ndarray[Any, np.dtype[np.float32]]:
    queue = installed()
    embedder = get_embedder(settings)
    if queue is None or not texts:
        return embedder.embed(texts)
    parts = []
    for i in range(0, len(texts), EMBED_STEP):
        with queue.slot(WRITE):
            parts.append(embedder.embed(texts[i:i + EMBED_STEP]))
    return np.concatenate(parts)


def prepare(doc: Document, settings: Settings = DEFAULTS) -> Prepared | None:
    """Chunk mode's model work for one document, done before a connection is taken: its chunks and
    their embeddings (None in the extraction modes, whose work needs the connection)."""
    doc.check(settings)
    if settings.llm_provider != "none":
        return None
    chunks = chunk_text(doc.content)
    return chunks, _embed(chunks, settings)


def _write_chunks(conn: psycopg.Connection[Any], bank: str, doc: Document, chunks: list[str],
                  vectors: np.ndarray[Any, np.dtype[np.float32]], via: str) -> RetainResult:
    with database_errors():
        row = conn.execute(
            "SELECT * FROM rcll.retain_chunks(bank => %(bank)s, content => %(content)s, chunks => %(chunks)s,"
            " embeddings => %(embeddings)s::vector[], source => %(source)s, occurred_at => %(occurred_at)s,"
            " room => %(room)s, thread => %(thread)s, tags => %(tags)s, hall => %(hall)s, layer => %(layer)s,"
            " metadata => %(metadata)s, via => %(via)s, author => %(author)s)",
            {"bank": bank, "content": doc.content, "chunks": chunks, "embeddings": list(vectors), **doc.fields(via)},
        ).fetchone()
    assert row is not None
    return RetainResult(int(row[0]), [int(u) for u in row[1]], bool(row[2]))


# On a Citus cluster (rcll.citus): the whole write as one call with the bank's id first, which
# Citus runs on the worker holding the bank (sql/functions/615-citus-delegated-writes.sql) when
# it is the client's own statement, outside a transaction block. What Memory sets for its
# transaction (rcll.agent, rcll.expires_at) goes with it as arguments.
_RETAIN_CHUNKS_IN_BANK = (
    "SELECT * FROM rcll.retain_chunks_in_bank(bank_id => %(bank_id)s, bank => %(bank)s, content => %(content)s,"
    " chunks => %(chunks)s, embeddings => %(embeddings)s::vector[], source => %(source)s,"
    " occurred_at => %(occurred_at)s, room => %(room)s, thread => %(thread)s, tags => %(tags)s, hall => %(hall)s,"
    " layer => %(layer)s, metadata => %(metadata)s, via => %(via)s, author => %(author)s, agent => %(agent)s,"
    " expires_at => %(expires_at)s)")


def _write_chunks_in_bank(conn: psycopg.Connection[Any], bank: str, target: InBank, doc: Document, chunks: list[str],
                          vectors: np.ndarray[Any, np.dtype[np.float32]], via: str) -> RetainResult:
    with database_errors(), own_statement(conn):
        row = conn.execute(_RETAIN_CHUNKS_IN_BANK, {
            "bank_id": target.bank_id, "bank": bank, "content": doc.content, "chunks": chunks,
            "embeddings": list(vectors), **doc.fields(via), "agent": target.agent or None,
            "expires_at": target.expires_at}).fetchone()
    assert row is not None
    return RetainResult(int(row[0]), [int(u) for u in row[1]], bool(row[2]))


def retain_in_bank(conn: psycopg.Connection[Any], bank: str, target: InBank, doc: Document, *, via: str = "python",
                   prepared: Prepared | None = None, settings: Settings = DEFAULTS) -> RetainResult:
    """retain() on a Citus cluster: one document written by rcll.retain_chunks_in_bank (or, in the
    extraction modes, rcll.retain_facts_in_bank), sent on `conn` (outside any transaction) as its
    own statement, which Citus runs whole on the worker holding the bank - the same rows as
    retain() writes."""
    check_bank(bank)
    doc.check(settings)
    if settings.llm_provider != "none":
        return retain_extracted(conn, bank, doc, mode=settings.llm_provider, via=via, settings=settings, in_bank=target)
    if prepared is None:
        texts = chunk_text(doc.content)
        prepared = texts, _embed(texts, settings)
    chunks, vectors = prepared
    return _write_chunks_in_bank(conn, bank, target, doc, chunks, vectors, via)


def retain(conn: psycopg.Connection[Any], bank: str, doc: Document, *, via: str = "python",
           prepared: Prepared | None = None, settings: Settings = DEFAULTS) -> RetainResult:
    """Retain one document in one transaction (chunk mode: with `prepared`'s chunks and vectors
    when given - see prepare()), in the mode settings.llm_provider names."""
    check_bank(bank)
    doc.check(settings)
    mode = settings.llm_provider
    if mode != "none":
        return retain_extracted(conn, bank, doc, mode=mode, via=via, settings=settings)
    if prepared is None:
        texts = chunk_text(doc.content)
        prepared = texts, _embed(texts, settings)
    chunks, vectors = prepared
    with conn.transaction():
        return _write_chunks(conn, bank, doc, chunks, vectors, via)


def _batches(docs: Iterable[Document], size: int, settings: Settings) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for d in docs:
        d.check(settings)
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _chunk_and_embed(batch: list[Document],
                     settings: Settings) -> tuple[list[list[str]], np.ndarray[Any, np.dtype[np.float32]]]:
    chunked = [chunk_text(d.content) for d in batch]
    return chunked, _embed([c for cs in chunked for c in cs], settings)


def retain_many(conn: psycopg.Connection[Any], bank: str, docs: Iterable[Document], *, via: str = "python",
                batch_size: int = 512, on_progress: Callable[[int], None] | None = None,
                settings: Settings = DEFAULTS, in_bank: InBank | None = None) -> list[RetainResult]:
    """Chunk-mode bulk retain. Embedding of batch i+1 overlaps the database write of batch i (the
    embedder releases the GIL), so the database adds little to the embedder's own cost. Each batch
    is one transaction; an invalid document stops the run before its batch is written. in_bank: on
    a Citus cluster, each document is written by one call delegated to the bank's worker
    (retain_in_bank), its own transaction."""
    check_bank(bank)
    if settings.llm_provider != "none":
        if in_bank is not None:
            return [retain_in_bank(conn, bank, in_bank, d, via=via, settings=settings) for d in docs]
        return [retain(conn, bank, d, via=via, settings=settings) for d in docs]
    results: list[RetainResult] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: Future[tuple[list[list[str]], Any]] | None = None
        pending_batch: list[Document] = []
        for batch in _batches(docs, batch_size, settings):
            nxt = pool.submit(_chunk_and_embed, batch, settings)
            if pending is not None:
                results += _write_batch(conn, bank, pending_batch, *pending.result(), via, in_bank)
                if on_progress:
                    on_progress(len(pending_batch))
            pending, pending_batch = nxt, batch
        if pending is not None:
            results += _write_batch(conn, bank, pending_batch, *pending.result(), via, in_bank)
            if on_progress:
                on_progress(len(pending_batch))
    return results


def _write_batch(conn: psycopg.Connection[Any], bank: str, batch: list[Document], chunked: list[list[str]],
                 vectors: np.ndarray[Any, np.dtype[np.float32]], via: str,
                 in_bank: InBank | None = None) -> list[RetainResult]:
    out: list[RetainResult] = []
    offset = 0
    # The batch is one transaction; on a Citus cluster each document is a delegated call of its own.
    with conn.transaction() if in_bank is None else nullcontext():
        for doc, chunks in zip(batch, chunked):
            part = vectors[offset:offset + len(chunks)]
            out.append(_write_chunks(conn, bank, doc, chunks, part, via) if in_bank is None
                       else _write_chunks_in_bank(conn, bank, in_bank, doc, chunks, part, via))
            offset += len(chunks)
    return out
