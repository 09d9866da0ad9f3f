"""One forget request: ForgetRequest's fields are rcll.forget's parameters (and the client's purge),
it checks every field once, and every interface - Memory.forget, HTTP's body, MCP's tool, the CLI's
flags, the console's "Forget by selector…" dialog (built from HTTP's schema; tests/test_console.py
drives it) and its per-unit routes - offers and carries every field."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import anyio
import psycopg
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from conftest import SETTINGS
from rcll import cli, http, mcp_server
from rcll.auth import TokenMap
from rcll.errors import RcllError
from rcll.memory import Memory
from rcll.request import FORGET_PARAMETERS, FORGET_SQL, ForgetRequest
from test_recall_request import _arguments

TOKEN = "alice-token-" + "x" * 20
NAMES = [p.name for p in FORGET_PARAMETERS]

# A value for every field, none at its default (bank aside). The ids cannot go with a batch, so
# they are the second value's: a field added to ForgetRequest must be added to one of them, and
# every interface below must then carry it through.
EVERY: dict[str, Any] = {
    "bank": "b", "thread": "t1", "author": "alice", "tag": "ops", "room": "deployment",
    "occurred_from": "2024-01-01T00:00:00+00:00", "occurred_to": "2024-12-31T00:00:00+00:00",
    "retained_from": "2025-01-01T00:00:00+00:00", "retained_to": "2025-12-31T00:00:00+00:00",
    "everything": "b", "dry_run": False, "reason": "right to erasure", "batch": 100, "purge": True,
}
IDS: dict[str, Any] = {"bank": "b", "unit_ids": [1, 2], "document_ids": [3], "dry_run": True}
EXPECTED = ForgetRequest(**EVERY)
EXPECTED_IDS = ForgetRequest(**IDS)


def test_every_field_has_a_value_in_this_test() -> None:
    assert set(EVERY) | set(IDS) == set(NAMES)
    for given, made in ((EVERY, EXPECTED), (IDS, EXPECTED_IDS)):
        assert all(getattr(made, p.name) != p.default for p in FORGET_PARAMETERS
                   if p.name in given and p.name not in ("bank", "dry_run"))
    assert EXPECTED.dry_run is False and EXPECTED_IDS.dry_run is True


def test_the_fields_are_forgets_parameters_and_the_clients_purge(db: psycopg.Connection[Any]) -> None:
    assert list(FORGET_SQL) == _arguments(db, "rcll.forget")
    assert [p.name for p in FORGET_PARAMETERS if not p.sql] == ["purge"]
    assert set(EXPECTED.arguments) == set(FORGET_SQL)


def test_the_defaults_are_forgets_defaults_a_dry_run_first(db: psycopg.Connection[Any]) -> None:
    rows = dict(db.execute("""
        SELECT a.name, pg_get_function_arg_default(p.oid, a.n::integer)
        FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS a(name, n)
        WHERE p.oid = 'rcll.forget'::regproc""").fetchall())
    assert rows["dry_run"] == "true" and ForgetRequest(bank="b").dry_run is True
    assert all(rows[p.name] == "NULL::" + rows[p.name].split("::")[-1] for p in FORGET_PARAMETERS
               if p.sql and p.default is None and rows.get(p.name))


@pytest.mark.parametrize(("field", "value"), [
    ("bank", ""), ("unit_ids", "12"), ("unit_ids", [1, "2"]), ("document_ids", [True]), ("thread", "\x00"),
    ("author", "a" * 600), ("tag", 3), ("room", ["r"]), ("occurred_from", "yesterday"), ("occurred_to", 2024),
    ("retained_from", "2024-13-01"), ("retained_to", "noon"), ("everything", "b" * 200), ("reason", "x" * 1001),
    ("batch", 0),
])
def test_a_bad_value_is_refused_naming_its_field(field: str, value: Any) -> None:
    with pytest.raises(RcllError) as e:
        ForgetRequest(**({"bank": "b", "dry_run": False} | {field: value}))
    assert e.value.field == field


def test_a_batch_by_ids_is_refused_and_a_dry_run_ignores_the_batch() -> None:
    with pytest.raises(RcllError) as e:
        ForgetRequest(bank="b", unit_ids=[1], dry_run=False, batch=10)
    assert e.value.field == "batch"
    assert ForgetRequest(bank="b", unit_ids=[1], batch=10).batch is None


def test_a_request_is_frozen_and_keeps_what_it_was_given() -> None:
    with pytest.raises(AttributeError):
        EXPECTED.dry_run = True  # type: ignore[misc]
    assert EXPECTED.occurred_from == datetime(2024, 1, 1, tzinfo=UTC) and EXPECTED_IDS.unit_ids == (1, 2)
    assert EXPECTED_IDS.arguments["unit_ids"] == [1, 2] and "purge" not in EXPECTED.arguments
    assert ForgetRequest(bank="b", dry_run=None) == ForgetRequest(bank="b")        # None: the default


# -- every interface offers every field ------------------------------------------------------------


@pytest.fixture
def bank(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
        conn.execute("SELECT set_config('rcll.agent', 'alice', false)")
        for thread in ("t1", "t2"):
            conn.execute("SELECT * FROM rcll.retain_chunks(bank => 'b', content => %s, chunks => ARRAY[%s], "
                         "embeddings => NULL, thread => %s)", (f"We deploy with Argo CD ({thread}).",) * 2 + (thread,))
    return dsn


def test_memory_takes_every_field_by_keyword_or_as_a_request(bank: str) -> None:
    with Memory(bank, settings=SETTINGS) as memory:
        by_keyword = memory.forget(bank="b", thread="t1")
        whole = memory.forget(ForgetRequest(bank="b", thread="t1"))
        assert by_keyword == whole and by_keyword.dry_run and by_keyword.counts["units"] == 1
        with pytest.raises(RcllError) as e:
            memory.forget(bank="b", threads=["t1"])
        assert e.value.field == "threads"


def test_http_offers_and_accepts_every_field(bank: str) -> None:
    schema = http.ForgetBody.model_json_schema()
    assert list(schema["properties"]) == NAMES and schema["required"] == ["bank"]
    for given, made in ((EVERY, EXPECTED), (IDS, EXPECTED_IDS)):
        assert http.forget_request(http.ForgetBody.model_validate(given)) == made
    app = http.create_app(bank, tokens=TokenMap.from_pairs({TOKEN: "alice"}), settings=SETTINGS)
    with TestClient(app) as client:
        r = client.post("/forget", json={"bank": "b", "thread": "t1"}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and r.json()["dry_run"] and r.json()["counts"]["units"] == 1, r.text
        spec = client.get("/openapi.json").json()
        assert list(spec["components"]["schemas"]["ForgetRequest"]["properties"]) == NAMES
        # The console's per-unit forget (a unit, its document or its thread) goes through the DELETE routes:
        # what they take beyond the target is ForgetRequest's, under the same names.
        for route in ("/units/{unit_id}", "/documents/{document_id}", "/threads/{thread}"):
            query = {q["name"] for q in spec["paths"][route]["delete"]["parameters"] if q["in"] == "query"}
            assert query == {"bank", "dry_run", "reason", "purge"}, route


def test_mcp_offers_and_accepts_every_field(bank: str) -> None:
    with Memory(bank, settings=SETTINGS) as svc:
        server = mcp_server.build_server(svc, agent="alice")

        async def go() -> tuple[dict[str, Any], Any]:
            async with Client(server) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                return tools["memory_forget"].input_schema, await client.call_tool("memory_forget", {"bank": "b", "thread": "t1"})

        schema, result = anyio.run(go)
    assert list(schema["properties"]) == NAMES and not schema.get("required")
    assert not result.is_error, result.content
    assert result.structured_content["dry_run"] and result.structured_content["counts"]["units"] == 1
    for given, made in ((EVERY, EXPECTED), (IDS, EXPECTED_IDS)):
        assert mcp_server.forget_request(dict(given), "default") == made
    assert mcp_server.forget_request({"thread": "t1"}, "fleet").bank == "fleet"


def _flags(given: dict[str, Any]) -> list[str]:
    argv = []
    for p in FORGET_PARAMETERS:
        if p.name not in given:
            continue
        value = given[p.name]
        if p.name == "dry_run":
            argv += [] if value else ["--yes"]
        elif p.kind == "ids":
            argv += [x for v in value for x in (f"--{p.flag}", str(v))]
        elif p.kind == "flag":
            argv += [f"--{p.flag}"] if value else []
        else:
            argv += [f"--{p.flag}", str(value)]
    return argv


def test_the_cli_offers_and_accepts_every_field(bank: str, capsys: pytest.CaptureFixture[str]) -> None:
    for given, made in ((EVERY, EXPECTED), (IDS, EXPECTED_IDS)):
        args = cli.build_parser().parse_args(["forget", *_flags(given)])
        assert isinstance(args, argparse.Namespace)
        assert cli.forget_request(args) == made
    offered = {a.dest for a in cli.build_parser()._subparsers._group_actions[0].choices["forget"]._actions}  # type: ignore[union-attr]
    assert set(NAMES) - {"dry_run"} <= offered and "yes" in offered
    assert cli.main(["forget", "--dsn", bank, "--json", "--bank", "b", "--thread", "t1"], {}) == 0
    assert '"units": 1' in capsys.readouterr().out


def test_the_console_builds_its_forget_dialog_from_the_request_schema() -> None:
    """The console's dialog makes one input per property of /openapi.json's ForgetRequest (the
    schema test_http_offers_and_accepts_every_field holds equal to NAMES) but the page's own: the
    bank is the page's, dry_run the dialog's two steps (Count, then Forget N units). The names it
    places by hand must be fields; tests/test_console.py::test_a_selector_is_counted_then_forgotten_
    from_a_dialog_built_from_the_request finds an input for every other field in Chromium."""
    js = (resources.files("rcll") / "console" / "app.js").read_text()
    assert "spec.components.schemas.ForgetRequest.properties" in js

    def names(const: str) -> set[str]:
        found = re.search(rf"^const {const} = \[(.*?)\];$", js, re.M)
        assert found, const
        return set(re.findall(r'"(\w+)"', found.group(1)))

    assert names("FORGET_FROM_PAGE") == {"bank", "dry_run"}
    for const in ("FORGET_WHY", "FORGET_HOW", "FORGET_ALL"):
        assert names(const) and names(const) <= set(NAMES) - names("FORGET_FROM_PAGE"), const


def test_every_field_of_the_request_is_a_parameter_and_the_reverse() -> None:
    assert [f.name for f in fields(ForgetRequest)] == NAMES
