"""The extraction schema: what an extractor (LLM or offline rules) must hand to rcll.retain_facts.

One JSON schema serves as the Anthropic tool's input_schema and as the validator of what comes
back; `normalise` then turns a validated tool input into the fact objects rcll.retain_facts takes
(times as ISO 8601 with an offset, resolved against the document's time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jsonschema

from rcll.extract.timeparse import parse_expression

HALLS = ("decision", "event", "preference", "procedure", "rule", "warning", "discovery", "fact")

_TIME = {"type": ["string", "null"], "description": "ISO 8601 date or date-time, or null if unknown"}

TOOL_NAME = "record_facts"

FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "description": "Every atomic fact in the document, in document order.",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1,
                             "description": "One self-contained fact: names instead of pronouns, absolute dates."},
                    "fact_type": {"type": "string", "enum": list(HALLS)},
                    "occurred_start": {**_TIME, "description": "When the described event happened or began."},
                    "occurred_end": {**_TIME, "description": "When it ended (null if instantaneous or unknown)."},
                    "valid_from": {**_TIME, "description": "From when the fact holds (null: from the document's time)."},
                    "valid_to": {**_TIME, "description": "Until when the fact holds, if the text says (else null)."},
                    "entities": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "type": {"type": ["string", "null"],
                                         "description": "person, organization, place, project, service, tool, concept..."},
                                "aliases": {"type": "array", "items": {"type": "string"},
                                            "description": "Other spellings of the name used in the document."},
                            },
                            "required": ["name"],
                            "additionalProperties": False,
                        },
                    },
                    "caused_by": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                  "description": "Indexes (0-based) of earlier facts in this list that caused this one."},
                    "supersedes": {"type": "array", "items": {"type": "string", "minLength": 1},
                                   "description": "Short statements of earlier beliefs this fact replaces "
                                                  "(e.g. 'we deploy with Helm'), empty if none."},
                },
                "required": ["text", "fact_type", "entities"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["facts"],
    "additionalProperties": False,
}

_VALIDATOR = jsonschema.Draft202012Validator(FACTS_SCHEMA)


class SchemaError(ValueError):
    """What the model returned does not fit the extraction schema."""


def validate(payload: Any) -> dict[str, Any]:
    """The payload if it fits FACTS_SCHEMA (and its cross-references hold), else SchemaError."""
    errors = sorted(_VALIDATOR.iter_errors(payload), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(root)"
        raise SchemaError(f"{where}: {e.message}"[:500])
    assert isinstance(payload, dict)
    facts = payload["facts"]
    for i, f in enumerate(facts):
        for c in f.get("caused_by", []):
            if c >= len(facts) or c == i:
                raise SchemaError(f"facts/{i}/caused_by: {c} is not another fact's index")
    return payload


def parse_time(value: Any, reference: datetime) -> str | None:
    """An ISO 8601 string with an offset, or None. Naive times take the reference's zone; a
    string that is not ISO is tried with dateparser against the reference, else dropped."""
    if value is None or not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        span = parse_expression(text, reference)
        return span[0].isoformat() if span else None
    if t.tzinfo is None:
        t = t.replace(tzinfo=reference.tzinfo or UTC)
    return t.isoformat()


@dataclass
class Fact:
    """One fact as rcll.retain_facts takes it (see its COMMENT)."""

    text: str
    hall: str | None = None
    occurred_start: str | None = None
    occurred_end: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    entities: list[dict[str, Any]] = field(default_factory=list)
    caused_by: list[int] = field(default_factory=list)
    supersedes: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def normalise(payload: dict[str, Any], reference: datetime) -> list[Fact]:
    """Facts from a validated tool input, times resolved and made absolute."""
    out: list[Fact] = []
    for f in payload["facts"]:
        out.append(Fact(
            text=f["text"].strip(),
            hall=f["fact_type"],
            occurred_start=parse_time(f.get("occurred_start"), reference),
            occurred_end=parse_time(f.get("occurred_end"), reference),
            valid_from=parse_time(f.get("valid_from"), reference),
            valid_to=parse_time(f.get("valid_to"), reference),
            entities=[{k: v for k, v in e.items() if v is not None} for e in f.get("entities", [])
                      if e["name"].strip()],
            caused_by=list(f.get("caused_by", [])),
            supersedes=[s.strip() for s in f.get("supersedes", []) if s.strip()],
        ))
    return out
