"""Input checks that happen before anything is written; each failure names the field and the fix."""

from __future__ import annotations

import os
from typing import Any

from rcll.errors import RcllError

DEFAULT_MAX_DOCUMENT_BYTES = 1_048_576


def max_document_bytes() -> int:
    return int(os.environ.get("RCLL_MAX_DOCUMENT_BYTES", DEFAULT_MAX_DOCUMENT_BYTES))


def decode_text(raw: bytes, field: str = "content") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RcllError(field, f"invalid UTF-8 at byte {e.start}", "send the text UTF-8 encoded") from e


def check_text(text: Any, field: str = "content", limit: int | None = None) -> str:
    if not isinstance(text, str):
        raise RcllError(field, f"must be a string, got {type(text).__name__}")
    if "\x00" in text:
        raise RcllError(field, f"contains a NUL byte at position {text.index(chr(0))}",
                        "PostgreSQL text cannot hold NUL; strip it or send the data base64-encoded")
    if not text.strip():
        raise RcllError(field, "empty or whitespace-only text", "pass the text to retain")
    limit = max_document_bytes() if limit is None else limit
    size = len(text.encode("utf-8"))
    if size > limit:
        raise RcllError(field, f"{size} bytes is over the limit of {limit} bytes",
                        "split the document or raise RCLL_MAX_DOCUMENT_BYTES")
    return text


def check_bank(bank: Any) -> str:
    if not isinstance(bank, str) or not bank:
        raise RcllError("bank", "a bank name is required", "pass --bank NAME (create it with `rcll bank create NAME`)")
    return bank
