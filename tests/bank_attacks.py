"""What a SQL role granted one bank tries against another under bank isolation, and what it must
get back: shared by the one-node tests (tests/test_isolation.py, tests/test_roles.py) and the Citus
cluster's (tests/test_citus_isolation.py), which make the same attacks through the coordinator -
where the *_in_bank calls are delegated, each run whole on the worker holding the bank as the
calling role - and add the ones only a cluster has (a worker's shards, read and written directly).

The attacker is a login role that is a member of rcll_agent and nothing else, granted bank `mine`;
`theirs` is another bank, granted to pg_monitor (a grant the attacker must not be able to list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

Db = psycopg.Connection[Any]


@dataclass(frozen=True)
class Banks:
    mine: str
    theirs: str
    mine_id: int
    theirs_id: int

    def params(self, **more: Any) -> dict[str, Any]:
        return {"mine": self.mine, "theirs": self.theirs, "mine_id": self.mine_id, "theirs_id": self.theirs_id, **more}


def seed(admin: Db, mine: str = "mine", theirs: str = "theirs") -> Banks:
    """The two banks, each with one document "<bank> deploys" in room deployment; theirs granted
    to pg_monitor."""
    ids = []
    for bank in (mine, theirs):
        ids.append(admin.execute("SELECT rcll.create_bank(%s)", (bank,)).fetchone()[0])  # type: ignore[index]
        admin.execute("SELECT rcll.retain_chunks(%s, %s, ARRAY[%s], NULL, room => 'deployment')",
                      (bank, f"{bank} deploys", f"{bank} deploys"))
    admin.execute("SELECT rcll.grant_bank('pg_monitor', %s)", (theirs,))
    return Banks(mine, theirs, int(ids[0]), int(ids[1]))


# Granting itself a bank, or switching isolation off: refused by privilege (42501), each.
GRANT_ATTACKS = [
    "INSERT INTO rcll.bank_grants (role_name, bank_id) SELECT current_user, %(theirs_id)s",
    "SELECT rcll.grant_bank(current_user, %(theirs)s)",
    "UPDATE rcll.bank_grants SET bank_id = bank_id + 1",
    "DELETE FROM rcll.bank_grants",
    "SELECT rcll.disable_bank_isolation()",
    "ALTER TABLE rcll.memory_units DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE rcll.memory_units NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY bank_isolation ON rcll.memory_units",
]

# Reaching the other bank through rcll's functions, each with the SQLSTATE it must fail with:
# another bank does not exist for the role (RC002, unknown bank), a delegated call naming one bank
# by id and another by name is refused (RC001), and a row written into it breaks the policy (42501).
FUNCTION_ATTACKS = [
    ("SELECT * FROM rcll.rooms(%(theirs)s)", "RC002"),
    ("SELECT * FROM rcll.recall('deploys', rcll.recall_scope(%(theirs)s))", "RC002"),
    ("SELECT * FROM rcll.recall_candidates('deploys', rcll.recall_scope(%(theirs)s))", "RC002"),
    ("SELECT * FROM rcll.retain_chunks(%(theirs)s, 'sneak', ARRAY['sneak'], NULL)", "RC002"),
    ("SELECT rcll.put_state(%(theirs)s, 'deployment', 'spread', '{}', 0)", "RC002"),
    ("SELECT * FROM rcll.forget(%(theirs)s, everything => %(theirs)s, dry_run => false, reason => 'attack')", "RC002"),
    ("SELECT * FROM rcll.retain_chunks_in_bank(%(theirs_id)s, %(theirs)s, 'sneak', ARRAY['sneak'], NULL)", "RC002"),
    ("SELECT * FROM rcll.retain_chunks_in_bank(%(theirs_id)s, %(mine)s, 'sneak', ARRAY['sneak'], NULL)", "RC001"),
    ("SELECT * FROM rcll.forget_in_bank(%(theirs_id)s, %(theirs)s, everything => %(theirs)s, dry_run => false, "
     "reason => 'attack')", "RC002"),
    # Every other twin (616-citus-delegated-verbs.sql), by the other bank's id and its name, and by
    # its id with the attacker's own bank's name.
    ("SELECT * FROM rcll.retain_facts_in_bank(%(theirs_id)s, %(theirs)s, 'sneak', '[]', NULL)", "RC002"),
    ("SELECT rcll.record_llm_calls_in_bank(%(theirs_id)s, %(theirs)s, '[]')", "RC002"),
    ("SELECT rcll.put_state_in_bank(%(theirs_id)s, %(theirs)s, 'deployment', 'spread', '{}', 0)", "RC002"),
    ("SELECT rcll.put_state_in_bank(%(theirs_id)s, %(mine)s, 'deployment', 'spread', '{}', 0)", "RC001"),
    ("SELECT * FROM rcll.get_state_in_bank(%(theirs_id)s, %(theirs)s, 'deployment', 'spread')", "RC002"),
    ("SELECT * FROM rcll.get_states_in_bank(%(theirs_id)s, %(theirs)s, ARRAY['deployment'], ARRAY['spread'])", "RC002"),
    ("SELECT * FROM rcll.state_history_in_bank(%(theirs_id)s, %(theirs)s, 'deployment', 'spread')", "RC002"),
    ("SELECT * FROM rcll.state_keys_in_bank(%(theirs_id)s, %(theirs)s)", "RC002"),
    ("SELECT rcll.forget_state_in_bank(%(theirs_id)s, %(theirs)s, 'deployment', all_keys => true, dry_run => false)",
     "RC002"),
    ("SELECT * FROM rcll.export_stream_in_bank(%(theirs_id)s, %(theirs)s)", "RC002"),
    ("SELECT * FROM rcll.export_stream_in_bank(%(theirs_id)s, %(mine)s)", "RC001"),
    ("INSERT INTO rcll.memory_units (bank_id, text, provenance) VALUES (%(theirs_id)s, 'sneak', '{\"via\": \"psql\"}')",
     "42501"),
    ("INSERT INTO rcll.documents (bank_id, content, content_hash, provenance) "
     "VALUES (%(theirs_id)s, 'sneak', 'sneak', '{\"via\": \"psql\"}')", "42501"),
]

# Reads that run and must return nothing of the other bank: its rows named by id, and a recall
# whose scope is the attacker's own with the other bank's id put in (what a client passes to the
# delegated twins as a value - no function check stands in the way, only the policies).
EMPTY_READS = [
    "SELECT text FROM rcll.memory_units WHERE bank_id = %(theirs_id)s",
    "SELECT name FROM rcll.banks WHERE bank_id = %(theirs_id)s",
    "SELECT text FROM rcll.recall_in_bank(%(theirs_id)s, 'deploys', %(forged)s::rcll.recall_scope)",
    "SELECT text FROM rcll.recall_candidates_in_bank(%(theirs_id)s, 'deploys', %(forged)s::rcll.recall_scope)",
    "SELECT text FROM rcll.recall('deploys', %(forged)s::rcll.recall_scope)",
]

# Writes that run and must change nothing of the other bank (rcll_agent may UPDATE units).
NOOP_WRITES = [
    "UPDATE rcll.memory_units SET room = 'stolen' WHERE bank_id = %(theirs_id)s",
    "UPDATE rcll.documents SET content = 'stolen' WHERE bank_id = %(theirs_id)s",
]


def forged_scope(conn: Db, banks: Banks) -> str:
    """The attacker's own scope (rcll.recall_scope of its bank, as text) with the other bank's id."""
    (scope,) = conn.execute("SELECT rcll.recall_scope(%s)::text", (banks.mine,)).fetchone()  # type: ignore[misc]
    assert scope.startswith(f"({banks.mine_id},"), scope
    return f"({banks.theirs_id}," + scope[len(f"({banks.mine_id},"):]


def theirs(admin: Db, banks: Banks) -> dict[str, list[str]]:
    """Every row of the other bank, table by table (as the administrator, who is not isolated),
    and every grant."""
    tables = [str(t) for (t,) in admin.execute("SELECT rcll._bank_tables()::text")]
    rows = {t: [str(r) for (r,) in admin.execute(f"SELECT r::text FROM {t} r WHERE r.bank_id = %s ORDER BY 1",  # t: a regclass
                                                 (banks.theirs_id,))] for t in tables}
    rows["rcll.bank_grants"] = [str(r) for (r,) in admin.execute("SELECT r::text FROM rcll.bank_grants r ORDER BY 1")]
    return rows


def refused(conn: Db, statement: str, params: dict[str, Any]) -> psycopg.Error | None:
    try:
        conn.execute(statement, params)
    except psycopg.Error as e:
        return e
    return None


def attack(admin: Db, conn: Db, role: str, banks: Banks) -> None:
    """Every attack of the lists above, made by `role` on its connection `conn` (autocommit: each
    call its own statement, as Citus delegates them), with isolation on: each refused or finding
    nothing, and nothing of the other bank or of the grants changed. Then what the role may do:
    see its bank and its own grant, and write into its bank (one unit, 'allowed write')."""
    before = theirs(admin, banks)
    params = banks.params(forged=forged_scope(conn, banks))
    failures = []
    for statement in GRANT_ATTACKS:
        e = refused(conn, statement, params)
        if e is None or e.sqlstate != "42501":
            failures.append((statement, e))
    for statement, sqlstate in FUNCTION_ATTACKS:
        e = refused(conn, statement, params)
        if e is None or e.sqlstate != sqlstate:
            failures.append((statement, e))
    for statement in EMPTY_READS:
        rows = conn.execute(statement, params).fetchall()
        if rows:
            failures.append((statement, rows))
    for statement in NOOP_WRITES:
        conn.execute(statement, params)
    assert not failures, failures
    # Every table, read whole: only its bank. The helper the policies call answers for no other role.
    for (table,) in admin.execute("SELECT rcll._bank_tables()::text"):
        ids = conn.execute(f"SELECT DISTINCT bank_id FROM {table}").fetchall()  # table: a regclass
        assert set(ids) <= {(banks.mine_id,)}, (table, ids)
    assert conn.execute("SELECT name FROM rcll.banks").fetchall() == [(banks.mine,)]
    assert conn.execute("SELECT role_name FROM rcll.bank_grants").fetchall() == [(role,)]
    assert conn.execute("SELECT rcll._visible_banks('pg_monitor')").fetchone() == ([],)
    assert theirs(admin, banks) == before
    # Its own bank it reads, and writes through the delegated twin (the one write path a SQL role
    # has on a cluster: docs/scaling.md, "SQL roles on a cluster").
    assert [r[0] for r in conn.execute("SELECT name FROM rcll.rooms(%(mine)s) WHERE fact_count > 0", params)] == ["deployment"]
    conn.execute("SELECT * FROM rcll.retain_chunks_in_bank(%(mine_id)s, %(mine)s, 'allowed write', ARRAY['allowed write'], NULL)",
                 params)
    scope = conn.execute("SELECT rcll.recall_scope(%(mine)s)::text", params).fetchone()
    recalled = [r[0] for r in conn.execute("SELECT text FROM rcll.recall_in_bank(%(mine_id)s, 'allowed', %(scope)s::rcll.recall_scope)",
                                           {**params, "scope": scope[0] if scope else None})]
    assert recalled == ["allowed write"], recalled
