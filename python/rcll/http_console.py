"""The console: a page served at / from files inside the package, and the read endpoints it browses with.

Endpoints: /whoami (what the page may show: auth, identity, scope, read-only), /banks,
/floor-plan, /units, /merges, /merges/decide, /state/keys, /state/history. Identity and scope are
the bearer token's, as for every other endpoint (rcll.auth): a bank outside the scope is an
unknown bank; nothing in a request names its author.

Who may decide a room merge: a person, never an agent, with the admin verb on the bank. On a
server without tokens the person at the console is the operator; on a server with tokens, a token
mapped to person:<name> (RCLL_TOKENS). The decision runs with no agent set and is audited with the
person's name (rcll.decide_room_merge). A read-only server shows no write control at all.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from rcll.auth import Caller, Forbidden, TokenMap
from rcll.errors import Code, status
from rcll.memory import Memory, RecallResult
from rcll.results import plain

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
PERSON = "person:"
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
# Everything the page loads comes from this server; inline script and style are refused.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class DecideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    from_room: str = Field(min_length=1, max_length=512)
    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=2000)


def _tokens(request: Request) -> TokenMap:
    tokens: TokenMap = request.app.state.tokens
    return tokens


def _caller(request: Request) -> Caller:
    """The bearer token's agent and scope (rcll.auth); the anonymous caller on a server without tokens."""
    return _tokens(request).caller_for(request.headers.get("authorization"))


Agent = Annotated[Caller, Depends(_caller)]     # who calls: agent and scope (banks, verbs)
Bank = Annotated[str, Query(min_length=1, max_length=128, pattern=NAME, description="bank name")]
Names = Annotated[list[str] | None, Query(max_length=256)]
Text = Annotated[str | None, Query(max_length=512)]


def person_of(tokens: TokenMap, agent: str | None) -> str | None:
    """The person a caller is, or None for an agent: the operator on a server without tokens
    ("" - the audit then names the server's database role), else a person:<name> token's name."""
    if not tokens.enabled:
        return ""
    if agent is not None and agent.startswith(PERSON) and agent[len(PERSON):].strip():
        return agent[len(PERSON):].strip()
    return None


def explain(result: RecallResult, budget: int | None,
            count: Callable[[list[str]], list[int]] | None = None) -> dict[str, Any]:
    """What POST /recall adds with explain: true - from the RecallResult recall computed: each
    returned fact's final rank, every ranked candidate the token budget (or the limit) left out,
    the budget, and the total of the phase timings. count: the token counter, for the candidates
    the cut skipped without counting them (rcll.budget.cut_counting leaves their tokens 0)."""
    kept = {f.unit_id for f in result.facts}
    rank = {f.unit_id: i for i, f in enumerate(result.ranked, 1)}
    left = [(i, f) for i, f in enumerate(result.ranked, 1) if f.unit_id not in kept]
    unread = [f.text for _, f in left if f.tokens == 0]
    counted = iter(count(unread) if count is not None and unread else [])
    cut = [{"rank": i, **{k: v for k, v in plain(f).items() if k != "context"},
            **({"tokens": next(counted)} if count is not None and unread and f.tokens == 0 else {})}
           for i, f in left]
    return {"budget": budget, "ranks": [rank.get(f.unit_id) for f in result.facts], "cut": cut,
            "timings_ms_total": round(result.timings.total, 3)}


def _static(name: str, media_type: str) -> Response:
    body = (resources.files("rcll") / "console" / name).read_bytes()
    return Response(body, media_type=media_type,
                    headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                             "X-Content-Type-Options": "nosniff"})


