"""One recall request: RecallRequest mirrors the SQL functions' parameters, checks every field once,
and every interface (HTTP, MCP, the CLI, the console's route) offers and accepts every field."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
import psycopg
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from rcll import cli, http, mcp_server
from rcll.auth import TokenMap
from rcll.defaults import CHANNELS, WEIGHTS
from rcll.errors import RcllError
from rcll.memory import Memory
from rcll.request import PARAMETERS, SCOPE, RecallRequest

TOKEN = "alice-token-" + "x" * 20

# A value for every field, none at its default: a field added to RecallRequest must be added here,
# and then every interface below must carry it through.
EVERY: dict[str, Any] = {
    "query": "how do we deploy?", "bank": "b", "rooms": ["deployment"], "authors": ["alice"], "mine": True,
    "include_unattributed": True, "halls": ["world"], "layers": ["L2"], "tags_any": ["ops"], "tags_all": ["ops"],
    "thread": "t1", "as_of": "2024-06-01T00:00:00+00:00", "include_self_declared": True, "time_from": "2024-01-01T00:00:00+00:00",
    "time_to": "2024-12-31T00:00:00+00:00", "reference_time": "2024-06-15T00:00:00+00:00",
    "weights": {"context": 0.5, "graph": 0.0}, "channel_limit": 50, "limit": 20, "rerank_depth": 5,
    "context_depth": 2, "budget": 1000, "deadline_ms": 60000,
}
EXPECTED = RecallRequest(**EVERY)


def _arguments(db: psycopg.Connection[Any], function: str) -> list[str]:
    """A function's input parameter names, as the catalog holds them."""
    row = db.execute("""
        SELECT array_agg(a.name ORDER BY a.n) FROM pg_proc p,
               unnest(p.proargnames, coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
               WITH ORDINALITY AS a(name, mode, n)
        WHERE p.oid = %s::regproc AND a.mode IN ('i', 'b')""", (function,)).fetchone()
    assert row is not None
    return list(row[0])


def test_every_field_has_a_value_in_this_test() -> None:
    assert set(EVERY) == {p.name for p in PARAMETERS}
    assert all(getattr(EXPECTED, p.name) != p.default for p in PARAMETERS if p.name not in ("query", "bank"))


def test_the_scope_fields_are_recall_scopes_parameters(db: psycopg.Connection[Any]) -> None:
    assert list(SCOPE) == _arguments(db, "rcll.recall_scope")


def test_the_other_fields_are_recall_candidates_parameters_and_the_clients_phases(db: psycopg.Connection[Any]) -> None:
    sql = _arguments(db, "rcll.recall_candidates")
    # What the client computes (the embeddings) or packs (the scope, the weights, the time range).
    packed = {"scope", "query_embedding", "entity_query_embedding", "time_range", "weights"}
    # deadline_ms is both: recall_candidates starts its channels by it, the client's phases use it too.
    client = {"rerank_depth", "context_depth", "budget", "time_from", "time_to", "weights"}
    fields = [p.name for p in PARAMETERS if not p.scope]
    assert sorted(set(sql) - packed) == sorted(set(fields) - client)
    assert list(CHANNELS) == _arguments(db, "rcll.channel_weights")


def test_the_channel_weights_default_as_in_sql(db: psycopg.Connection[Any]) -> None:
    rows = db.execute("""
        SELECT a.name, pg_get_function_arg_default(p.oid, a.n::integer)
        FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS a(name, n)
        WHERE p.oid = 'rcll.channel_weights'::regproc""").fetchall()
    assert {name: float(expr) for name, expr in rows} == dict(WEIGHTS)
    # ... and SQL knows each by the same name (a list under another name is refused).
    assert db.execute("SELECT rcll._known_channels(%s)", (list(CHANNELS),)).fetchone() == (True,)


@pytest.mark.parametrize(("field", "value"), [
    ("query", ""), ("query", "x" * 4001), ("bank", ""), ("rooms", "a" * 600), ("rooms", [""]), ("authors", 3),
    ("mine", "yes"), ("include_unattributed", 1), ("include_self_declared", "no"), ("halls", ["\x00"]), ("layers", [None]), ("tags_any", {}),
    ("tags_all", ["a"] * 300), ("thread", "\ud800"), ("as_of", "tomorrow"), ("time_from", "2024-13-01"),
    ("time_to", 20240101), ("reference_time", "noon"), ("weights", [1.0]), ("weights.dense", -1),
    ("weights.sparse", 1.0), ("weights.graph", float("nan")), ("channel_limit", 0), ("limit", 10_001),
    ("rerank_depth", -1), ("context_depth", 1001), ("budget", 0), ("deadline_ms", 600_001),
])
def test_a_bad_value_is_refused_naming_its_field(field: str, value: Any) -> None:
    name, _, channel = field.partition(".")
    given = {"weights": {channel: value}} if channel else {name: value}
    with pytest.raises(RcllError) as e:
        RecallRequest(**({"query": "q", "bank": "b"} | given))
    assert e.value.field.split("[")[0] == field


