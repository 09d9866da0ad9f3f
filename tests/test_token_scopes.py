"""Token scopes: a token reaches only its banks and uses only its verbs, over HTTP and over MCP.
A bank out of reach answers exactly as a bank that does not exist, and never with its data."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from conftest import MakeLoginRole
from harness import fuzz_import
from rcll.auth import VERBS, Caller, TokenMap
from rcll.errors import CODES, Code, RcllError, unknown_bank
from rcll.http import create_app
from rcll.mcp_server import MCPServer, build_server, http_app
from rcll.memory import Memory

# Every bank's data carries its own marker (in unit text, room, tag, state key and value), and unit
# ids start at 10^7, so a leak is visible in any response: a foreign marker or a foreign unit id.
BANKS = {"alpha": "qxalphaq", "alpha-2": "qxalphatwoq", "beta": "qxbetaq", "gamma": "qxgammaq"}
MISSING = ("alpha-9", "betamax", "delta", "gamma-1")       # names that never exist
TOKEN = "scope-token-" + "s" * 24
OTHER = "other-token-" + "o" * 24
NDJSON = {"Content-Type": "application/x-ndjson"}


class Scopes(TokenMap):
    """A server's token map that grows: every scope a test tries is added under a token of its own."""

    def add(self, pairs: dict[str, Caller]) -> None:
        self._callers.update(TokenMap.from_pairs(pairs)._callers)


class Served:
    """The one HTTP app and the one MCP server over a service that a test drives. Building either
    costs far more than the requests a case sends, so each case's token map is added to theirs under
    fresh tokens (Served.login) instead of a server being built for it: a client made earlier keeps
    the scope it was made with, and both read the map at every request, as a server reads its own."""

    def __init__(self, svc: Memory) -> None:
        self.svc = svc
        self.tokens = Scopes()
        self.app = create_app(service=svc, tokens=self.tokens)
        self._mcp: MCPServer | None = None
        self._logins = itertools.count()

    def login(self, tm: dict[str, Caller]) -> str:
        """Add tm's tokens (renamed, so that no earlier case's scope is changed); the bearer token
        that stands for tm's TOKEN."""
        n = next(self._logins)
        self.tokens.add({f"{n:05d}-{token}": caller for token, caller in tm.items()})
        return f"{n:05d}-{TOKEN}"

    @property
    def mcp(self) -> MCPServer:
        if self._mcp is None:
            self._mcp = build_server(self.svc, tokens=self.tokens)
        return self._mcp


@dataclass
class World:
    dsn: str
    svc: Memory
    served: Served
    anonymous: FastAPI      # the app of a server without tokens
    units: dict[str, set[int]] = field(default_factory=dict)
    exports: dict[str, bytes] = field(default_factory=dict)


def seed(dsn: str) -> dict[str, set[int]]:
    units: dict[str, set[int]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE rcll.memory_units ALTER COLUMN unit_id RESTART WITH 10000000")
        for bank, mark in BANKS.items():
            conn.execute("SELECT rcll.create_bank(%s)", (bank,))
            for i in range(3):
                text = f"{mark} note {i}: the {mark} team deploys with tool {mark}{i}."
                conn.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s], "
                             "embeddings => NULL, room => %s, tags => ARRAY[%s])",
                             (bank, text, text, f"room-{mark}", f"tag-{mark}"))
            conn.execute("SELECT rcll.put_state(bank => %s, room => %s, key => %s, value => %s, "
                         "expected_version => 0)", (bank, f"room-{mark}", f"key-{mark}", json.dumps({"m": mark})))
            units[bank] = {r[0] for r in conn.execute(
                "SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)", (bank,))}
    return units


@pytest.fixture
def world(dsn: str) -> Iterator[World]:
    units = seed(dsn)
    svc = Memory(dsn)
    try:
        w = World(dsn, svc, Served(svc), create_app(service=svc, tokens=TokenMap()), units)
        admin = TestClient(w.anonymous)
        for bank in BANKS:
            w.exports[bank] = admin.get("/export", params={"bank": bank}).content
        yield w
    finally:
        svc.close()


def tokens(**scopes: Caller) -> dict[str, Caller]:
    return {TOKEN: scopes.get("token", Caller("agent")), OTHER: Caller("other", ("*",), frozenset(VERBS))}


