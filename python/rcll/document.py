"""What retain takes and returns: a Document in, a RetainResult out (shared by chunk and extraction modes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from rcll.settings import DEFAULTS, Settings
from rcll.validate import check_document


@dataclass
class Document:
    """One piece of text to retain, with where it belongs (room, thread, hall, layer, tags)."""

    content: str
    source: str | None = None
    occurred_at: datetime | None = None
    room: str | None = None
    thread: str | None = None
    tags: list[str] = field(default_factory=list)
    hall: str | None = None
    layer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    author: str | None = None  # a claim only: the server's identity wins (rcll._resolve_author)

    def check(self, settings: Settings = DEFAULTS) -> None:
        """Raise RcllError naming the field when this document cannot be retained (within settings' limits)."""
        check_document(self.content, self.tags, self.metadata, self.layer, settings)

    def fields(self, via: str) -> dict[str, Any]:
        """The document fields every SQL retain takes (rcll.retain_chunks and rcll.retain_facts spell
        them alike: tests/test_retain_chunks.py), as the parameters of one call."""
        return {"source": self.source, "occurred_at": self.occurred_at, "room": self.room, "thread": self.thread,
                "tags": self.tags, "hall": self.hall, "layer": self.layer, "metadata": Jsonb(self.metadata),
                "via": via, "author": self.author}


@dataclass(frozen=True)
class InBank:
    """A write delegated to the bank's worker on a Citus cluster: the bank's id, and what the
    writing transaction would have set - the agent (rcll.agent) and the units' expiry."""

    bank_id: int
    agent: str | None = None
    expires_at: datetime | None = None


@dataclass
class RetainResult:
    """The document's id, the ids of the units written for it, whether it was new, and the mode."""

    document_id: int
    unit_ids: list[int]
    created: bool
    mode: str = "chunks"

    def as_dict(self) -> dict[str, Any]:
        return {"document_id": self.document_id, "unit_ids": self.unit_ids, "created": self.created,
                "mode": self.mode}
