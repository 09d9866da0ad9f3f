"""HTTP API: every verb over HTTP, identity from the bearer token only, errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import psycopg
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from rcll.auth import TokenMap
from rcll.http import create_app

ALICE = "alice-token-" + "x" * 20
BOB = "bob-token-" + "y" * 20
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def client(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    app = create_app(dsn, tokens=TokenMap.from_pairs({ALICE: "alice", BOB: "bob"}))
    with TestClient(app) as c:
        yield c


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_verb_works_and_the_token_is_the_author(client: TestClient) -> None:
    r = client.post("/retain", json={"bank": "b", "content": "We deploy with Argo CD.", "room": "deploy",
                                     "tags": ["ops", "author:mallory"]}, headers=h(ALICE))
    assert r.status_code == 200, r.text
    # A body cannot name the author: the field is not in the schema at all.
    r = client.post("/retain", json={"bank": "b", "content": "x", "author": "mallory"}, headers=h(BOB))
    assert r.status_code == 422 and r.json()["field"] == "author"
    client.post("/retain", json={"bank": "b", "content": "Bob likes the canary rollout."}, headers=h(BOB))
    tags = client.get("/tags", params={"bank": "b", "q": "author:*"}, headers=h(ALICE)).json()["tags"]
    assert sorted(t["tag"] for t in tags) == ["author:alice", "author:bob"]
    rooms = client.get("/rooms", params={"bank": "b"}, headers=h(ALICE)).json()["rooms"]
    assert "deployment" in {x["name"] for x in rooms}
    r = client.post("/recall", json={"bank": "b", "query": "how do we deploy", "mine": True}, headers=h(ALICE))
    assert r.status_code == 200 and {f["author"] for f in r.json()["facts"]} == {"alice"}
    stats = client.get("/stats", params={"bank": "b"}, headers=h(ALICE)).json()
    assert stats["author"] == {"alice": 1, "bob": 1} and stats["tokens"]["total"]["read_tokens"] == 0
    r = client.put("/state", json={"bank": "b", "room": "deployment", "key": "k", "value": [1], "expected_version": 0},
                   headers=h(ALICE))
    assert r.json()["version"] == 1
    r = client.put("/state", json={"bank": "b", "room": "deployment", "key": "k", "value": [2], "expected_version": 0},
                   headers=h(ALICE))
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (409, "RC005", "expected_version")
    st = client.get("/state", params={"bank": "b", "room": "deployment", "key": "k"}, headers=h(ALICE)).json()
    assert st["value"] == [1] and st["provenance"]["who"] == "alice"
    assert client.get("/health", headers=h(ALICE)).json()["status"] == "ok"
    assert client.get("/health").json() == {"status": "alive"}      # no token: no versions, no upkeep state


def test_export_then_import_over_http(client: TestClient, dsn: str) -> None:
    client.post("/retain", json={"bank": "b", "content": "A fact to carry over."}, headers=h(ALICE))
    body = client.get("/export", params={"bank": "b"}, headers=h(ALICE)).content
    lines = body.splitlines()
    assert json.loads(lines[0])["format"] == "rcll-export-stream"
    assert any(json.loads(x)["table"] == "memory_units" for x in lines[1:])
    r = client.post("/import", content=body, headers=h(ALICE) | NDJSON)
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (409, "RC004", "bank")
    r = client.post("/import", params={"on_conflict": "skip"}, content=body, headers=h(ALICE) | NDJSON)
    assert r.status_code == 200, r.text
    again = client.get("/export", params={"bank": "b"}, headers=h(ALICE)).content
    assert again.count(b'"table":"memory_units"') == body.count(b'"table":"memory_units"')


def test_rejections_name_the_field(client: TestClient) -> None:
    r = client.post("/recall", json={"bank": "b", "query": "x"})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (401, "RC009", "authorization")
    r = client.post("/recall", json={"bank": "b", "query": "x"}, headers=h("nope" * 5))
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (401, "RC009", "authorization")
    cases = [
        ("post", "/recall", {"json": {"bank": "nope", "query": "x"}}, 404, "RC002", "bank"),
        ("post", "/recall", {"json": {"bank": "b", "query": ""}}, 422, "RC001", "query"),
        ("post", "/retain", {"json": {"bank": "b", "content": "a\u0000b"}}, 422, "RC001", "content"),
        ("post", "/retain", {"json": {"bank": "b", "content": "ok", "layer": "L9"}}, 422, "RC001", "layer"),
        ("get", "/tags", {"params": {}}, 422, "RC001", "bank"),
        ("get", "/state", {"params": {"bank": "b", "room": "r", "key": "missing"}}, 404, "RC003", "key"),
        ("post", "/import", {"content": b"not json", "headers": h(ALICE) | NDJSON}, 422, "RC008", "body"),
    ]
    for method, path, kw, status, code, field in cases:
        r = getattr(client, method)(path, **({"headers": h(ALICE)} | kw))
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (status, code, field), (path, r.text)
        assert r.json()["error"] and r.json()["hint"], (path, r.text)


# Each verb: its method and path, then the body fields or query parameters it requires.
BODY_VERBS = {("post", "/retain"): {"bank", "content"}, ("post", "/recall"): {"bank", "query"},
              ("put", "/state"): {"bank", "room", "key", "value"}, ("post", "/forget"): {"bank"},
              ("put", "/retention"): {"bank", "keep"}}
QUERY_VERBS = {("get", "/rooms"): {"bank"}, ("get", "/tags"): {"bank"}, ("get", "/stats"): {"bank"},
               ("get", "/state"): {"bank", "room", "key"}, ("get", "/export"): {"bank"},
               ("delete", "/state"): {"bank", "room"}, ("get", "/retention"): {"bank"}}
ERRORS = ("401", "403", "404", "409", "422", "503")   # the statuses of rcll.errors.CODES


def test_openapi_documents_every_verb(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths, schemas = spec["paths"], spec["components"]["schemas"]
    # Each error status documents the codes that answer with it (rcll.errors.CODES).
    responses = paths["/recall"]["post"]["responses"]
    assert "RC002" in responses["404"]["description"] and "RC005" in responses["409"]["description"]
    assert "RC001" in responses["422"]["description"] and "RC010" in responses["503"]["description"]

    def schema(ref: dict[str, Any]) -> dict[str, Any]:
        return dict(schemas[ref["$ref"].rsplit("/", 1)[1]])

    # Nothing is served undocumented.
    served = {(m.lower(), r.path.replace(":path}", "}")) for r in client.app.routes if isinstance(r, APIRoute)
              for m in r.methods}     # a {name:path} parameter (a thread name may hold "/") is {name} in OpenAPI
    assert served and served <= {(m, p) for p, ops in paths.items() for m in ops}
    verbs = {**BODY_VERBS, **QUERY_VERBS, ("post", "/import"): set(), ("get", "/health"): set()}
    assert set(verbs) <= served
    assert set(schemas["ErrorBody"]["required"]) == {"code", "field", "error"}
    for (method, path), required in verbs.items():
        op = paths[path][method]
        assert "200" in op["responses"], (method, path)
        for status in ERRORS:     # every refusal is an ErrorBody naming the field
            assert schema(op["responses"][status]["content"]["application/json"]["schema"])["title"] == "ErrorBody"
        if (method, path) in BODY_VERBS:
            assert op["requestBody"]["required"] is True
            body = schema(op["requestBody"]["content"]["application/json"]["schema"])
            assert set(body["required"]) == required, (method, path, body["required"])
            assert body["additionalProperties"] is False, (method, path)   # an unknown field is refused
        else:
            params = {p["name"]: p for p in op.get("parameters", ())}
            assert {n for n, p in params.items() if p["required"]} == required, (method, path, params)
            assert all(p["in"] == "query" for p in params.values())
    imported = paths["/import"]["post"]
    assert "application/x-ndjson" in imported["requestBody"]["content"]
    [on_conflict] = imported["parameters"]
    assert on_conflict["name"] == "on_conflict" and on_conflict["schema"]["default"] == "error"


def test_the_server_requires_what_openapi_documents(client: TestClient) -> None:
    # A request without the documented required inputs is refused, naming one of them.
    for (method, path), required in BODY_VERBS.items():
        r = client.request(method.upper(), path, json={}, headers=h(ALICE))
        assert r.status_code == 422 and r.json()["field"] in required, (path, r.text)
    for (method, path), required in QUERY_VERBS.items():
        r = client.request(method.upper(), path, headers=h(ALICE))
        assert r.status_code == 422 and r.json()["field"] in required, (path, r.text)


def _closed(schema: Any) -> Any:
    """The schema with every object that lists its properties refusing any other key."""
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def test_every_answer_is_what_openapi_documents(client: TestClient) -> None:
    # Typed clients (clients/typescript) take their answer types from these schemas: an undocumented
    # key, a missing one or a wrong type in what the server really sends fails here.
    doc = _closed(client.get("/openapi.json").json())
    checked: set[tuple[str, str]] = set()

    def check(method: str, path: str, url: str | None = None, **kw: Any) -> Any:
        r = client.request(method.upper(), url or path, **({"headers": h(ALICE)} | kw))
        assert r.status_code == 200, (path, r.text)
        schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        jsonschema.validate(r.json(), {**doc, **schema})
        checked.add((method, path))
        return r.json()

    check("post", "/retain", json={"bank": "b", "content": "The canary runs for an hour before a full rollout.",
                                   "room": "deployment", "tags": ["ops"], "occurred_at": "2026-02-01T09:00:00Z"})
    kept = check("post", "/retain", json={"bank": "b", "content": "Rollbacks are automatic when the error rate doubles.",
                                          "thread": "t", "ttl": "P30D"})
    unit = kept["unit_ids"][0]
    assert check("post", "/recall", json={"bank": "b", "query": "how long does the canary run?"})["facts"]
    explained = check("post", "/recall", json={"bank": "b", "query": "canary rollout", "explain": True, "budget": 12})
    assert explained["cut"] and explained["ranks"], explained
    # what the budget cut skipped without counting, explain counts (rcll.budget.cut_counting)
    assert all(f["tokens"] > 0 for f in explained["cut"]), explained["cut"]
    check("get", "/rooms", params={"bank": "b"})
    check("get", "/tags", params={"bank": "b", "q": "*"})
    check("get", "/stats", params={"bank": "b"})
    check("put", "/state", json={"bank": "b", "room": "deployment", "key": "k", "value": {"a": [1]},
                                 "expected_version": 0})
    check("get", "/state", params={"bank": "b", "room": "deployment", "key": "k"})
    check("get", "/health")
    check("get", "/health", headers={})          # no token: {"status": "alive"} alone
    check("post", "/forget", json={"bank": "b", "thread": "t"})                       # dry runs, all of them
    check("delete", "/state", params={"bank": "b", "room": "deployment", "key": "k"})
    check("delete", "/units/{unit_id}", f"/units/{unit}", params={"bank": "b"})
    check("delete", "/documents/{document_id}", f"/documents/{kept['document_id']}", params={"bank": "b"})
    check("delete", "/threads/{thread}", "/threads/t", params={"bank": "b"})
    check("patch", "/units/{unit_id}", f"/units/{unit}", json={"bank": "b", "text": "Rollbacks are automatic.",
                                                                "reason": "shorter"})
    check("get", "/units/{unit_id}/history", f"/units/{unit}/history", params={"bank": "b"})
    check("put", "/retention", json={"bank": "b", "keep": "P90D", "room": "deployment"})
    check("get", "/retention", params={"bank": "b"})
    check("delete", "/banks/{bank}", "/banks/b", params={"confirm": "b"})
    stream = client.get("/export", params={"bank": "b"}, headers=h(ALICE)).content
    check("post", "/import", params={"on_conflict": "skip"}, content=stream, headers=h(ALICE) | NDJSON)
    verbs = {**BODY_VERBS, **QUERY_VERBS, ("post", "/import"): set(), ("get", "/health"): set()}
    assert set(verbs) - {("get", "/export")} <= checked     # export answers NDJSON, not JSON
