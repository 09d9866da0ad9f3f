"""Forgotten means never retained: for generated documents (chunk mode, offline extraction, or both in
one bank; threads, authors, rooms, tags, supersession cues) and a generated selection, retaining
everything and forgetting the selection leaves a bank that recalls exactly like a bank that only ever
held the rest - every channel's ranks, the fused scores to the last bit and the reranked order,
compared by content, not ids - with the same rooms, tags, statistics, links and entities (names,
spellings, types, mention counts).

The banks are small, so the dense channel takes its exact route (rcll.channel_dense scans exactly
below exact_below units): an HNSW graph keeps a deleted node's edges until VACUUM, which only the
approximate route could see."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import psycopg
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from rcll.recall import Direct, recall
from rcll.request import RecallRequest
from rcll.retain import Document, retain
from rcll.settings import Settings
from sqlcall import call

NAMES = ["Alice", "Bob", "Carol", "Dmitri", "Esther"]
SENTENCES = [
    "deployed the billing service to the Frankfurt cluster",
    "prefers green tea over coffee in the morning",
    "adopted a rescue dog named Pepper from the shelter",
    "fixed the flaky login test in the nightly pipeline",
    "reviewed the Postgres migration for the invoices table",
    "is learning to play the cello with a teacher in Lisbon",
    "booked a hiking trip to the Dolomites with Marta",
    "wrote the runbook for rotating the TLS certificates",
    "We deploy every service with Helm charts",
    "We switched to Argo CD instead of Helm charts for every deploy",
    "painted the kitchen a pale shade of blue",
    "ran the Berlin half marathon in under two hours",
]
QUERIES = ["Who deployed the billing service?", "How do we deploy services?", "Which trip did Carol book?"]
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
_banks = count()


@dataclass(frozen=True)
class Doc:
    speaker: str
    sentences: tuple[int, ...]
    mode: str
    thread: str | None
    author: str | None
    room: str | None
    tag: str | None
    day: int

    def content(self) -> str:
        return " ".join(f"{self.speaker}: {SENTENCES[i]}." if not SENTENCES[i].startswith("We ")
                        else f"{SENTENCES[i]}." for i in self.sentences)

    def document(self) -> Document:
        return Document(self.content(), thread=self.thread, room=self.room, tags=[self.tag] if self.tag else [],
                        occurred_at=T0 + timedelta(days=self.day))


# Chunk mode, offline extraction, or both in one bank (a document's mode drawn per document): a
# forgotten chunk may have created the entity a kept extracted fact was then resolved to.
docs_strategy = st.sampled_from(["none", "offline", "mixed"]).flatmap(lambda mode: st.lists(st.builds(
    Doc,
    speaker=st.sampled_from(NAMES),
    sentences=st.lists(st.integers(0, len(SENTENCES) - 1), min_size=1, max_size=3, unique=True).map(tuple),
    mode=st.sampled_from(["none", "offline"]) if mode == "mixed" else st.just(mode),
    thread=st.sampled_from([None, "t1", "t2"]),
    author=st.sampled_from([None, "ana", "ben"]),
    room=st.sampled_from([None, "ops", "home"]),
    tag=st.sampled_from([None, "x", "y"]),
    day=st.integers(0, 20),
), min_size=2, max_size=6, unique_by=lambda d: (d.content(), d.thread)))

selections = st.one_of(
    st.builds(lambda ix: {"docs": ix}, st.sets(st.integers(0, 5), min_size=1, max_size=3)),
    st.builds(lambda v: {"thread": v}, st.sampled_from(["t1", "t2"])),
    st.builds(lambda v: {"author": v}, st.sampled_from(["ana", "ben"])),
    st.builds(lambda v: {"room": v}, st.sampled_from(["ops", "home"])),
    st.builds(lambda v: {"tag": v}, st.sampled_from(["x", "y"])),
    st.builds(lambda a, n: {"occurred_from": T0 + timedelta(days=a), "occurred_to": T0 + timedelta(days=a + n)},
              st.integers(0, 20), st.integers(1, 10)),
)


def _retain(db: psycopg.Connection[Any], bank: str, docs: list[Doc]) -> list[int]:
    ids = []
    for d in docs:
        db.execute("SELECT set_config('rcll.agent', %s, false)", (d.author or "",))
        ids.append(retain(db, bank, d.document(), settings=Settings(llm_provider=d.mode)).document_id)
    db.execute("SELECT set_config('rcll.agent', '', false)")
    return ids


def _recalls(db: psycopg.Connection[Any], bank: str) -> list[Any]:
    out = []
    for q in QUERIES:
        for scope in ({}, {"thread": "t1"}, {"rooms": ["ops"]}):
            r = recall(Direct(db), RecallRequest(query=q, bank=bank, budget=None, reference_time=T0 + timedelta(days=30),
                                                 **scope))
            out.append((q, scope, [(f.text, f.room, f.hall, f.layer, f.author, f.thread, tuple(f.tags),
                                    f.valid.lower, f.valid.upper, f.occurred_start, f.mentioned_at, f.fused_score,
                                    f.rank_dense, f.rank_lexical, f.rank_graph, f.rank_temporal, f.rank_entity,
                                    f.rank_session, f.context, f.rerank_score) for f in r.ranked]))
    return out


def _state(db: psycopg.Connection[Any], bank: str) -> dict[str, Any]:
    def rows(query: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in db.execute(query, {"bank": bank})]
    return {
        "rooms": rows("SELECT name, status, fact_count, aliases FROM rcll.rooms(%(bank)s) ORDER BY name"),
        "tags": rows("SELECT tag, unit_count FROM rcll.tags(%(bank)s) ORDER BY tag"),
        "stats": rows("SELECT section, name, value FROM rcll.stats(%(bank)s) WHERE section <> 'tokens'"
                      " ORDER BY section, name"),
        "bank_stats": rows("SELECT unit_count, total_length, document_count FROM rcll.bank_stats"
                           " WHERE bank_id = rcll._bank_id(%(bank)s)"),
        "entities": rows("SELECT a.alias, e.name, e.mention_count, e.entity_type FROM rcll.entities e"
                         " JOIN rcll.entity_aliases a USING (entity_id)"
                         " WHERE e.bank_id = rcll._bank_id(%(bank)s) ORDER BY 1"),
        "links": rows("SELECT f.text, t.text, l.link_type, l.weight FROM rcll.links l"
                      " JOIN rcll.memory_units f ON f.unit_id = l.from_unit JOIN rcll.memory_units t ON t.unit_id = l.to_unit"
                      " WHERE l.bank_id = rcll._bank_id(%(bank)s) ORDER BY 1, 2, 3, 4"),
        "documents": rows("SELECT content, thread, occurred_at FROM rcll.documents"
                          " WHERE bank_id = rcll._bank_id(%(bank)s) ORDER BY 1, 2, 3"),
        "doc_lengths": rows("SELECT d.content, l.lexical_length FROM rcll.document_lexicon l JOIN rcll.documents d"
                            " USING (document_id) WHERE d.bank_id = rcll._bank_id(%(bank)s) ORDER BY 1"),
    }


@settings(max_examples=int(os.environ.get("RCLL_FORGET_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(docs=docs_strategy, selection=selections)
def test_forgetting_a_selection_recalls_exactly_like_never_retaining_it(
        db: psycopg.Connection[Any], docs: list[Doc], selection: dict[str, Any]) -> None:
    n = next(_banks)
    everything, rest = f"all{n}", f"rest{n}"
    db.execute("SELECT rcll.create_bank(%s)", (everything,))
    ids = _retain(db, everything, docs)
    db.execute("SELECT rcll.refresh_bank_stats(%s)", (everything,))
    if "docs" in selection:
        chosen = [ids[i] for i in sorted(selection["docs"]) if i < len(ids)]
        assume(chosen)
        kw: dict[str, Any] = {"document_ids": chosen}
    else:
        kw = dict(selection)
    try:
        call(db, "rcll.forget", bank=everything, dry_run=False, **kw)
    except psycopg.Error as e:
        assume(e.sqlstate != "RC007")      # matched nothing, or everything: refused, nothing to compare
        raise
    survivors = {r[0] for r in db.execute("SELECT document_id FROM rcll.documents WHERE bank_id = rcll._bank_id(%s)"
                                          " AND NOT metadata ? 'redacted'", (everything,))}
    # A selector on units may split an offline document (its facts' own rooms or times); such a
    # bank has no "never retained" twin to compare with.
    assume(not db.execute("SELECT 1 FROM rcll.documents WHERE bank_id = rcll._bank_id(%s) AND metadata ? 'redacted'",
                          (everything,)).fetchone())
    kept = [d for d, i in zip(docs, ids) if i in survivors]
    db.execute("SELECT rcll.create_bank(%s)", (rest,))
    _retain(db, rest, kept)
    db.execute("SELECT rcll.refresh_bank_stats(%s)", (rest,))

    note(f"documents: {docs!r}; selection: {selection!r}; kept: {kept!r}")
    forgot, never = _state(db, everything), _state(db, rest)
    for key, rows in forgot.items():
        assert rows == never[key], (key, "only after forgetting:", sorted(set(rows) - set(never[key])),
                                    "only when never retained:", sorted(set(never[key]) - set(rows)))
    assert _recalls(db, everything) == _recalls(db, rest)


