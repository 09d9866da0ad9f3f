"""One source per default on each side: rcll.recall_defaults() in SQL, rcll.defaults in Python, held
equal here; and the recall functions really take their defaults from rcll.recall_defaults()."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rcll import defaults, models
from test_recall_seed import seed

BANK = "d"
SQL_NAMES = {"budget": defaults.BUDGET, "rerank_depth": defaults.RERANK_DEPTH,
             "context_depth": defaults.CONTEXT_DEPTH,
             "channel_limit": defaults.CHANNEL_LIMIT, "candidate_limit": defaults.CANDIDATE_LIMIT}


def _argument_defaults(db: psycopg.Connection[Any], function: str) -> dict[str, str]:
    """Parameter name -> its DEFAULT expression, as the catalog holds them."""
    rows = db.execute("""
        SELECT a.name, pg_get_function_arg_default(p.oid, a.n::integer)
        FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS a(name, n)
        WHERE p.oid = %s::regproc""", (function,)).fetchall()
    return {name: expr for name, expr in rows if expr is not None}


def test_sql_and_python_defaults_are_equal(db: psycopg.Connection[Any]) -> None:
    row = db.execute("SELECT to_jsonb(d) FROM rcll.recall_defaults() d").fetchone()
    assert row is not None
    assert row[0] == SQL_NAMES


def test_recall_defaults_is_immutable(db: psycopg.Connection[Any]) -> None:
    assert db.execute("SELECT provolatile::text FROM pg_proc WHERE oid = 'rcll.recall_defaults'::regproc").fetchone() == ("i",)


@pytest.mark.parametrize(("function", "parameters"), [
    ("rcll.recall", {"limit": "candidate_limit", "rerank_depth": "rerank_depth", "context_depth": "context_depth",
                     "budget": "budget"}),
    ("rcll.recall_candidates", {"channel_limit": "channel_limit", "limit": "candidate_limit"}),
    ("rcll.channel_dense", {"limit": "channel_limit"}),
    ("rcll.channel_lexical", {"limit": "channel_limit"}),
    ("rcll.channel_graph", {"limit": "channel_limit"}),
    ("rcll.channel_temporal", {"limit": "channel_limit"}),
    ("rcll.channel_context", {"limit": "channel_limit"}),
    ("rcll.channel_entity", {"limit": "channel_limit"}),
    ("rcll.channel_session", {"limit": "channel_limit"}),
])
def test_recall_parameters_default_to_rcll_recall_defaults(db: psycopg.Connection[Any], function: str,
                                                           parameters: dict[str, str]) -> None:
    got = _argument_defaults(db, function)
    assert {p: got[p] for p in parameters} == {p: f"(rcll.recall_defaults()).{d}" for p, d in parameters.items()}


def test_recall_cuts_to_the_default_limits(db: psycopg.Connection[Any]) -> None:
    # More units than a channel returns, each a lexical match: the lexical channel stops at
    # CHANNEL_LIMIT, fusion at CANDIDATE_LIMIT. Every unit scores the same in every channel (one
    # document, equal lengths), so no channel speaks: every fused score is 0, ties in unit order.
    db.execute("SELECT rcll.create_bank(%s)", (BANK,))
    n = defaults.CHANNEL_LIMIT + 50
    db.execute("SELECT * FROM rcll.retain_chunks(bank => %s, content => 'alpha notes', chunks => %s, embeddings => NULL)",
               (BANK, [f"alpha note {i}" for i in range(n)]))
    assert db.execute("SELECT count(*) FROM rcll.channel_lexical('alpha', rcll.recall_scope(%s))", (BANK,)).fetchone() == (defaults.CHANNEL_LIMIT,)
    rows = db.execute("SELECT fused_score FROM rcll.recall_candidates('alpha', rcll.recall_scope(%s))", (BANK,)).fetchall()
    assert len(rows) == defaults.CANDIDATE_LIMIT
    assert {r[0] for r in rows} == {0.0}
    assert db.execute("SELECT count(*) FROM rcll.recall('alpha', rcll.recall_scope(%s))", (BANK,)).fetchone() == (defaults.CANDIDATE_LIMIT,)


def _parameters(db: psycopg.Connection[Any], function: str, modes: str) -> list[str]:
    """A function's parameter names of the given modes (i, o, b, t), in order."""
    row = db.execute("""
        SELECT array_agg(a.name ORDER BY a.n) FROM pg_proc p,
               unnest(p.proargnames, coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
               WITH ORDINALITY AS a(name, mode, n)
        WHERE p.oid = %s::regproc AND a.mode = ANY (%s)""", (function, list(modes))).fetchone()
    assert row is not None
    return list(row[0])


def test_sql_and_python_name_the_same_channels_in_the_same_order(db: psycopg.Connection[Any]) -> None:
    assert db.execute("SELECT rcll.recall_channel_names()").fetchone() == (list(defaults.CHANNELS),)
    assert db.execute("SELECT provolatile::text FROM pg_proc WHERE oid = 'rcll.recall_channel_names'::regproc").fetchone() == ("i",)


