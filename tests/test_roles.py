"""SQL roles stay in their lane: rcll_reader reads, rcll_agent writes memories through its verbs,
and neither can grant itself a bank, change who it writes as, rewrite a unit's author, or make a
SECURITY DEFINER function write for it. Tried as an attacker would, with a real login role."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import bank_attacks
from conftest import LoginRole, MakeLoginRole
from test_backup import snapshot

Db = psycopg.Connection[Any]
DIM = 384


def vec(i: int) -> str:
    v = [0.0] * DIM
    v[i % DIM], v[(i * 7 + 1) % DIM] = 1.0, 0.5
    n = math.sqrt(sum(x * x for x in v))
    return "[" + ",".join(f"{x / n:.4f}" for x in v) + "]"


def seed(db: Db) -> None:
    """Two banks with units in rooms, room counts waiting to be folded, a grant and an identity."""
    for bank in ("b", "other"):
        db.execute("SELECT rcll.create_bank(%s)", (bank,))
        for i, room in enumerate(("deployment", "ops")):
            db.execute("SELECT rcll.retain_chunks(%s, %s, ARRAY[%s], ARRAY[%s::vector], room => %s, author => 'bob')",
                       (bank, f"{bank} note {i}", f"{bank} note {i}", vec(i), room))
    db.execute("SELECT rcll.grant_bank('pg_monitor', 'other')")
    db.execute("INSERT INTO rcll.identities (role_name, agent) VALUES ('pg_monitor', 'monitor')")


def refused(conn: psycopg.Connection[Any], statement: str, *args: Any) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as e:
        conn.execute(statement, args[0] if len(args) == 1 and isinstance(args[0], dict) else args or None)
    return e.value


@pytest.fixture
def agent(db: Db, login_role: MakeLoginRole) -> LoginRole:
    return login_role(member_of="rcll_agent")


@pytest.fixture
def reader(db: Db, login_role: MakeLoginRole) -> LoginRole:
    return login_role(member_of="rcll_reader")


def test_an_agent_role_cannot_grant_itself_a_bank(db: Db, agent: LoginRole) -> None:
    seed(db)
    db.execute("SELECT rcll.grant_bank(%s, 'b')", (agent.name,))
    db.execute("SELECT rcll.enable_bank_isolation()")
    try:
        grants = snapshot(db)["rcll.bank_grants"]
        with psycopg.connect(agent.dsn, autocommit=True) as conn:
            other = {"theirs": "other", "theirs_id": db.execute("SELECT rcll._bank_id('other')").fetchone()[0]}  # type: ignore[index]
            for attempt in bank_attacks.GRANT_ATTACKS:         # the cluster's tests make the same
                assert isinstance(refused(conn, attempt, other), psycopg.errors.InsufficientPrivilege), attempt
            assert conn.execute("SELECT name FROM rcll.banks").fetchall() == [("b",)]
            # Its own grant it may see; another role's it may not, through the table or the policies' helper.
            assert conn.execute("SELECT role_name FROM rcll.bank_grants").fetchall() == [(agent.name,)]
            assert conn.execute("SELECT rcll._visible_banks('pg_monitor')").fetchone() == ([],)
        assert snapshot(db)["rcll.bank_grants"] == grants
    finally:
        db.execute("SELECT rcll.disable_bank_isolation()")


def test_an_agent_role_cannot_rewrite_its_identity(db: Db, agent: LoginRole) -> None:
    seed(db)
    db.execute("INSERT INTO rcll.identities (role_name, agent) VALUES (%s, 'deployer')", (agent.name,))
    with psycopg.connect(agent.dsn, autocommit=True) as conn:
        for attempt in ("UPDATE rcll.identities SET agent = 'ceo' WHERE role_name = current_user",
                        "INSERT INTO rcll.identities (role_name, agent) VALUES ('someone_else', 'ceo')",
                        "DELETE FROM rcll.identities",
                        "SELECT agent FROM rcll.identities"):
            assert isinstance(refused(conn, attempt), psycopg.errors.InsufficientPrivilege), attempt
        conn.execute("SET rcll.agent = 'ceo'")                  # not the identity server: ignored
        assert conn.execute("SELECT rcll.current_agent()").fetchone() == ("deployer",)
        (uid,) = conn.execute("SELECT unit_ids[1] FROM rcll.retain_chunks('b', 'x', ARRAY['x'], NULL, author => 'ceo')"
                              ).fetchone()  # type: ignore[misc]
    assert db.execute("SELECT author, author_source FROM rcll.memory_units WHERE unit_id = %s", (uid,)).fetchone() \
        == ("deployer", "server")
    assert db.execute("SELECT role_name, agent FROM rcll.identities ORDER BY 1").fetchall() == \
        sorted([(agent.name, "deployer"), ("pg_monitor", "monitor")])


@pytest.mark.parametrize("change", [
    "author = 'ceo'", "author_source = 'server'", "author = NULL, author_source = 'none'",
    "tags = array_remove(tags, 'author-source:self_declared')", "tags = tags || 'author:ceo'::text",
    "provenance = provenance || '{\"who\": \"ceo\"}'"])
def test_an_agent_role_cannot_change_a_units_author(db: Db, agent: LoginRole, change: str) -> None:
    seed(db)
    with psycopg.connect(agent.dsn, autocommit=True) as conn:
        (uid,) = conn.execute("SELECT unit_ids[1] FROM rcll.retain_chunks('b', 'mine', ARRAY['mine'], NULL, author => 'ann')"
                              ).fetchone()  # type: ignore[misc]
        before = db.execute("SELECT author, author_source, tags, provenance FROM rcll.memory_units WHERE unit_id = %s",
                            (uid,)).fetchone()
        statement = f"UPDATE rcll.memory_units SET {change} WHERE unit_id = %s"
        for conn_ in (conn, db):                                # the agent, and not even the owner
            e = refused(conn_, statement, uid)
            assert (e.sqlstate, e.diag.column_name) == ("RC006", "author"), e
        # Other columns stay the agent's to change.
        conn.execute("UPDATE rcll.memory_units SET room = 'ui' WHERE unit_id = %s", (uid,))
    after = db.execute("SELECT author, author_source, tags, provenance FROM rcll.memory_units WHERE unit_id = %s",
                       (uid,)).fetchone()
    assert before is not None and before[:2] == ("ann", "self_declared") and after == before


def test_a_reader_role_cannot_write_grants_identities_or_authors(db: Db, reader: LoginRole) -> None:
    seed(db)
    before = snapshot(db)
    with psycopg.connect(reader.dsn, autocommit=True) as conn:
        for attempt in ("INSERT INTO rcll.bank_grants (role_name, bank_id) SELECT current_user, bank_id FROM rcll.banks",
                        "SELECT rcll.grant_bank(current_user, 'b')",
                        "INSERT INTO rcll.identities (role_name, agent) VALUES (current_user, 'ceo')",
                        "UPDATE rcll.memory_units SET author = 'ceo'",
                        "SELECT rcll.fold_room_counts()",
                        "SELECT rcll.retain_chunks('b', 'x', ARRAY['x'], NULL)"):
            assert isinstance(refused(conn, attempt), psycopg.errors.InsufficientPrivilege), attempt
        assert conn.execute("SELECT count(*) FROM rcll.bank_grants").fetchone() == (0,)   # pg_monitor's is not its
    assert snapshot(db) == before


def test_an_agent_role_writes_through_its_verbs_with_no_other_grant(db: Db, agent: LoginRole) -> None:
    """Least privilege is still enough: every write verb an agent has, under bank isolation, as a
    member of rcll_agent and nothing else."""
    seed(db)
    db.execute("SELECT rcll.grant_bank(%s, 'b')", (agent.name,))
    db.execute("INSERT INTO rcll.identities (role_name, agent) VALUES (%s, 'deployer')", (agent.name,))
    db.execute("SELECT rcll.enable_bank_isolation()")
    try:
        with psycopg.connect(agent.dsn, autocommit=True) as conn:
            x = conn.execute
            (ids,) = x("SELECT unit_ids FROM rcll.retain_chunks('b', 'Dana: Kim runs Nightly.', "
                       "ARRAY['Dana: Kim runs Nightly.'], ARRAY[%s::vector], room => 'ops')", (vec(3),)).fetchone()  # type: ignore[misc]
            facts = [{"text": "Deploys use Argo CD.", "hall": "decision",
                      "entities": [{"name": "Argo CD", "type": "service", "aliases": ["argocd"]}],
                      "supersedes": ["b note 0"]},
                     {"text": "Rollbacks are a git revert.", "hall": "procedure", "caused_by": [0],
                      "entities": [{"name": "Argo CD", "type": "service"}]}]
            (fact_ids,) = x("""SELECT unit_ids FROM rcll.retain_facts(bank => 'b', content => 'notes', facts => %s,
                                   embeddings => %s::vector[], aux_texts => ARRAY['Argo CD', 'b note 0'],
                                   aux_embeddings => %s::vector[], llm_calls => %s, room => 'deployment')""",
                            (Jsonb(facts), [vec(10), vec(11)], [vec(12), vec(0)],
                             Jsonb([{"purpose": "extract", "provider": "anthropic", "model": "m", "input_tokens": 1,
                                     "output_tokens": 1, "outcome": "ok"}]))).fetchone()  # type: ignore[misc]
            x("SELECT rcll.put_state('b', 'deployment', 'spread', '{\"n\": 1}', 0)")
            x("SELECT rcll.propose_room_merge('b', 'ops', 'deployment', 'same subject')")
            x("SELECT rcll.move_units('b', %s, 'ui', 'misfiled')", (ids,))
            x("SELECT rcll.write_observation(bank => 'b', text => 'Deploys: Argo CD, reverted by git.', "
              "embedding => %s::vector, sources => %s)", (vec(20), fact_ids))
            x("SELECT rcll.supersede(%s, %s, at => now() + interval '1 minute')", (fact_ids[0], fact_ids[1]))
            assert x("SELECT count(*) FROM rcll.recall_candidates('argo', rcll.recall_scope('b', mine => true), "
                     "query_embedding => %s::vector)", (vec(10),)).fetchone()[0] > 0  # type: ignore[index]
            # What stays the administrator's.
            for attempt in ("SELECT rcll.create_bank('mine')", "SELECT rcll.approve_room_merge('b', 'ops')",
                            "SELECT rcll.refresh_bank_stats('b')", "SELECT rcll.fold_room_counts()",
                            "DELETE FROM rcll.memory_units"):
                # Refused by privilege (42501), or by the verb itself as not permitted (RC006).
                assert refused(conn, attempt).sqlstate in ("42501", "RC006"), attempt
        authors = db.execute("SELECT DISTINCT author, author_source FROM rcll.memory_units WHERE bank_id = rcll._bank_id('b') "
                             "AND created_at > now() - interval '1 hour' AND author <> 'bob'").fetchall()
        assert authors == [("deployer", "server")]
    finally:
        db.execute("SELECT rcll.disable_bank_isolation()")


# The definer functions a role other than the owner may execute, and who: anything else is the owner's.
DEFINER_GRANTS = {
    "rcll.current_agent()": {"rcll_reader", "rcll_agent", "rcll_identity_server"},
    "rcll._visible_banks(name)": {"rcll_reader", "rcll_agent"},
    "rcll._link_written_keyless_entities(integer,bigint[])": {"rcll_agent"},
    "rcll._model_service_ask(text,text,text[],double precision,text[],jsonb)": {"rcll_reader", "rcll_agent"},
    # Forgetting from its own banks (bank isolation applied inside, by session_user).
    "rcll.forget(text,bigint[],bigint[],text,text,text,text,timestamp with time zone,timestamp with time zone,"
    "timestamp with time zone,timestamp with time zone,text,boolean,text,integer)": {"rcll_agent"},
    "rcll.forget_state(text,text,text,boolean,boolean,text)": {"rcll_agent"},
}
# Of those, the ones rcll_reader reaches: each reads only (reviewed), and is declared STABLE.
READER_DEFINERS = {"rcll.current_agent()", "rcll._visible_banks(name)",
                   "rcll._model_service_ask(text,text,text[],double precision,text[],jsonb)"}


def test_a_definer_function_is_executable_only_by_the_roles_that_need_it(db: Db) -> None:
    rows = db.execute("""
        SELECT p.oid::regprocedure::text, coalesce(array_agg(DISTINCT r.rolname) FILTER (WHERE r.rolname IS NOT NULL), '{}'),
               bool_or(a.grantee = 0)
        FROM pg_proc p
        LEFT JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a ON a.privilege_type = 'EXECUTE'
                                                                                    AND a.grantee <> p.proowner
        LEFT JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.pronamespace = 'rcll'::regnamespace AND p.prosecdef
        GROUP BY 1 ORDER BY 1""").fetchall()
    assert rows and not [f for f, _, public in rows if public], "PUBLIC may execute a definer function"
    assert {f: set(g) for f, g, _ in rows if g} == DEFINER_GRANTS


def _argument(name: str, typ: str, ids: dict[str, Any]) -> Any:
    """A plausible value for one parameter, so that a STRICT function runs its body."""
    by_type: dict[str, Any] = {
        "text": "b" if name == "bank" else "deployment" if "room" in name else "x",
        "text[]": ["x"], "bigint": ids["unit"], "bigint[]": [ids["unit"]], "integer": ids["bank"],
        "integer[]": [ids["bank"]], "jsonb": Jsonb({}), "boolean": True, "timestamp with time zone": "now",
        "vector": vec(1), "regconfig": "english", "name": "rcll_reader", "interval": "1 day", "real": 0.5,
        "double precision": 0.5, "regclass": "rcll.memory_units", "tstzrange": "[2020-01-01,2030-01-01)",
    }
    return by_type.get(typ)


def test_every_function_the_reader_can_execute_writes_nothing(db: Db, reader: LoginRole) -> None:
    """Every function of the schema rcll_reader may execute: none is a definer that could write
    as the owner (the definers it reaches are reviewed read-only and STABLE); it holds no privilege
    that writes; and calling every VOLATILE one as a reader login, with arguments that make its
    body run, fails or changes no row and no sequence."""
    seed(db)
    ids = {"unit": db.execute("SELECT min(unit_id) FROM rcll.memory_units").fetchone()[0],  # type: ignore[index]
           "bank": db.execute("SELECT rcll._bank_id('b')").fetchone()[0]}  # type: ignore[index]
    functions = db.execute("""
        SELECT p.oid::regprocedure::text, p.proname, p.provolatile::text, p.prosecdef, p.provariadic <> 0,
               coalesce(p.proargnames[1:p.pronargs], '{}'),
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) t)
        FROM pg_proc p
        WHERE p.pronamespace = 'rcll'::regnamespace AND has_function_privilege('rcll_reader', p.oid, 'EXECUTE')
        ORDER BY 1""").fetchall()
    assert len(functions) > 50
    definers = {f for f, _, _, secdef, *_ in functions if secdef}
    assert definers == READER_DEFINERS
    assert all(vol == "s" for f, _, vol, secdef, *_ in functions if secdef)
    # No table, sequence or schema privilege that writes, directly or through a role it is in.
    writes = db.execute("""
        SELECT c.oid::regclass::text, p FROM pg_class c,
               unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
        WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
          AND has_table_privilege('rcll_reader', c.oid, p)
        UNION ALL
        SELECT c.oid::regclass::text, p FROM pg_class c, unnest(ARRAY['USAGE', 'UPDATE']) p
        WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind = 'S' AND has_sequence_privilege('rcll_reader', c.oid, p)
        UNION ALL
        SELECT n.nspname, 'CREATE' FROM pg_namespace n
        WHERE n.nspname IN ('rcll', 'public') AND has_schema_privilege('rcll_reader', n.oid, 'CREATE')""").fetchall()
    assert writes == []
    before = snapshot(db)
    outcomes: dict[str, int] = {}
    with psycopg.connect(reader.dsn, autocommit=True) as conn:
        for signature, fname, vol, _, variadic, names, types in functions:
            if vol != "v":
                continue
            args = [_argument(n, t, ids) for n, t in zip(list(names) + [""] * len(types), types)]
            placeholders = [sql.SQL("%s::{}").format(sql.SQL(t)) for t in types]
            if variadic:
                placeholders[-1] = sql.SQL("VARIADIC ") + placeholders[-1]
            call = sql.SQL("SELECT {}({})").format(sql.Identifier("rcll", fname), sql.SQL(", ").join(placeholders))
            try:
                conn.execute(call, args)
                outcomes["ran"] = outcomes.get("ran", 0) + 1
            except psycopg.Error as e:
                outcomes[str(e.sqlstate)] = outcomes.get(str(e.sqlstate), 0) + 1
            assert snapshot(db) == before, f"{signature} changed the database when the reader called it"
    # Most are refused by privilege (42501); some run and find nothing to do.
    assert sum(outcomes.values()) > 20 and outcomes.get("42501", 0) > 10, outcomes


@pytest.mark.parametrize("role", ["rcll_reader", "rcll_agent"])
def test_the_sql_roles_are_installed_and_hold_no_login(db: Db, role: str) -> None:
    assert db.execute("SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_roles "
                      "WHERE rolname = %s", (role,)).fetchone() == (False, False, False, False, False)
