"""LLM extraction through the official Anthropic SDK, driven by recorded HTTP responses
(tests/fixtures/anthropic/*.json, in the Messages API wire format) through the SDK's own HTTP
transport: no network, no key. The live test runs only with ANTHROPIC_API_KEY set."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import psycopg
import pytest

from rcll import extract
from rcll.errors import RcllError
from rcll.retain import Document, retain
from rcll.settings import Settings

if TYPE_CHECKING:
    import anthropic

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
DOC_TIME = datetime(2026, 8, 26, 10, 0, tzinfo=UTC)
INCIDENT = ("Yesterday the Helm rollout of billing-api broke because the chart pinned an old image. "
            "Alice Martin (Alice, @alice) decided we pin images by digest from now on. "
            "To deploy billing-api, run make release.")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


class Recorded:
    """A transport that answers with recorded responses in order (the last one repeats)."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        rec = fixture(self.names[min(len(self.requests) - 1, len(self.names) - 1)])
        body = rec["raw_body"].encode() if "raw_body" in rec else json.dumps(rec["body"]).encode()
        return httpx2.Response(rec["status"], headers=rec["headers"], content=body)

    def client(self, max_retries: int = 2) -> anthropic.Anthropic:
        # Here: every test worker collects this file, one runs it, and the SDK takes seconds to import.
        import anthropic

        return anthropic.Anthropic(api_key="sk-test", max_retries=max_retries,
                                   http_client=httpx2.Client(transport=httpx2.MockTransport(self)))


# The extraction mode, with no wait between schema retries (the SDK's own retries are the client's).
LLM = Settings(llm_provider="anthropic", extraction_backoff=0)


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch, db: psycopg.Connection[Any]) -> Iterator[Callable[..., Recorded]]:
    db.execute("SELECT rcll.create_bank('b')")

    def use(*names: str, max_retries: int = 2) -> Recorded:
        rec = Recorded(*names)
        extract.set_client(rec.client(max_retries))
        return rec

    yield use
    extract.set_client(None)


def _doc(content: str = INCIDENT, **kw: Any) -> Document:
    return Document(content=content, occurred_at=DOC_TIME, author="tester", **kw)


def _ledger(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute("SELECT purpose, provider, model, input_tokens, output_tokens, outcome, document_id IS NOT NULL"
                      " FROM rcll.llm_calls ORDER BY call_id").fetchall()


def test_a_good_extraction_stores_typed_dated_entity_linked_facts(db: psycopg.Connection[Any], llm: Any) -> None:
    rec = llm("good_extraction")
    result = retain(db, "b", _doc(), settings=LLM)
    assert result.created and result.mode == "llm" and len(result.unit_ids) == 4
    request = rec.requests[0]
    assert request["tool_choice"] == {"type": "tool", "name": "record_facts"}
    assert request["tools"][0]["input_schema"]["required"] == ["facts"]
    assert "DOCUMENT TIME: 2026-08-26T10:00:00+00:00" in request["system"]
    rows = db.execute("""SELECT kind, hall, layer, occurred_start, lower(valid), mentioned_at, author
                         FROM rcll.memory_units ORDER BY chunk_index""").fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("fact", "warning", "L2"), ("fact", "discovery", "L2"), ("fact", "decision", "L1"), ("fact", "procedure", "L0")]
    # "yesterday" resolved against the document's time, not today
    assert rows[0][3] == datetime(2026, 8, 25, tzinfo=UTC)
    assert rows[3][4] == DOC_TIME and rows[3][5] == DOC_TIME
    assert db.execute("SELECT extraction FROM rcll.documents").fetchone() == ("llm",)
    # entities resolved once each; the person's spellings are aliases of one entity
    ents = dict(db.execute("SELECT name, mention_count FROM rcll.entities").fetchall())
    assert ents == {"Helm": 2, "billing-api": 3, "Alice Martin": 1}
    aliases = {a for (a,) in db.execute(
        "SELECT alias FROM rcll.entity_aliases a JOIN rcll.entities e USING (entity_id) WHERE e.name = 'Alice Martin'")}
    assert aliases == {"alice martin", "alice"}
    links = dict(db.execute("SELECT link_type, count(*) FROM rcll.links GROUP BY 1").fetchall())
    assert links["causal"] == 2 and links["entity"] > 0 and links["temporal"] > 0
    causal = db.execute("""SELECT f.chunk_index, t.chunk_index FROM rcll.links l
                           JOIN rcll.memory_units f ON f.unit_id = l.from_unit JOIN rcll.memory_units t ON t.unit_id = l.to_unit
                           WHERE l.link_type = 'causal' ORDER BY 1""").fetchall()
    assert causal == [(0, 2), (1, 0)]
    assert _ledger(db) == [("extract", "anthropic", "claude-sonnet-4-6", 1480, 412, "ok", True)]


