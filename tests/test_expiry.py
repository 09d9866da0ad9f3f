"""Expiry: a retain's expires_at / ttl and a bank's retention policies. An expired unit leaves
recall at the instant it expires (a read-time filter in the scope, no sweeper lag) and the periodic
sweep forgets it with the same cascade as a forget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from rcll import Memory
from rcll.errors import RcllError

PAST = datetime(2020, 1, 1, tzinfo=UTC)


def test_an_expired_unit_leaves_recall_at_once_and_the_sweep_forgets_it(
        dsn: str, db: psycopg.Connection[Any]) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        gone = m.retain("The door code of the lab is 4711.", expires_at=PAST)
        kept = m.retain("The lab door opens with a badge.", ttl=timedelta(days=30))
        assert [f.text for f in m.recall("lab door code").facts] == ["The lab door opens with a badge."]
        assert db.execute("SELECT count(*) FROM rcll.unit_lexicon WHERE expires_at = %s", (PAST,)).fetchone() == (1,)
        with pytest.raises(RcllError) as e:
            m.retain("x", expires_at=PAST, ttl=timedelta(days=1))
        assert e.value.field == "ttl"
        assert m.upkeep().expired == len(gone.unit_ids)
    assert db.execute("SELECT count(*) FROM rcll.memory_units WHERE unit_id = ANY (%s)", (gone.unit_ids,)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM rcll.documents WHERE document_id = %s", (gone.document_id,)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM rcll.documents WHERE content LIKE '%%4711%%'").fetchone() == (0,)
    assert db.execute("SELECT actor, action FROM rcll.forget_log").fetchall() == [("system:expire", "expire")]
    row = db.execute("SELECT expires_at > now() + interval '29 days' FROM rcll.memory_units WHERE unit_id = %s",
                     (kept.unit_ids[0],)).fetchone()
    assert row == (True,)


def test_a_retention_policy_expires_its_layer_and_is_listed_in_stats(dsn: str, db: psycopg.Connection[Any]) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        raw = m.retain("Raw note: the printer on floor two jams.", layer="L2")
        rule = m.retain("Rule: always lock the server room.", layer="L0")
        assert m.set_retention(timedelta(microseconds=1), layer="L2") == len(raw.unit_ids)
        assert [f.text for f in m.recall("printer server room").facts] == ["Rule: always lock the server room."]
        [policy] = m.retention()
        assert (policy["layer"], policy["units"], policy["expired"]) == ("L2", 1, 1)
        assert m.stats().other["retention"] == {"layer=L2": 0}
        later = m.retain("Raw note: the coffee machine is fixed.", layer="L2")
        assert db.execute("SELECT expires_at <= now() + interval '1 second' FROM rcll.memory_units WHERE unit_id = %s",
                          (later.unit_ids[0],)).fetchone() == (True,), "a new unit falls under the policy too"
        assert m.set_retention(None, layer="L2") == 2, "removing the policy gives the units back"
        assert len(m.recall("printer coffee server").facts) == 3
        assert m.upkeep().expired == 0
        assert db.execute("SELECT count(*) FROM rcll.memory_units WHERE expires_at IS NOT NULL").fetchone() == (0,)
        assert rule.unit_ids


def test_the_scope_skips_the_expiry_test_only_while_its_bank_holds_no_expired_unit(
        dsn: str, db: psycopg.Connection[Any]) -> None:
    # rcll.recall_scope's has_expired: false lets every channel's plan drop the expiry test
    # (docs/scaling.md); it must be true exactly while the bank holds an expired unit not yet swept.
    def has_expired(bank: str) -> bool:
        return bool(db.execute("SELECT (rcll.recall_scope(%s)).has_expired", (bank,)).fetchone()[0])  # type: ignore[index]

    def lexical(bank: str, scope_sql: str = "rcll.recall_scope(%(b)s)") -> list[str]:
        return [r[0] for r in db.execute(
            f"SELECT u.text FROM rcll.channel_lexical('lab door code', {scope_sql}) c "
            "JOIN rcll.memory_units u USING (unit_id) ORDER BY c.rank", {"b": bank}).fetchall()]

    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        m.create_bank("c")
        m.retain("The lab door opens with a badge.", ttl=timedelta(days=30))
        m.retain("The lab door code is on the badge.", bank="c")
        assert not has_expired("b") and not has_expired("c")
        m.retain("The door code of the lab is 4711.", expires_at=PAST)
        assert has_expired("b") and not has_expired("c")
        assert lexical("b") == ["The lab door opens with a badge."]
        # A scope built by hand without the field (NULL) makes the test all the same.
        by_hand = "jsonb_populate_record(NULL::rcll.recall_scope, to_jsonb(rcll.recall_scope(%(b)s)) - 'has_expired')"
        assert lexical("b", by_hand) == ["The lab door opens with a badge."]
        assert [f.text for f in m.recall("lab door code").facts] == ["The lab door opens with a badge."]
        m.upkeep()
        assert not has_expired("b")
        assert lexical("b") == ["The lab door opens with a badge."]
