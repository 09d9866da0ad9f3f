"""Upgrades on a real Citus cluster (the suite's `citus` fixture: a coordinator and two workers on
loopback): a 0.1.0 store on the coordinator, bank isolation on, becomes the current version,
distributed by bank with its policies on every shard, by `rcll install`, and recalls as the same
store upgraded on one node; the delegated twins survive a
second install. The extension route (CREATE EXTENSION rcll, ALTER EXTENSION rcll UPDATE) and what
Citus says when it is asked to distribute an extension's tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import CITUS_SHARD_COUNT, Leg
from rcll import Memory, install
from rcll.citus import is_distributed, statements
from rcll.citus_cluster import CitusCluster, add_database
from rcll.sqlsource import extension_version
from test_backup import fill, install_extension_files, recalls
from test_citus_isolation import POLICY, policies
from test_upgrade import BASELINE, baseline_body

# Tens of seconds: two databases made on the cluster's three nodes, a fill and an upgrade each.
pytestmark = pytest.mark.slow


def _baseline(conn: psycopg.Connection[Any]) -> None:
    """rcll 0.1.0 as its `rcll install` left it, statement by statement (as the installer sends
    SQL to a Citus coordinator), with a store's worth of memories written through its SQL API."""
    install.ensure_required_extensions(conn)
    conn.execute("CREATE SCHEMA rcll")
    for statement in statements(baseline_body().decode()):
        conn.execute(statement.encode())
    fill(conn)


def _delegated(conn: psycopg.Connection[Any]) -> list[str]:
    """The rcll functions Citus delegates by an argument (create_distributed_function)."""
    return [str(r[0]) for r in conn.execute(
        "SELECT objid::regprocedure::text FROM pg_dist_object WHERE classid = 'pg_proc'::regclass "
        "AND distribution_argument_index IS NOT NULL AND objid::regprocedure::text LIKE 'rcll.%' ORDER BY 1")]


@pytest.fixture
def one_node_upgraded(pg18: Leg) -> Iterator[list[list[str]]]:
    """The same 0.1.0 store upgraded by `rcll install` on one node (the pg18 leg): its recalls."""
    name = pg18.new_database("template0")
    try:
        with psycopg.connect(pg18.url(name), autocommit=True) as conn:
            _baseline(conn)
            install.install(conn)
            yield recalls(conn)
    finally:
        pg18.drop_database(name)


def test_rcll_install_upgrades_a_baseline_store_on_the_coordinator_and_distributes_it(
        citus: CitusCluster, one_node_upgraded: list[list[str]]) -> None:
    url = add_database(citus, "rcll_upgrade")
    with psycopg.connect(url, autocommit=True) as conn:
        _baseline(conn)
        # Bank isolation on, as one node has it: the distribution makes its policies again in the
        # cluster's shape, on every shard (the owner's recalls below are not isolated).
        conn.execute("SELECT rcll.enable_bank_isolation()")
        before = conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone()
        done = install.install(conn)
        assert "migration(s) applied" in done and "distributed by bank" in done, done
        for worker in citus.workers:
            held, tables, expressions = policies(worker.url("rcll_upgrade"))
            assert held == tables > 20 * CITUS_SHARD_COUNT // 2 and expressions == {POLICY}, (held, tables, expressions)
        assert conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone() == before
        assert is_distributed(conn)
        assert recalls(conn) == one_node_upgraded and all(one_node_upgraded)
        delegated = _delegated(conn)
        assert len(delegated) == 13, delegated      # every twin of rcll._in_bank_twins()
        again = install.install(conn)
        assert "0 migration(s) applied, 0 changed function(s) dropped" in again, again
        assert "already distributed by bank; 13 function(s) delegated" in again, again
        assert _delegated(conn) == delegated
    # The upgraded store takes writes, forgets, keyed state and exports through the delegated twins.
    with Memory(url, bank="fleet", agent="agent-9") as m:
        assert m._shared.in_bank
        written = m.retain("The upgrade to the cluster went fine.")
        assert m.recall("upgrade cluster").facts[0].text == "The upgrade to the cluster went fine."
        assert m.forget(unit_ids=written.unit_ids, dry_run=False, reason="test").counts["units"] == 1
        m.put_state("ops", "upgrade", {"done": True}, expected_version=0)
        assert m.get_state("ops", "upgrade").value == {"done": True}     # type: ignore[union-attr]
        assert b'"table":"room_state"' in b"".join(m.export_lines())



def test_the_extension_route_updates_on_every_node_but_is_not_distributed(citus: CitusCluster, pg18: Leg) -> None:
    """CREATE EXTENSION rcll and ALTER EXTENSION rcll UPDATE on a coordinator run on every worker
    too (Citus propagates them), each worker keeping tables of its own; Citus then takes those as
    the distributed tables' shells, which the distribution's key and foreign key changes on the
    coordinator would not match: rcll.distribute_by_bank refuses, saying which route a cluster
    takes (`rcll install`), and changes nothing."""
    install_extension_files(pg18)          # the cluster's nodes run the same embedded server
    url = add_database(citus, "rcll_extension")
    with psycopg.connect(url, autocommit=True) as conn:
        install.ensure_required_extensions(conn)
        conn.execute(f"CREATE EXTENSION rcll VERSION '{BASELINE}'")
        fill(conn)
        conn.execute("ALTER EXTENSION rcll UPDATE")
        on_workers = conn.execute("SELECT result FROM run_command_on_workers("
                                  "$$SELECT extversion FROM pg_extension WHERE extname = 'rcll'$$)").fetchall()
        assert on_workers == [(extension_version(),), (extension_version(),)]
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT rcll.distribute_by_bank()")
        assert refused.value.sqlstate == "RC001" and refused.value.diag.column_name == "dsn"
        assert "rcll install" in (refused.value.diag.message_hint or "")
        assert not is_distributed(conn)
        with pytest.raises(psycopg.Error) as also:
            install.install(conn)           # an upgrade of it by `rcll install` says the same
        assert also.value.sqlstate == "RC001"
        assert recalls(conn)[0]             # still one store on the coordinator, as it was