def router(memory: Memory) -> APIRouter:
    """The console's routes over `memory` (each request acts as its token's agent)."""
    r = APIRouter()

    def as_caller(who: Caller) -> Memory:
        return memory.as_caller(who)     # every verb checks the caller's scope

    @r.get("/", include_in_schema=False)
    def index() -> Response:
        return _static("index.html", "text/html; charset=utf-8")

    @r.get("/console/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC:
            return JSONResponse(status_code=status(Code.NOT_FOUND),
                                content={"code": Code.NOT_FOUND.value, "field": "path", "error": "Not Found", "hint": None})
        return _static(name, STATIC[name])

    @r.get("/whoami")
    def whoami(request: Request) -> dict[str, Any]:
        """What the console may show the caller: whether a token is required and accepted, the
        agent it names, whether the server is read-only and whether the caller may decide merges.
        Without a token on a server that needs one this answers (authenticated false); a wrong
        token is a 401."""
        tokens = _tokens(request)
        header = request.headers.get("authorization")
        authenticated = not tokens.enabled or bool(header)
        caller = tokens.caller_for(header) if authenticated else None
        person = person_of(tokens, caller.agent) if caller is not None else None
        return {"auth_required": tokens.enabled, "authenticated": authenticated,
                "agent": caller.agent if caller else None, "person": person,
                "banks": list(caller.banks) if caller else [], "can": sorted(caller.can) if caller else [],
                "read_only": memory.read_only,
                "can_decide_merges": caller is not None and person is not None and "admin" in caller.can
                and not memory.read_only}

    @r.get("/banks")
    def banks(who: Agent) -> dict[str, Any]:
        return {"banks": [b.as_dict() for b in as_caller(who).banks()]}

    @r.get("/floor-plan")
    def floor_plan(bank: Bank, who: Agent) -> dict[str, Any]:
        """Every room of a bank with its unit count, status, aliases, and its units by hall,
        layer and author; a room named null holds the units filed in no room."""
        return {"bank": bank, "rooms": [x.as_dict() for x in as_caller(who).floor_plan(bank=bank)]}

    @r.get("/units")
    def units(bank: Bank, who: Agent, room: Names = None, hall: Names = None, layer: Names = None,
              author: Names = None, tag: Names = None, thread: Names = None,
              from_: Annotated[datetime | None, Query(alias="from")] = None,
              to: Annotated[datetime | None, Query()] = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> dict[str, Any]:
        """Browse units (newest first) by room (aliases followed), hall, layer, author, tag (all
        given), thread and [from, to); each filter may repeat. total counts every match."""
        page = as_caller(who).units(bank=bank, rooms=room, halls=hall, layers=layer, authors=author, tags_all=tag,
                                    threads=thread, time_from=from_, time_to=to, limit=limit, offset=offset)
        return {"bank": bank, **page.as_dict()}

    @r.get("/merges")
    def merges(bank: Bank, who: Agent, include_decided: bool = False) -> dict[str, Any]:
        """Room merge proposals awaiting a person (and, with include_decided, the decided ones)."""
        rows = as_caller(who).merge_proposals(bank=bank, include_decided=include_decided)
        return {"bank": bank, "proposals": [p.as_dict() for p in rows]}

    @r.post("/merges/decide")
    def decide(req: DecideRequest, request: Request, who: Agent) -> Any:
        """A person with the admin verb on the bank approves or rejects a pending merge (an agent
        is refused: 403). Audited with the person's name."""
        memory.check_writable()
        person = person_of(_tokens(request), who.agent)
        if person is None:
            raise Forbidden("authorization", f"agent {who.agent!r} cannot decide a room merge",
                            "a person decides: use a token mapped to person:<name>")
        # As no agent (the person is audited), within the token's scope: admin on that bank.
        moved = as_caller(who).as_agent(None).decide_merge(req.from_room, approve=req.decision == "approve",
                                                           reason=req.reason, person=person or None, bank=req.bank)
        return {"bank": req.bank, "from_room": req.from_room, "decision": req.decision, "moved": moved}

    @r.get("/state/keys")
    def state_keys(bank: Bank, who: Agent, room: Names = None) -> dict[str, Any]:
        """Every keyed state of a bank (or of the rooms named, exactly) at its current version."""
        return {"bank": bank, "keys": [k.as_dict() for k in as_caller(who).state_keys(bank=bank, rooms=room)]}

    @r.get("/state/history")
    def state_history(bank: Bank, who: Agent, room: Annotated[str, Query(min_length=1, max_length=512)],
                      key: Annotated[str, Query(min_length=1, max_length=512)]) -> dict[str, Any]:
        """Every version of one room's keyed state, newest first, with its provenance."""
        versions = as_caller(who).state_history(room, key, bank=bank)
        return {"bank": bank, "room": room, "key": key, "versions": [v.as_dict() for v in versions]}

    return r
