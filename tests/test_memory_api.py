"""The Python API: `from rcll import Memory` does every verb with typed results and field-named
errors, and it is the one door - the CLI, HTTP and MCP go through it."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from mcp import Client

import clicall
from conftest import Leg, scratch_dir
from rcll import Memory
from rcll.auth import Caller
from rcll.document import Document, RetainResult
from rcll.errors import Code, RcllError
from rcll.export import ExportSummary, ImportSummary
from rcll.http import create_app
from rcll.mcp_server import READ_TOOLS, WRITE_TOOLS, build_server
from rcll.recall import RecallResult
from rcll.results import Room, State, Stats, Tag

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def memory(dsn: str) -> Iterator[Memory]:
    with Memory(dsn, bank="fleet") as m:
        m.create_bank("fleet")
        yield m


def test_retain_then_recall_with_typed_results(memory: Memory) -> None:
    r = memory.retain("We deploy the API with Argo CD since March.", room="deployment", tags=["ops"])
    assert isinstance(r, RetainResult) and r.created and r.unit_ids
    assert memory.retain("We deploy the API with Argo CD since March.", room="deployment").created is False
    many = memory.retain_many(["Rollbacks use helm rollback.", Document(content="Carol owns the billing service.",
                                                                            room="billing")])
    assert [x.created for x in many] == [True, True]

    result = memory.recall("how do we deploy?", rooms=["deployment"])
    assert isinstance(result, RecallResult)
    assert "Argo CD" in result.facts[0].text and result.facts[0].room == "deployment"
    data = json.loads(result.to_json())
    assert data == result.as_dict() and set(data) == {"facts", "candidates", "tokens", "timings_ms",
                                                         "rerank_depth_reached", "context_depth_reached",
                                                         "deadline_ms", "deadline_cut"}
    assert "context" not in data["facts"][0] and data["facts"][0]["text"] == result.facts[0].text


def test_rooms_tags_and_stats(memory: Memory) -> None:
    memory.retain("The canary gets 5% of traffic.", room="deployment", tags=["ops", "canary"])
    memory.retain("Invoices go out on the 1st.", room="billing")
    rooms = memory.rooms()
    assert all(isinstance(r, Room) for r in rooms)
    assert {"deployment", "billing"} <= {r.name for r in rooms}
    assert [r.name for r in memory.rooms("dep*")] == ["deployment"]
    tags = memory.tags("c*")
    assert [(t.tag, t.unit_count) for t in tags] == [("canary", 1)] and isinstance(tags[0], Tag)
    stats = memory.stats()
    assert isinstance(stats, Stats) and stats.bank == "fleet"
    assert stats.room.get("deployment") == 1 and stats.tokens["total"].read_tokens == 0
    assert stats.as_dict()["tokens"]["total"]["calls"] == stats.tokens["total"].calls


def test_state_put_get_and_history(memory: Memory) -> None:
    assert memory.get_state("deployment", "spread") is None
    assert memory.put_state("deployment", "spread", {"n": 1}).version == 1
    assert memory.put_state("deployment", "spread", {"n": 2}, expected_version=1).version == 2
    with pytest.raises(RcllError) as e:
        memory.put_state("deployment", "spread", {"n": 3}, expected_version=1)
    assert e.value.field == "expected_version" and "current version is 2" in e.value.message
    latest = memory.get_state("deployment", "spread")
    assert isinstance(latest, State) and (latest.version, latest.value) == (2, {"n": 2})
    assert memory.get_state("deployment", "spread", version=1).value == {"n": 1}  # type: ignore[union-attr]
    history = memory.state_history("deployment", "spread")
    assert [(s.version, s.value) for s in history] == [(2, {"n": 2}), (1, {"n": 1})]
    assert history[0].provenance["via"] == "python"


def test_session_start_loads_the_rules(memory: Memory) -> None:
    memory.retain("Always run the tests before a deploy.", hall="rule", layer="L0")
    memory.retain("Deploys to prod need two approvals.", hall="rule", layer="L0", room="deployment")
    memory.retain("Billing runs nightly.", room="billing")
    rules = memory.session_start(rooms=["deployment"])
    assert [r.text for r in rules] == ["Always run the tests before a deploy.", "Deploys to prod need two approvals."]


def test_export_then_import_into_another_database(memory: Memory, leg: Leg, tmp_path: Path) -> None:
    memory.retain("A fact to carry over.", room="moves")
    summary = memory.export(tmp_path / "fleet")
    assert isinstance(summary, ExportSummary) and summary.tables["memory_units"] == 1

    other = leg.new_database()
    try:
        with Memory(leg.url(other), bank="fleet") as there:
            imported = there.import_(tmp_path / "fleet")
            assert isinstance(imported, ImportSummary) and imported.bank == "fleet" and imported.fresh
            assert there.recall("what carries over?").facts[0].text == "A fact to carry over."
            with pytest.raises(RcllError) as e:
                there.import_(tmp_path / "fleet")
            assert e.value.field == "bank"
    finally:
        leg.drop_database(other)

    # The NDJSON form (what HTTP streams) goes to and from a file object.
    buf = io.BytesIO()
    streamed = memory.export(buf)
    assert streamed.tables["memory_units"] == 1
    buf.seek(0)
    assert memory.import_(buf, on_conflict="skip").bank == "fleet"


def test_errors_name_the_field(memory: Memory, dsn: str) -> None:
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: memory.retain("   "), "content"),
        (lambda: memory.retain("ok", layer="L9"), "layer"),
        (lambda: memory.retain("ok", tags=["a\x00b"]), "tags[0]"),
        (lambda: memory.recall("x", bank="nope"), "bank"),
        (lambda: memory.recall(""), "query"),
        (lambda: memory.recall("x", budget=0), "budget"),
        (lambda: memory.recall("x", time_from="2024-06-01", time_to="2024-05-01"), "time_to"),
        (lambda: memory.recall("x", mine=True), "mine"),          # no identity to be "me"
        (lambda: memory.rooms(bank="nope"), "bank"),
        (lambda: memory.put_state("r", "k", float("nan")), "value"),
        (lambda: memory.import_(io.BytesIO(b"not json\n")), "body"),
        (lambda: Memory("host=x port=notanumber =="), "dsn"),
    ]
    for call, field in cases:
        with pytest.raises(RcllError) as e:
            call()
        assert e.value.field == field, (field, e.value)


def test_a_view_acts_as_its_agent_and_the_author_is_never_an_argument(memory: Memory, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:   # the test role is a superuser: honoured
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)
    memory.as_agent("alice").retain("Alice prefers blue-green deploys.", room="deployment")
    memory.as_agent("bob").retain("Bob prefers canaries.", room="deployment")
    facts = memory.as_agent("alice").recall("deploy preferences", mine=True).facts
    assert {f.author for f in facts} == {"alice"}
    assert sorted(t.tag for t in memory.tags("author:*")) == ["author:alice", "author:bob"]
    assert memory.agent is None        # a view does not change the Memory it came from


def test_a_memory_on_an_empty_database_installs_the_schema(leg: Leg) -> None:
    empty = leg.new_database(template="template1")
    try:
        with Memory(leg.url(empty)) as m:
            assert m.installed and [b.name for b in m.banks()] == ["default"]
            m.retain("Installed on first use.")
        with Memory(leg.url(empty)) as m:
            assert m.installed is None        # current: left alone
            assert m.recall("first use").facts[0].text == "Installed on first use."
    finally:
        leg.drop_database(empty)


def _rcll_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rcll"):
            names |= {node.module} if node.module != "rcll" else {f"rcll.{a.name}" for a in node.names}
    return names


def test_cli_http_and_mcp_go_through_memory(dsn: str) -> None:
    # None of the three talks SQL or reaches the recall/retain/export machinery itself.
    allowed = {"rcll.auth", "rcll.errors", "rcll.memory", "rcll.sqlsource", "rcll.defaults", "rcll.validate",
               "rcll.results", "rcll.document", "rcll.cluster", "rcll.db", "rcll.install", "rcll.export", "rcll.request",
               "rcll.models", "rcll.http", "rcll.http_console", "rcll.http_guard", "rcll.mcp_server", "rcll.upkeep",
               "rcll.model_service",   # a server the CLI starts, like rcll.http
               "rcll.citus_cluster",   # a local Citus cluster `rcll serve --citus-workers` starts, like rcll.cluster
               "rcll.http_answers",    # the shapes of HTTP's answers, for /openapi.json
               "rcll.dense_indexes",          # upkeep: a graph build's progress (Tracker) and its busy signal
               "rcll.settings"}        # what the edges read from the environment and pass down
    for name in ("cli.py", "http.py", "http_console.py", "mcp_server.py", "upkeep.py"):
        source = (ROOT / "python" / "rcll" / name).read_text()
        assert _rcll_imports(ROOT / "python" / "rcll" / name) <= allowed, name
        for raw in ("SELECT ", "psycopg.connect(", ".execute(", "retain_many(conn", "import_bank(", "export_bank("):
            assert raw not in source, (name, raw)
    cli = (ROOT / "python" / "rcll" / "cli.py").read_text()
    assert "from rcll.db import embedded_dsn" in cli and "connect" not in cli.split("from rcll.db import")[1].split("\n")[0]
    assert "from rcll.export import read_manifest, validate_pam" in cli   # file checks only, no database

    app = create_app(dsn)
    assert isinstance(app.state.memory, Memory)
    with pytest.raises(TypeError):
        build_server()  # type: ignore[call-arg]
    # The MCP server's tools act through the Memory it was built over: every call goes through
    # that Memory's as_caller, and what a tool writes, the Memory reads.
    with Memory(dsn) as m:
        m.create_bank("mcp")
        seen: list[str | None] = []
        as_caller = m.as_caller

        def spy(caller: Caller) -> Memory:
            seen.append(caller.agent)
            return as_caller(caller)

        m.as_caller = spy  # type: ignore[method-assign]
        server = build_server(m, agent="mcp-agent")

        async def go() -> set[str]:
            async with Client(server) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                done = await client.call_tool("memory_retain", {"bank": "mcp", "content": "Written by the MCP tool."})
                assert not done.is_error, done
                return names

        assert anyio.run(go) == set(READ_TOOLS + WRITE_TOOLS)
        assert seen == ["mcp-agent"]
        [fact] = m.recall("what did the MCP tool write?", bank="mcp").facts
        assert (fact.text, fact.author) == ("Written by the MCP tool.", "mcp-agent")


def test_cli_verbs_work_on_a_fresh_home_and_errors_are_one_line() -> None:
    home = Path(tempfile.mkdtemp(prefix="rcllm-", dir=scratch_dir()))
    env = {**os.environ, "RCLL_HOME": str(home), "LLM_PROVIDER": "none", "PYTHONPATH": str(ROOT / "python")}
    env.pop("RCLL_DSN", None)

    def rcll(*args: str) -> subprocess.CompletedProcess[str]:
        return clicall.rcll(*args, env=env)

    try:
        assert rcll("db", "start").returncode == 0
        steps = [rcll("bank", "create", "fleet"),
                 rcll("retain", "--bank", "fleet", "--room", "deployment", "We deploy with Argo CD."),
                 rcll("recall", "--bank", "fleet", "how do we deploy?"),
                 rcll("state", "put", "deployment", "spread", '{"n": 1}', "--bank", "fleet"),
                 rcll("state", "history", "deployment", "spread", "--bank", "fleet"),
                 rcll("rooms", "--bank", "fleet"), rcll("tags", "--bank", "fleet"), rcll("stats", "--bank", "fleet"),
                 rcll("bank", "list")]
        for p in steps:
            assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert "We deploy with Argo CD." in steps[2].stdout and "v1: {\"n\": 1}" in steps[4].stdout
        for p in (rcll("recall", "--bank", "nope", "x"), rcll("state", "put", "r", "k", "{nope", "--bank", "fleet"),
                  rcll("import", str(home / "missing"))):
            assert p.returncode == 2 and "Traceback" not in p.stderr
            assert p.stderr.startswith("rcll: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
        # The verbs above ran in this process (tests/clicall.py); the entry point itself, once, as
        # a user runs it: a new interpreter, the models loaded from scratch.
        p = subprocess.run([sys.executable, "-m", "rcll.cli", "recall", "--bank", "fleet", "how do we deploy?"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert "We deploy with Argo CD." in p.stdout.splitlines()[0], p.stdout
    finally:
        rcll("db", "stop")
        subprocess.run(["rm", "-rf", str(home)])


def test_a_unit_of_work_runs_several_verbs_in_one_transaction(memory: Memory) -> None:
    with memory.transaction() as tx:
        [] = tx.lock_states([("deployment", "spread")])
        assert tx.put_state("deployment", "spread", {"n": 1}).version == 1
        kept = tx.retain("We deploy with Argo CD.", thread="t1")
        assert [s.value for s in tx.get_states([("deployment", "spread")])] == [{"n": 1}]
        # a verb that fails undoes only itself: the unit goes on
        with pytest.raises(RcllError) as e:
            tx.put_state("deployment", "spread", {"n": 2}, expected_version=0)
        assert e.value.field == "expected_version"
        [state] = tx.lock_states([("deployment", "spread")])
        tx.put_state("deployment", "spread", {"n": 2}, expected_version=state.version)
    assert [s.value for s in memory.state_history("deployment", "spread")] == [{"n": 2}, {"n": 1}]
    assert [u.unit_id for u in memory.units(threads=["t1"]).units] == kept.unit_ids
    # an exception leaving the block rolls every verb back
    with pytest.raises(ZeroDivisionError), memory.transaction() as tx:
        tx.put_state("deployment", "other", {"n": 1})
        tx.forget(everything="fleet", dry_run=False)
        _ = 1 / 0
    assert memory.get_state("deployment", "other") is None and memory.units(threads=["t1"]).total == 1
    # work on connections of its own is refused inside; every verb once the block has ended
    with memory.transaction() as tx:
        for refused in (lambda: tx.recall("how do we deploy?"), lambda: tx.export_lines(),
                        lambda: tx.retain_many(["x"])):
            with pytest.raises(RcllError) as e:
                refused()
            assert e.value.field == "transaction"
    with pytest.raises(RcllError) as e:
        tx.get_state("deployment", "spread")
    assert e.value.field == "transaction"


def test_a_unit_of_work_checks_each_verbs_scope_as_the_verb_alone(memory: Memory) -> None:
    memory.create_bank("other")
    writer = memory.as_caller(Caller("agent", banks=("fleet",), can=frozenset({"read", "write"})))
    with writer.transaction() as tx:
        tx.put_state("deployment", "spread", {"n": 1})
        tx.retain("We deploy with Argo CD.", thread="t1")
        with pytest.raises(RcllError) as e:
            tx.forget(thread="t1", dry_run=False)
        assert e.value.code is Code.NOT_PERMITTED
        with pytest.raises(RcllError) as e:
            tx.forget_state("deployment", "spread", dry_run=False)
        assert e.value.code is Code.NOT_PERMITTED
        with pytest.raises(RcllError) as e:
            tx.put_state("deployment", "spread", {"n": 1}, bank="other")
        assert e.value.code is Code.UNKNOWN_BANK
        # a view of the unit keeps it: its verbs join the transaction, with the view's own scope
        reader = tx.as_caller(Caller("agent", banks=("fleet",), can=frozenset({"read"})))
        assert reader.get_state("deployment", "spread") is not None
        with pytest.raises(RcllError) as e:
            reader.lock_states([("deployment", "spread")])
        assert e.value.code is Code.NOT_PERMITTED
    assert memory.get_state("deployment", "spread") is not None and memory.units(threads=["t1"]).total == 1
    assert memory.state_history("deployment", "spread")[0].provenance["who"] == "agent"


def test_the_integrations_use_only_memorys_public_api() -> None:
    # No private part of Memory, no SQL of their own, no connection: every call goes through a verb.
    for path in sorted((ROOT / "python" / "rcll" / "integrations").glob("*.py")):
        source = path.read_text()
        for raw in ("memory._", "._tx(", "._bank(", "SELECT ", ".execute(", "import psycopg", "from psycopg"):
            assert raw not in source, (path.name, raw)
        assert not {"rcll.retain", "rcll.db"} & _rcll_imports(path), path.name
