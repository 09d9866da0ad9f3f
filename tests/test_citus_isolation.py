"""Bank isolation on a real Citus cluster (the suite's `citus` fixture: a coordinator and two
workers on loopback). rcll.enable_bank_isolation on the coordinator puts the policy on every shard
of every bank table on every worker; a SQL role given its credentials the documented way
(rcll.citus_cluster.add_login_role; docs/scaling.md, "SQL roles on a cluster") makes every attack
of tests/bank_attacks.py - the one-node tests' own - through the coordinator, where its *_in_bank
calls run whole on the bank's worker as the role, and then on each worker directly, against the
shards: it reaches only its bank. Disabling takes every policy away again."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import conninfo

import bank_attacks
from conftest import CITUS_SHARD_COUNT
from rcll import install
from rcll.citus_cluster import DATABASE, HOST, CitusCluster, add_login_role, drop_login_role

# The cluster is shared with tests/test_citus.py; the policies cost about a second to switch.
pytestmark = pytest.mark.slow

Db = psycopg.Connection[Any]
POLICY = "(bank_id = ANY (rcll._visible_banks(CURRENT_USER)))"


class Attacker(NamedTuple):
    name: str
    password: str
    dsn: str                     # the coordinator, as it


@pytest.fixture(scope="module")
def coordinator(citus: CitusCluster) -> str:
    """The coordinator's rcll database, installed (idempotent: other test files may have done it),
    in autocommit as `rcll install` does: each step committed, the sequences' grants reach the
    workers (sql/functions/980-privileges.sql)."""
    with psycopg.connect(citus.url(), autocommit=True) as conn:
        install.install(conn)
    return citus.url()


@pytest.fixture(scope="module")
def isolated(citus: CitusCluster, coordinator: str) -> Iterator[tuple[bank_attacks.Banks, Attacker]]:
    """Banks iso-mine and iso-theirs, an rcll_agent login granted iso-mine, isolation on; off
    again, the grant and the role gone, after the module."""
    name, password = f"rcll_t_{secrets.token_hex(6)}", secrets.token_hex(16)
    with psycopg.connect(coordinator, autocommit=True) as admin:
        banks = bank_attacks.seed(admin, "iso-mine", "iso-theirs")
        dsn = add_login_role(citus, name, password, member_of="rcll_agent")
        try:
            admin.execute("SELECT rcll.grant_bank(%s, %s)", (name, banks.mine))
            assert admin.execute("SELECT rcll.enable_bank_isolation()").fetchone() == (20,)
            yield banks, Attacker(name, password, dsn)
        finally:
            admin.execute("SELECT rcll.disable_bank_isolation()")
            admin.execute("DELETE FROM rcll.bank_grants WHERE role_name IN (%s, 'pg_monitor')", (name,))
            drop_login_role(citus, name)


def policies(url: str) -> tuple[int, int, set[str]]:
    """On the node and database of url: how many of rcll's bank tables (their shards and the
    workers' copies included) carry the bank_isolation policy with row-level security on; how many
    there are; the policy's expressions."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET citus.override_table_visibility = off")      # the shards, listed
        row = conn.execute("""
            SELECT count(*) FILTER (WHERE c.relrowsecurity AND p.polname IS NOT NULL), count(*),
                   array_remove(array_agg(DISTINCT pg_get_expr(p.polqual, p.polrelid)), NULL)
            FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid AND p.polname = 'bank_isolation'
            WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind = 'r'
              AND regexp_replace(c.relname, '_[0-9]+$', '') IN (SELECT t.relname FROM pg_class t
                                                                 WHERE t.oid IN (SELECT rcll._bank_tables()))""").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), set(row[2])


def test_enable_puts_the_policy_on_every_shard_on_every_worker(citus: CitusCluster, isolated: Any) -> None:
    for worker in citus.workers:
        held, tables, expressions = policies(citus.url(worker))
        assert tables > 20 * CITUS_SHARD_COUNT // 2 and held == tables, (worker.port, held, tables)   # a table's shards over two workers
        assert expressions == {POLICY}
    # Switched on a worker, the policies would stay there: refused.
    with citus.connect(citus.workers[0]) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute("SELECT rcll.enable_bank_isolation()")
    assert refused.value.sqlstate == "RC001" and "coordinator" in str(refused.value)