def test_the_channel_weights_are_named_in_recall_channel_names_order(db: psycopg.Connection[Any]) -> None:
    # rcll._weight_of reads a channel's weight at the channel's position in rcll.recall_channel_names().
    names = db.execute("SELECT rcll.recall_channel_names()").fetchone()[0]  # type: ignore[index]
    fields = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'rcll.channel_weights'::regclass AND attnum > 0 "
        "ORDER BY attnum")]
    assert fields == names == _parameters(db, "rcll.channel_weights", "i")
    assert [db.execute("SELECT rcll._weight_of(rcll.channel_weights(dense => 0.5, context => 0.25), %s)",
                       (c,)).fetchone()[0] for c in names] == [0.5, 1, 1, 1, 1, 1, 0.25]  # type: ignore[index]


@pytest.mark.parametrize("function", ["rcll.recall_candidates", "rcll.recall_channels", "rcll.fuse_candidates"])
def test_every_recall_function_takes_the_weights_as_one_value(db: psycopg.Connection[Any], function: str) -> None:
    params = _parameters(db, function, "ib")
    assert "weights" in params and not [p for p in params if p.endswith("_weight")]


@pytest.mark.parametrize("weight", ["-1", "'NaN'", "'Infinity'", "NULL"])
def test_a_weight_that_is_no_weight_is_refused_by_name(db: psycopg.Connection[Any], weight: str) -> None:
    with pytest.raises(psycopg.Error) as e:
        db.execute(f"SELECT rcll.channel_weights(graph => {weight})")  # noqa: S608 - a test's literal
    assert e.value.diag.sqlstate == "RC001" and e.value.diag.column_name == "weights.graph"
    db.rollback()


@pytest.mark.parametrize("function", ["rcll.recall_candidates", "rcll.fuse_candidates", "rcll.recall"])
def test_every_fused_row_has_a_rank_column_per_channel_and_no_other(db: psycopg.Connection[Any], function: str) -> None:
    names = db.execute("SELECT rcll.recall_channel_names()").fetchone()[0]  # type: ignore[index]
    ranks = {p for p in _parameters(db, function, "ot") if p.startswith("rank_")}
    assert ranks == {f"rank_{c}" for c in names}


def test_recall_channels_labels_its_lists_with_the_channel_names(db: psycopg.Connection[Any]) -> None:
    # Every channel on (context too) over the recall tests' store: each list carries a name of the
    # list, and every channel but graph (no entity links between these units' names) returns one.
    seed(db)
    q = "how do we deploy with helm and roll back, and what did Carol do last week"
    got = {r[0] for r in db.execute(
        "SELECT DISTINCT channel FROM rcll.recall_channels(%s, rcll.recall_scope('b'), query_embedding => %s::vector,"
        " reference_time => '2024-05-15', weights => rcll.channel_weights(context => 1.0))", (q, models.get_embedder().embed_query(q)))}
    names = set(db.execute("SELECT rcll.recall_channel_names()").fetchone()[0])  # type: ignore[index]
    assert got <= names
    assert names - got <= {"graph"}


_AGENT = ", agent text DEFAULT NULL::text"
_EXPIRES = ", expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone"


@pytest.mark.parametrize(("function", "after"), [
    ("rcll.recall", ""), ("rcll.recall_candidates", ""),
    # the write twins also carry what the client's transaction would have set (616)
    ("rcll.retain_chunks", _AGENT + _EXPIRES), ("rcll.retain_facts", _AGENT + _EXPIRES),
    ("rcll.record_llm_calls", ""), ("rcll.forget", _AGENT),
    ("rcll.put_state", _AGENT), ("rcll.get_state", ""), ("rcll.get_states", ""), ("rcll.state_history", ""),
    ("rcll.state_keys", ""), ("rcll.forget_state", _AGENT), ("rcll.export_stream", "")])
def test_each_in_bank_twin_is_its_function_with_the_banks_id_first(db: psycopg.Connection[Any], function: str,
                                                                   after: str) -> None:
    # Citus delegates a call by an argument of the distribution column's type, so each delegated
    # function has a twin taking the bank's id first, made from the function's signature by
    # rcll._make_in_bank_twin (616-citus-delegated-verbs.sql): this holds the two headers equal -
    # names, types, defaults and the rows returned - and the list of twins to this one.
    def header(name: str) -> tuple[str, str]:
        row = db.execute("SELECT pg_get_function_arguments(%s::regproc), pg_get_function_result(%s::regproc)",
                         (name, name)).fetchone()
        assert row is not None
        return str(row[0]), str(row[1])
    arguments, result = header(function)
    assert header(f"{function}_in_bank") == (f"bank_id integer, {arguments}{after}", result)
    listed = {str(r[0]) for r in db.execute("SELECT base::regproc::text FROM rcll._in_bank_twins()")}
    assert function in listed and len(listed) == 13


def test_a_twin_refuses_an_id_that_is_not_its_banks_on_one_node_too(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT rcll.create_bank('twin-a')")
    db.execute("SELECT rcll.create_bank('twin-b')")
    b = db.execute("SELECT rcll._bank_id('twin-b')").fetchone()
    assert b is not None
    db.execute("SELECT rcll.put_state_in_bank(%s, 'twin-b', 'ops', 'k', '1'::jsonb, 0)", (b[0],))
    assert db.execute("SELECT value FROM rcll.get_state_in_bank(%s, 'twin-b', 'ops', 'k')", (b[0],)).fetchone() == (1,)
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT * FROM rcll.get_state_in_bank(%s, 'twin-a', 'ops', 'k')", (b[0],))
    assert refused.value.sqlstate == "RC001" and refused.value.diag.column_name == "bank_id"
