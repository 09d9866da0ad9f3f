"""The first stage's who/where channels and their z-score fusion (research/locomo/RESEARCH.md, third
round): keyless entity links at retain, the entity channel, the session channel, and the fused score."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from rcll.recall import candidates, entity_query
from rcll.request import RecallRequest as R
from sqlcall import scalar

BANK = "fs"
DIM = 384


def axis(*weights: tuple[int, float]) -> list[float]:
    """A unit vector with the given weights on the given axes (a deterministic stand-in embedding)."""
    v = [0.0] * DIM
    for i, w in weights:
        v[i] = w
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def vtext(v: list[float]) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


def retain(db: psycopg.Connection[Any], chunks: list[str], vectors: list[list[float]] | None = None,
           author: str | None = None, source: str | None = None) -> list[int]:
    row = db.execute(
        "SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s, embeddings => %s::vector[],"
        " author => %s, source => %s)",
        (BANK, "\n".join(chunks), chunks, None if vectors is None else [vtext(v) for v in vectors], author, source),
    ).fetchone()
    assert row is not None
    return [int(x) for x in row[0]]


def links(db: psycopg.Connection[Any], unit_id: int) -> dict[str, str]:
    """entity key -> role, for one unit."""
    rows = db.execute("""SELECT a.alias, ue.role FROM rcll.unit_entities ue
                         JOIN rcll.entity_aliases a ON a.entity_id = ue.entity_id
                         WHERE ue.unit_id = %s""", (unit_id,)).fetchall()
    return {str(k): str(r) for k, r in rows}


CHANNEL = {
    "dense": "SELECT * FROM rcll.channel_dense(query_embedding => %(qe)s::vector, scope => rcll.recall_scope(%(bank)s))",
    "lexical": "SELECT * FROM rcll.channel_lexical(query => %(q)s, scope => rcll.recall_scope(%(bank)s))",
    "graph": "SELECT * FROM rcll.channel_graph(query => %(q)s, scope => rcll.recall_scope(%(bank)s))",
    "temporal": """SELECT * FROM rcll.channel_temporal(query => %(q)s, scope => rcll.recall_scope(%(bank)s),
                       query_embedding => %(qe)s::vector)""",
    "entity": """SELECT * FROM rcll.channel_entity(query => %(q)s, scope => rcll.recall_scope(%(bank)s, authors => %(authors)s),
                     query_embedding => %(qe)s::vector)""",
    "session": """SELECT * FROM rcll.channel_session(query => %(q)s, scope => rcll.recall_scope(%(bank)s),
                      query_embedding => %(qe)s::vector, "limit" => %(limit)s)""",
}


def channel(db: psycopg.Connection[Any], name: str, q: str | None = None, qe: list[float] | None = None,
            authors: list[str] | None = None, limit: int = 300) -> list[dict[str, Any]]:
    """One channel's rows (unit_id, score, rank), called as from psql."""
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute(CHANNEL[name], {"q": q, "qe": None if qe is None else vtext(qe), "bank": BANK,
                                           "authors": authors, "limit": limit}).fetchall()


