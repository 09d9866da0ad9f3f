"""Channels side by side: rcll.recall_channels on two connections, fused by rcll.fuse_candidates,
return what rcll.recall_candidates returns in one call - and the fusion reads only what the scope
allows, whatever unit ids a caller hands it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from rcll import Memory, models
from rcll.db import configure
from rcll.recall import MAIN_CHANNELS, SIDE_CHANNELS, candidates
from rcll.request import RecallRequest as R
from sqlcall import refused
from test_recall_seed import seed

Q = "how do we deploy with helm and roll back, and what did Carol do last week"
SCOPES: list[dict[str, Any]] = [
    {},
    {"rooms": ["deployment"]},
    {"authors": ["alice"]},
    {"thread": "B"},
    {"tags_any": ["ops"], "include_unattributed": True},
]


@pytest.fixture
def side(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A second connection to the test's database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        configure(conn)
        yield conn


def _rows(facts: list[Any]) -> list[tuple[Any, ...]]:
    return [(f.unit_id, f.fused_score, f.rank_dense, f.rank_lexical, f.rank_graph, f.rank_temporal,
             f.rank_entity, f.rank_session, f.context) for f in facts]


def test_channels_side_by_side_return_what_one_call_returns(db: psycopg.Connection[Any],
                                                            side: psycopg.Connection[Any]) -> None:
    seed(db)
    qe = models.get_embedder().embed_query(Q)
    for scope in SCOPES:
        one = candidates(db, R(query=Q, bank="b", reference_time="2024-05-15", **scope), query_embedding=qe, limit=1000)
        two = candidates(db, R(query=Q, bank="b", reference_time="2024-05-15", **scope), query_embedding=qe, limit=1000, side=side)
        assert one, scope
        # Exactly equal, scores to the last bit: the fusion sums each channel in rank order.
        assert _rows(two) == _rows(one), scope
    assert set(SIDE_CHANNELS) | set(MAIN_CHANNELS) == {"dense", "context", "lexical", "graph", "temporal",
                                                       "entity", "session"}


def test_recall_channels_runs_only_the_channels_it_is_asked_for(db: psycopg.Connection[Any]) -> None:
    seed(db)
    qe = models.get_embedder().embed_query(Q)
    sql = ("SELECT DISTINCT channel FROM rcll.recall_channels(%s, rcll.recall_scope('b'), query_embedding => %s::vector,"
           " reference_time => '2024-05-15', channels => %s) ORDER BY 1")
    assert [r[0] for r in db.execute(sql, (Q, qe, None))] == ["dense", "entity", "graph", "lexical", "session", "temporal"]
    assert [r[0] for r in db.execute(sql, (Q, qe, ["lexical", "session"]))] == ["lexical", "session"]
    assert [r[0] for r in db.execute(sql, (Q, qe, ["dense"]))] == ["dense"]
    assert db.execute(sql, (Q, qe, [])).fetchall() == []


def test_a_misspelt_channel_is_an_error_naming_the_field(db: psycopg.Connection[Any]) -> None:
    seed(db)
    with refused("RC001", "channels") as e:
        db.execute("SELECT * FROM rcll.recall_channels('helm', rcll.recall_scope('b'), channels => '{lexcal}')")
    assert e.value.diag.message_primary == 'channels: "lexcal" is not a recall channel'
    assert "lexical" in (e.value.diag.message_hint or "")
    with refused("RC001", "channels", 'channels: "lexcal"'):
        db.execute("""SELECT * FROM rcll.fuse_candidates(rcll.recall_scope('b'), channels => '{lexcal}',
                          unit_ids => '{1}', scores => '{1.0}', ranks => '{1}')""")


FUSE = """SELECT unit_id FROM rcll.fuse_candidates(rcll.recall_scope(%(bank)s, rooms => %(rooms)s),
              channels => %(channels)s, unit_ids => %(units)s::bigint[], scores => %(scores)s,
              ranks => %(ranks)s)"""


def test_fusion_returns_only_units_in_scope_whatever_ids_it_is_given(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    db.execute("SELECT rcll.create_bank('other')")
    other = db.execute("""SELECT unit_ids[1] FROM rcll.retain_chunks(bank => 'other', content => 'secret plan',
                              chunks => ARRAY['secret plan'], embeddings => NULL)""").fetchone()
    assert other is not None
    # Hits handed in by hand, as a client that read its lists elsewhere would: units of another
    # bank, of another room, superseded, or that do not exist are never returned.
    db.execute("UPDATE rcll.memory_units SET valid = tstzrange(lower(valid), now()) WHERE unit_id = %s", (ids["rollback"],))
    units = [ids["helm"], ids["rollback"], ids["lunch"], other[0], 10**12]
    args = {"bank": "b", "rooms": ["deployment"], "channels": ["lexical"] * len(units), "units": units,
            "scores": [5.0, 4.0, 3.0, 2.0, 1.0], "ranks": [1, 2, 3, 4, 5]}
    assert [r[0] for r in db.execute(FUSE, args)] == [ids["helm"]]
    assert [r[0] for r in db.execute(FUSE, {**args, "rooms": None})] == [ids["helm"], ids["lunch"]]


def test_memory_recall_is_the_same_with_a_spare_connection_or_without(dsn: str, db: psycopg.Connection[Any]) -> None:
    seed(db)
    orders = []
    for pool_size in (1, 4):
        with Memory(dsn=dsn, bank="b", pool_size=pool_size) as memory:
            for _ in range(2):      # the pool grows on the first recall's request for a spare
                result = memory.recall(Q, rerank_depth=0, time_from="2024-01-01")
            orders.append([f.unit_id for f in result.ranked])
    assert orders[0] and orders[0] == orders[1]


def test_an_error_on_the_side_connection_reaches_the_caller_and_frees_both(dsn: str, db: psycopg.Connection[Any]) -> None:
    seed(db)
    # A side connection to a database without rcll: its channels fail, the caller sees why.
    with psycopg.connect(conninfo.make_conninfo(dsn, dbname="postgres"), autocommit=True) as other:
        configure(other)
        with pytest.raises(psycopg.errors.InvalidSchemaName):
            candidates(db, R(query=Q, bank="b", reference_time="2024-05-15"), side=other)
        assert other.execute("SELECT 1").fetchone() == (1,)
    assert candidates(db, R(query=Q, bank="b", reference_time="2024-05-15"))