def http(served: Served, tm: dict[str, Caller]) -> TestClient:
    """An HTTP client, as tm's TOKEN, of the app over the already open service (which outlives it)."""
    return TestClient(served.app, headers={"Authorization": f"Bearer {served.login(tm)}"})


def renamed(export: bytes, bank: str) -> bytes:
    """An export stream whose bank row names `bank` (what the import would write to)."""
    lines = export.splitlines()
    head = json.loads(lines[0])
    head["bank"] = bank
    rows = [json.loads(raw) for raw in lines[1:] if b'"trailer"' not in raw[:12]]
    for obj in rows:
        if obj["table"] == "banks":
            obj["row"]["name"] = bank
    return fuzz_import.seal(head, rows)     # with the trailer an exporter would write for it


# -- requests: every HTTP endpoint and every MCP tool, as (verb, build) ------------------------------

HttpCall = Callable[[TestClient, str, World], httpx.Response]


def first_unit(bank: str) -> int:
    """The first unit seed() wrote into the bank (ids from 10^7, three a bank, in BANKS' order)."""
    return 10_000_000 + 3 * list(BANKS).index(bank) if bank in BANKS else 1


def unit_of(w: World, bank: str) -> int:
    """A unit of the bank (the lowest id): one of several, so forgetting it is not forgetting everything."""
    return min(w.units.get(bank) or {1})


HTTP: dict[str, tuple[str, HttpCall]] = {
    "recall": ("read", lambda c, b, w: c.post("/recall", json={"bank": b, "query": f"how does {BANKS.get(b, b)} deploy"})),
    "rooms": ("read", lambda c, b, w: c.get("/rooms", params={"bank": b})),
    "tags": ("read", lambda c, b, w: c.get("/tags", params={"bank": b, "q": "*"})),
    "stats": ("read", lambda c, b, w: c.get("/stats", params={"bank": b})),
    "state_get": ("read", lambda c, b, w: c.get("/state", params={"bank": b, "room": f"room-{BANKS.get(b, b)}",
                                                                   "key": f"key-{BANKS.get(b, b)}"})),
    # the console's browsing endpoints
    "floor_plan": ("read", lambda c, b, w: c.get("/floor-plan", params={"bank": b})),
    "units": ("read", lambda c, b, w: c.get("/units", params={"bank": b})),
    "merges": ("read", lambda c, b, w: c.get("/merges", params={"bank": b, "include_decided": True})),
    "state_keys": ("read", lambda c, b, w: c.get("/state/keys", params={"bank": b})),
    "state_history": ("read", lambda c, b, w: c.get("/state/history", params={
        "bank": b, "room": f"room-{BANKS.get(b, b)}", "key": f"key-{BANKS.get(b, b)}"})),
    "retain": ("write", lambda c, b, w: c.post("/retain", json={
        "bank": b, "content": f"{BANKS.get(b, b)} also runs canaries ({uuid.uuid4().hex[:8]}).",
        "room": f"room-{BANKS.get(b, b)}"})),
    "state_put": ("write", lambda c, b, w: c.put("/state", json={
        "bank": b, "room": f"room-{BANKS.get(b, b)}", "key": f"key-{BANKS.get(b, b)}-{uuid.uuid4().hex[:8]}",
        "value": BANKS.get(b, b), "expected_version": 0})),
    "export": ("export", lambda c, b, w: c.get("/export", params={"bank": b})),
    # the destructive verbs, as dry runs: they count and change nothing
    "forget": ("forget", lambda c, b, w: c.post("/forget", json={"bank": b, "unit_ids": [unit_of(w, b)]})),
    "forget_unit": ("forget", lambda c, b, w: c.delete(f"/units/{unit_of(w, b)}", params={"bank": b})),
    "forget_state": ("forget", lambda c, b, w: c.delete("/state", params={
        "bank": b, "room": f"room-{BANKS.get(b, b)}", "key": f"key-{BANKS.get(b, b)}"})),
    "history": ("read", lambda c, b, w: c.get(f"/units/{unit_of(w, b)}/history", params={"bank": b})),
    "correct": ("write", lambda c, b, w: c.patch(f"/units/{unit_of(w, b)}", json={
        "bank": b, "text": f"{BANKS.get(b, b)} note: the team deploys with tool {uuid.uuid4().hex[:8]}.",
        "reason": "a scope probe"})),
    "retention": ("read", lambda c, b, w: c.get("/retention", params={"bank": b})),
    "set_retention": ("admin", lambda c, b, w: c.put("/retention", json={
        "bank": b, "keep": "P3650D", "room": f"room-{BANKS.get(b, b)}"})),
    # Into an existing bank its own export (skip: nothing changes); into a missing one an empty bank.
    "import": ("import", lambda c, b, w: c.post("/import", params={"on_conflict": "skip"},
                                                content=w.exports[b] if b in w.exports else renamed(w.exports["gamma"], b),
                                                headers=NDJSON)),
}

