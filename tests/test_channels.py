"""The four recall channels, one at a time: each ranks the right units, with its own score,
filtered before ranking."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest

from conftest import Leg, connected
from rcll import models
from test_recall_seed import UNITS, seed


class Seeded(NamedTuple):
    db: psycopg.Connection[Any]
    ids: dict[str, int]


@pytest.fixture
def seeded(leg: Leg) -> Iterator[Seeded]:
    """A copy, for each test, of test_recall_seed's store (seeded once per leg), and its unit ids by key."""
    with leg.database(leg.template("channels_seed", seed)) as url, connected(url) as conn:
        key = {u.text: u.key for u in UNITS}
        yield Seeded(conn, {key[t]: int(u) for u, t in conn.execute("SELECT unit_id, text FROM rcll.memory_units")})


def _qe(text: str) -> Any:
    return models.get_embedder().embed_query(text)


def _ids(db: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> list[int]:
    return [int(r[0]) for r in db.execute(sql, params).fetchall()]


DENSE = "SELECT unit_id FROM rcll.channel_dense(%(qe)s, rcll.recall_scope('b', rooms => %(rooms)s), exact_below => %(exact)s) ORDER BY rank"


def test_dense_ranks_the_nearest_unit_first_on_both_paths(seeded: Seeded) -> None:
    db, ids = seeded
    qe = _qe("which charts do we deploy to kubernetes with")
    exact = _ids(db, DENSE, {"qe": qe, "rooms": None, "exact": 100000})
    hnsw = _ids(db, DENSE, {"qe": qe, "rooms": None, "exact": 0})
    assert exact[0] == ids["helm"]
    assert hnsw == exact                           # 7 units: the iterative scan finds them all
    scores = [r[0] for r in db.execute(
        "SELECT score FROM rcll.channel_dense(%s, rcll.recall_scope('b')) ORDER BY rank", (qe,)).fetchall()]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1


def test_dense_filters_before_ranking(seeded: Seeded) -> None:
    db, ids = seeded
    qe = _qe("which charts do we deploy to kubernetes with")
    for exact in (0, 100000):
        got = _ids(db, DENSE, {"qe": qe, "rooms": ["database"], "exact": exact})
        assert set(got) == {ids["pgvector"], ids["backups"]}


def _bm25(docs: dict[int, list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    n = len(docs)
    avgdl = sum(len(d) for d in docs.values()) / n
    df = Counter(t for d in docs.values() for t in set(d))
    out: dict[int, float] = {}
    for uid, d in docs.items():
        tf = Counter(d)
        s = sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] * (k1 + 1)
                / (tf[t] + k1 * (1 - b + b * len(d) / avgdl)) for t in set(query) if tf[t])
        if s:
            out[uid] = s
    return out


def test_lexical_is_okapi_bm25_with_per_bank_idf(seeded: Seeded) -> None:
    db, _ = seeded
    # A second bank with the same words must not change bank b's IDF.
    db.execute("SELECT rcll.create_bank('other')")
    db.execute("""SELECT rcll.retain_chunks(bank => 'other', content => 'x', author => 'z',
                  chunks => ARRAY['helm helm helm deploy', 'helm again'], embeddings => NULL)""")
    query = "helm rollback deploy release"
    docs: dict[int, list[str]] = {}
    for uid, lexeme, positions in db.execute(
            "SELECT u.unit_id, t.lexeme, t.positions FROM rcll.memory_units u, unnest(u.lexical) t "
            "WHERE u.bank_id = rcll._bank_id('b')"):
        docs.setdefault(uid, []).extend([lexeme] * len(positions))
    terms = [r[0] for r in db.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", (query,))]
    expected = _bm25(docs, terms)
    got = {int(r[0]): float(r[1]) for r in db.execute(
        "SELECT unit_id, score FROM rcll.channel_lexical(%s, rcll.recall_scope('b'))", (query,)).fetchall()}
    assert got.keys() == expected.keys()
    for uid, s in expected.items():
        assert got[uid] == pytest.approx(s, rel=1e-9)


def test_lexical_pruned_candidates_agree_with_exact_scoring(seeded: Seeded) -> None:
    db, _ = seeded
    db.execute("ANALYZE rcll.memory_units")
    for q in ("helm rollback", "database backups", "carol berlin office"):
        pruned = db.execute("SELECT unit_id, score FROM rcll.channel_lexical(%s, rcll.recall_scope('b')) ORDER BY rank", (q,)).fetchall()
        exact = db.execute("SELECT unit_id, score FROM rcll.channel_lexical(%s, rcll.recall_scope('b'), prune_above => NULL) ORDER BY rank",
                           (q,)).fetchall()
        assert pruned == exact                     # small bank: always exact


def test_bm25_in_a_big_bank_prunes_without_losing_small_scopes_or_documents(db: psycopg.Connection[Any]) -> None:
    # A bank big enough for pruning: "deploy" is in every unit, so it generates no candidates;
    # "zebra" is rare and lies outside the tiny room. Pruned by bank-wide frequency alone, the
    # tiny room's units (which match only "deploy") were never candidates: both channels came back
    # empty there while exact BM25 lists the room's every unit.
    # Big enough: a term is pruned in a bank of over 1,000 units once it is in over 1,000 of them
    # (rcll._bm25_pruned_terms), so 3,000 "deploy" units prune it three times over (the whole-bank
    # check below proves it was); more units would take the same route, only slower to write.
    db.execute("SELECT rcll.create_bank('big')")
    db.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'bulk', room => 'main', embeddings => NULL,
                  chunks => ARRAY(SELECT 'deploy step' || i FROM generate_series(1, 3000) i))""")
    db.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'zebras', room => 'main', embeddings => NULL,
                  chunks => ARRAY(SELECT 'zebra deploy ' || i FROM generate_series(1, 10) i))""")
    db.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'tiny', room => 'tiny', embeddings => NULL,
                  chunks => ARRAY(SELECT 'deploy notes deploy ' || i FROM generate_series(1, 30) i))""")
    # Two documents for the session channel (below): "many" holds the rare "okapi" in one unit and
    # the pruned "deploy" ten times in five others; "once" holds "okapi deploy" in one unit.
    db.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'many', room => 'main', embeddings => NULL,
                  chunks => ARRAY['okapi'] || ARRAY(SELECT 'deploy deploy ' || i FROM generate_series(1, 5) i))""")
    db.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'once', room => 'main', embeddings => NULL,
                  chunks => ARRAY['okapi deploy'] || ARRAY(SELECT 'filler ' || i FROM generate_series(1, 5) i))""")
    db.execute("ANALYZE rcll.unit_lexicon")
    tiny = {r[0] for r in db.execute("SELECT unit_id FROM rcll.memory_units WHERE room = 'tiny'")}
    for channel in ("lexical", "session"):
        got = {}
        for name, prune in (("pruned", 0.05), ("exact", None)):
            got[name] = [r[0] for r in db.execute(
                "SELECT unit_id FROM rcll._bm25_channels('zebra deploy', rcll.recall_scope('big', rooms => '{tiny}'), "
                "prune_above => %s, lexical => %s, session => %s) ORDER BY rank",
                (prune, channel == "lexical", channel == "session"))]
        assert set(got["exact"]) == tiny, channel
        assert got["pruned"] == got["exact"], channel
    # The whole bank still prunes: "deploy" generates no candidates there, the zebras come first.
    top = [r[0] for r in db.execute("SELECT unit_id FROM rcll.channel_lexical('zebra deploy', rcll.recall_scope('big')) ORDER BY rank")]
    assert len(top) == 10
    # The session channel scores a document over all its units in scope, so a pruned term counts
    # in the units that hold no rarer term too: exact BM25 puts "many" (deploy x10) above "once"
    # (deploy x1). Counted over the candidate units alone (those holding "okapi"), "once" came first.
    many = db.execute("SELECT document_id FROM rcll.memory_units WHERE text = 'okapi'").fetchone()
    for prune in (None, 0.05):
        first = db.execute(
            "SELECT u.document_id FROM rcll._bm25_channels('okapi deploy', rcll.recall_scope('big'), prune_above => %s, "
            "lexical => false, session => true) c JOIN rcll.memory_units u USING (unit_id) ORDER BY c.rank LIMIT 1",
            (prune,)).fetchone()
        assert first == many, prune


def test_lexical_needs_no_refreshed_stats(seeded: Seeded) -> None:
    db, ids = seeded
    db.execute("UPDATE rcll.bank_stats SET unit_count = 0, total_length = 0")
    got = _ids(db, "SELECT unit_id FROM rcll.channel_lexical('helm rollback', rcll.recall_scope('b')) ORDER BY rank", {})
    assert got[0] == ids["rollback"]


def test_session_reads_the_refreshed_document_count(seeded: Seeded) -> None:
    db, _ = seeded   # seed() refreshed bank_stats
    stats = db.execute("SELECT s.document_count, (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = s.bank_id) "
                       "FROM rcll.bank_stats s WHERE s.bank_id = rcll._bank_id('b')").fetchone()
    assert stats is not None and stats[0] == stats[1] > 1
    refreshed = db.execute("SELECT * FROM rcll.refresh_bank_stats('b')").fetchone()
    assert refreshed is not None and refreshed[0] == "b" and refreshed[3] == stats[1]
    q = ("SELECT unit_id, score FROM rcll._bm25_channels('helm rollback deploy', rcll.recall_scope('b'), "
         "lexical => false, session => true) ORDER BY rank")
    read = db.execute(q).fetchall()
    assert read
    # Never refreshed: counted at recall time, the same figure, so the same rows and scores.
    db.execute("UPDATE rcll.bank_stats SET document_count = NULL")
    assert db.execute(q).fetchall() == read
    # A stale figure is what the channel reads (no recount on the recall path): IDF moves with it.
    db.execute("UPDATE rcll.bank_stats SET document_count = 1000")
    stale = db.execute(q).fetchall()
    assert [r[0] for r in stale] and [r[1] for r in stale] != [r[1] for r in read]


def test_lexical_takes_quotes_and_backslashes_verbatim(seeded: Seeded) -> None:
    db, ids = seeded

    def lexical(q: str) -> list[tuple[int, float]]:
        return [(int(u), float(s)) for u, s in db.execute(
            "SELECT unit_id, score FROM rcll.channel_lexical(%s, rcll.recall_scope('b')) ORDER BY rank", (q,))]

    # tsquery's operators and quoting in a query are plain text: the same ranking, the same scores
    # as its words alone, and the unit those words name first.
    plain = lexical("O Brien s helm rollback previous release")
    assert plain and plain[0][0] == ids["rollback"]
    assert lexical("O'Brien's \\ 'helm' | rollback & !(previous) <-> release:*") == plain
    # Nothing to match: no rows, and no error.
    assert lexical("it's O'Brien's \\ 'quoted' | & ! (x)") == []
    assert lexical("") == [] and lexical("the of and") == []


def test_graph_spreads_from_named_entities_over_two_hops(seeded: Seeded) -> None:
    db, ids = seeded
    rows = db.execute("SELECT unit_id, score FROM rcll.channel_graph('where did Caroline move to?', rcll.recall_scope('b')) ORDER BY rank").fetchall()
    got = {int(r[0]): float(r[1]) for r in rows}
    # hop 1: both units naming Carol (alias "caroline"); hop 2: the unit linked from one of them.
    assert {ids["lunch"], ids["berlin"]} <= got.keys()
    assert ids["backups"] in got
    assert got[ids["backups"]] < min(got[ids["lunch"]], got[ids["berlin"]])
    one_hop = _ids(db, "SELECT unit_id FROM rcll.channel_graph('Caroline', rcll.recall_scope('b'), hops => 1)", {})
    assert set(one_hop) == {ids["lunch"], ids["berlin"]}


def test_graph_matches_entities_fuzzily_and_ignores_stop_words(seeded: Seeded) -> None:
    db, _ = seeded
    names = [r[0] for r in db.execute("SELECT name FROM rcll.query_entities('how do we use kubernetess', 'b')")]
    assert names == ["Kubernetes"]
    assert db.execute("SELECT count(*) FROM rcll.channel_graph('how do we do it', rcll.recall_scope('b'))").fetchone() == (0,)


def test_graph_walks_only_through_readable_units(seeded: Seeded) -> None:
    db, ids = seeded
    got = _ids(db, "SELECT unit_id FROM rcll.channel_graph('Carol', rcll.recall_scope('b', rooms => '{database}'))", {})
    assert got == []                               # the linked unit is reachable only via social
    got = _ids(db, "SELECT unit_id FROM rcll.channel_graph('Helm', rcll.recall_scope('b', authors => '{bob}'))", {})
    assert got == [ids["rollback"]]


REF = "2024-05-15 12:00+00"
_pure: dict[str, str] = {}


@pytest.fixture
def pure(leg: Leg) -> Iterator[psycopg.Connection[Any]]:
    """A connection to one rcll database per leg, made once and shared by the tests that call
    functions reading and writing no table (rcll.parse_time_range): a database of its own for
    each of them would cost more than the test."""
    if leg.name not in _pure:
        _pure[leg.name] = leg.new_database()
    with connected(leg.url(_pure[leg.name])) as conn:
        yield conn


@pytest.mark.parametrize(("text", "expected"), [
    ("what did we ship last week", "[2024-05-06,2024-05-13)"),
    ("decisions in May 2023", "[2023-05-01,2023-06-01)"),
    ("what broke yesterday", "[2024-05-14,2024-05-15)"),
    ("two years ago", "[2022-01-01,2023-01-01)"),
    ("3 days ago", "[2024-05-12,2024-05-13)"),
    ("before June 2023", "(,2023-06-01)"),
    ("after 2022", "[2023-01-01,)"),
    ("since last month", "[2024-04-01,)"),
    ("on Monday", "[2024-05-13,2024-05-14)"),
    ("last friday", "[2024-05-10,2024-05-11)"),
    ("in March", "[2024-03-01,2024-04-01)"),
    ("in December", "[2023-12-01,2024-01-01)"),
    ("on 7 May 2023", "[2023-05-07,2023-05-08)"),
    ("May 7th, 2023", "[2023-05-07,2023-05-08)"),
    ("2023-05-07", "[2023-05-07,2023-05-08)"),
    ("what happened in 2021", "[2021-01-01,2022-01-01)"),
    ("this month", "[2024-05-01,2024-06-01)"),
    ("how may I deploy", None),
    ("how do we deploy", None),
])
def test_time_expressions_resolve_against_the_reference_time(
        pure: psycopg.Connection[Any], text: str, expected: str | None) -> None:
    db = pure
    db.execute("SET TimeZone = 'UTC'")
    row = db.execute("SELECT rcll.parse_time_range(%s, %s::timestamptz) = %s::tstzrange, rcll.parse_time_range(%s, %s::timestamptz)::text",
                     (text, REF, expected, text, REF)).fetchone()
    assert row is not None
    if expected is None:
        assert row[1] is None
    else:
        assert row[0], row[1]


def test_temporal_channel_returns_units_in_the_range(seeded: Seeded) -> None:
    db, ids = seeded
    got = _ids(db, "SELECT unit_id FROM rcll.channel_temporal('what did we decide last week', rcll.recall_scope('b'), reference_time => %(r)s) ORDER BY rank",
               {"r": REF})
    assert set(got) == {ids["helm"], ids["rollback"], ids["backups"]}
    got = _ids(db, "SELECT unit_id FROM rcll.channel_temporal('anything', rcll.recall_scope('b'), time_range => '[2023-05-01,2023-06-01)') ORDER BY rank", {})
    assert set(got) == {ids["lunch"], ids["berlin"]}
    assert _ids(db, "SELECT unit_id FROM rcll.channel_temporal('no time here', rcll.recall_scope('b'))", {}) == []


def test_temporal_orders_by_meaning_when_given_the_embedding(seeded: Seeded) -> None:
    db, ids = seeded
    qe = _qe("database backups")
    got = _ids(db, "SELECT unit_id FROM rcll.channel_temporal('last week', rcll.recall_scope('b'), reference_time => %(r)s, query_embedding => %(qe)s) ORDER BY rank",
               {"r": REF, "qe": qe})
    assert got[0] == ids["backups"]


CHANNELS = {
    "dense": "SELECT unit_id FROM rcll.channel_dense(%(qe)s, rcll.recall_scope('b', {f}))",
    "lexical": "SELECT unit_id FROM rcll.channel_lexical('deploy helm database backups pizza pipeline postgres', rcll.recall_scope('b', {f}))",
    "graph": "SELECT unit_id FROM rcll.channel_graph('helm carol kubernetes', rcll.recall_scope('b', {f}))",
    "temporal": "SELECT unit_id FROM rcll.channel_temporal('anything', rcll.recall_scope('b', {f}), time_range => '[2020-01-01,2025-01-01)')",
}


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_every_channel_applies_every_filter(seeded: Seeded, channel: str) -> None:
    db, ids = seeded
    qe = _qe("deploy helm database backups")
    sql = CHANNELS[channel]

    def run(f: str, **p: Any) -> set[int]:
        return set(_ids(db, sql.format(f=f), {"qe": qe, **p}))

    everything = run("as_of => NULL")
    assert everything
    key = {v: k for k, v in ids.items()}

    def keys(s: set[int]) -> set[str]:
        return {key[i] for i in s}

    assert keys(run("authors => '{bob}'")) <= {"rollback", "backups"}
    assert "pipeline" not in keys(run("authors => '{alice}'"))
    assert keys(run("authors => '{alice}', include_unattributed => true")) <= {"helm", "pgvector", "pipeline"}
    assert keys(run("thread => 'B'")) <= {"pipeline", "backups"}
    assert keys(run("halls => '{procedure}'")) <= {"rollback", "backups"}
    assert keys(run("layers => '{L1}'")) <= {"helm"}
    assert keys(run("tags_any => '{ci,db}'")) <= {"pipeline", "pgvector", "backups"}
    assert keys(run("tags_all => '{db,ops}'")) <= {"backups"}
    assert keys(run("rooms => '{social}'")) <= {"lunch", "berlin"}
    assert run("rooms => '{nowhere}'") == set()
    # mine: the agent this session is mapped to.
    db.execute("INSERT INTO rcll.identities (role_name, agent) VALUES (session_user, 'carol')")
    assert keys(run("mine => true")) <= {"lunch", "berlin"}
    db.execute("DELETE FROM rcll.identities")
    assert run("mine => true") == set()            # no identity: mine matches nobody
    # as_of: a unit whose validity ended is not read now, but is read as of before the end.
    db.execute("UPDATE rcll.memory_units SET valid = tstzrange(lower(valid), '2024-05-10') WHERE unit_id = %s",
               (ids["helm"],))
    if ids["helm"] in everything:
        assert ids["helm"] not in run("as_of => now()")
        assert ids["helm"] in run("as_of => '2024-05-09'::timestamptz")
