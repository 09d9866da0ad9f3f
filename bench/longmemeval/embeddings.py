"""An embedding cache by content hash, for benchmarks whose corpora take hours to embed.

One append-only file of records (sha256 of the model name and the text, then the float32
vector); a torn last record (a run stopped mid-write) is ignored. Several processes may append:
each record goes in one write() on an O_APPEND descriptor. Not committed: it lives under
~/.cache/rcll-bench (or a folder given by the caller), never beside the read-only data.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rcll import models

MODEL = "bge-small-en-v1.5-int8"
DEFAULT_DIR = Path(os.environ.get("RCLL_BENCH_CACHE") or Path.home() / ".cache" / "rcll-bench")
_RECORD = 32 + 4 * models.EMBED_DIM


def _key(text: str) -> bytes:
    return hashlib.sha256(f"{MODEL}\0{text}".encode()).digest()


class CachedEmbedder:
    """embed(texts) as models.Embedder's, each text embedded once across runs; the rest of the
    embedder (embed_query, count_tokens) is the model's own."""

    def __init__(self, path: Path, embedder: Any | None = None) -> None:
        self.path = path
        self.embedder = embedder or models.get_embedder()
        self.vectors: dict[bytes, np.ndarray] = {}
        self.hits = self.misses = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            raw = path.read_bytes()
            for at in range(0, len(raw) - _RECORD + 1, _RECORD):
                self.vectors[raw[at:at + 32]] = np.frombuffer(raw, np.float32, models.EMBED_DIM, at + 32)
            if len(raw) % _RECORD:      # a torn record: cut it, so appends stay aligned
                with open(path, "r+b") as f:
                    f.truncate(len(raw) - len(raw) % _RECORD)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def missing(self, texts: Sequence[str]) -> list[str]:
        return [t for t in dict.fromkeys(texts) if _key(t) not in self.vectors]

    def embed(self, texts: Sequence[str], batch: int = 1024) -> np.ndarray:
        # Up to `batch` texts a call: the embedder sorts a call's texts by length before it batches
        # them, so the more a call holds, the less padding. A question's ~460 turns in one call took
        # 0.61 of the time in calls of 64 (`--embed-only`'s rate); a stopped run loses one call.
        todo = self.missing(texts)
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        for at in range(0, len(todo), batch):
            part = todo[at:at + batch]
            vecs = self.embedder.embed(part)
            os.write(self._fd, b"".join(_key(t) + np.asarray(v, np.float32).tobytes() for t, v in zip(part, vecs, strict=True)))
            self.vectors.update((_key(t), v) for t, v in zip(part, vecs, strict=True))
        return np.stack([self.vectors[_key(t)] for t in texts]) if texts else np.empty((0, models.EMBED_DIM), np.float32)

    def embed_query(self, text: str) -> Any:
        return self.embedder.embed_query(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return list(self.embedder.count_tokens(texts))