MCP: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "memory_recall": ("read", lambda b: {"bank": b, "query": f"how does {BANKS.get(b, b)} deploy"}),
    "memory_rooms": ("read", lambda b: {"bank": b}),
    "memory_tags": ("read", lambda b: {"bank": b, "pattern": "*"}),
    "memory_state_get": ("read", lambda b: {"bank": b, "room": f"room-{BANKS.get(b, b)}", "key": f"key-{BANKS.get(b, b)}"}),
    "memory_session_start": ("read", lambda b: {"bank": b}),
    "memory_retain": ("write", lambda b: {"bank": b, "content": f"{BANKS.get(b, b)} pins versions ({uuid.uuid4().hex[:8]})."}),
    "memory_state_put": ("write", lambda b: {"bank": b, "room": f"room-{BANKS.get(b, b)}",
                                             "key": f"key-{uuid.uuid4().hex[:8]}", "value": BANKS.get(b, b),
                                             "expected_version": 0}),
    "memory_history": ("read", lambda b: {"bank": b, "unit_id": first_unit(b)}),
    "memory_forget": ("forget", lambda b: {"bank": b, "unit_ids": [first_unit(b)]}),      # a dry run
    "memory_correct": ("write", lambda b: {"bank": b, "unit_id": first_unit(b), "reason": "a scope probe",
                                           "text": f"{BANKS.get(b, b)} note: tool {uuid.uuid4().hex[:8]}."}),
}


@dataclass
class Answer:
    """One response, interface-independent: ok, status (HTTP; MCP: 200 or the error), body."""

    ok: bool
    status: int
    body: Any
    raw: str


def http_answer(r: httpx.Response) -> Answer:
    if r.headers.get("content-type", "").startswith("application/x-ndjson"):
        return Answer(r.status_code == 200, r.status_code, [json.loads(x) for x in r.content.splitlines()], r.text)
    return Answer(r.status_code == 200, r.status_code, r.json(), r.text)


def mcp_answer(result: Any) -> Answer:
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        body = json.loads(text[text.index("{"):])
        code = Code(body["code"])
        assert body.pop("kind") == code.kind, body          # the rest is the body HTTP sends
        return Answer(False, CODES[code].status, body, text)     # HTTP's status for the code
    body = result.structured_content if result.structured_content is not None else json.loads(text)
    return Answer(True, 200, body, text + json.dumps(body))


def mcp_calls(served: Served, tm: dict[str, Caller], calls: list[tuple[str, dict[str, Any]]]) -> list[Answer]:
    """Call MCP tools through the streamable-HTTP app (in process), as tm's TOKEN."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    token = served.login(tm)
    server = served.mcp
    app = http_app(server, served.tokens)      # each app runs a session manager of its own

    async def go() -> list[Answer]:
        out = []
        async with (server.session_manager.run(),
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766",
                                      headers={"Authorization": f"Bearer {token}"}, timeout=120) as h,
                    Client(streamable_http_client("http://127.0.0.1:8766/mcp", http_client=h)) as client):
            for tool, args in calls:
                out.append(mcp_answer(await client.call_tool(tool, args)))
        return out

    return anyio.run(go)


def foreign_leaks(answer: Answer, w: World, caller: Caller) -> list[str]:
    """What of the banks out of the caller's reach this answer carries: markers, unit ids."""
    leaks = [f"marker of {b}" for b, mark in BANKS.items() if not caller.reaches(b) and mark in answer.raw]
    foreign = set().union(*(ids for b, ids in w.units.items() if not caller.reaches(b)))

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, int) and not isinstance(x, bool) and x in foreign:
            leaks.append(f"unit id {x}")

    walk(answer.body)
    return leaks