@pytest.fixture
def bank(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute("SELECT rcll.create_bank(%s)", (BANK,))
    return db


def test_a_chunk_is_linked_to_its_speaker_and_the_names_it_writes(bank: psycopg.Connection[Any]) -> None:
    ids = retain(bank, [
        "[1:56 pm on 8 May, 2023] Caroline: I went to the LGBTQ support group with Melanie yesterday.",
        "[1:56 pm on 8 May, 2023] Melanie: That's great! Tell me about Paris and the Louvre.",
        "[1:56 pm on 8 May, 2023] Caroline: Yes. I think so, said Melanie.",
    ], author="locomo")
    # The speaker from "Name:", not the author; a name mid-sentence; never a sentence's first word
    # ("That's", "Tell", "Yes", "I"), a stop word or a one-letter word; the date is not text.
    assert links(bank, ids[0]) == {"caroline": "speaker", "lgbtq": "name", "melanie": "name"}
    assert links(bank, ids[1]) == {"melanie": "speaker", "paris": "name", "louvre": "name"}
    assert links(bank, ids[2]) == {"caroline": "speaker", "melanie": "name"}
    # One entity per spelling key, its mention count the units linked to it.
    assert bank.execute("SELECT name, mention_count FROM rcll.entities WHERE lower(name) = 'melanie'").fetchall() == [("Melanie", 3)]


def test_without_a_speaker_prefix_the_author_is_the_speaker(bank: psycopg.Connection[Any]) -> None:
    ids = retain(bank, ["the deploy moved to Thursday after talking to Bob"], author="alice")
    assert links(bank, ids[0]) == {"alice": "speaker", "thursday": "name", "bob": "name"}
    (none,) = retain(bank, ["nothing named here"])
    assert links(bank, none) == {}


def test_link_keyless_entities_backfills_a_store_written_before_it(bank: psycopg.Connection[Any]) -> None:
    ids = retain(bank, ["Jon: I met Gina at the studio.", "Gina: Jon showed me Rome."])
    before = {u: links(bank, u) for u in ids}
    bank.execute("DELETE FROM rcll.unit_entities")
    assert scalar(bank, "rcll.link_keyless_entities", bank=BANK) == 4
    assert {u: links(bank, u) for u in ids} == before
    assert scalar(bank, "rcll.link_keyless_entities", bank=BANK) == 0     # re-runnable


def test_the_query_without_the_entities_it_names(bank: psycopg.Connection[Any]) -> None:
    retain(bank, ["Caroline: I went to the support group with Melanie."])
    assert entity_query(bank, R(query="What did Caroline's group discuss with Melanie?", bank=BANK)) == "What did group discuss with ?"
    # Only names written capitalised and known in the bank; none: NULL (the entity channel is silent).
    assert entity_query(bank, R(query="what did caroline discuss?", bank=BANK)) is None
    assert entity_query(bank, R(query="What did Gina discuss?", bank=BANK)) is None
    # Nothing but the name: the whole query.
    assert entity_query(bank, R(query="Caroline?", bank=BANK)) == "Caroline?"


def test_entity_channel_ranks_the_named_entitys_units_by_the_rest_of_the_query(bank: psycopg.Connection[Any]) -> None:
    ids = retain(bank, ["Caroline: I adopted a dog.", "Caroline: I research adoption agencies.",
                        "Melanie: I research pottery.", "Melanie: I think Caroline likes dogs."],
                 [axis((0, 1)), axis((1, 1)), axis((1, 1)), axis((0, 1), (1, 0.2))])
    rest = axis((1, 1))                                 # "what did research?" points at axis 1
    rows = channel(bank, "entity", "What did Caroline research?", rest)
    # Her own turns and the turn that names her; not Melanie's other turn, however close.
    assert [r["unit_id"] for r in rows] == [ids[1], ids[3], ids[0]]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["score"] == pytest.approx(1.0, abs=1e-5)
    # No named entity, no embedding, or a scope that excludes them: silent.
    for query, emb, authors in (("what did she research?", rest, None), ("What did Caroline research?", None, None),
                                ("What did Caroline research?", rest, ["nobody"])):
        assert channel(bank, "entity", query, emb, authors) == []


def test_session_channel_lists_the_best_documents_units_by_their_documents_bm25(bank: psycopg.Connection[Any]) -> None:
    # Session A is about the charity race throughout; session B mentions a race once.
    a = retain(bank, ["Melanie: I ran a charity race.", "Caroline: How was the race?", "Melanie: Tiring, but great."],
               [axis((0, 1)), axis((1, 1)), axis((2, 1))], source="a")
    b = retain(bank, ["Jon: I watched a race on TV.", "Gina: Nice, I painted all day.", "Jon: Cool."],
               [axis((3, 1)), axis((4, 1)), axis((5, 1))], source="b")
    rows = channel(bank, "session", "charity race", axis((2, 1), (0, 0.5)))
    # Every unit of a document, the turn without the query's words too; inside it by cosine.
    assert [r["unit_id"] for r in rows] == [a[2], a[0], a[1], b[0], b[1], b[2]]
    scores = [r["score"] for r in rows]
    assert scores[0] == scores[1] == scores[2] > scores[3] == scores[4] == scores[5] > 0
    assert [r["rank"] for r in channel(bank, "session", "charity race", limit=2)] == [1, 2]
    assert channel(bank, "session", "submarine") == []


def test_one_bm25_scan_serves_both_channels_exactly_as_each_alone(bank: psycopg.Connection[Any]) -> None:
    """recall_candidates reads the lexical and session channels from one candidate scan
    (rcll._bm25_channels); each public channel is one half of it, row for row and bit for bit."""
    retain(bank, ["Melanie: I ran a charity race.", "Caroline: How was the race?", "Melanie: Tiring."],
           [axis((0, 1)), axis((1, 1)), axis((2, 1))], author="mel", source="a")
    retain(bank, ["Jon: I watched a race on TV.", "Gina: The charity gala was fun.", "Jon: Cool race."],
           [axis((3, 1)), axis((4, 1)), axis((5, 1))], author="jon", source="b")
    qe = vtext(axis((2, 1), (0, 0.5)))
    for authors, limit in ((None, 300), (["mel"], 300), (None, 2)):
        args = {"q": "charity race", "bank": BANK, "authors": authors, "qe": qe, "limit": limit}
        both = bank.execute("""SELECT channel, unit_id, score, rank FROM rcll._bm25_channels(
                                   %(q)s, rcll.recall_scope(%(bank)s, authors => %(authors)s, include_self_declared => true), %(qe)s::vector,
                                   %(limit)s) ORDER BY channel, rank""", args).fetchall()
        alone = [("lexical", *r) for r in bank.execute(
                     """SELECT unit_id, score, rank FROM rcll.channel_lexical(%(q)s,
                            rcll.recall_scope(%(bank)s, authors => %(authors)s, include_self_declared => true), %(limit)s)""", args).fetchall()]
        alone += [("session", *r) for r in bank.execute(
                      """SELECT unit_id, score, rank FROM rcll.channel_session(%(q)s,
                             rcll.recall_scope(%(bank)s, authors => %(authors)s, include_self_declared => true), %(qe)s::vector, %(limit)s)""",
                      args).fetchall()]
        assert both == alone and any(c == "lexical" for c, *_ in both) and any(c == "session" for c, *_ in both)
        assert len([r for r in both if r[0] == "session"]) <= limit


def test_fused_score_is_the_sum_of_each_channels_z_score(bank: psycopg.Connection[Any]) -> None:
    chunks = ["Caroline: I ran a charity race for the shelter.", "Melanie: A race? Which race?",
              "Caroline: The charity race downtown, with Melanie.", "Melanie: I painted a lake.",
              "Caroline: Pottery class was fun.", "Melanie: I went camping with the kids."]
    retain(bank, chunks[:3], [axis((i, 1), (9, 0.3 * i)) for i in range(3)], source="s1")
    retain(bank, chunks[3:], [axis((i, 1), (9, 0.2 * i)) for i in range(3, 6)], source="s2")
    q, qe, qe_entity = "Did Caroline run a charity race?", axis((0, 1), (9, 0.5)), axis((2, 1))
    facts = candidates(bank, R(query=q, bank=BANK), query_embedding=qe, entity_query_embedding=qe_entity, limit=50)
    # Recompute from the channels themselves: z over each channel's own list, a missing unit at
    # the channel's lowest z, a channel with < 2 hits or flat scores silent.
    lists = {
        "dense": channel(bank, "dense", q, qe),
        "lexical": channel(bank, "lexical", q),
        "graph": channel(bank, "graph", q),
        "temporal": channel(bank, "temporal", q, qe),
        "entity": channel(bank, "entity", q, qe_entity),
        "session": channel(bank, "session", q, qe),
    }
    assert lists["entity"] and lists["session"] and lists["lexical"] and not lists["temporal"]
    union = {r["unit_id"] for rows in lists.values() for r in rows}
    fused: dict[int, float] = defaultdict(float)
    for rows in lists.values():
        s = [r["score"] for r in rows]
        if len(s) < 2:
            continue
        mu = sum(s) / len(s)
        sd = math.sqrt(sum((x - mu) ** 2 for x in s) / len(s))
        if sd <= 1e-12 * max(abs(mu), 1):
            continue
        z = {r["unit_id"]: (r["score"] - mu) / sd for r in rows}
        for u in union:
            fused[u] += z.get(u, min(z.values()))
    assert {f.unit_id for f in facts} == union
    for f in facts:
        assert f.fused_score == pytest.approx(fused[f.unit_id], abs=1e-5)   # vectors sent as 6-decimal text
        for name, rows in lists.items():
            rank = next((r["rank"] for r in rows if r["unit_id"] == f.unit_id), None)
            assert getattr(f, f"rank_{name}") == rank, name
        assert f.rank_context is None                       # out of the fusion unless asked for
    # Best fused first, ties in unit order.
    assert [(-f.fused_score, f.unit_id) for f in facts] == sorted((-f.fused_score, f.unit_id) for f in facts)


def test_a_channel_with_one_hit_or_flat_scores_is_silent(bank: psycopg.Connection[Any]) -> None:
    ids = retain(bank, ["zebra crossing", "plain text here", "another plain line"])
    rows = candidates(bank, R(query="zebra", bank=BANK), limit=10)
    # Lexical and session each found what they found, but one hit (or one document, every unit
    # alike) orders nothing: every fused score is 0 and the units come in unit order.
    assert [(f.unit_id, f.fused_score) for f in rows] == [(u, 0.0) for u in ids]
    assert rows[0].rank_lexical == 1 and rows[0].rank_session is not None


def test_a_weight_of_zero_skips_the_new_channels(bank: psycopg.Connection[Any]) -> None:
    retain(bank, ["Caroline: I ran a charity race.", "Melanie: Which race?"], [axis((0, 1)), axis((1, 1))])
    facts = candidates(bank, R(query="Caroline race", bank=BANK, weights={"entity": 0, "session": 0}), query_embedding=axis((0, 1)))
    assert facts and all(f.rank_entity is None and f.rank_session is None for f in facts)


def test_the_graph_channel_leaves_keyless_links_to_the_entity_channel(bank: psycopg.Connection[Any]) -> None:
    retain(bank, ["Caroline: I adopted a dog.", "Melanie: I think Caroline likes dogs."], [axis((0, 1)), axis((1, 1))])
    assert channel(bank, "entity", "Did Caroline adopt?", axis((0, 1)))
    assert channel(bank, "graph", "Did Caroline adopt?") == []
