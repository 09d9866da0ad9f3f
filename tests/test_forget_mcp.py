"""memory_forget, memory_correct and memory_history over MCP: marked destructive, a dry run unless
asked, the forget verb of their own, absent from a read-only server, an unscoped forget refused."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import psycopg

from conftest import MakeLoginRole
from rcll.auth import VERBS, Caller, TokenMap
from rcll.mcp_server import DESTRUCTIVE_TOOLS, build_server, http_app
from rcll.memory import Memory

TOKEN = "forget-token-" + "f" * 24
SECRET = "The vault password is qxsecretq-4711."


def payload(result: Any) -> Any:
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.content
    text = result.content[0].text
    return dict(json.loads(text[text.index("{"):]))


def calls(server: Any, steps: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any]]:
    """The tools as listed, then each call's result, in process."""
    from mcp import Client

    async def go() -> tuple[dict[str, Any], list[Any]]:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            return tools, [await client.call_tool(name, args) for name, args in steps]

    return anyio.run(go)


def as_token(svc: Memory, caller: Caller, steps: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call over streamable HTTP with a bearer token scoped as `caller`."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tokens = TokenMap.from_pairs({TOKEN: caller})
    server = build_server(svc, tokens=tokens)
    app = http_app(server, tokens)      # before the session manager, which it creates

    async def go() -> list[Any]:
        async with (server.session_manager.run(),
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                      base_url="http://127.0.0.1:8766", headers={"Authorization": f"Bearer {TOKEN}"},
                                      timeout=120) as h,
                    Client(streamable_http_client("http://127.0.0.1:8766/mcp", http_client=h)) as client):
            return [await client.call_tool(name, args) for name, args in steps]

    return anyio.run(go)