def expected(caller: Caller, bank: str, verb: str) -> tuple[int, dict[str, Any] | None]:
    """What a request must get: out of reach = unknown bank; a verb not granted = 403; a bank that
    does not exist = unknown bank; else 200."""
    if not caller.reaches(bank):
        return 404, unknown_bank(bank).as_dict()
    if verb not in caller.can:
        return 403, None
    if bank not in BANKS:
        return 404, unknown_bank(bank).as_dict()
    return 200, None


def check(answer: Answer, caller: Caller, bank: str, verb: str, w: World, what: str) -> None:
    status, body = expected(caller, bank, verb)
    assert answer.status == status, (what, bank, caller, answer.raw[:300])
    if body is not None:
        assert {k: answer.body.get(k) for k in body} == body, (what, answer.body)
    if status == 403:
        assert (answer.body["code"], answer.body["field"]) == ("RC006", "authorization"), (what, answer.body)
        assert verb in answer.body["error"], (what, answer.body)
    assert not foreign_leaks(answer, w, caller), (what, bank, caller, foreign_leaks(answer, w, caller))


# -- the token file -----------------------------------------------------------------------------------

def test_a_token_written_the_old_way_keeps_every_bank_and_every_verb() -> None:
    t1, t2 = "a" * 20, "b" * 20
    for text in (f"{t1} alice\n{t2}=bob", f"{t1} alice,{t2} bob", json.dumps({t1: "alice", t2: "bob"})):
        tm = TokenMap.from_env({"RCLL_TOKENS": text})
        alice = tm.caller_for(f"Bearer {t1}")
        assert alice.agent == "alice" and alice.banks == ("*",) and alice.can == frozenset(VERBS), text
        assert tm.agent_for(f"Bearer {t2}") == "bob"


def test_a_scoped_token_names_its_banks_and_verbs_in_either_form(tmp_path: Any) -> None:
    t1, t2, t3 = "a" * 20, "b" * 20, "c" * 20
    lines = (f"# token  agent  banks  verbs\n{t1} ci-bot banks=team-a,team-a-* can=read,write\n"
             f"{t2} auditor can=read,export\n{t3} admin banks=* can=all\n")
    path = tmp_path / "tokens"
    path.write_text(lines)
    as_json = json.dumps({t1: {"agent": "ci-bot", "banks": ["team-a", "team-a-*"], "can": ["read", "write"]},
                          t2: {"agent": "auditor", "can": ["read", "export"]},
                          t3: {"agent": "admin", "banks": ["*"], "can": ["all"]}})
    inline = ";".join(line for line in lines.splitlines() if not line.startswith("#"))
    for env in ({"RCLL_TOKENS_FILE": str(path)}, {"RCLL_TOKENS": as_json}, {"RCLL_TOKENS": inline}):
        tm = TokenMap.from_env(env)
        bot = tm.caller_for(f"Bearer {t1}")
        assert (bot.agent, bot.banks, bot.can) == ("ci-bot", ("team-a", "team-a-*"), {"read", "write"}), env
        assert [bot.reaches(b) for b in ("team-a", "team-a-ui", "team-ab", "team-b")] == [True, True, False, False]
        assert tm.caller_for(f"Bearer {t2}").can == {"read", "export"}
        assert tm.caller_for(f"Bearer {t2}").reaches("anything")
        assert tm.caller_for(f"Bearer {t3}").can == frozenset(VERBS)


@pytest.mark.parametrize("text, field, words", [
    ("a" * 20 + " bot can=read,fly", "RCLL_TOKENS line 1", "unknown verb 'fly'"),
    ("a" * 20 + " bot banks=team[a]", "RCLL_TOKENS line 1", "not a bank name or pattern"),
    ("a" * 20 + " banks=a", "RCLL_TOKENS line 1", "expected '<token> <agent>"),
    ("a" * 20 + " bot banks=", "RCLL_TOKENS line 1", "banks is empty"),
    ("short bot can=read", "RCLL_TOKENS", "shorter than 16"),
    (json.dumps({"a" * 20: {"agent": "bot", "bank": ["x"]}}), "RCLL_TOKENS", "unknown key 'bank'"),
    (json.dumps({"a" * 20: {"agent": "bot", "can": []}}), "RCLL_TOKENS", "can is empty"),
])
def test_a_bad_token_entry_is_refused_naming_the_fix(text: str, field: str, words: str) -> None:
    with pytest.raises(RcllError) as e:
        TokenMap.from_env({"RCLL_TOKENS": text})
    assert e.value.field == field and words in e.value.message and e.value.hint, e.value


