"""Retain: store documents as memory units.

LLM_PROVIDER=none (the default) is chunk mode: a document is split into chunks, embedded locally
and written by rcll.retain_chunks() in one statement. Extraction modes (offline, anthropic) live in
rcll.extract and are dispatched from here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import psycopg

from rcll.chunking import chunk_text
from rcll.document import Document, RetainResult
from rcll.errors import RcllError, database_errors
from rcll.extract import retain_extracted
from rcll.models import get_embedder
from rcll.validate import check_bank
from rcll.workqueue import WRITE, installed

__all__ = ["PROVIDERS", "Document", "Prepared", "RetainResult", "prepare", "provider", "retain", "retain_many"]

PROVIDERS = ("none", "offline", "anthropic")
# Under a model-work queue (rcll.workqueue, installed by the servers) texts are embedded this many
# at a time, one slot each, so a bulk retain never holds a slot for long.
EMBED_STEP = 32
Prepared = tuple[list[str], np.ndarray[Any, np.dtype[np.float32]]]


def provider() -> str:
    name = os.environ.get("LLM_PROVIDER", "none").strip().lower() or "none"
    if name not in PROVIDERS:
        raise RcllError("LLM_PROVIDER", f"unknown provider {name!r}", f"use one of {', '.join(PROVIDERS)}")
    return name


def _embed(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    queue = installed()
    if queue is None or not texts:
        return get_embedder().embed(texts)
    parts = []
    for i in range(0, len(texts), EMBED_STEP):
        with queue.slot(WRITE):
            parts.append(get_embedder().embed(texts[i:i + EMBED_STEP]))
    return np.concatenate(parts)


def prepare(doc: Document) -> Prepared | None:
    """Chunk mode's model work for one document, done before a connection is taken: its chunks and
    their embeddings (None in the extraction modes, whose work needs the connection)."""
    doc.check()
    if provider() != "none":
        return None
    chunks = chunk_text(doc.content)
    return chunks, _embed(chunks)


def _write_chunks(conn: psycopg.Connection[Any], bank: str, doc: Document, chunks: list[str],
                  vectors: np.ndarray[Any, np.dtype[np.float32]], via: str) -> RetainResult:
    with database_errors():
        row = conn.execute(
            "SELECT * FROM rcll.retain_chunks(bank => %(bank)s, content => %(content)s, chunks => %(chunks)s,"
            " embeddings => %(embeddings)s::vector[], source => %(source)s, occurred_at => %(occurred_at)s,"
            " room => %(room)s, thread => %(thread)s, tags => %(tags)s, hall => %(hall)s, layer => %(layer)s,"
            " metadata => %(metadata)s, via => %(via)s, author => %(author)s)",
            {"bank": bank, "content": doc.content, "chunks": chunks, "embeddings": list(vectors),
             "source": doc.source, "occurred_at": doc.occurred_at, "room": doc.room, "thread": doc.thread,
             "tags": doc.tags, "hall": doc.hall, "layer": doc.layer,
             "metadata": psycopg.types.json.Jsonb(doc.metadata), "via": via, "author": doc.author},
        ).fetchone()
    assert row is not None
    return RetainResult(int(row[0]), [int(u) for u in row[1]], bool(row[2]))


def retain(conn: psycopg.Connection[Any], bank: str, doc: Document, *, via: str = "python",
           prepared: Prepared | None = None) -> RetainResult:
    """Retain one document in one transaction (chunk mode: with `prepared`'s chunks and vectors
    when given - see prepare())."""
    check_bank(bank)
    doc.check()
    mode = provider()
    if mode != "none":
        return retain_extracted(conn, bank, doc, mode=mode, via=via)
    if prepared is None:
        texts = chunk_text(doc.content)
        prepared = texts, _embed(texts)
    chunks, vectors = prepared
    with conn.transaction():
        return _write_chunks(conn, bank, doc, chunks, vectors, via)


def _batches(docs: Iterable[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for d in docs:
        d.check()
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _chunk_and_embed(batch: list[Document]) -> tuple[list[list[str]], np.ndarray[Any, np.dtype[np.float32]]]:
    chunked = [chunk_text(d.content) for d in batch]
    return chunked, _embed([c for cs in chunked for c in cs])


def retain_many(conn: psycopg.Connection[Any], bank: str, docs: Iterable[Document], *, via: str = "python",
                batch_size: int = 512, on_progress: Callable[[int], None] | None = None) -> list[RetainResult]:
    """Chunk-mode bulk retain. Embedding of batch i+1 overlaps the database write of batch i (the
    embedder releases the GIL), so the database adds little to the embedder's own cost. Each batch
    is one transaction; an invalid document stops the run before its batch is written."""
    check_bank(bank)
    mode = provider()
    if mode != "none":
        return [retain(conn, bank, d, via=via) for d in docs]
    results: list[RetainResult] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: Future[tuple[list[list[str]], Any]] | None = None
        pending_batch: list[Document] = []
        for batch in _batches(docs, batch_size):
            nxt = pool.submit(_chunk_and_embed, batch)
            if pending is not None:
                results += _write_batch(conn, bank, pending_batch, *pending.result(), via)
                if on_progress:
                    on_progress(len(pending_batch))
            pending, pending_batch = nxt, batch
        if pending is not None:
            results += _write_batch(conn, bank, pending_batch, *pending.result(), via)
            if on_progress:
                on_progress(len(pending_batch))
    return results


def _write_batch(conn: psycopg.Connection[Any], bank: str, batch: list[Document], chunked: list[list[str]],
                 vectors: np.ndarray[Any, np.dtype[np.float32]], via: str) -> list[RetainResult]:
    out: list[RetainResult] = []
    offset = 0
    with conn.transaction():
        for doc, chunks in zip(batch, chunked):
            out.append(_write_chunks(conn, bank, doc, chunks, vectors[offset:offset + len(chunks)], via))
            offset += len(chunks)
    return out