def units(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone()
    return int(row[0]) if row else 0


def test_forget_and_correct_are_marked_destructive_and_forget_is_a_dry_run_unless_asked(dsn: str) -> None:
    with Memory(dsn, bank="b") as svc:
        svc.create_bank("b")
        secret = svc.retain(SECRET, thread="oops")
        svc.retain("Alice keeps the kitchen tidy.", thread="fine")
        before = units(dsn)
        tools, (dry, recalled, done, again, unscoped) = calls(build_server(svc, agent="agent"), [
            ("memory_forget", {"bank": "b", "thread": "oops"}),
            ("memory_recall", {"bank": "b", "query": "vault password"}),
            ("memory_forget", {"bank": "b", "document_ids": [secret.document_id], "dry_run": False,
                               "reason": "stored by mistake"}),
            ("memory_recall", {"bank": "b", "query": "vault password"}),
            ("memory_forget", {"bank": "b", "dry_run": False})])
        for name in DESTRUCTIVE_TOOLS:
            ann = tools[name].annotations
            assert (ann.destructive_hint, ann.read_only_hint) == (True, False), name
        assert tools["memory_history"].annotations.read_only_hint is True
        assert tools["memory_retain"].annotations.destructive_hint is False
        schema = tools["memory_forget"].input_schema["properties"]
        assert schema["dry_run"]["default"] is True and "DRY RUN" in (tools["memory_forget"].description or "")
        assert payload(dry)["dry_run"] is True and payload(dry)["counts"]["units"] == 1
        assert SECRET in [f["text"] for f in payload(recalled)["facts"]], "the dry run changed nothing"
        assert payload(done) == {"dry_run": False, "counts": payload(dry)["counts"], "purged": []}
        assert SECRET not in [f["text"] for f in payload(again)["facts"]] and units(dsn) == before - 1
        assert (error(unscoped)["code"], error(unscoped)["kind"]) == ("RC007", "too_broad")


def test_a_corrected_unit_is_recalled_with_its_new_text_and_its_history_listed(dsn: str) -> None:
    with Memory(dsn, bank="b") as svc:
        svc.create_bank("b")
        unit = svc.retain("Alice lives in Porto.").unit_ids[0]
        svc.retain("Bob lives in Oslo.")
        _, (fixed, history, recalled, no_reason, unknown) = calls(build_server(svc, agent="editor"), [
            ("memory_correct", {"bank": "b", "unit_id": unit, "text": "Alice lives in Lisbon.", "reason": "moved"}),
            ("memory_history", {"bank": "b", "unit_id": unit}),
            ("memory_recall", {"bank": "b", "query": "where does Alice live"}),
            ("memory_correct", {"bank": "b", "unit_id": unit, "text": "Alice lives in Faro.", "reason": " "}),
            ("memory_correct", {"bank": "b", "unit_id": 999_999, "text": "x", "reason": "r"})])
        assert [(v["version"], v["text"]) for v in payload(fixed)["versions"]] == [
            (2, "Alice lives in Lisbon."), (1, "Alice lives in Porto.")]
        assert payload(fixed)["versions"][1]["replaced_by"] == "editor"
        assert payload(history) == payload(fixed)
        texts = [f["text"] for f in payload(recalled)["facts"]]
        assert "Alice lives in Lisbon." in texts and "Alice lives in Porto." not in texts
        assert error(no_reason)["field"] == "reason"
        assert error(unknown)["code"] == "RC003"


def test_forget_needs_the_forget_verb_and_a_bank_in_reach(dsn: str) -> None:
    with Memory(dsn, bank="b") as svc:
        svc.create_bank("b")
        svc.create_bank("c")
        unit = svc.retain(SECRET).unit_ids[0]
        svc.retain("Alice keeps the kitchen tidy.")
        before = units(dsn)
        forget = ("memory_forget", {"bank": "b", "unit_ids": [unit], "dry_run": False})
        correct = ("memory_correct", {"bank": "b", "unit_id": unit, "text": "nothing here", "reason": "cover-up"})
        writer = as_token(svc, Caller("writer", ("b",), frozenset({"read", "write"})), [forget])
        other = as_token(svc, Caller("other", ("c",), frozenset(VERBS)), [forget, correct])
        assert (error(writer[0])["code"], error(writer[0])["field"]) == ("RC006", "authorization")
        assert "no forget scope" in error(writer[0])["error"]
        for r in other:
            assert (error(r)["code"], error(r)["field"]) == ("RC002", "bank") and "qxsecretq" not in str(r.content)
        allowed = as_token(svc, Caller("forgetter", ("b",), frozenset({"forget"})), [forget])
        assert payload(allowed[0])["counts"]["units"] == 1
        assert units(dsn) == before - 1


def test_a_read_only_server_offers_no_destructive_tool(dsn: str, login_role: MakeLoginRole) -> None:
    with Memory(dsn, bank="b") as m:
        m.create_bank("b")
        unit = m.retain("Alice keeps the kitchen tidy.").unit_ids[0]
        m.retain("Bob waters the plants.")
    svc = Memory(login_role(member_of="rcll_reader").dsn, read_only=True)
    svc.open()
    try:
        tools, (forget, correct, history) = calls(build_server(svc), [
            ("memory_forget", {"bank": "b", "unit_ids": [unit], "dry_run": False}),
            ("memory_correct", {"bank": "b", "unit_id": unit, "text": "x", "reason": "y"}),
            ("memory_history", {"bank": "b", "unit_id": unit})])
        assert not set(DESTRUCTIVE_TOOLS) & set(tools) and "memory_history" in tools
        assert forget.is_error and correct.is_error
        assert payload(history)["versions"][0]["text"] == "Alice keeps the kitchen tidy."
    finally:
        svc.close()
    assert units(dsn) == 2


def test_memory_retain_takes_an_expiry_or_a_time_to_live(dsn: str) -> None:
    with Memory(dsn, bank="b") as svc:
        svc.create_bank("b")
        _, (gone, kept, bad, both, recalled) = calls(build_server(svc, agent="agent"), [
            ("memory_retain", {"bank": "b", "content": "The lab door code is 4711.",
                               "expires_at": "2020-01-01T00:00:00+00:00"}),
            ("memory_retain", {"bank": "b", "content": "The lab door opens with a badge.", "ttl": "P30D"}),
            ("memory_retain", {"bank": "b", "content": "x", "ttl": "soon"}),
            ("memory_retain", {"bank": "b", "content": "x", "ttl": 60, "expires_at": "2030-01-01T00:00:00+00:00"}),
            ("memory_recall", {"bank": "b", "query": "lab door code"})])
        assert payload(gone)["unit_ids"] and payload(kept)["unit_ids"]
        assert error(bad)["field"] == "ttl" and error(both)["field"] == "ttl"
        assert [f["text"] for f in payload(recalled)["facts"]] == ["The lab door opens with a badge."]