# -- every HTTP endpoint, every MCP tool: allowed, wrong bank, wrong verb -----------------------------

def test_every_http_endpoint_checks_the_bank_and_the_verb(world: World) -> None:
    for name, (verb, call) in HTTP.items():
        only = Caller("agent", ("alpha", "alpha-*"), frozenset({verb}))
        c = http(world.served, tokens(token=only))
        check(http_answer(call(c, "alpha", world)), only, "alpha", verb, world, name)       # allowed
        check(http_answer(call(c, "alpha-2", world)), only, "alpha-2", verb, world, name)   # by pattern
        beta = http_answer(call(c, "beta", world))                                         # wrong bank
        check(beta, only, "beta", verb, world, name)
        # Out of reach is word for word what the database says of a bank that does not exist.
        if name != "import":        # (an import creates a missing bank)
            missing = http_answer(call(http(world.served, tokens()), "delta", world))
            same = json.loads(beta.raw.replace("beta", "delta"))
            assert (missing.status, missing.body) == (beta.status, same), name
        but = Caller("agent", ("alpha", "alpha-*"), frozenset(VERBS) - {verb})            # wrong verb
        wrong = http_answer(call(http(world.served, tokens(token=but)), "alpha", world))
        check(wrong, but, "alpha", verb, world, name)
        assert wrong.status == 403 and f"no {verb} scope" in wrong.body["error"], name


