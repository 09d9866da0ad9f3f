"""Input checks, the one module for them: each failure is an RcllError naming the field and the fix.

Every interface (the Python API, CLI, HTTP, MCP) passes its callers' values through these before
anything reaches the database; HTTP's schema checks shapes first, these check what it cannot
(NUL bytes, surrogates, finite numbers, ranges).
"""

from __future__ import annotations

import contextlib
import json
import math
from datetime import datetime, timedelta
from typing import Any

from rcll.errors import RcllError
from rcll.settings import DEFAULTS, Settings

# The limits a caller's values meet are settings (rcll.settings, each with its variable); their defaults:
DEFAULT_MAX_DOCUMENT_BYTES = DEFAULTS.max_document_bytes
DEFAULT_MAX_METADATA_BYTES = DEFAULTS.max_metadata_bytes
DEFAULT_MAX_STATE_BYTES = DEFAULTS.max_state_bytes
DEFAULT_MAX_IMPORT_LINE_BYTES = DEFAULTS.max_import_line_bytes
MAX_QUERY = 4000
MAX_NAME = 512
MAX_BANK_NAME = 128
MAX_LIST = 256
MAX_BUDGET = 200_000
MAX_VERSION = 2**31 - 1
LAYERS = ("L0", "L1", "L2")


def json_size_arg(value: Any, field: str, limit: int, setting: str) -> Any:
    """A JSON value (json_arg) whose compact encoding is at most `limit` bytes."""
    json_arg(value, field)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > limit:
        raise RcllError(field, f"{size} bytes of JSON is over the limit of {limit} bytes",
                        f"store less here (a document's text goes in content), or raise {setting}")
    return value


def metadata_arg(value: Any, field: str = "metadata", *, limit: int = DEFAULT_MAX_METADATA_BYTES) -> Any:
    """A document's metadata: at most `limit` bytes of JSON (settings.max_metadata_bytes)."""
    return json_size_arg(value, field, limit, "RCLL_MAX_METADATA_BYTES")


def state_value_arg(value: Any, field: str = "value", *, limit: int = DEFAULT_MAX_STATE_BYTES) -> Any:
    """One version of a room's state: at most `limit` bytes of JSON (settings.max_state_bytes)."""
    return json_size_arg(value, field, limit, "RCLL_MAX_STATE_BYTES")


def decode_text(raw: bytes, field: str = "content") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RcllError(field, f"invalid UTF-8 at byte {e.start}", "send the text UTF-8 encoded") from e


def check_text(text: Any, field: str = "content", limit: int = DEFAULT_MAX_DOCUMENT_BYTES) -> str:
    """Text to retain: a non-blank string without NUL, at most `limit` bytes (settings.max_document_bytes)."""
    if not isinstance(text, str):
        raise RcllError(field, f"must be a string, got {type(text).__name__}")
    if "\x00" in text:
        raise RcllError(field, f"contains a NUL byte at position {text.index(chr(0))}",
                        "PostgreSQL text cannot hold NUL; strip it or send the data base64-encoded")
    if not text.strip():
        raise RcllError(field, "empty or whitespace-only text", "pass the text to retain")
    size = len(text.encode("utf-8"))
    if size > limit:
        raise RcllError(field, f"{size} bytes is over the limit of {limit} bytes",
                        "split the document or raise RCLL_MAX_DOCUMENT_BYTES")
    return text


def check_bank(bank: Any) -> str:
    """A bank name is present and a string (whether the bank exists is the database's answer)."""
    if not isinstance(bank, str) or not bank:
        raise RcllError("bank", "a bank name is required", "pass --bank NAME (create it with `rcll bank create NAME`)")
    return str(text_arg(bank, "bank", required=True, limit=MAX_BANK_NAME))


def check_document(content: Any, tags: Any, metadata: Any, layer: Any, settings: Settings = DEFAULTS) -> None:
    """The fields of a Document that retain needs before anything is embedded, within settings' limits."""
    check_text(content, "content", settings.max_document_bytes)
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RcllError("tags", "must be a list of strings")
    if not isinstance(metadata, dict):
        raise RcllError("metadata", "must be a JSON object")
    metadata_arg(metadata, limit=settings.max_metadata_bytes)
    if layer is not None and layer not in LAYERS:
        raise RcllError("layer", f"{layer!r} is not a layer", "use L0, L1 or L2")