def test_the_model_is_configurable(db: psycopg.Connection[Any], llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = llm("helm")
    retain(db, "b", _doc("We deploy every service with Helm charts kept in the infra repository."),
           settings=LLM.replace(llm_model="claude-haiku-4-5"))
    assert rec.requests[0]["model"] == "claude-haiku-4-5"
    assert _ledger(db)[0][2] == "claude-haiku-4-5"


@pytest.mark.parametrize("bad", ["wrong_schema", "array_not_object", "facts_item_array", "max_tokens_cut",
                                 "no_tool_call", "truncated_body", "zero_facts"])
def test_a_malformed_response_is_retried_then_succeeds(db: psycopg.Connection[Any], llm: Any, bad: str) -> None:
    rec = llm(bad, "good_extraction")
    result = retain(db, "b", _doc(), settings=LLM)
    assert len(rec.requests) == 2
    assert result.mode == "llm" and len(result.unit_ids) == 4
    assert [r[5] for r in _ledger(db)] == ["retried", "ok"]


@pytest.mark.parametrize("bad", ["wrong_schema", "array_not_object", "max_tokens_cut", "truncated_body", "zero_facts"])
def test_a_response_malformed_every_time_is_stored_as_chunks_marked_failed(
        db: psycopg.Connection[Any], llm: Any, bad: str) -> None:
    rec = llm(bad)
    result = retain(db, "b", _doc(), settings=LLM)
    assert len(rec.requests) == 3                     # 1 + RCLL_EXTRACTION_RETRIES (2)
    assert result.created and result.mode == "failed" and result.unit_ids
    doc = db.execute("SELECT extraction, metadata ->> 'extraction_error' FROM rcll.documents").fetchone()
    assert doc is not None and doc[0] == "failed" and doc[1]
    kinds = db.execute("SELECT DISTINCT kind, 'extraction:failed' = ANY (tags) FROM rcll.memory_units").fetchall()
    assert kinds == [("chunk", True)]
    assert [r[5] for r in _ledger(db)] == ["retried", "retried", "failed"]


def test_zero_facts_from_a_greeting_is_kept_verbatim_not_retried(db: psycopg.Connection[Any], llm: Any) -> None:
    # Trivial text may hold no facts: one call, and the text is kept as one untyped fact, so the
    # retain never reports success with nothing stored.
    rec = llm("zero_facts")
    result = retain(db, "b", _doc("Hi all, thanks!"), settings=LLM)
    assert len(rec.requests) == 1 and result.mode == "llm"
    assert db.execute("SELECT kind, text, hall FROM rcll.memory_units").fetchall() == [("fact", "Hi all, thanks!", None)]


def test_a_rate_limit_is_retried_by_the_sdk_then_succeeds(db: psycopg.Connection[Any], llm: Any) -> None:
    rec = llm("rate_limited", "good_extraction")
    result = retain(db, "b", _doc(), settings=LLM)
    assert len(rec.requests) == 2 and result.mode == "llm" and len(result.unit_ids) == 4
    assert [r[5] for r in _ledger(db)] == ["ok"]


def test_server_errors_until_giving_up_raise_and_write_nothing_when_configured_to_error(
        db: psycopg.Connection[Any], llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = llm("server_error", max_retries=2)
    with pytest.raises(RcllError) as err:
        retain(db, "b", _doc(), settings=LLM.replace(extraction_failure="error"))
    assert err.value.field == "extraction" and "500" in err.value.message
    assert len(rec.requests) == 3                     # the SDK's max_retries=2, then it gives up
    assert db.execute("SELECT count(*) FROM rcll.documents").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (0,)
    assert [r[5:] for r in _ledger(db)] == [("failed", False)]


def test_server_errors_until_giving_up_store_chunks_by_default(db: psycopg.Connection[Any], llm: Any) -> None:
    rec = llm("overloaded", max_retries=1)
    result = retain(db, "b", _doc(), settings=LLM)
    assert len(rec.requests) == 2 and result.mode == "failed"
    assert db.execute("SELECT extraction FROM rcll.documents").fetchone() == ("failed",)
    assert db.execute("SELECT bool_and('extraction:failed' = ANY (tags)) FROM rcll.memory_units").fetchone() == (True,)


def test_re_retaining_the_same_content_makes_no_call_and_no_duplicates(db: psycopg.Connection[Any], llm: Any) -> None:
    rec = llm("good_extraction")
    first = retain(db, "b", _doc(), settings=LLM)
    again = retain(db, "b", _doc(), settings=LLM)
    assert len(rec.requests) == 1
    assert not again.created and again.unit_ids == first.unit_ids
    assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (4,)


def test_stats_show_zero_read_tokens_next_to_the_write_tokens(db: psycopg.Connection[Any], llm: Any) -> None:
    llm("wrong_schema", "good_extraction")
    retain(db, "b", _doc(), settings=LLM)
    rows = {(r[0], r[1]): r[2:] for r in db.execute("SELECT * FROM rcll.stats('b')")}
    assert rows[("tokens", "extract")] == (2, 0, 1400 + 1480, 60 + 412)
    assert rows[("tokens", "consolidate")] == (0, 0, 0, 0)
    assert rows[("tokens", "total")] == (2, 0, 2880, 472)
    assert rows[("hall", "decision")][0] == 1 and rows[("layer", "L0")][0] == 1
    assert rows[("link_type", "causal")][0] == 2 and rows[("author", "tester")][0] == 4
    assert rows[("totals", "entities")][0] == 3 and rows[("extraction", "llm")][0] == 1


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="live test: set ANTHROPIC_API_KEY")
def test_live_extraction_with_anthropic(db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    extract.set_client(None)
    db.execute("SELECT rcll.create_bank('live')")
    # The key from the environment, read here (the test is an edge), as Memory() would.
    result = retain(db, "live", _doc(), settings=Settings.from_env().replace(llm_provider="anthropic"))
    assert result.mode == "llm" and result.unit_ids
    row = db.execute("SELECT count(*) FILTER (WHERE occurred_start::date = '2026-08-25'), count(DISTINCT hall)"
                     " FROM rcll.memory_units").fetchone()
    assert row is not None and row[0] >= 1 and row[1] >= 2
    assert db.execute("SELECT sum(input_tokens) > 0 FROM rcll.llm_calls").fetchone() == (True,)
