"""The channel phase under a deadline: rcll.recall_channels starts a channel only while deadline_ms
leaves it time (rcll._channel_starts, each channel's one-time filter), the lexical channel always;
what it skipped is one NOTICE; without a deadline nothing changes."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg

from rcll import models
from test_recall_seed import BANK, seed

Q = "how do we deploy with helm and roll back, and what did Carol do last week"
EVERY = ("dense", "lexical", "session", "graph", "temporal", "entity")
CHANNELS = ("SELECT channel, unit_id, score, rank FROM rcll.recall_channels(%(q)s, rcll.recall_scope(%(bank)s), "
            "query_embedding => %(qe)s::vector, reference_time => '2024-05-15', deadline_ms => %(deadline)s) "
            "ORDER BY channel, rank, unit_id")


def _args(deadline: int | None) -> dict[str, Any]:
    return {"q": Q, "bank": BANK, "qe": models.get_embedder().embed_query(Q), "deadline": deadline}


def _channels(db: psycopg.Connection[Any], deadline: int | None) -> tuple[list[tuple[Any, ...]], list[str]]:
    """(the rows, the NOTICEs that speak of the channel phase)."""
    notices: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if "channel" in (d.message_primary or ""):
            notices.append(d.message_primary or "")

    db.add_notice_handler(keep)
    try:
        rows = db.execute(CHANNELS, _args(deadline)).fetchall()
    finally:
        db.remove_notice_handler(keep)
    return rows, notices


def test_without_a_deadline_every_channel_runs_and_nothing_is_said(db: psycopg.Connection[Any]) -> None:
    seed(db)
    rows, notices = _channels(db, None)
    assert notices == []
    assert {r[0] for r in rows} >= {"dense", "lexical", "session", "temporal", "entity"}
    plain = db.execute(CHANNELS.replace(", deadline_ms => %(deadline)s", ""), _args(None)).fetchall()
    assert rows == plain
    # A deadline the channels meet changes nothing either.
    generous, notices = _channels(db, 600_000)
    assert (generous, notices) == (plain, [])


def test_a_deadline_passed_before_the_channels_runs_the_lexical_channel_only_and_says_so_once(
        db: psycopg.Connection[Any]) -> None:
    seed(db)
    rows, notices = _channels(db, 1)
    # The lexical channel always runs: a recall never comes back empty for want of time.
    assert rows and {r[0] for r in rows} == {"lexical"}
    assert rows == [r for r in _channels(db, None)[0] if r[0] == "lexical"]
    assert len(notices) == 1, notices
    assert notices[0].startswith("recall: the deadline (1 ms) had 0 ms left when the dense channel was to start: "
                                 "the dense, session, graph, temporal, entity channels are skipped"), notices


def test_a_skipped_channel_never_runs(db: psycopg.Connection[Any]) -> None:
    # The check is each channel's one-time filter: the channel's function scan under it is never
    # executed (no loop at all), not run and then filtered.
    seed(db)
    plans: list[dict[str, Any]] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if (d.message_primary or "").startswith("duration:"):
            plans.append(json.loads((d.message_primary or "").split("plan:", 1)[1]))

    db.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice",
                    "log_format = json", "log_analyze = on"):
        db.execute(f"SET auto_explain.{setting}")
    db.add_notice_handler(keep)
    try:
        db.execute(CHANNELS, _args(1)).fetchall()
    finally:
        db.execute("SET auto_explain.log_min_duration = -1")
        db.remove_notice_handler(keep)
    [plan] = [p["Plan"] for p in plans if "rcll.channel_graph(" in p["Query Text"]]

    def scans(node: dict[str, Any]) -> dict[str, int]:
        out = {}
        if node.get("Node Type") == "Function Scan":
            out[node["Function Name"]] = node["Actual Loops"]
        for child in node.get("Plans", []):
            out |= scans(child)
        return out

    loops = scans(plan)
    assert loops["_bm25_channels"] == 1
    assert {f: loops[f] for f in ("channel_dense", "channel_graph", "channel_temporal", "channel_entity")} == {
        "channel_dense": 0, "channel_graph": 0, "channel_temporal": 0, "channel_entity": 0}


def test_each_channel_is_checked_when_its_turn_comes(db: psycopg.Connection[Any], dsn: str) -> None:
    # A slow path: another session holds the BM25 channels' table until after the deadline. The
    # dense channel starts in time; the lexical (and session) scan waits out the lock; by the
    # graph channel's turn the deadline is spent, so it and the channels after it are skipped.
    seed(db)
    locked, done = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as other, other.transaction():
            other.execute("LOCK TABLE rcll.unit_lexicon IN ACCESS EXCLUSIVE MODE")
            locked.set()
            other.execute("SELECT pg_sleep(2.5)")
        done.set()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        rows, notices = _channels(db, 2000)
    finally:
        holder.join()
    assert done.is_set()
    assert {r[0] for r in rows} == {"dense", "lexical", "session"}
    assert len(notices) == 1, notices
    assert "when the graph channel was to start: the graph, temporal, entity channels are skipped" in notices[0], notices


def test_after_a_channel_ran_the_lexical_channel_is_held_to_the_deadline_too(db: psycopg.Connection[Any]) -> None:
    # The rule itself, in one statement (its clock): the dense channel starts in time; the deadline
    # passes while it "runs" (a sleep); then the lexical channel is skipped like the rest - a
    # channel ran, so the recall has rows without it - and one NOTICE names every channel skipped.
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    db.execute("""DO $$
        DECLARE run_order constant text[] := '{dense,lexical,session,graph,temporal,entity}';
        BEGIN
            ASSERT rcll._channel_starts('dense', 2000, run_order), 'the dense channel starts in time';
            PERFORM pg_sleep(2.1);
            ASSERT NOT rcll._channel_starts('lexical', 2000, run_order), 'the lexical channel is skipped';
            ASSERT NOT rcll._channel_starts('session', 2000, run_order), 'the session channel is skipped';
            ASSERT NOT rcll._channel_starts('graph', 2000, run_order), 'the graph channel is skipped';
            ASSERT rcll._channel_starts('graph', NULL, run_order), 'without a deadline every channel starts';
        END $$""")
    assert len(notices) == 1, notices
    assert "when the lexical channel was to start: the lexical, session, graph, temporal, entity channels are skipped" \
        in notices[0], notices


def test_with_no_channel_run_before_it_the_lexical_channel_runs_past_the_deadline(db: psycopg.Connection[Any]) -> None:
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    db.execute("""DO $$
        DECLARE run_order constant text[] := '{lexical,session,graph}';
        BEGIN
            PERFORM pg_sleep(0.05);
            ASSERT rcll._channel_starts('lexical', 10, run_order), 'the lexical channel runs';
            ASSERT NOT rcll._channel_starts('session', 10, run_order), 'the session channel is skipped';
            ASSERT NOT rcll._channel_starts('graph', 10, run_order), 'the graph channel is skipped';
        END $$""")
    assert len(notices) == 1, notices
    assert "when the lexical channel was to start: the session, graph channels are skipped" in notices[0], notices


def test_sql_recall_past_its_deadline_answers_from_the_lexical_channel_with_one_channel_notice(
        db: psycopg.Connection[Any]) -> None:
    # rcll.recall hands its deadline to the channels: spent before them, the answer is the
    # lexical channel's fused order, never an error, and the channel phase says so once.
    seed(db)
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    sql = ("SELECT unit_id, rank_dense, rank_lexical, rank_session FROM rcll.recall(%(q)s, rcll.recall_scope(%(bank)s), "
           "query_embedding => %(qe)s::vector, reference_time => '2024-05-15', deadline_ms => %(deadline)s)")
    rows = db.execute(sql, _args(1)).fetchall()
    assert rows and all(d is None and lex is not None and s is None for _, d, lex, s in rows)
    assert len([n for n in notices if "channel was to start" in n]) == 1, notices
    notices.clear()
    plain = db.execute(sql.replace(", deadline_ms => %(deadline)s", ""), _args(None)).fetchall()
    assert db.execute(sql, _args(600_000)).fetchall() == plain
    assert not [n for n in notices if "channel was to start" in n]