def test_a_role_makes_every_attack_through_the_coordinator_and_reaches_only_its_bank(
        coordinator: str, isolated: tuple[bank_attacks.Banks, Attacker]) -> None:
    banks, attacker = isolated
    with psycopg.connect(coordinator, autocommit=True) as admin, psycopg.connect(attacker.dsn, autocommit=True) as conn:
        bank_attacks.attack(admin, conn, attacker.name, banks)
        # The forged recall ran whole on the worker holding the other bank, as the role: one
        # command to one worker, and the shards' policies left it nothing.
        params = banks.params(forged=bank_attacks.forged_scope(conn, banks))
        sent: list[str] = []
        conn.add_notice_handler(lambda d: sent.append(d.message_primary or ""))
        conn.execute("SET citus.log_remote_commands = on")
        assert conn.execute(bank_attacks.EMPTY_READS[2], params).fetchall() == []
        assert [m for m in sent if m.startswith("issuing")] == [m for m in sent if "recall_in_bank" in m]
        assert len([m for m in sent if m.startswith("issuing")]) == 1, sent
        # The plain verbs write through the coordinator statement by statement, the owner's
        # triggers and the role's statements on the same shards over two connections, which Citus
        # refuses (connection/placement_connection.c): on a cluster a role writes through the twins.
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT rcll.retain_chunks(%(mine)s, 'plain write', ARRAY['plain write'], NULL)", params)
        assert refused.value.sqlstate == "25001" and "by a different user" in str(refused.value)


def test_a_role_on_a_worker_reads_and_writes_only_its_banks_shards(
        citus: CitusCluster, coordinator: str, isolated: tuple[bank_attacks.Banks, Attacker]) -> None:
    banks, attacker = isolated
    with psycopg.connect(coordinator, autocommit=True) as admin:
        shards = admin.execute("""SELECT s.nodeport, s.shard_name FROM citus_shards s
                                  WHERE s.shardid IN (SELECT get_shard_id_for_distribution_column(t, %s)
                                                      FROM rcll._citus_bank_tables() t)""", (banks.theirs_id,)).fetchall()
    assert len(shards) >= 15 and {port for port, _ in shards} <= {w.port for w in citus.workers}
    seen = 0
    for worker in citus.workers:
        here = [str(name) for port, name in shards if port == worker.port]
        with citus.connect(worker) as owner:
            held = {name: owner.execute(f"SELECT count(*) FROM rcll.{name} WHERE bank_id = %s",  # name: from citus_shards
                                        (banks.theirs_id,)).fetchone() for name in here}
        seen += sum(n for (n,) in held.values())  # type: ignore[misc]
        # Over TCP with its password, as a remote attacker with the role's credentials would.
        dsn = conninfo.make_conninfo(host=HOST, port=worker.port, dbname=DATABASE, user=attacker.name,
                                     password=attacker.password)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in here:
                assert conn.execute(f"SELECT count(*) FROM rcll.{name} WHERE bank_id = %s",
                                    (banks.theirs_id,)).fetchone() == (0,), name
            # The table itself, queried on a worker (Citus routes it to every shard, as the role).
            assert {r[0] for r in conn.execute("SELECT DISTINCT bank_id FROM rcll.memory_units")} <= {banks.mine_id}
            with pytest.raises(psycopg.errors.InsufficientPrivilege):          # nor past the policies
                conn.execute("SET row_security = off; SELECT count(*) FROM rcll.memory_units")
            units = [name for name in here if name.startswith("memory_units_")]
            for name in units:
                for statement in (f"INSERT INTO rcll.{name} (bank_id, text, provenance) VALUES (%s, 'sneak', '{{\"via\": \"psql\"}}')",
                                  f"ALTER TABLE rcll.{name} DISABLE ROW LEVEL SECURITY",
                                  f"DROP POLICY bank_isolation ON rcll.{name}"):
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(statement, (banks.theirs_id,) if "%s" in statement else None)
        with citus.connect(worker) as owner:
            assert {name: owner.execute(f"SELECT count(*) FROM rcll.{name} WHERE bank_id = %s",
                                        (banks.theirs_id,)).fetchone() for name in here} == held
    assert seen > 0                     # the shards it read as empty hold the other bank's rows


def test_disable_takes_every_policy_away(citus: CitusCluster, coordinator: str,
                                         isolated: tuple[bank_attacks.Banks, Attacker]) -> None:
    _, attacker = isolated
    with psycopg.connect(coordinator, autocommit=True) as admin:
        assert admin.execute("SELECT rcll.disable_bank_isolation()").fetchone() == (20,)
    for node in citus.nodes:
        held, tables, _ = policies(citus.url(node))
        assert held == 0 and tables >= 20, (node.port, held, tables)
    with psycopg.connect(attacker.dsn, autocommit=True) as conn:
        assert {"iso-mine", "iso-theirs"} <= {r[0] for r in conn.execute("SELECT name FROM rcll.banks")}
