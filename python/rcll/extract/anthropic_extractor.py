"""LLM extraction with Anthropic (LLM_PROVIDER=anthropic), through the official SDK.

Structured output: one tool whose input_schema is the extraction schema, forced with tool_choice.
Rate limits and 5xx are retried by the SDK itself (max_retries, exponential backoff honouring
retry-after; RCLL_LLM_MAX_RETRIES, default 3). A response that does not fit the schema - no tool
call, an array where an object belongs, a cut-off (max_tokens) input, missing fields - or zero
facts from non-trivial text is retried by us (RCLL_EXTRACTION_RETRIES more attempts, default 2,
with backoff). Every call that returned is put on the ledger with its tokens.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rcll.extract.schema import FACTS_SCHEMA, TOOL_NAME, Fact, SchemaError, normalise, validate
from rcll.settings import DEFAULTS, Settings

DEFAULT_MODEL = DEFAULTS.llm_model
PROVIDER = "anthropic"

SYSTEM = """You extract memory for a team of AI agents. From the document, list every atomic fact worth \
remembering, in document order, by calling the record_facts tool exactly once.

- One fact per claim; each fact's text stands alone: names instead of pronouns, absolute dates instead \
of relative ones.
- fact_type: decision (a choice made), event (something that happened), preference, procedure (how to do \
something), rule (what must or must not be done), warning (a risk, failure or pitfall), discovery \
(something found out), fact (anything else).
- Resolve every relative time expression against the DOCUMENT TIME given below, never against today: \
"yesterday" is the day before the document time. Use ISO 8601; null when the text gives no time.
- occurred_start/occurred_end: when the described event happened. valid_from/valid_to: when the fact \
holds, if the text says.
- entities: people, agents, teams, projects, services, tools, places named in the fact, with other \
spellings of the same name used in the document as aliases.
- caused_by: indexes of earlier facts in your list that caused this one.
- supersedes: when a fact replaces an earlier state ("we moved deploys to Argo" replaces "we deploy with \
Helm"), a short statement of the replaced belief; otherwise an empty list.
- Do not invent facts; skip greetings and filler."""


class ExtractionFailed(RuntimeError):
    """The model gave no usable extraction within the retries."""

    def __init__(self, message: str, calls: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.calls = calls


@dataclass
class Extraction:
    facts: list[Fact]
    calls: list[dict[str, Any]] = field(default_factory=list)
    model: str = DEFAULT_MODEL


def make_client(settings: Settings = DEFAULTS, **kwargs: Any) -> Any:
    """An Anthropic client with settings' key (when set: else the SDK looks for it) and retries."""
    import anthropic

    kwargs.setdefault("max_retries", settings.llm_max_retries)
    if settings.anthropic_api_key is not None:
        kwargs.setdefault("api_key", settings.anthropic_api_key)
    return anthropic.Anthropic(**kwargs)


def is_trivial(text: str) -> bool:
    """Text from which zero facts is a plausible answer (a greeting, a few words)."""
    return len(text.split()) < 6


def _tool_input(message: Any) -> Any:
    if getattr(message, "stop_reason", None) == "max_tokens":
        raise SchemaError("the response was cut off at max_tokens (truncated tool input)")
    blocks = [b for b in getattr(message, "content", []) or [] if getattr(b, "type", None) == "tool_use"]
    if not blocks:
        raise SchemaError("the response has no record_facts tool call")
    block = blocks[0]
    if block.name != TOOL_NAME:
        raise SchemaError(f"the response called tool {block.name!r}, not {TOOL_NAME}")
    payload = block.input
    if isinstance(payload, str):               # some proxies hand back the JSON as text
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError as e:
            raise SchemaError(f"tool input is not valid JSON: {e}") from e
    return payload


def extract(text: str, occurred_at: datetime | None, *, client: Any = None, model: str | None = None,
            schema_retries: int | None = None, backoff: float | None = None,
            max_tokens: int = 8192, settings: Settings = DEFAULTS) -> Extraction:
    """Facts of a document from the model; raises ExtractionFailed (with the calls made) if none
    usable came back within the retries. model, schema_retries and backoff default to settings'."""
    import anthropic

    client = client or make_client(settings)
    model = model or settings.llm_model
    retries = settings.extraction_retries if schema_retries is None else schema_retries
    delay = settings.extraction_backoff if backoff is None else backoff
    reference = occurred_at or datetime.now(UTC)
    if reference.tzinfo is None:
        reference = reference.replace(tzinfo=UTC)
    calls: list[dict[str, Any]] = []
    problem = "no attempt made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(delay * (2 ** (attempt - 1)))
        try:
            message = client.messages.create(
                model=model, max_tokens=max_tokens,
                system=SYSTEM + f"\n\nDOCUMENT TIME: {reference.isoformat()} ({reference:%A})",
                messages=[{"role": "user", "content": f"<document>\n{text}\n</document>"}],
                tools=[{"name": TOOL_NAME, "description": "Record the facts extracted from the document.",
                        "input_schema": FACTS_SCHEMA}],
                tool_choice={"type": "tool", "name": TOOL_NAME},
            )
        except anthropic.APIStatusError as e:          # the SDK's own retries are spent
            calls.append(_call(model, None, "failed"))
            raise ExtractionFailed(f"anthropic: HTTP {e.status_code} after retries: {_short(e)}", calls) from e
        except anthropic.APIConnectionError as e:
            calls.append(_call(model, None, "failed"))
            raise ExtractionFailed(f"anthropic: connection failed after retries: {_short(e)}", calls) from e
        except anthropic.APIResponseValidationError as e:
            calls.append(_call(model, None, "retried"))
            problem = f"malformed response body: {_short(e)}"
            continue
        except (ValueError, json.JSONDecodeError) as e:  # a body that is not JSON at all (truncated)
            calls.append(_call(model, None, "retried"))
            problem = f"response body is not JSON: {_short(e)}"
            continue
        try:
            payload = validate(_tool_input(message))
            facts = normalise(payload, reference)
            if not facts and not is_trivial(text):
                raise SchemaError("zero facts from non-trivial text")
        except SchemaError as e:
            calls.append(_call(model, message, "retried"))
            problem = str(e)
            continue
        calls.append(_call(model, message, "ok"))
        return Extraction(facts, calls, model)
    if calls:
        calls[-1]["outcome"] = "failed"
    raise ExtractionFailed(f"extraction: {problem} (after {retries + 1} attempts)", calls)


def _short(e: Exception) -> str:
    return str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def _call(model: str, message: Any, outcome: str) -> dict[str, Any]:
    usage = getattr(message, "usage", None)
    return {"purpose": "extract", "provider": PROVIDER, "model": model,
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0), "outcome": outcome}