def test_an_import_goes_only_to_a_bank_in_reach_whatever_its_header_says(world: World) -> None:
    alpha_only = Caller("agent", ("alpha",), frozenset({"import", "read"}))
    c = http(world.served, tokens(token=alpha_only))
    # The bank row decides where an import writes; a header naming an allowed bank changes nothing.
    sneaky = renamed(world.exports["beta"], "beta").replace(b'"bank": "beta"', b'"bank": "alpha"', 1)
    assert json.loads(sneaky.splitlines()[0])["bank"] == "alpha"
    for body in (sneaky, world.exports["beta"], renamed(world.exports["gamma"], "delta")):
        for policy in ("error", "skip", "replace"):
            r = c.post("/import", params={"on_conflict": policy}, content=body, headers=NDJSON)
            bank = "delta" if b'"name": "delta"' in body else "beta"
            assert (r.status_code, r.json()) == (404, unknown_bank(bank).as_dict()), (policy, r.text)
    with psycopg.connect(world.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM rcll.banks WHERE name = 'delta'").fetchone() == (0,)
    assert c.post("/import", params={"on_conflict": "skip"}, content=world.exports["alpha"],
                  headers=NDJSON).status_code == 200


def test_every_mcp_tool_checks_the_bank_and_the_verb(world: World) -> None:
    for name, (verb, args) in MCP.items():
        only = Caller("agent", ("alpha*",), frozenset({verb}))
        allowed, by_pattern, beta = mcp_calls(world.served, tokens(token=only),
                                              [(name, args("alpha")), (name, args("alpha-2")), (name, args("beta"))])
        check(allowed, only, "alpha", verb, world, name)
        check(by_pattern, only, "alpha-2", verb, world, name)
        check(beta, only, "beta", verb, world, name)
        (missing,) = mcp_calls(world.served, tokens(), [(name, args("delta"))])
        same = json.loads(json.dumps(beta.body).replace("beta", "delta"))
        assert (missing.ok, missing.body) == (beta.ok, same), name
        but = Caller("agent", ("alpha*",), frozenset(VERBS) - {verb})
        (wrong,) = mcp_calls(world.served, tokens(token=but), [(name, args("alpha"))])
        check(wrong, but, "alpha", verb, world, name)
    # A tool called without a bank uses the server's default bank, which is checked like any other.
    only = Caller("agent", ("alpha",), frozenset(VERBS))
    (default,) = mcp_calls(world.served, tokens(token=only), [("memory_rooms", {})])
    assert (default.status, default.body) == (404, unknown_bank("default").as_dict())


def test_the_console_lists_only_the_banks_in_reach_and_merges_need_admin(world: World) -> None:
    some = Caller("person:dana", ("alpha*",), frozenset({"read"}))
    c = http(world.served, tokens(token=some))
    assert sorted(b["name"] for b in c.get("/banks").json()["banks"]) == ["alpha", "alpha-2"]
    everything = TestClient(world.anonymous)
    assert {"beta", "gamma"} <= {b["name"] for b in everything.get("/banks").json()["banks"]}
    decide = {"from_room": "room-qxalphaq", "decision": "approve"}
    r = c.post("/merges/decide", json={"bank": "alpha", **decide})
    assert r.status_code == 403 and "no admin scope" in r.json()["error"], r.text
    r = c.post("/merges/decide", json={"bank": "beta", **decide})
    assert (r.status_code, r.json()) == (404, unknown_bank("beta").as_dict())
    admin = http(world.served, tokens(token=Caller("person:dana", ("alpha",), frozenset({"admin"}))))
    r = admin.post("/merges/decide", json={"bank": "alpha", **decide})    # past the scope: no merge pending
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (404, "RC003", "from_room"), r.text


def test_a_read_only_server_refuses_writes_even_to_a_token_that_may_write(world: World,
                                                                          login_role: MakeLoginRole) -> None:
    ro = Memory(login_role(member_of="rcll_reader").dsn, read_only=True)
    try:
        writer = Caller("agent", ("*",), frozenset(VERBS))
        c = http(Served(ro), tokens(token=writer))
        for name in ("retain", "state_put", "import", "forget", "forget_unit", "forget_state", "correct",
                     "set_retention"):
            r = HTTP[name][1](c, "alpha", world)
            assert (r.status_code, r.json()["code"], r.json()["field"]) == (403, "RC006", "read_only"), (name, r.text)
        assert HTTP["recall"][1](c, "alpha", world).status_code == 200
    finally:
        ro.close()


def test_without_tokens_every_bank_and_every_verb_answers_as_before(world: World) -> None:
    c = TestClient(world.anonymous)
    for name, (_, call) in HTTP.items():
        for bank in ("alpha", "beta"):
            assert call(c, bank, world).status_code == 200, (name, bank)
    assert HTTP["rooms"][1](c, "delta", world).json() == unknown_bank("delta").as_dict()


# -- the property: generated tokens, banks and requests; nothing crosses a scope ----------------------

def test_no_response_ever_carries_a_unit_of_a_bank_out_of_reach(world: World) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    patterns = st.sampled_from(["alpha", "alpha-2", "alpha*", "alpha-?", "beta", "b*", "*a", "?eta", "gamma*",
                                "*", "delta", "zeta*"])
    callers = st.builds(lambda banks, can: Caller("agent", tuple(banks), frozenset(can)),
                        st.lists(patterns, min_size=1, max_size=3, unique=True),
                        st.sets(st.sampled_from(VERBS), min_size=1))
    banks = st.sampled_from([*BANKS, *MISSING])
    requests = st.lists(st.tuples(st.sampled_from(["http", "mcp"]), st.sampled_from([*HTTP, *MCP]), banks),
                        min_size=1, max_size=4)
    seen: dict[str, int] = {}
    counter = itertools.count()

    @settings(max_examples=30, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(caller=callers, reqs=requests)
    def run(caller: Caller, reqs: list[tuple[str, str, str]]) -> None:
        tm = tokens(token=caller)
        c = http(world.served, tm)
        mcp: list[tuple[str, str, dict[str, Any]]] = []
        for _, name, bank in reqs:
            if name in HTTP:
                verb, call = HTTP[name]
                if name == "import" and bank not in BANKS and caller.reaches(bank) and "import" in caller.can:
                    continue        # would create the bank: a write, not a probe
                answer = http_answer(call(c, bank, world))
                check(answer, caller, bank, verb, world, f"HTTP {name}")
                if name == "retain" and answer.ok:
                    world.units[bank] |= set(answer.body["unit_ids"])
            else:
                mcp.append((name, bank, MCP[name][1](bank)))
            key = f"{name}:{expected(caller, bank, (HTTP.get(name) or MCP[name])[0])[0]}"
            seen[key] = seen.get(key, 0) + 1
        if mcp:
            for (name, bank, _), answer in zip(mcp, mcp_calls(world.served, tm, [(n, a) for n, _, a in mcp])):
                check(answer, caller, bank, MCP[name][0], world, f"MCP {name}")
                if name == "memory_retain" and answer.ok:
                    world.units[bank] |= set(answer.body["unit_ids"])
        next(counter)

    run()
    # The generator reached every kind of answer: allowed, out of reach, verb refused, missing bank.
    assert {k.split(":")[1] for k in seen} == {"200", "403", "404"}, seen
    assert next(counter) > 10