def text_arg(value: Any, field: str, *, required: bool = False, limit: int = MAX_NAME) -> str | None:
    """An optional (or required) string PostgreSQL text can hold, at most `limit` characters."""
    if value is None:
        if required:
            raise RcllError(field, "is required")
        return None
    if not isinstance(value, str):
        raise RcllError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise RcllError(field, "contains a NUL byte", "PostgreSQL text cannot hold NUL; strip it")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise RcllError(field, "contains an unpaired UTF-16 surrogate", "send valid Unicode text")
    if required and not value.strip():
        raise RcllError(field, "is empty")
    if len(value) > limit:
        raise RcllError(field, f"{len(value)} characters is over the limit of {limit}")
    return value


def required_text(value: Any, field: str, *, limit: int = MAX_NAME) -> str:
    """text_arg for a value that must be there."""
    return str(text_arg(value, field, required=True, limit=limit))


def list_arg(value: Any, field: str) -> list[str] | None:
    """An optional list of non-empty strings (a single string is a list of one)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise RcllError(field, f"must be a list of strings, got {type(value).__name__}")
    if len(value) > MAX_LIST:
        raise RcllError(field, f"{len(value)} items is over the limit of {MAX_LIST}")
    return [required_text(v, f"{field}[{i}]") for i, v in enumerate(value)]


def int_arg(value: Any, field: str, lo: int, hi: int, default: int | None = None) -> int | None:
    """An optional integer in lo..hi (booleans are not integers here)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RcllError(field, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise RcllError(field, f"{value} is out of range", f"use {lo}..{hi}")
    return value


def bool_arg(value: Any, field: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RcllError(field, "must be true or false")


def time_arg(value: Any, field: str) -> datetime | None:
    """An optional timestamp: a datetime or an ISO 8601 string."""
    if value is None or isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text_arg(value, field)
        try:
            dt = datetime.fromisoformat(value)
        except ValueError as e:
            raise RcllError(field, f"{value!r} is not an ISO 8601 timestamp", "e.g. 2024-05-01T00:00:00Z") from e
    else:
        raise RcllError(field, f"must be an ISO 8601 timestamp string, got {type(value).__name__}")
    if dt is not None and not 1 <= dt.year <= 9999:
        raise RcllError(field, "year out of range")
    return dt


MAX_DURATION = timedelta(days=365_000)     # keeps now() + a span a timestamp both Python and PostgreSQL hold


def duration_arg(value: Any, field: str) -> timedelta | None:
    """An optional positive time span: a timedelta, a number of seconds, or an ISO 8601 duration
    (P90D, PT12H, P1DT30M) - the one spelling every interface accepts for a ttl or a retention."""
    if value is None:
        return None
    hint = "an ISO 8601 duration (P90D, PT12H) or a number of seconds"
    if isinstance(value, bool):
        raise RcllError(field, "must be a time span, not true or false", hint)
    if isinstance(value, str):
        text_arg(value, field)
        with contextlib.suppress(ValueError):      # "3600": seconds; anything else: a duration
            value = float(value)
    if isinstance(value, (int, float)) and not math.isfinite(value):
        raise RcllError(field, "must be a finite number of seconds", hint)
    from pydantic import TypeAdapter, ValidationError  # deferred: only durations need pydantic's parser

    try:
        span = TypeAdapter(timedelta).validate_python(value)
    except (ValidationError, OverflowError) as e:
        raise RcllError(field, f"{value!r} is not a time span", hint) from e
    if span <= timedelta(0):
        raise RcllError(field, "must be a positive time span", hint)
    if span > MAX_DURATION:
        raise RcllError(field, "is over the limit of 1000 years", hint)
    return span


def duration_text(span: timedelta) -> str:
    """A time span as ISO 8601 (P90D, PT1H): how every interface shows one."""
    from pydantic import TypeAdapter  # deferred: only durations need pydantic's serializer

    return str(TypeAdapter(timedelta).dump_python(span, mode="json"))


def json_arg(value: Any, field: str, depth: int = 0) -> Any:
    """A JSON value PostgreSQL jsonb can hold (no NUL, finite numbers, bounded depth)."""
    if depth > 64:
        raise RcllError(field, "nested too deeply (over 64 levels)")
    if isinstance(value, str):
        text_arg(value, field, limit=1 << 20)
    elif isinstance(value, float) and not math.isfinite(value):
        raise RcllError(field, "numbers must be finite (no NaN or Infinity)")
    elif isinstance(value, dict):
        for k, v in value.items():
            text_arg(k, f"{field}.<key>", limit=1 << 16)
            json_arg(v, f"{field}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            json_arg(v, f"{field}[{i}]", depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise RcllError(field, f"not a JSON value ({type(value).__name__})")
    return value


def on_conflict_arg(value: Any) -> str:
    if value not in ("error", "skip", "replace"):
        raise RcllError("on_conflict", f"{value!r} is not a conflict policy", "use error, skip or replace")
    return str(value)
