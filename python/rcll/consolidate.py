"""Consolidation: a background job, never on the recall path.

Related pending L2 units (sharing an entity within a time window, rcll.consolidation_groups) are
compacted into one observation each (kind 'observation'), written by rcll.write_observation in one
transaction per group: sources linked ('consolidates'), marked consolidated, an audit_log row, and
a room on every observation (the sources' majority room, else the classifier's, else general).

The observation's text comes from the LLM when settings.llm_provider (LLM_PROVIDER) is anthropic (ledger purpose
'consolidate'; on failure the offline rule is used instead), else from the offline rule: the
entity, the time span, and the source facts in time order. `rcll consolidate --bank NAME`
(or Memory.consolidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rcll.errors import RcllError, database_errors
from rcll.extract import anthropic_extractor as ax
from rcll.models import get_embedder
from rcll.settings import DEFAULTS, Settings
from rcll.validate import check_bank

MAX_OBSERVATION_CHARS = 2000
TOOL = {"name": "record_observation", "description": "Record one observation that summarises the facts.",
        "input_schema": {"type": "object", "additionalProperties": False, "required": ["text"],
                         "properties": {"text": {"type": "string", "minLength": 1}}}}


@dataclass
class Observation:
    """An observation written: its unit, the units it consolidates, and how its text was made."""

    unit_id: int
    sources: list[int]
    method: str


def offline_text(entity: str, texts: list[str]) -> str:
    seen: list[str] = []
    for t in texts:
        t = t.strip().rstrip(".")
        if t and t not in seen:
            seen.append(t)
    body = "; ".join(seen)
    if len(body) > MAX_OBSERVATION_CHARS:
        body = body[:MAX_OBSERVATION_CHARS].rsplit(" ", 1)[0] + " ..."
    return f"{entity}: {body}."


def llm_text(entity: str, texts: list[str], client: Any = None,
             settings: Settings = DEFAULTS) -> tuple[str | None, list[dict[str, Any]]]:
    client = client or ax.make_client(settings)
    model = settings.llm_model
    try:
        message = client.messages.create(
            model=model, max_tokens=1024,
            system="Summarise the facts about one subject into a single self-contained observation "
                   "(keep names, dates and numbers; no speculation). Call record_observation once.",
            messages=[{"role": "user", "content": f"Subject: {entity}\nFacts:\n" + "\n".join(f"- {t}" for t in texts)}],
            tools=[TOOL], tool_choice={"type": "tool", "name": TOOL["name"]})
    except Exception:  # noqa: BLE001 - consolidation falls back to the offline rule on any failure
        return None, [{"purpose": "consolidate", "provider": ax.PROVIDER, "model": model,
                       "input_tokens": 0, "output_tokens": 0, "outcome": "failed"}]
    usage = getattr(message, "usage", None)
    blocks = [b for b in message.content if getattr(b, "type", None) == "tool_use"]
    text = blocks[0].input.get("text") if blocks and isinstance(blocks[0].input, dict) else None
    ok = isinstance(text, str) and bool(text.strip())
    text = text.strip() if isinstance(text, str) else None
    call = {"purpose": "consolidate", "provider": ax.PROVIDER, "model": model,
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0), "outcome": "ok" if ok else "failed"}
    return (text if ok else None), [call]


def consolidate(conn: psycopg.Connection[Any], bank: str, *, mode: str | None = None, client: Any = None,
                time_window: timedelta = timedelta(days=7), min_size: int = 2, max_size: int = 12,
                max_groups: int = 100, actor: str = "system:consolidate",
                settings: Settings = DEFAULTS) -> list[Observation]:
    """Write one observation per group of related pending units; returns what was written. mode
    (None: settings.llm_provider) offline or anthropic."""
    check_bank(bank)
    mode = mode or settings.llm_provider
    if mode == "none":
        raise RcllError("LLM_PROVIDER", "consolidation is disabled in chunk mode (LLM_PROVIDER=none)",
                        "set LLM_PROVIDER=offline (rules) or anthropic")
    with database_errors():
        groups = conn.execute(
            "SELECT entity_name, unit_ids, texts FROM rcll.consolidation_groups(bank => %(bank)s,"
            " time_window => %(w)s, min_size => %(min)s, max_size => %(max)s, max_groups => %(groups)s)",
            {"bank": bank, "w": time_window, "min": min_size, "max": max_size, "groups": max_groups}).fetchall()
        out: list[Observation] = []
        for entity, unit_ids, texts in groups:
            text: str | None = None
            calls: list[dict[str, Any]] = []
            method = "offline"
            if mode == "anthropic":
                text, calls = llm_text(entity, texts, client, settings)
                method = "llm" if text else "offline"
            text = text or offline_text(entity, texts)
            vector = get_embedder(settings).embed([text])[0]
            with conn.transaction():
                row = conn.execute(
                    "SELECT rcll.write_observation(bank => %(bank)s, text => %(text)s, embedding => %(e)s,"
                    " sources => %(src)s, actor => %(actor)s, method => %(method)s, llm_calls => %(calls)s,"
                    " metadata => %(meta)s)",
                    {"bank": bank, "text": text, "e": vector, "src": list(unit_ids), "actor": actor,
                     "method": method, "calls": Jsonb(calls), "meta": Jsonb({"entity": entity})}).fetchone()
            assert row is not None
            out.append(Observation(int(row[0]), [int(u) for u in unit_ids], method))
        return out

