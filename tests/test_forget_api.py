"""Memory.forget / drop_bank / forget_state / correct / history: dry run first, a verb of their own,
read-only refuses, and a correction is what recall returns afterwards, with no stale copy."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rcll import Memory
from rcll.auth import Caller, Forbidden
from rcll.errors import RcllError


def test_memory_forget_is_a_dry_run_unless_asked_and_purge_vacuums(dsn: str) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        doc = m.retain("Mallory wrote the vault password on a sticky note.", thread="oops")
        m.retain("Alice keeps the kitchen tidy.", thread="fine")
        dry = m.forget(thread="oops")
        assert dry.dry_run and dry.counts["documents"] == 1 and dry.purged == []
        assert len(m.recall("vault password").facts) == 2, "a dry run changes nothing"
        done = m.forget(thread="oops", dry_run=False, reason="secret stored by mistake", purge=True)
        assert done.counts == dry.counts and not done.dry_run
        assert "rcll.memory_units" in done.purged and "rcll.unit_lexicon" in done.purged
        assert [f.text for f in m.recall("vault password").facts] == ["Alice keeps the kitchen tidy."]
        with pytest.raises(RcllError) as e:
            m.forget(document_ids=[doc.document_id], dry_run=False)
        assert e.value.field == "document_ids"


def test_forget_is_a_verb_of_its_own_and_a_bank_drop_needs_admin_too(dsn: str) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        m.retain("Alice keeps the kitchen tidy.", thread="t")
        writer = m.as_caller(Caller("agent", banks=("b",), can=frozenset({"read", "write"})))
        with pytest.raises(Forbidden):
            writer.forget(thread="t")
        forgetter = m.as_caller(Caller("agent", banks=("b",), can=frozenset({"read", "forget"})))
        assert forgetter.forget(everything="b").counts["units"] == 1
        with pytest.raises(Forbidden):
            forgetter.drop_bank("b", confirm="b")
        with pytest.raises(RcllError):
            forgetter.as_caller(Caller("agent", banks=("other",), can=frozenset({"forget"}))).forget(everything="b")
        assert m.drop_bank("b", confirm="b", dry_run=False).counts["banks"] == 1
        assert [b.name for b in m.banks()] == [b.name for b in m.banks() if b.name != "b"]


def test_a_read_only_memory_refuses_every_destructive_verb(dsn: str, login_role: Any) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        unit = m.retain("Alice keeps the kitchen tidy.").unit_ids[0]
    with Memory(login_role(member_of="rcll_reader").dsn, bank="b", read_only=True) as ro:
        for verb in (lambda: ro.forget(everything="b", dry_run=False),
                     lambda: ro.drop_bank("b", confirm="b", dry_run=False),
                     lambda: ro.forget_state("r", "k", dry_run=False),
                     lambda: ro.correct(unit, "Alice keeps it messy.", reason="wrong")):
            with pytest.raises(RcllError) as e:
                verb()
            assert e.value.field == "read_only"


def test_a_corrected_unit_is_recalled_with_its_new_text_and_keeps_its_history(
        dsn: str, db: psycopg.Connection[Any]) -> None:
    with Memory(dsn, bank="b", agent="editor") as m:
        m.create_bank("b")
        unit = m.retain("Alice lives in Porto and works on billing.").unit_ids[0]
        m.retain("Bob lives in Oslo.")
        history = m.correct(unit, "Alice lives in Lisbon and works on billing.", reason="she moved in May")
        assert [(v.version, v.current, v.text) for v in history] == [
            (2, True, "Alice lives in Lisbon and works on billing."), (1, False, "Alice lives in Porto and works on billing.")]
        assert history[1].reason == "she moved in May" and history[1].replaced_by == "editor"
        top = m.recall("Where does Alice live? Lisbon").facts[0]
        assert top.unit_id == unit and top.text == "Alice lives in Lisbon and works on billing."
        assert not any("Porto" in f.text for f in m.recall("Porto").facts)
        with pytest.raises(RcllError) as e:
            m.correct(unit, "Alice lives in Faro.", reason=" ")
        assert e.value.field == "reason"
    # no stale copy: the lexical rows and the embedding are the new text's
    row = db.execute("SELECT l.lexical = u.lexical, l.lexical_length = u.lexical_length,"
                     " u.lexical @@ to_tsquery('english', 'lisbon'), NOT u.lexical @@ to_tsquery('english', 'porto'),"
                     " d.lexical_length = l.lexical_length"
                     " FROM rcll.memory_units u JOIN rcll.unit_lexicon l USING (unit_id)"
                     " JOIN rcll.document_lexicon d ON d.document_id = u.document_id WHERE u.unit_id = %s",
                     (unit,)).fetchone()
    assert row == (True, True, True, True, True)
    keyless = {r[0] for r in db.execute("SELECT e.name FROM rcll.unit_entities ue JOIN rcll.entities e USING (entity_id)"
                                        " WHERE ue.unit_id = %s", (unit,))}
    assert "Lisbon" in keyless and "Porto" not in keyless
    assert db.execute("SELECT count(*) FROM rcll.entities WHERE name = 'Porto'").fetchone() == (0,)
    audit = db.execute("SELECT detail FROM rcll.audit_log WHERE action = 'correct'").fetchone()
    assert audit is not None and "Porto" not in str(audit[0]) and "Lisbon" not in str(audit[0])
