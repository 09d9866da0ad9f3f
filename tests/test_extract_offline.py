"""Keyless extraction (LLM_PROVIDER=offline): typed, dated, entity-linked facts with no model and no key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from rcll.extract import offline
from rcll.extract.timeparse import find_times
from rcll.retain import Document, retain
from rcll.settings import Settings

REF = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)   # a Monday


@pytest.mark.parametrize(("text", "start", "end"), [
    ("I went to a support group yesterday.", "2023-05-07", "2023-05-08"),
    ("We met last Friday.", "2023-05-05", "2023-05-06"),
    ("Last weekend I ran a race.", "2023-05-06", "2023-05-08"),
    ("Two weeks ago we shipped it.", "2023-04-24", "2023-05-01"),
    ("The outage started on May 7, 2023.", "2023-05-07", "2023-05-08"),
    ("We launched in June 2021.", "2021-06-01", "2021-07-01"),
    ("In 2022 I painted a lot.", "2022-01-01", "2023-01-01"),
    ("See you tomorrow!", "2023-05-09", "2023-05-10"),
])
def test_time_expressions_resolve_against_the_document_time(text: str, start: str, end: str) -> None:
    found = find_times(text, REF)
    assert found, text
    assert (found[0][1].date().isoformat(), found[0][2].date().isoformat()) == (start, end)


def test_may_the_verb_is_not_a_date() -> None:
    assert find_times("I may go to the park now.", REF) == []


def test_the_extractor_is_deterministic_typed_dated_and_finds_entities() -> None:
    text = ("Caroline: I went to the LGBTQ support group yesterday and it was powerful.\n"
            "Melanie: Wow, thanks! I love painting with Caroline at the Riverside Studio.\n"
            "We decided to adopt ArgoCD. @ops-bot must always run the smoke test before a deploy.")
    facts = offline.extract(text, REF)
    assert [f.as_json() for f in facts] == [f.as_json() for f in offline.extract(text, REF)]
    by_text = {f.text.split(":")[0] if ":" in f.text[:12] else f.text: f for f in facts}
    first = facts[0]
    assert first.text.startswith("Caroline: I went") and "(2023-05-07)" in first.text
    assert first.hall == "event" and first.occurred_start == "2023-05-07T00:00:00+00:00"
    assert {e["name"] for e in first.entities} == {"Caroline", "LGBTQ"}
    assert first.entities[0] == {"name": "Caroline", "type": "person", "role": "speaker"}
    pref = [f for f in facts if "painting" in f.text][0]
    assert pref.hall == "preference" and {"Melanie", "Caroline", "Riverside Studio"} <= {e["name"] for e in pref.entities}
    assert not any(f.text.startswith("Melanie: Wow") for f in facts), "filler is not a fact"
    assert [f.hall for f in facts if "ArgoCD" in f.text] == ["decision"]
    rule = [f for f in facts if "smoke test" in f.text][0]
    assert rule.hall == "rule" and {"name": "@ops-bot", "type": "agent"} in rule.entities
    assert by_text


def test_any_text_yields_at_least_one_fact() -> None:
    assert [f.text for f in offline.extract("Hi!", REF)] == ["Hi!"]


def test_offline_retain_writes_typed_dated_linked_facts_in_layers(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_provider="offline")
    db.execute("SELECT rcll.create_bank('b')")
    r1 = retain(db, "b", Document("Our release procedure: to deploy, run make release. Deploys must always go through "
                                  "the staging cluster first. We decided to adopt ArgoCD for the billing service.",
                                  occurred_at=REF, author="ops"), settings=settings)
    assert r1.mode == "offline" and len(r1.unit_ids) == 3
    assert db.execute("SELECT extraction FROM rcll.documents").fetchone() == ("offline",)
    layers = dict(db.execute("SELECT hall, layer FROM rcll.memory_units").fetchall())
    assert layers["decision"] == "L1" and layers["rule"] == "L0"
    # a later document: "argocd" is found as a known entity even in lower case
    r2 = retain(db, "b", Document("yesterday the argocd sync for billing failed twice.", occurred_at=REF), settings=settings)
    row = db.execute("""SELECT u.hall, u.occurred_start::date::text, array_agg(e.name ORDER BY e.name)
                        FROM rcll.memory_units u JOIN rcll.unit_entities ue USING (unit_id)
                        JOIN rcll.entities e USING (entity_id) WHERE u.unit_id = %s GROUP BY 1, 2""",
                     (r2.unit_ids[0],)).fetchone()
    assert row == ("warning", "2023-05-07", ["ArgoCD"])
    assert db.execute("SELECT count(*) FROM rcll.links WHERE link_type = 'entity'").fetchone()[0] >= 2
    # re-retaining creates nothing new
    again = retain(db, "b", Document("yesterday the argocd sync for billing failed twice.", occurred_at=REF), settings=settings)
    assert not again.created and again.unit_ids == r2.unit_ids
    assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (4,)
    assert db.execute("SELECT count(*) FROM rcll.llm_calls").fetchone() == (0,), "offline makes no model call"


def test_two_spellings_of_a_name_become_one_entity_with_aliases(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    first = db.execute("SELECT entity_id, matched_by FROM rcll.resolve_entity('b', 'Jonathan Smithers', 'person')").fetchone()
    same = db.execute("SELECT entity_id, matched_by FROM rcll.resolve_entity('b', 'Jonathon Smithers', 'person')").fetchone()
    case = db.execute("SELECT entity_id, matched_by FROM rcll.resolve_entity('b', '  jonathan   SMITHERS ')").fetchone()
    other = db.execute("SELECT entity_id, matched_by FROM rcll.resolve_entity('b', 'Helm', 'tool')").fetchone()
    assert first is not None and same is not None and case is not None and other is not None
    assert first[1] == "new" and same == (first[0], "trigram") and case == (first[0], "exact")
    assert other[0] != first[0]
    assert db.execute("SELECT array_agg(alias ORDER BY alias) FROM rcll.entity_aliases WHERE entity_id = %s",
                      (first[0],)).fetchone() == (["jonathan smithers", "jonathon smithers"],)