def test_none_leaves_a_depth_or_limit_at_its_default() -> None:
    asked = RecallRequest(query="q", bank="b", channel_limit=None, limit=None, rerank_depth=None,
                          context_depth=None, mine=None, weights=None)
    assert asked == RecallRequest(query="q", bank="b")


def test_time_to_before_time_from_is_refused() -> None:
    with pytest.raises(RcllError) as e:
        RecallRequest(query="q", bank="b", time_from="2024-06-01", time_to="2024-05-01")
    assert e.value.field == "time_to"


def test_a_request_is_frozen_and_keeps_what_it_was_given() -> None:
    with pytest.raises(AttributeError):
        EXPECTED.query = "other"  # type: ignore[misc]
    assert EXPECTED.rooms == ("deployment",) and EXPECTED.as_of == datetime(2024, 6, 1, tzinfo=UTC)
    assert dict(EXPECTED.weights) == {**WEIGHTS, "context": 0.5, "graph": 0.0}
    assert EXPECTED.time_range == "[2024-01-01T00:00:00+00:00,2024-12-31T00:00:00+00:00)"
    assert replace(EXPECTED, rerank_depth=0).rerank_depth == 0


# -- every interface offers every field ------------------------------------------------------------


@pytest.fixture
def bank(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
        conn.execute("SELECT set_config('rcll.agent', 'alice', false)")
        conn.execute("SELECT * FROM rcll.retain_chunks(bank => 'b', content => 'We deploy with Argo CD.', "
                     "chunks => ARRAY['We deploy with Argo CD.'], embeddings => NULL, room => 'deployment')")
    return dsn


def test_http_offers_and_accepts_every_field(bank: str) -> None:
    schema = http.RecallBody.model_json_schema()["properties"]
    assert {p.name for p in PARAMETERS} <= set(schema)
    assert http.recall_request(http.RecallBody.model_validate(EVERY | {"explain": True})) == EXPECTED
    app = http.create_app(bank, tokens=TokenMap.from_pairs({TOKEN: "alice"}))
    with TestClient(app) as client:
        r = client.post("/recall", json=EVERY, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        assert r.json()["deadline_ms"] == EVERY["deadline_ms"]
        # The console posts its form to this route; its schema is what the page builds its form from.
        spec = client.get("/openapi.json").json()
        assert {p.name for p in PARAMETERS} <= set(spec["components"]["schemas"]["RecallBody"]["properties"])


def test_mcp_offers_and_accepts_every_field(bank: str) -> None:
    with Memory(dsn=bank) as svc:
        server = mcp_server.build_server(svc, agent="alice")

        async def go() -> tuple[dict[str, Any], Any]:
            async with Client(server) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                return tools["memory_recall"].input_schema, await client.call_tool("memory_recall", EVERY)

        schema, result = anyio.run(go)
    assert {p.name for p in PARAMETERS} == set(schema["properties"])
    assert schema["required"] == ["query"]
    assert not result.is_error, result.content
    assert result.structured_content["deadline_ms"] == EVERY["deadline_ms"]
    assert mcp_server.recall_request(dict(EVERY), "default") == EXPECTED
    assert mcp_server.recall_request({"query": "q"}, "fleet").bank == "fleet"


def _flags() -> list[str]:
    argv = []
    for p in PARAMETERS:
        value = EVERY[p.name]
        flag = f"--{p.name.replace('_', '-')}"
        if p.name == "query":
            continue
        if p.kind == "names":
            argv += [x for v in value for x in (flag, v)]
        elif p.kind == "flag":
            argv.append(flag)
        elif p.kind == "weights":
            argv += [x for c, w in value.items() for x in ("--weight", f"{c}={w}")]
        else:
            argv += [flag, str(value)]
    return [*argv, EVERY["query"]]


def test_the_cli_offers_and_accepts_every_field(bank: str) -> None:
    args = cli.build_parser().parse_args(["recall", *_flags()])
    assert isinstance(args, argparse.Namespace)
    assert cli.recall_request(args) == EXPECTED
    done = subprocess.run([sys.executable, "-m", "rcll.cli", "recall", "--dsn", bank, "--json", *_flags()],
                          env={**os.environ, "RCLL_AGENT": "alice"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"deadline_ms": 60000' in done.stdout


def test_memory_recall_takes_every_field_by_keyword_or_as_a_request(bank: str) -> None:
    with Memory(dsn=bank, agent="alice") as memory:
        by_keyword = memory.recall(**EVERY)
        whole = memory.recall(EXPECTED)
        with pytest.raises(RcllError) as e:
            memory.recall("q", room="deployment")
    assert e.value.field == "room"
    assert [f.unit_id for f in by_keyword.facts] == [f.unit_id for f in whole.facts]
