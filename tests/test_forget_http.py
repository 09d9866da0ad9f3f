"""Forget, correct, history and retention over HTTP: a dry run unless asked, the forget verb of
its own, a read-only server refuses, an unscoped forget is refused, and OpenAPI shows every route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from conftest import MakeLoginRole
from rcll.auth import VERBS, Caller, TokenMap
from rcll.errors import unknown_bank
from rcll.http import create_app
from rcll.memory import Memory

ADMIN = "admin-token-" + "a" * 20        # every verb, every bank
WRITER = "writer-token-" + "w" * 20      # read and write on b: no forget
OTHER = "other-token-" + "o" * 20        # every verb, but only on bank c
BASE = "http://127.0.0.1"
SECRET = "The vault password is qxsecretq-4711."


def tokens() -> TokenMap:
    return TokenMap.from_pairs({ADMIN: Caller("admin", ("*",), frozenset(VERBS)),
                                WRITER: Caller("writer", ("b",), frozenset({"read", "write"})),
                                OTHER: Caller("other", ("c",), frozenset(VERBS))})


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(dsn: str) -> Iterator[TestClient]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
        conn.execute("SELECT rcll.create_bank('c')")
    with TestClient(create_app(dsn, tokens=tokens()), base_url=BASE, headers=h(ADMIN)) as c:
        yield c


def retain(c: TestClient, content: str, **fields: Any) -> dict[str, Any]:
    r = c.post("/retain", json={"bank": "b", "content": content, **fields})
    assert r.status_code == 200, r.text
    return dict(r.json())


def texts(c: TestClient, query: str) -> list[str]:
    r = c.post("/recall", json={"bank": "b", "query": query})
    assert r.status_code == 200, r.text
    return [f["text"] for f in r.json()["facts"]]


def units(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone()
    return int(row[0]) if row else 0


def test_every_forget_route_is_a_dry_run_unless_dry_run_is_false(client: TestClient, dsn: str) -> None:
    one = retain(client, SECRET, thread="oops/1")
    two = retain(client, "Alice keeps the kitchen tidy.", thread="fine")
    three = retain(client, "Bob waters the plants on Fridays.", thread="fine")
    retain(client, "Carol books the meeting rooms.", thread="fine")
    before = units(dsn)
    dry = [client.post("/forget", json={"bank": "b", "thread": "oops/1"}),
           client.delete(f"/units/{one['unit_ids'][0]}", params={"bank": "b"}),
           client.delete(f"/documents/{one['document_id']}", params={"bank": "b"}),
           client.delete("/threads/oops%2F1", params={"bank": "b"})]
    for r in dry:
        assert r.status_code == 200, r.text
        assert r.json()["dry_run"] is True and r.json()["counts"]["units"] == 1 and r.json()["purged"] == []
    assert units(dsn) == before and SECRET in texts(client, "vault password"), "a dry run changes nothing"

    r = client.delete("/threads/oops%2F1", params={"bank": "b", "dry_run": False, "reason": "stored by mistake"})
    assert (r.status_code, r.json()["dry_run"], r.json()["counts"]) == (200, False, dry[3].json()["counts"])
    assert SECRET not in texts(client, "vault password") and units(dsn) == before - 1
    r = client.delete(f"/units/{two['unit_ids'][0]}", params={"bank": "b", "dry_run": "false"})
    assert r.status_code == 200 and r.json()["counts"]["units"] == 1, r.text
    r = client.delete(f"/documents/{three['document_id']}", params={"bank": "b", "dry_run": False, "purge": True})
    assert r.status_code == 200 and "rcll.memory_units" in r.json()["purged"], r.text
    assert texts(client, "who does what") == ["Carol books the meeting rooms."]
    # Gone is gone: the same id again is refused, naming the selector.
    r = client.delete(f"/units/{two['unit_ids'][0]}", params={"bank": "b", "dry_run": False})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (404, "RC003", "unit_ids"), r.text


def test_an_unscoped_or_empty_forget_is_refused_and_changes_nothing(client: TestClient, dsn: str) -> None:
    retain(client, "Alice keeps the kitchen tidy.", thread="t")
    retain(client, "Bob waters the plants.", thread="t")
    before = units(dsn)
    refused = [
        (client.post("/forget", json={"bank": "b", "dry_run": False}), 422, "RC007"),                # no selector
        (client.post("/forget", json={"bank": "b", "thread": "t", "dry_run": False}), 422, "RC007"),  # all of it
        (client.post("/forget", json={"bank": "b", "unit_ids": [], "dry_run": False}), 422, "RC007"),
        (client.post("/forget", json={"bank": "b", "thread": "nope", "dry_run": False}), 422, "RC007"),
        (client.post("/forget", json={"bank": "b", "everything": "c", "dry_run": False}), 422, "RC001"),
        (client.post("/forget", json={"bank": "b", "thread": "t", "who": "x"}), 422, "RC001"),        # unknown field
        (client.delete("/banks/b", params={"confirm": "c", "dry_run": False}), 422, "RC007"),
        (client.delete("/banks/b", params={"dry_run": False}), 422, "RC001"),                        # no confirm
        (client.delete("/state", params={"bank": "b", "room": "r", "dry_run": False}), 422, "RC007"),  # no key
        (client.delete("/units/0", params={"bank": "b", "dry_run": False}), 422, "RC001"),
        (client.delete("/units/1", params={"dry_run": False}), 422, "RC001"),                       # no bank
    ]
    for r, status, code in refused:
        assert (r.status_code, r.json()["code"]) == (status, code), r.text
        assert r.json()["field"] and r.json()["hint"], r.text
    assert units(dsn) == before
    r = client.post("/forget", json={"bank": "b", "everything": "b"})
    assert (r.status_code, r.json()["dry_run"], r.json()["counts"]["units"]) == (200, True, 2), r.text
    assert units(dsn) == before


def test_forget_needs_the_forget_verb_and_a_bank_in_reach(client: TestClient, dsn: str) -> None:
    unit = retain(client, SECRET)["unit_ids"][0]
    retain(client, "Alice keeps the kitchen tidy.")
    before = units(dsn)
    attempts = [lambda c: c.post("/forget", json={"bank": "b", "unit_ids": [unit], "dry_run": False}),
                lambda c: c.delete(f"/units/{unit}", params={"bank": "b", "dry_run": False}),
                lambda c: c.delete("/threads/t", params={"bank": "b", "dry_run": False}),
                lambda c: c.delete("/state", params={"bank": "b", "room": "r", "key": "k", "dry_run": False}),
                lambda c: c.delete("/banks/b", params={"confirm": "b", "dry_run": False})]
    writer = TestClient(client.app, base_url=BASE, headers=h(WRITER))
    other = TestClient(client.app, base_url=BASE, headers=h(OTHER))
    for attempt in attempts:
        r = attempt(writer)        # may write to b, may not forget in it
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (403, "RC006", "authorization"), r.text
        assert "no forget scope" in r.json()["error"]
        r = attempt(other)         # may forget, but only in c: b is an unknown bank to it
        assert (r.status_code, r.json()) == (404, unknown_bank("b").as_dict()), r.text
    r = other.put("/retention", json={"bank": "b", "keep": "P1D"})
    assert (r.status_code, r.json()) == (404, unknown_bank("b").as_dict()), r.text
    r = writer.put("/retention", json={"bank": "b", "keep": "P1D"})
    assert (r.status_code, r.json()["code"]) == (403, "RC006") and "no admin scope" in r.json()["error"], r.text
    r = other.patch(f"/units/{unit}", json={"bank": "b", "text": "nothing to see", "reason": "cover-up"})
    assert (r.status_code, r.json()) == (404, unknown_bank("b").as_dict()), r.text
    r = other.get(f"/units/{unit}/history", params={"bank": "b"})
    assert (r.status_code, r.json()) == (404, unknown_bank("b").as_dict()), r.text
    # A unit of bank b named under bank c (which the token reaches) is another bank's unit: refused.
    r = other.delete(f"/units/{unit}", params={"bank": "c", "dry_run": False})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (404, "RC003", "unit_ids"), r.text
    assert units(dsn) == before and SECRET in texts(client, "vault password")


def test_a_read_only_server_refuses_every_destructive_route(dsn: str, login_role: MakeLoginRole) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        unit = m.retain("Alice keeps the kitchen tidy.").unit_ids[0]
        m.retain("Bob waters the plants.")
        m.put_state("r", "k", 1)
    ro = Memory(login_role(member_of="rcll_reader").dsn, read_only=True)
    try:
        c = TestClient(create_app(service=ro, tokens=tokens()), base_url=BASE, headers=h(ADMIN))
        for r in (c.post("/forget", json={"bank": "b", "unit_ids": [unit], "dry_run": False}),
                  c.post("/forget", json={"bank": "b", "unit_ids": [unit]}),           # even a dry run
                  c.delete(f"/units/{unit}", params={"bank": "b", "dry_run": False}),
                  c.delete("/state", params={"bank": "b", "room": "r", "key": "k", "dry_run": False}),
                  c.delete("/banks/b", params={"confirm": "b", "dry_run": False}),
                  c.patch(f"/units/{unit}", json={"bank": "b", "text": "Alice is messy.", "reason": "wrong"}),
                  c.put("/retention", json={"bank": "b", "keep": "P1D"})):
            assert (r.status_code, r.json()["code"], r.json()["field"]) == (403, "RC006", "read_only"), r.text
        r = c.get(f"/units/{unit}/history", params={"bank": "b"})
        assert r.status_code == 200 and r.json()["versions"][0]["text"] == "Alice keeps the kitchen tidy.", r.text
        assert c.get("/retention", params={"bank": "b"}).json() == {"bank": "b", "policies": []}
    finally:
        ro.close()
    assert units(dsn) == 2


def test_a_corrected_unit_is_recalled_with_its_new_text_and_its_history_is_served(client: TestClient) -> None:
    unit = retain(client, "Alice lives in Porto.")["unit_ids"][0]
    retain(client, "Bob lives in Oslo.")
    r = client.patch(f"/units/{unit}", json={"bank": "b", "text": "Alice lives in Lisbon.", "reason": "she moved"})
    assert r.status_code == 200, r.text
    assert [(v["version"], v["current"], v["text"]) for v in r.json()["versions"]] == [
        (2, True, "Alice lives in Lisbon."), (1, False, "Alice lives in Porto.")]
    assert r.json()["versions"][1]["replaced_by"] == "admin" and r.json()["versions"][1]["reason"] == "she moved"
    assert client.get(f"/units/{unit}/history", params={"bank": "b"}).json() == r.json()
    assert "Alice lives in Lisbon." in texts(client, "where does Alice live")
    assert "Alice lives in Porto." not in texts(client, "where does Alice live")
    writer = TestClient(client.app, base_url=BASE, headers=h(WRITER))      # correct is a write
    r = writer.patch(f"/units/{unit}", json={"bank": "b", "text": "Alice lives in Faro.", "reason": "moved again"})
    assert r.status_code == 200 and r.json()["versions"][0]["replaced_by"] is None, r.text
    for bad, field in (({"text": "x"}, "reason"), ({"text": "", "reason": "r"}, "text"),
                       ({"text": "x", "reason": "r", "author": "mallory"}, "author")):
        r = client.patch(f"/units/{unit}", json={"bank": "b", **bad})
        assert (r.status_code, r.json()["field"]) == (422, field), r.text
    r = client.get("/units/999999/history", params={"bank": "b"})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (404, "RC003", "unit_id"), r.text
    r = client.patch("/units/999999", json={"bank": "b", "text": "x", "reason": "r"})
    assert (r.status_code, r.json()["code"]) == (404, "RC003"), r.text


def test_retention_policies_are_set_listed_and_removed_over_http(client: TestClient) -> None:
    retain(client, "Raw note from the standup.", room="standup", layer="L2")
    retain(client, "Always pin versions.", room="standup", layer="L0")
    r = client.put("/retention", json={"bank": "b", "keep": "P90D", "layer": "L2"})
    assert r.status_code == 200 and r.json()["changed"] == 1 and r.json()["keep"] == "P90D", r.text
    r = client.put("/retention", json={"bank": "b", "keep": 3600, "room": "standup"})     # seconds
    assert r.status_code == 200 and r.json()["keep"] == "PT1H", r.text
    policies = client.get("/retention", params={"bank": "b"}).json()["policies"]
    assert sorted((p["room"] or "", p["layer"] or "", p["keep"], p["keep_seconds"], p["units"]) for p in policies) == [
        ("", "L2", "P90D", 90 * 86400.0, 1), ("standup", "", "PT1H", 3600.0, 2)]
    for keep in ("P0D", -5, "ninety days", "P2000Y", True):
        r = client.put("/retention", json={"bank": "b", "keep": keep})
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "RC001", "keep"), (keep, r.text)
    r = client.put("/retention", json={"bank": "b", "keep": None, "layer": "L2"})
    assert r.status_code == 200, r.text
    assert [p["room"] for p in client.get("/retention", params={"bank": "b"}).json()["policies"]] == ["standup"]


def test_a_retain_may_carry_an_expiry_or_a_time_to_live(client: TestClient, dsn: str) -> None:
    gone = retain(client, "The door code of the lab is 4711.", expires_at="2020-01-01T00:00:00Z")
    kept = retain(client, "The lab door opens with a badge.", ttl="P30D")
    secs = retain(client, "The lab closes at nine.", ttl=86400)
    assert "The door code of the lab is 4711." not in texts(client, "lab door code")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT bool_and(expires_at BETWEEN now() + interval '29 days' AND now() + interval '31 days')"
                           " FROM rcll.memory_units WHERE unit_id = ANY(%s)", (kept["unit_ids"],)).fetchone()
        assert row == (True,)
        row = conn.execute("SELECT bool_and(expires_at < now() + interval '25 hours') FROM rcll.memory_units "
                           "WHERE unit_id = ANY(%s)", (secs["unit_ids"],)).fetchone()
        assert row == (True,) and gone["unit_ids"]
    for bad in ({"ttl": "P0D"}, {"ttl": "soon"}, {"ttl": -1}, {"ttl": True}):
        r = client.post("/retain", json={"bank": "b", "content": "x", **bad})
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "RC001", "ttl"), r.text
    r = client.post("/retain", json={"bank": "b", "content": "x", "ttl": "P1D", "expires_at": "2030-01-01T00:00:00Z"})
    assert (r.status_code, r.json()["field"]) == (422, "ttl"), r.text


def test_state_and_a_whole_bank_are_forgotten_only_when_confirmed(client: TestClient, dsn: str) -> None:
    client.put("/state", json={"bank": "b", "room": "r", "key": "k", "value": 1, "expected_version": 0})
    client.put("/state", json={"bank": "b", "room": "r", "key": "k", "value": 2, "expected_version": 1})
    r = client.delete("/state", params={"bank": "b", "room": "r", "key": "k"})
    assert r.json() == {"dry_run": True, "counts": {"state_versions": 2}, "purged": []}, r.text
    assert client.get("/state", params={"bank": "b", "room": "r", "key": "k"}).json()["value"] == 2
    r = client.delete("/state", params={"bank": "b", "room": "r", "all_keys": True, "dry_run": False})
    assert r.json()["counts"] == {"state_versions": 2}, r.text
    assert client.get("/state", params={"bank": "b", "room": "r", "key": "k"}).status_code == 404
    retain(client, "Alice keeps the kitchen tidy.")
    r = client.delete("/banks/b", params={"confirm": "b"})
    assert r.status_code == 200 and r.json()["dry_run"] and r.json()["counts"]["banks"] == 1, r.text
    assert client.get("/stats", params={"bank": "b"}).status_code == 200
    r = client.delete("/banks/b", params={"confirm": "b", "dry_run": False, "reason": "project over"})
    assert r.status_code == 200 and r.json()["counts"]["units"] == 1, r.text
    assert client.get("/stats", params={"bank": "b"}).json() == unknown_bank("b").as_dict()
    writer_only_forget = TokenMap.from_pairs({WRITER: Caller("w", ("c",), frozenset({"forget"}))})
    c = TestClient(create_app(dsn, tokens=writer_only_forget), base_url=BASE, headers=h(WRITER))
    with c:
        r = c.delete("/banks/c", params={"confirm": "c", "dry_run": False})    # forget without admin
        assert (r.status_code, r.json()["code"]) == (403, "RC006") and "no admin scope" in r.json()["error"], r.text


def test_a_bodiless_delete_needs_no_content_type_but_a_foreign_origin_is_still_refused(client: TestClient,
                                                                                     dsn: str) -> None:
    unit = retain(client, SECRET)["unit_ids"][0]
    retain(client, "Alice keeps the kitchen tidy.")
    r = client.delete(f"/units/{unit}", params={"bank": "b"})
    assert r.status_code == 200 and "content-type" not in r.request.headers, r.text
    for headers in ({"Origin": "http://attacker.example"}, {"Sec-Fetch-Site": "cross-site"}):
        r = client.delete(f"/units/{unit}", params={"bank": "b", "dry_run": False}, headers=headers)
        assert (r.status_code, r.json()["field"]) == (403, "origin"), r.text
    r = client.request("DELETE", f"/units/{unit}", params={"bank": "b", "dry_run": False}, content=b"x=1",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (r.status_code, r.json()["field"]) == (415, "content-type"), r.text
    r = client.request("PATCH", f"/units/{unit}", content=b'{"bank": "b", "text": "x", "reason": "y"}')
    assert (r.status_code, r.json()["field"]) == (415, "content-type"), r.text
    assert units(dsn) == 2


def test_openapi_shows_every_forget_route_with_dry_run_by_default(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    routes = {("post", "/forget"), ("delete", "/units/{unit_id}"), ("delete", "/documents/{document_id}"),
              ("delete", "/threads/{thread}"), ("delete", "/banks/{bank}"), ("delete", "/state"),
              ("patch", "/units/{unit_id}"), ("get", "/units/{unit_id}/history"), ("get", "/retention"),
              ("put", "/retention")}
    assert routes <= {(m, p) for p, ops in paths.items() for m in ops}
    for method, path in routes:
        op = paths[path][method]
        for status in ("200", "403", "404", "422"):
            assert status in op["responses"], (method, path, status)
        params = {p["name"]: p for p in op.get("parameters", ())}
        if method == "delete":
            assert params["dry_run"]["schema"]["default"] is True and not params["dry_run"]["required"], path
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["ForgetRequest"]["properties"]["dry_run"]["default"] is True
    assert schemas["ForgetRequest"]["required"] == ["bank"]
    assert set(schemas["CorrectRequest"]["required"]) == {"bank", "text", "reason"}
    assert "ttl" in schemas["RetainRequest"]["properties"] and "expires_at" in schemas["RetainRequest"]["properties"]
