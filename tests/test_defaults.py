"""One source per default on each side: rcll.recall_defaults() in SQL, rcll.defaults in Python, held
equal here; and the recall functions really take their defaults from rcll.recall_defaults()."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rcll import defaults

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
