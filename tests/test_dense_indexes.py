"""A big bank's own HNSW index (sql/functions/112-dense-indexes.sql): rcll.dense_index_plan says what to
run, `rcll dense-indexes --apply` runs it, and afterwards the planner walks the bank's own index for that bank
and the global index (now without it) for the others - each unit in one index - with the same results.
Plans are read as tests/test_channel_plans.py reads them (auto_explain of the channel's statements)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import SETTINGS, Leg, connected
from rcll import dense_indexes
from rcll.cli import main as cli
from rcll.settings import Settings
from sqlcall import refused
from test_channel_plans import _chunks, _nested_plans, _scans

BIG, OTHER = 6000, 1500      # units in the bank that gets its own index (big enough that HNSW beats reading the bank: test_channel_plans), and in one that stays global
SMALL = 300
EXACT_BELOW = 1000           # both banks above it: the dense channel takes the HNSW route in each


def _fleet(db: psycopg.Connection[Any], sizes: tuple[int, int], bulk: bool = False) -> psycopg.Connection[Any]:
    """Two banks, big and other, of these sizes (random unit vectors from a fixed seed). bulk: the
    global index is dropped for the load and built again from its installed definition after it
    (one build of 7,500 vectors costs a quarter of as many inserts into a growing index)."""
    global_index = db.execute("SELECT pg_get_indexdef('rcll.memory_units_embedding_hnsw'::regclass)").fetchone()
    assert global_index is not None
    if bulk:
        db.execute("DROP INDEX rcll.memory_units_embedding_hnsw")
    db.execute("SELECT setseed(0.25)")
    for bank, n in zip(("big", "other"), sizes):
        db.execute("SELECT rcll.create_bank(%s)", (bank,))
        for start in range(0, n, 500):
            _chunks(db, bank, f"room{start}", [f"{bank} unit {i}" for i in range(start, min(n, start + 500))])
    if bulk:
        db.execute(global_index[0])
    db.execute("ANALYZE rcll.memory_units")
    return db


@pytest.fixture
def fleet(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    return _fleet(db, (BIG, OTHER), bulk=True)


@pytest.fixture
def small_fleet_dsn(leg: Leg) -> Iterator[str]:
    """The same two banks at SMALL and SMALL // 2 units: enough for what the plan says and runs (a
    copy, for each test, of a database built once per leg)."""
    with leg.database(leg.template("dense_indexes_small_fleet", lambda db: _fleet(db, (SMALL, SMALL // 2)))) as url:
        yield url


@pytest.fixture
def small_fleet(small_fleet_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with connected(small_fleet_dsn) as conn:
        yield conn


def _bank_id(db: psycopg.Connection[Any], bank: str) -> int:
    row = db.execute("SELECT bank_id FROM rcll.banks WHERE name = %s", (bank,)).fetchone()
    assert row is not None
    return int(row[0])


def _dense(db: psycopg.Connection[Any], bank: str, exact_below: int = EXACT_BELOW,
           discourage_sort: bool = False) -> tuple[list[int], list[str]]:
    """(the dense channel's top 10 for a query near one of the bank's units, the ranking statement's scans).
    discourage_sort: a bank this small is cheaper to sort than to search; with sorts discouraged the
    plan shows whether an HNSW index can serve the bank at all (its predicate proven)."""
    q = db.execute("SELECT u.embedding FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id) "
                   "WHERE b.name = %s ORDER BY u.unit_id LIMIT 1 OFFSET 7", (bank,)).fetchone()
    assert q is not None
    top = [r[0] for r in db.execute("SELECT unit_id FROM rcll.channel_dense(%s, rcll.recall_scope(%s), exact_below => %s) "
                                    "ORDER BY rank LIMIT 10", (q[0], bank, exact_below))]
    db.execute(f"SET enable_sort = {'off' if discourage_sort else 'on'}")
    _, plans = _nested_plans(db, "SELECT count(*) FROM rcll.channel_dense(%s, rcll.recall_scope(%s), exact_below => %s)",
                             (q[0], bank, exact_below))
    ranking = [p for p in plans if "OPERATOR(public.<=>)" in p["Query Text"]]
    assert len(ranking) == 1
    db.execute("RESET enable_seqscan")
    db.execute("RESET enable_bitmapscan")
    db.execute("RESET enable_sort")
    return top, _scans(ranking[0]["Plan"])


@pytest.mark.slow
def test_a_big_bank_gets_its_own_index_and_the_global_index_leaves_it_out(fleet: psycopg.Connection[Any], dsn: str) -> None:
    big, other = _bank_id(fleet, "big"), _bank_id(fleet, "other")
    before = {b: _dense(fleet, b)[0] for b in ("big", "other")}
    exact = {b: _dense(fleet, b, exact_below=10**9)[0] for b in ("big", "other")}
    assert before == exact                       # at this size HNSW with ef_search 400 finds the exact ten

    # big is four fifths of this store: max_share 0.9 lets it have its own index (at the default 0.5,
    # test_a_bank_that_is_most_of_the_store_keeps_the_global_index).
    assert "WITH (m = 32, ef_construction = 128)" in dense_indexes.plan(fleet, BIG, max_share=0.9)[0].statement   # the default
    # Built as sparse as the global index here: for a bank this small, pgvector's cost estimate of a
    # denser index's scan (it grows with m) makes the planner read the bank and sort it instead. At
    # the default min_units (20,000) and above it takes the own index either way (docs/scaling.md).
    steps = dense_indexes.plan(fleet, BIG, max_share=0.9, m=16, ef_construction=64)
    assert [s.statement.split(" ON ")[0] for s in steps if s.statement.startswith("CREATE")] == [
        f"CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_bank_{big}",
        "CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_next"]
    assert f"WHERE bank_id <> ALL ('{{{big}}}'::integer[])" in steps[-4].statement
    assert "WITH (m = 16, ef_construction = 64)" in steps[0].statement
    assert "WITH (m=16, ef_construction=64)" in steps[-4].statement     # the global index: built as it was
    assert dense_indexes.apply(dsn, BIG, max_share=0.9, m=16, ef_construction=64) == steps
    fleet.execute("ANALYZE rcll.memory_units")

    listed = {g.index_name: g for g in dense_indexes.indexes(fleet)}
    assert set(listed) == {"memory_units_embedding_hnsw", f"memory_units_embedding_hnsw_bank_{big}"}
    assert listed["memory_units_embedding_hnsw"].excluded_banks == [big]
    assert {g.kind for g in listed.values()} == {"global", "bank"}
    assert listed[f"memory_units_embedding_hnsw_bank_{big}"].bank == "big"
    assert all(g.valid for g in listed.values())
    assert dense_indexes.plan(fleet, BIG, max_share=0.9, m=16, ef_construction=64) == []   # done: nothing more to run

    top, scans = _dense(fleet, "big")
    assert scans == [f"Index Scan using memory_units_embedding_hnsw_bank_{big} on memory_units"]
    assert top == before["big"]
    top, scans = _dense(fleet, "other", discourage_sort=True)
    assert scans == ["Index Scan using memory_units_embedding_hnsw on memory_units"]
    assert top == before["other"]

    # A retain into the big bank goes into its own index and is found there.
    fleet.execute("""SELECT rcll.retain_chunks(bank => 'big', content => 'newcomer', chunks => ARRAY['newcomer'],
                         embeddings => ARRAY[(SELECT embedding FROM rcll.memory_units WHERE bank_id = %s ORDER BY unit_id LIMIT 1 OFFSET 7)])""",
                  (big,))
    top, _ = _dense(fleet, "big")
    newest = fleet.execute("SELECT max(unit_id) FROM rcll.memory_units WHERE bank_id = %s", (big,)).fetchone()
    assert newest is not None and newest[0] in top[:2]

    # Raising min_units undoes it: the global index takes every bank again, then the own index goes.
    steps = dense_indexes.plan(fleet, BIG + 10_000, max_share=0.9)
    assert [s.why for s in steps][-1] == f"bank {big}: below {BIG + 10_000} units (or over 0.9 of the store), back in the global index"
    dense_indexes.apply(dsn, BIG + 10_000, max_share=0.9)
    listed = {g.index_name: g for g in dense_indexes.indexes(fleet)}
    assert set(listed) == {"memory_units_embedding_hnsw"} and listed["memory_units_embedding_hnsw"].excluded_banks == []
    assert _dense(fleet, "other", discourage_sort=True)[1] == ["Index Scan using memory_units_embedding_hnsw on memory_units"]
    assert other != big


def test_a_bank_that_is_most_of_the_store_keeps_the_global_index(small_fleet: psycopg.Connection[Any]) -> None:
    # big holds two thirds of the units: an index of its own would be most of the global one again.
    big, other = _bank_id(small_fleet, "big"), _bank_id(small_fleet, "other")

    def own(**kw: Any) -> list[str]:
        return [s.statement.split()[3] for s in dense_indexes.plan(small_fleet, SMALL // 2, **kw)
                if s.statement.startswith("CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_bank_")]
    assert own() == [f"memory_units_embedding_hnsw_bank_{other}"]
    assert own(max_share=0.9) == [f"memory_units_embedding_hnsw_bank_{big}", f"memory_units_embedding_hnsw_bank_{other}"]


def test_an_interrupted_build_is_cleared_by_the_next_plan(small_fleet: psycopg.Connection[Any]) -> None:
    fleet = small_fleet
    big = _bank_id(fleet, "big")
    # What a cancelled CREATE INDEX CONCURRENTLY leaves: an invalid index under the index's name.
    fleet.execute(f"CREATE INDEX memory_units_embedding_hnsw_bank_{big} ON rcll.memory_units USING hnsw "
                  f"(embedding vector_cosine_ops) WHERE bank_id = {big}")
    fleet.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
                  (f"rcll.memory_units_embedding_hnsw_bank_{big}",))
    steps = dense_indexes.plan(fleet, SMALL, max_share=0.9)
    assert steps[0].statement == f"DROP INDEX CONCURRENTLY IF EXISTS rcll.memory_units_embedding_hnsw_bank_{big}"
    assert steps[1].statement.startswith(f"CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_bank_{big} ")


def test_an_hnsw_index_of_a_dbas_own_is_listed_and_left_alone(small_fleet: psycopg.Connection[Any]) -> None:
    small_fleet.execute("CREATE INDEX my_hnsw ON rcll.memory_units USING hnsw (embedding vector_cosine_ops) WHERE room = 'room0'")
    (mine,) = [g for g in dense_indexes.indexes(small_fleet) if g.index_name == "my_hnsw"]
    assert (mine.kind, mine.bank_id, mine.excluded_banks) == ("other", None, None)
    assert not any("my_hnsw" in s.statement for s in dense_indexes.plan(small_fleet, SMALL, max_share=0.9))


def _reloptions(db: psycopg.Connection[Any], index: str) -> list[str]:
    (g,) = [g for g in dense_indexes.indexes(db) if g.index_name == index]
    return sorted(g.build_options)


def test_an_own_index_built_with_other_parameters_is_rebuilt_beside_it(small_fleet: psycopg.Connection[Any],
                                                                       small_fleet_dsn: str) -> None:
    fleet, dsn = small_fleet, small_fleet_dsn
    big = _bank_id(fleet, "big")
    own = f"memory_units_embedding_hnsw_bank_{big}"
    dense_indexes.apply(dsn, SMALL, max_share=0.9)
    assert _reloptions(fleet, own) == ["ef_construction=128", "m=32"]
    before = _dense(fleet, "big", exact_below=0)[0]

    # Other parameters: the new index is built beside the old one (which serves the bank meanwhile),
    # the old one dropped, the new one renamed; the global index is left as it is.
    steps = dense_indexes.plan(fleet, SMALL, max_share=0.9, m=16, ef_construction=64)
    assert [s.statement.split(" ON ")[0] for s in steps] == [
        f"DROP INDEX CONCURRENTLY IF EXISTS rcll.{own}_next",
        f"CREATE INDEX CONCURRENTLY {own}_next",
        f"DROP INDEX CONCURRENTLY rcll.{own}",
        f"ALTER INDEX rcll.{own}_next RENAME TO {own}"]
    assert "WITH (m = 16, ef_construction = 64)" in steps[1].statement and steps[1].statement.endswith(f"WHERE bank_id = {big}")
    # Interrupted after the build: the new half is listed as the bank's (not a DBA's) ...
    for s in steps[:2]:
        fleet.execute(s.statement)
    kinds = {g.index_name: (g.kind, g.bank_id) for g in dense_indexes.indexes(fleet)}
    assert kinds[f"{own}_next"] == ("bank", big)
    # ... and the next plan starts the rebuild over; run to the end, it leaves one index per bank.
    assert dense_indexes.plan(fleet, SMALL, max_share=0.9, m=16, ef_construction=64) == steps
    dense_indexes.apply(dsn, SMALL, max_share=0.9, m=16, ef_construction=64)
    assert {g.index_name for g in dense_indexes.indexes(fleet)} == {"memory_units_embedding_hnsw", own}
    assert _reloptions(fleet, own) == ["ef_construction=64", "m=16"]
    assert dense_indexes.plan(fleet, SMALL, max_share=0.9, m=16, ef_construction=64) == []
    assert _dense(fleet, "big", exact_below=0)[0] == before

    # A leftover new half of a bank that no longer needs its own index goes with it.
    fleet.execute(f"CREATE INDEX {own}_next ON rcll.memory_units USING hnsw (embedding vector_cosine_ops) WHERE bank_id = {big}")
    drops = [s.statement for s in dense_indexes.plan(fleet, 10 * SMALL) if s.statement.startswith("DROP INDEX CONCURRENTLY rcll.")]
    assert drops[-2:] == [f"DROP INDEX CONCURRENTLY rcll.{own}", f"DROP INDEX CONCURRENTLY rcll.{own}_next"]


def test_the_plan_refuses_a_bad_min_units(db: psycopg.Connection[Any]) -> None:
    with refused("RC001", "min_units", "min_units: must be a positive number"):
        db.execute("SELECT * FROM rcll.dense_index_plan(0)")
    with refused("RC001", "max_share", "max_share: must be a fraction"):
        db.execute("SELECT * FROM rcll.dense_index_plan(10, max_share => 1.5)")
    with refused("RC001", "m", "m: must be from 2 to 100"):
        db.execute("SELECT * FROM rcll.dense_index_plan(m => 1)")
    with refused("RC001", "ef_construction", r"ef_construction: must be from 2 x m \(64\)"):
        db.execute("SELECT * FROM rcll.dense_index_plan(m => 32, ef_construction => 40)")
    assert dense_indexes.plan(db) == []                       # an empty store: one global index, nothing to do


def test_rcll_indexes_prints_the_plan_and_applies_it(small_fleet: psycopg.Connection[Any], small_fleet_dsn: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fleet, dsn = small_fleet, small_fleet_dsn
    big = _bank_id(fleet, "big")
    assert cli(["dense-indexes", "--dsn", dsn, "--min-units", str(SMALL), "--max-share", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "memory_units_embedding_hnsw: global" in out and "m=16 ef_construction=64" in out
    assert f"CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_bank_{big} " in out
    assert "rcll dense-indexes --apply runs these" in out
    assert [g.index_name for g in dense_indexes.indexes(fleet)] == ["memory_units_embedding_hnsw"]     # printing runs nothing
    assert cli(["graphs", "--dsn", dsn, "--min-units", str(SMALL), "--max-share", "0.9", "--apply"]) == 0   # its former name
    assert f"bank {big} (big) holds at least {SMALL} units: its own index:" in capsys.readouterr().out
    assert cli(["dense-indexes", "--dsn", dsn, "--min-units", str(SMALL), "--max-share", "0.9"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert cli(["dense-indexes", "--dsn", dsn, "--min-units", "0"]) == 2
    assert "min_units" in capsys.readouterr().err
    assert cli(["dense-indexes", "--dsn", dsn, "--min-units", str(SMALL), "--max-share", "0.9", "--m", "16", "--ef-construction", "64"]) == 0
    assert f"memory_units_embedding_hnsw_bank_{big}_next ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops) " \
           f"WITH (m = 16, ef_construction = 64) WHERE bank_id = {big}" in capsys.readouterr().out
    assert cli(["dense-indexes", "--dsn", dsn, "--ef-construction", "8"]) == 2
    assert "ef_construction" in capsys.readouterr().err


def test_a_scoped_or_read_only_memory_cannot_touch_the_indexes(dsn: str, login_role: Any) -> None:
    # The indexes are the whole store's: a token scoped to some banks, or a read-only memory, is refused
    # before anything reaches the database.
    from rcll.auth import Caller
    from rcll.errors import RcllError
    from rcll.memory import Memory
    with Memory(dsn) as m:
        assert m.dense_index_plan() == []
        scoped = m.as_caller(Caller("agent", banks=("default",)))
        for call in (scoped.dense_indexes, scoped.dense_index_plan, scoped.apply_dense_index_plan,
                     scoped.dense_index_builds, scoped.upkeep_dense_indexes):
            with pytest.raises(RcllError, match="operation on the whole store"):
                call()
    with Memory(login_role(member_of="rcll_reader").dsn, read_only=True) as ro, \
            pytest.raises(RcllError, match="operation on the whole store"):
        ro.apply_dense_index_plan()


# -- the periodic jobs apply the plan themselves (rcll.upkeep) ---------------------------------------
# small_fleet: big (SMALL units, two thirds of the store: it keeps the global index) and other
# (SMALL // 2). With the threshold lowered to AUTO_MIN, other has crossed it.
AUTO_MIN = SMALL // 3


def _own_indexes(conn: psycopg.Connection[Any]) -> dict[str, bool]:
    return {g.index_name: g.valid for g in dense_indexes.indexes(conn) if g.kind == "bank"}


def test_one_upkeep_round_gives_a_bank_that_crossed_the_threshold_its_own_index(
        small_fleet: psycopg.Connection[Any], small_fleet_dsn: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rcll.memory import Memory
    other = _bank_id(small_fleet, "other")
    with Memory(small_fleet_dsn, settings=Settings()) as m:         # the indexes on by default
        assert m.upkeep().index_steps == []                           # the default threshold: nothing to do
        done = m.upkeep(dense_index_min_units=AUTO_MIN)
        assert done.index_steps and f"bank {other} (other) holds at least {AUTO_MIN} units: its own index" in done.index_steps
        assert _own_indexes(small_fleet) == {f"memory_units_embedding_hnsw_bank_{other}": True}
        listed = {g.index_name: g for g in dense_indexes.indexes(small_fleet)}
        assert listed["memory_units_embedding_hnsw"].excluded_banks == [other] and listed["memory_units_embedding_hnsw"].valid
        assert m.upkeep(dense_index_min_units=AUTO_MIN).index_steps == []       # the next round: the indexes match
    # RCLL_DENSE_INDEX_MIN_UNITS is the jobs' threshold (and `rcll dense-indexes`' default); `rcll upkeep` says what it built.
    monkeypatch.setenv("RCLL_DENSE_INDEX_MIN_UNITS", str(SMALL + 1))      # the CLI reads the environment
    assert cli(["upkeep", "--dsn", small_fleet_dsn]) == 0
    assert f"bank {other}: below {SMALL + 1} units" in capsys.readouterr().out
    assert _own_indexes(small_fleet) == {}


def test_auto_indexes_off_leaves_the_indexes_to_the_dba(small_fleet: psycopg.Connection[Any], small_fleet_dsn: str,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from rcll.errors import RcllError
    from rcll.memory import Memory
    env = {"RCLL_DENSE_INDEX_MIN_UNITS": str(AUTO_MIN), "RCLL_AUTO_DENSE_INDEXES": "off"}
    with Memory(small_fleet_dsn, settings=Settings.from_env(env)) as m:
        assert m.upkeep().index_steps is None
        assert cli(["upkeep", "--dsn", small_fleet_dsn], env) == 0
        assert cli(["dense-indexes", "--dsn", small_fleet_dsn], env) == 0
        out = capsys.readouterr().out
        assert "RCLL_AUTO_DENSE_INDEXES=off" in out and "CREATE INDEX CONCURRENTLY" in out    # the plan is the DBA's to run
        assert _own_indexes(small_fleet) == {}
        assert m.upkeep(dense_indexes=True).index_steps                       # the Memory option overrides the setting
        assert len(_own_indexes(small_fleet)) == 1
    for name, bad in (("RCLL_AUTO_DENSE_INDEXES", "sometimes"), ("RCLL_DENSE_INDEX_MIN_UNITS", "0"), ("RCLL_DENSE_INDEX_MIN_UNITS", "lots")):
        with pytest.raises(RcllError) as e:
            Settings.from_env({name: bad})
        assert e.value.field == name
        # refused before it starts
        assert cli(["serve", "--dsn", "postgresql:///nowhere?host=/nonexistent"], {name: bad}) == 2
        assert name in capsys.readouterr().err


def test_a_second_run_of_the_plan_waits_its_turn(small_fleet: psycopg.Connection[Any], small_fleet_dsn: str) -> None:
    # Two runs at once would each take the other's unfinished build for an interrupted one.
    from rcll.memory import Memory
    row = small_fleet.execute("SELECT rcll.dense_index_build_lock()").fetchone()
    assert row == (True,)
    with Memory(small_fleet_dsn) as m:
        with pytest.raises(dense_indexes.BuildUnderWay) as e:
            m.apply_dense_index_plan(min_units=AUTO_MIN)
        assert e.value.field == "indexes" and "rcll dense-indexes" in e.value.hint
        assert m.upkeep(dense_indexes=True, dense_index_min_units=AUTO_MIN).index_steps is None    # the jobs leave it to the other run
        assert _own_indexes(small_fleet) == {}
        small_fleet.execute("SELECT pg_advisory_unlock_all()")
        assert m.upkeep(dense_indexes=True, dense_index_min_units=AUTO_MIN).index_steps


def test_the_server_builds_an_index_while_writes_and_recalls_go_on_and_health_shows_it(
        small_fleet: psycopg.Connection[Any], small_fleet_dsn: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from fastapi.testclient import TestClient

    from rcll.http import create_app
    from rcll.memory import Memory
    other = _bank_id(small_fleet, "other")
    env = {"RCLL_DENSE_INDEX_MIN_UNITS": str(AUTO_MIN)}
    # A writer that does not commit holds the build in its first wait (CREATE INDEX CONCURRENTLY
    # waits for the writers it found when it started): the build is under way for as long as the
    # test needs, and every other write and read must pass it.
    with psycopg.connect(small_fleet_dsn) as blocker, Memory(small_fleet_dsn, settings=SETTINGS.replace(dense_index_min_units=AUTO_MIN)) as m:
        blocker.execute("LOCK TABLE rcll.memory_units IN ROW EXCLUSIVE MODE")
        with TestClient(create_app(service=m, upkeep_seconds=3600), base_url="http://127.0.0.1") as client:
            deadline = time.monotonic() + 60
            # Until the build has reached its wait: before that, PostgreSQL's progress row is in
            # 'initializing', with no index yet (seen on a loaded machine).
            while time.monotonic() < deadline and not any(
                    b.phase.startswith("waiting for writers") for b in dense_indexes.builds(small_fleet)):
                time.sleep(0.05)
            (build,) = dense_indexes.builds(small_fleet)
            assert build.index_name == f"memory_units_embedding_hnsw_bank_{other}" and build.bank_id == other
            assert build.phase.startswith("waiting for writers")
            seen = client.get("/health").json()["upkeep"]["dense_indexes"]
            assert seen["auto"] is True and seen["building"]["step"] >= 1
            assert seen["building"]["why"] == f"bank {other} (other) holds at least {AUTO_MIN} units: its own index"
            assert seen["index_builds"][0]["index_name"] == build.index_name
            assert cli(["dense-indexes", "--dsn", small_fleet_dsn], env) == 0
            assert f"building now: {build.index_name}" in capsys.readouterr().out

            t = time.monotonic()
            wrote = client.post("/retain", json={"bank": "other", "content": "The rollback plan moved to Argo CD."})
            found = client.post("/recall", json={"bank": "other", "query": "rollback plan"})
            assert wrote.status_code == 200 and found.status_code == 200, (wrote.text, found.text)
            assert any("rollback plan" in f["text"] for f in found.json()["facts"])
            assert time.monotonic() - t < 30
            assert dense_indexes.builds(small_fleet)                    # ...and all of it while the build waited

            blocker.rollback()
            while time.monotonic() < deadline and client.get("/health").json()["upkeep"]["dense_indexes"]["building"]:
                time.sleep(0.05)
            seen = client.get("/health").json()["upkeep"]["dense_indexes"]
            assert seen["building"] is None and seen["last_error"] is None and seen["last_end"]
            assert seen["last_steps"][0].startswith(f"bank {other} (other)")
        assert _own_indexes(small_fleet) == {f"memory_units_embedding_hnsw_bank_{other}": True}
