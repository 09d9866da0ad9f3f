"""Optional bank isolation: with row-level security on, a role sees and writes only its banks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import bank_attacks
from conftest import LoginRole, MakeLoginRole

Db = psycopg.Connection[Any]


@pytest.fixture
def agent_role(db: Db, login_role: MakeLoginRole) -> Iterator[LoginRole]:
    """A login role that may read and write every rcll table; bank isolation is off again after."""
    try:
        yield login_role("SELECT", "INSERT", "UPDATE", "DELETE", member_of="rcll_agent")
    finally:
        db.execute("SELECT rcll.disable_bank_isolation()")


def seed(db: Db) -> None:
    for bank in ("mine", "theirs"):
        db.execute("SELECT rcll.create_bank(%s)", (bank,))
        db.execute("SELECT rcll.retain_chunks(%s, %s, ARRAY[%s], NULL, room => 'deployment')",
                   (bank, f"{bank} deploys", f"{bank} deploys"))


def test_bank_isolation_limits_a_role_to_its_banks(db: Db, login_role: MakeLoginRole) -> None:
    """Every attack of tests/bank_attacks.py (the cluster's tests make the same ones), by an
    rcll_agent member granted one bank."""
    role, role_dsn = login_role(member_of="rcll_agent")
    banks = bank_attacks.seed(db)
    db.execute("SELECT rcll.grant_bank(%s, %s)", (role, banks.mine))
    assert db.execute("SELECT rcll.enable_bank_isolation()").fetchone()[0] >= 8  # type: ignore[index]
    try:
        with psycopg.connect(role_dsn, autocommit=True) as conn:
            bank_attacks.attack(db, conn, role, banks)
            conn.execute("SELECT rcll.retain_chunks('mine', 'plain write', ARRAY['plain write'], NULL, room => 'ui')")
        # The administrator (superuser / owner) is not isolated; rooms stay a topic, not a permission.
        assert db.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (4,)
    finally:
        db.execute("SELECT rcll.disable_bank_isolation()")
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM rcll.banks").fetchone() == (2,)


def test_isolation_is_off_unless_enabled(db: Db, agent_role: LoginRole) -> None:
    _, role_dsn = agent_role
    seed(db)
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == (2,)


def test_keyless_entity_linking_reaches_only_the_callers_own_writes(db: Db, agent_role: LoginRole) -> None:
    """retain_chunks links each chunk to its speaker and names through a definer function; an agent
    calling it directly with another bank's unit ids links nothing there, and the worker underneath
    is not executable by agents at all."""
    role, role_dsn = agent_role
    seed(db)
    theirs = db.execute("SELECT bank_id FROM rcll.banks WHERE name = 'theirs'").fetchone()[0]  # type: ignore[index]
    (their_ids,) = db.execute("SELECT unit_ids FROM rcll.retain_chunks('theirs', 'Dana: Kim runs Nightly.', "
                              "ARRAY['Dana: Kim runs Nightly.'], NULL)").fetchone()  # type: ignore[misc]
    db.execute("DELETE FROM rcll.unit_entities WHERE bank_id = %s", (theirs,))
    db.execute("SELECT rcll.grant_bank(%s, 'mine')", (role,))
    db.execute("SELECT rcll.enable_bank_isolation()")
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        (mine_ids,) = conn.execute("SELECT unit_ids FROM rcll.retain_chunks('mine', 'Ann: I met Bo.', "
                                   "ARRAY['Ann: I met Bo.'], NULL)").fetchone()  # type: ignore[misc]
        assert conn.execute("SELECT rcll._link_written_keyless_entities(%s, %s)", (theirs, their_ids)).fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT rcll._link_keyless_entities(%s, %s)", (theirs, their_ids))
    assert db.execute("SELECT count(*) FROM rcll.unit_entities WHERE bank_id = %s", (theirs,)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM rcll.unit_entities WHERE unit_id = ANY(%s)", (mine_ids,)).fetchone() == (2,)


def test_a_role_cannot_change_another_banks_document_lengths(db: Db, agent_role: LoginRole) -> None:
    """An attacker with write grants and isolation on points its own unit at another bank's
    document (memory_units and its BM25 copy): that document's stored length - which the owner's
    trigger keeps past row-level security - counts only its own bank's units, so the other
    bank's session-channel scores do not move."""
    role, role_dsn = agent_role
    seed(db)
    db.execute("SELECT rcll.grant_bank(%s, 'mine')", (role,))
    db.execute("SELECT rcll.enable_bank_isolation()")
    theirs = "SELECT document_id FROM rcll.documents WHERE bank_id = (SELECT bank_id FROM rcll.banks WHERE name = 'theirs')"
    (doc,) = db.execute(theirs).fetchone()  # type: ignore[misc]
    length = "SELECT lexical_length FROM rcll.document_lexicon WHERE document_id = %s"
    before = db.execute(length, (doc,)).fetchone()
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        (mine,) = conn.execute("SELECT unit_id FROM rcll.memory_units").fetchone()  # type: ignore[misc]
        conn.execute("UPDATE rcll.memory_units SET document_id = %s WHERE unit_id = %s", (doc, mine))
        conn.execute("UPDATE rcll.unit_lexicon SET document_id = %s, lexical_length = 1000 WHERE unit_id = %s", (doc, mine))
        conn.execute("""INSERT INTO rcll.memory_units (bank_id, document_id, text, provenance)
                        SELECT bank_id, %s, 'padding padding padding padding', '{"via": "psql"}' FROM rcll.banks""", (doc,))
        assert conn.execute(length, (doc,)).fetchall() == []                  # and it cannot read it either
    assert db.execute(length, (doc,)).fetchone() == before
