"""HTTP API (OpenAPI at /openapi.json): retain, recall, rooms, tags, stats, state, export, import, health,
and the destructive verbs: forget (POST /forget, DELETE /units|documents|threads/..., DELETE /state,
DELETE /banks/{bank}), correct (PATCH /units/{id}), history, retention (GET and PUT /retention).

Identity for the author axis comes from authentication only: a bearer token mapped to an agent
(RCLL_TOKENS / RCLL_TOKENS_FILE, see rcll.auth). The token's scope decides what it reaches: a bank
outside it answers 404 exactly as a bank that does not exist; a verb it does not grant, 403. The server sets rcll.agent for each transaction;
nothing in a request body can name the author. Every error body is {code, field, error, hint}; the
status is the code's (rcll.errors.CODES, the one table; docs/errors.md).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import psycopg
import uvicorn
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rcll import models
from rcll.auth import Caller, Forbidden, TokenMap
from rcll.errors import CODES, Code, RcllError, from_database, status
from rcll.http_answers import (
    HealthAnswer,
    HistoryResponse,
    ImportAnswer,
    RecallAnswer,
    RoomsAnswer,
    StateAnswer,
    StatsAnswer,
    TagsAnswer,
    answer,
)
from rcll.http_console import explain
from rcll.http_console import router as console_router
from rcll.http_guard import Guard, GuardConfig
from rcll.memory import Memory, bounded_model_work
from rcll.request import (
    ANNOTATIONS,
    FORGET_ANNOTATIONS,
    FORGET_PARAMETERS,
    MAX_DEADLINE_MS,
    PARAMETERS,
    ForgetRequest,
    RecallRequest,
)
from rcll.settings import DEFAULTS, Settings
from rcll.sqlsource import extension_version
from rcll.upkeep import Upkeeper
from rcll.validate import MAX_DURATION, MAX_QUERY, duration_text

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
ARRIVED = "rcll.arrived"   # the ASGI scope key holding a request's arrival (time.perf_counter())


class _Arrival:
    """Stamps each HTTP request with its arrival, before the body is read and before a sync
    endpoint waits for a worker thread: recall's deadline counts from there (the waits included)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[ARRIVED] = time.perf_counter()
        await self.app(scope, receive, send)


class ErrorBody(BaseModel):
    code: str = Field(description="RCLL's error code (docs/errors.md); the status follows from it")
    field: str | None
    error: str
    hint: str | None = None


# The documented error statuses: each with the codes that answer with it (rcll.errors.CODES).
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody, "description": "; ".join(f"{c.value} {m.text}" for c, m in CODES.items() if m.status == s)}
    for s in sorted({m.status for m in CODES.values()})
}


def _not_a_flag(value: Any) -> Any:
    if isinstance(value, bool):      # pydantic would read true as one second
        raise ValueError("a time span is an ISO 8601 duration (P90D, PT12H) or a number of seconds, not true/false")
    return value


# A time span as every interface spells it: an ISO 8601 duration or a number of seconds (rcll.validate.duration_arg).
Span = Annotated[timedelta, BeforeValidator(_not_a_flag), Field(gt=timedelta(0), le=MAX_DURATION)]


class RetainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    content: str = Field(min_length=1)
    source: str | None = Field(default=None, max_length=512)
    occurred_at: datetime | None = None
    room: str | None = Field(default=None, max_length=512)
    thread: str | None = Field(default=None, max_length=512)
    tags: list[str] = Field(default_factory=list, max_length=256)
    hall: str | None = Field(default=None, max_length=512)
    layer: str | None = Field(default=None, pattern="^L[012]$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = Field(default=None, description="when the document's units expire: recall "
                                        "stops returning them at once, the periodic jobs forget them")
    ttl: Span | None = Field(default=None, description=(
        "time to live instead of expires_at: an ISO 8601 duration (P30D, PT12H) or a number of seconds"))


class RetainResponse(BaseModel):
    document_id: int
    unit_ids: list[int]
    created: bool
    mode: str


def _recall_body() -> type[BaseModel]:
    """POST /recall's body: every RecallRequest field (rcll.request.PARAMETERS, so none is left
    out), plus explain. The schema checks shapes; RecallRequest checks the values."""
    fields: dict[str, Any] = {}
    for p in PARAMETERS:
        if p.name == "query":
            fields[p.name] = (str, Field(min_length=1, max_length=MAX_QUERY, description=p.help))
        elif p.name == "bank":
            fields[p.name] = (str, Field(min_length=1, max_length=128, pattern=NAME, description=p.help))
        elif p.name == "deadline_ms":
            # Not given: the server's settings.deadline_ms (recall_endpoint: the factory is only its type).
            fields[p.name] = (int, Field(default_factory=lambda: DEFAULTS.deadline_ms, ge=1, le=MAX_DEADLINE_MS, description=(
                "latency budget from the request's arrival (waits for a thread, a model slot and a connection "
                "count): the cross-encoder reads candidates in fused order while time is left (default 1000, "
                "RCLL_DEADLINE_MS); the response says how deep it read (rerank_depth_reached, "
                "context_depth_reached) and deadline_cut. Passed before the query is embedded or the candidates "
                "fetched: 503 with Retry-After at once")))
        else:
            default = dict(p.default) if isinstance(p.default, Mapping) else p.default
            fields[p.name] = (ANNOTATIONS[p.kind], Field(default=default, description=p.help))
    fields["explain"] = (bool, Field(default=False, description="add each fact's final rank, what the budget cut, "
                                     "the budget and the total time (rcll.http_console.explain)"))
    model: type[BaseModel] = create_model("RecallBody", __config__=ConfigDict(extra="forbid"), **fields)
    return model


if TYPE_CHECKING:
    RecallBody = BaseModel
else:
    RecallBody = _recall_body()


def recall_request(body: BaseModel, deadline_ms: int = DEFAULTS.deadline_ms) -> RecallRequest:
    """The one place HTTP builds a recall: the body's fields, explain aside; deadline_ms when the
    body gives none (the server's settings.deadline_ms)."""
    fields = body.model_dump(exclude={"explain"})
    if "deadline_ms" not in body.model_fields_set:
        fields["deadline_ms"] = deadline_ms
    return RecallRequest(**fields)


class StatePut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    room: str = Field(min_length=1, max_length=512)
    key: str = Field(min_length=1, max_length=512)
    value: Any
    expected_version: int = Field(default=0, ge=0, le=2**31 - 1)


class StatePutResponse(BaseModel):
    room: str
    key: str
    version: int


# -- forget, correct, retention ---------------------------------------------------------------------

# The DELETE routes' query parameters say what ForgetRequest's fields say.
_FORGET = {p.name: p for p in FORGET_PARAMETERS}
DRY_RUN, PURGE, REASON = _FORGET["dry_run"].help, _FORGET["purge"].help, _FORGET["reason"].help
TEXT = 512


def _forget_body() -> type[BaseModel]:
    """POST /forget's body: every ForgetRequest field (rcll.request.FORGET_PARAMETERS, so none is
    left out). The schema checks shapes; ForgetRequest checks the values."""
    fields: dict[str, Any] = {}
    for p in FORGET_PARAMETERS:
        if p.name == "bank":
            fields[p.name] = (str, Field(min_length=1, max_length=p.limit, pattern=NAME, description=p.help))
        elif p.kind == "text":
            fields[p.name] = (str | None, Field(default=None, max_length=p.limit, description=p.help))
        elif p.kind == "ids":
            fields[p.name] = (list[int] | None, Field(default=None, max_length=100_000, description=p.help))
        elif p.kind == "int":
            fields[p.name] = (int | None, Field(default=None, ge=1, description=p.help))
        else:
            fields[p.name] = (FORGET_ANNOTATIONS[p.kind], Field(default=p.default, description=p.help))
    model: type[BaseModel] = create_model("ForgetRequest", __config__=ConfigDict(extra="forbid"),
                                          __doc__="POST /forget: selectors (several must all match), or everything = "
                                                  "the bank's name.", **fields)
    return model


if TYPE_CHECKING:
    ForgetBody = BaseModel
else:
    ForgetBody = _forget_body()


def forget_request(body: BaseModel) -> ForgetRequest:
    """The one place HTTP builds a forget: the body's fields."""
    return ForgetRequest(**body.model_dump())


class ForgetResponse(BaseModel):
    dry_run: bool = Field(description="true: nothing changed, counts say what would go")
    counts: dict[str, int] = Field(description="per kind: documents, units, embeddings, lexicon_rows, links, ...")
    purged: list[str] = Field(description="the tables vacuumed after the commit (purge)")


class CorrectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    text: str = Field(min_length=1, max_length=1 << 20, description="the unit's new text")
    reason: str = Field(min_length=1, max_length=1000, description="why it is corrected (kept in its history)")


class RetentionPut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    keep: Span | None = Field(description=(
        "how long after they were retained the units are kept: an ISO 8601 duration (P90D, PT12H) or a number "
        "of seconds; null removes the policy"))
    room: str | None = Field(default=None, max_length=TEXT, description="only this room's units (null: any)")
    hall: str | None = Field(default=None, max_length=TEXT, description="only this hall's units (null: any)")
    layer: str | None = Field(default=None, pattern="^L[012]$", description="only this layer's units (null: any)")


class Policy(BaseModel):
    room: str | None
    hall: str | None
    layer: str | None
    keep: timedelta = Field(description="an ISO 8601 duration")
    keep_seconds: float
    units: int = Field(description="the units it covers")
    expired: int = Field(description="of those, expired and awaiting the periodic sweep")
    created_by: str | None
    created_at: datetime | None


class RetentionResponse(BaseModel):
    bank: str
    policies: list[Policy]


class RetentionPutResponse(BaseModel):
    bank: str
    room: str | None
    hall: str | None
    layer: str | None
    keep: timedelta | None
    changed: int = Field(description="units whose expiry changed")


def policy(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of rcll.retention_policies as JSON: keep as an ISO 8601 duration and in seconds."""
    keep: timedelta = row["keep"]
    return {**{k: row.get(k) for k in ("room", "hall", "layer", "units", "expired", "created_by", "created_at")},
            "keep": duration_text(keep), "keep_seconds": keep.total_seconds()}


def _caller(request: Request) -> Caller:
    """Who the bearer token authenticates: its agent and scope (rcll.auth). On a server without
    tokens, the anonymous caller: no agent, every bank, every verb."""
    tokens: TokenMap = request.app.state.tokens
    return tokens.caller_for(request.headers.get("authorization"))


Who = Annotated[Caller, Depends(_caller)]
Bank = Annotated[str, Query(min_length=1, max_length=128, pattern=NAME, description="bank name")]
DryRun = Annotated[bool, Query(description=DRY_RUN)]
Reason = Annotated[str | None, Query(max_length=1000, description=REASON)]
Purge = Annotated[bool, Query(description=PURGE)]
UnitId = Annotated[int, Path(ge=1, le=2**63 - 1, description="a unit id (recall's facts carry it)")]


def _error_response(e: RcllError) -> JSONResponse:
    """An RcllError as HTTP: the status its code has in rcll.errors.CODES, the body as_dict()."""
    answer = status(e.code)
    headers = ({"WWW-Authenticate": 'Bearer error="insufficient_scope"'} if isinstance(e, Forbidden)
               else {"WWW-Authenticate": "Bearer"} if e.code is Code.UNAUTHENTICATED
               else {"Retry-After": str(getattr(e, "retry_after", 1))} if e.code is Code.UNAVAILABLE else None)
    return JSONResponse(status_code=answer, content=e.as_dict(), headers=headers)


IMPORT_SPOOL_BYTES = 32 << 20    # an import body held in memory up to this, then on disk


def create_app(dsn: str | None = None, *, pool_size: int = 4, service: Memory | None = None,
               tokens: TokenMap | None = None, read_only: bool = False, upkeep_seconds: float = 0,
               host: str | None = None, guard: GuardConfig | None = None,
               settings: Settings | None = None) -> FastAPI:
    """The HTTP API over `service` (default: a Memory on `dsn` with `settings` - None: read from the
    environment, as Memory() does -, opened when the app starts). Every
    endpoint calls the Memory acting as the agent the request's bearer token authenticates. With
    upkeep_seconds > 0 (`rcll serve`: RCLL_UPKEEP_SECONDS, default 300) a read-write, unscoped
    service runs Memory.upkeep() when the app starts and then that often (rcll.upkeep). host: the
    address it is served on; tokens and guard (the Host, Origin and body-size rules,
    rcll.http_guard): default from the service's settings, for that host."""
    svc = service if service is not None else Memory(dsn, settings=settings, read_only=read_only, pool_size=pool_size,
                                                     open=False)
    auth = tokens if tokens is not None else TokenMap.from_settings(svc.settings)
    rules = guard if guard is not None else GuardConfig.from_settings(svc.settings, host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        svc.open()
        keeper = (Upkeeper(svc, upkeep_seconds).start()
                  if upkeep_seconds > 0 and svc.whole_store else None)
        app.state.upkeep = keeper
        try:
            with bounded_model_work(svc.settings):     # over the limit: 503 + Retry-After at once
                yield
        finally:
            if keeper is not None:
                keeper.stop()
            svc.close()

    app = FastAPI(title="RCLL", version=extension_version(), lifespan=lifespan, responses=ERRORS,
                  description="Memory for agent fleets: retain facts, recall them with SQL. Authenticate with "
                              "Authorization: Bearer <token>; the token decides the author of every write.")

    app.state.tokens = auth
    app.state.memory = svc
    if rules.cors_origins:      # no CORS header at all unless the operator names origins
        app.add_middleware(CORSMiddleware, allow_origins=list(rules.cors_origins), allow_credentials=False,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"], allow_headers=["authorization", "content-type"])
    app.add_middleware(Guard, config=rules)    # before the body is read, before authentication
    app.add_middleware(_Arrival)

    @app.exception_handler(RcllError)
    async def rcll_error(request: Request, exc: RcllError) -> JSONResponse:
        return _error_response(exc)      # Busy and DeadlinePassed too: 503 with their Retry-After

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": ".".join(str(p) for p in (e["loc"][1:] if e["loc"] and e["loc"][0] in
                                                        ("body", "query", "path", "header") else e["loc"])) or "body",
                   "error": e["msg"]} for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "error": "invalid request"}
        return JSONResponse(status_code=status(Code.INVALID_INPUT),
                            content={"code": Code.INVALID_INPUT.value, **first,
                                     "hint": "the request schema, field by field, is at /openapi.json", "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own refusals keep their status; the code is the nearest of the table's.
        field = "path" if exc.status_code == 404 else "method" if exc.status_code == 405 else "body"
        code = Code.NOT_FOUND if exc.status_code == 404 else Code.INVALID_INPUT
        return JSONResponse(status_code=exc.status_code,
                            content={"code": code.value, "field": field, "error": str(exc.detail), "hint": None})

    @app.exception_handler(psycopg.Error)
    async def database_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        mapped = from_database(exc, read_only=svc.read_only)
        if mapped is not None:
            return _error_response(mapped)
        # Not the caller's to fix (a bug or an outage): unavailable, with the database's first line.
        return JSONResponse(status_code=status(Code.UNAVAILABLE),
                            content={"code": Code.UNAVAILABLE.value, "field": None, "error": "database error",
                                     "hint": str(exc).strip().splitlines()[0] if str(exc) else None},
                            headers={"Retry-After": "1"})

    @app.get("/health", response_model=None, responses=answer(HealthAnswer))
    def health(request: Request) -> dict[str, Any]:
        """alive, to anyone; the versions, read-only mode and the periodic jobs' state (its last
        error among them) to a caller with a token, or to anyone on a server without tokens."""
        tokens: TokenMap = request.app.state.tokens
        header = request.headers.get("authorization")
        if tokens.enabled and not header:
            return {"status": "alive"}
        tokens.caller_for(header)                # a wrong token: 401, as everywhere
        # upkeep: the periodic jobs of this server (rcll.upkeep), or every_seconds 0 when it runs none
        keeper = getattr(app.state, "upkeep", None)
        return {**svc.health().as_dict(), "upkeep": keeper.status() if keeper is not None else {"every_seconds": 0}}

    @app.post("/retain", response_model=RetainResponse)
    def retain_endpoint(req: RetainRequest, who: Who) -> dict[str, Any]:
        return svc.as_caller(who).retain(req.content, bank=req.bank, source=req.source,
                                        occurred_at=req.occurred_at, room=req.room, thread=req.thread,
                                        tags=req.tags, hall=req.hall, layer=req.layer, metadata=req.metadata,
                                        via="http", expires_at=req.expires_at, ttl=req.ttl).as_dict()

    @app.post("/recall", response_model=None, responses=answer(RecallAnswer))
    def recall_endpoint(req: RecallBody, who: Who, request: Request) -> dict[str, Any]:
        started = float(request.scope.get(ARRIVED) or time.perf_counter())
        recall = recall_request(req, svc.settings.deadline_ms)
        result = svc.as_caller(who).recall(recall, started=started)
        if getattr(req, "explain", False):
            out = result.as_dict() | explain(result, recall.budget, models.get_embedder(svc.settings).count_tokens)
        else:
            out = result.as_dict()
        out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return out

    @app.get("/rooms", response_model=None, responses=answer(RoomsAnswer))
    def rooms(bank: Bank, who: Who, q: Annotated[str, Query(max_length=512)] = "*") -> dict[str, Any]:
        return {"bank": bank, "rooms": [r.as_dict() for r in svc.as_caller(who).rooms(q, bank=bank)]}

    @app.get("/tags", response_model=None, responses=answer(TagsAnswer))
    def tags(bank: Bank, who: Who, q: Annotated[str, Query(max_length=512, description="wildcards * ?; "
                                                             "author:* is the roster of writers")] = "*") -> dict[str, Any]:
        return {"bank": bank, "tags": [t.as_dict() for t in svc.as_caller(who).tags(q, bank=bank)]}

    @app.get("/stats", response_model=None, responses=answer(StatsAnswer))
    def stats(bank: Bank, who: Who) -> dict[str, Any]:
        return svc.as_caller(who).stats(bank=bank).as_dict()

    @app.get("/state", response_model=None, responses=answer(StateAnswer))
    def state_get(bank: Bank, room: Annotated[str, Query(min_length=1, max_length=512)],
                  key: Annotated[str, Query(min_length=1, max_length=512)], who: Who,
                  version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None) -> dict[str, Any]:
        st = svc.as_caller(who).get_state(room, key, bank=bank, version=version)
        if st is None:
            raise RcllError("key", f"no state for room {room!r} key {key!r}" + (f" version {version}" if version else ""),
                            "put it first (PUT /state with expected_version 0)", code=Code.NOT_FOUND)
        return st.as_dict()

    @app.put("/state", response_model=StatePutResponse)
    def state_put(req: StatePut, who: Who) -> dict[str, Any]:
        return svc.as_caller(who).put_state(req.room, req.key, req.value, expected_version=req.expected_version,
                                           bank=req.bank, via="api").as_dict()

    @app.get("/export", responses={200: {"content": {"application/x-ndjson": {}},
                                         "description": "the bank as NDJSON: a header line, then {table, row} lines"}})
    def export(bank: Bank, who: Who) -> StreamingResponse:
        return StreamingResponse(svc.as_caller(who).export_lines(bank=bank), media_type="application/x-ndjson")

    @app.post("/import", response_model=None, responses=answer(ImportAnswer), openapi_extra={"requestBody": {"required": True, "content": {
        "application/x-ndjson": {"schema": {"type": "string"}}}}})
    async def import_(request: Request, who: Who,
                      on_conflict: Annotated[str, Query(pattern="^(error|skip|replace)$")] = "error") -> dict[str, Any]:
        svc.check_writable()   # refused before the body is read
        # Spooled (memory, then disk) as it arrives, each line capped before anything parses it.
        max_line = svc.settings.max_import_line_bytes
        with tempfile.SpooledTemporaryFile(max_size=IMPORT_SPOOL_BYTES) as spool:
            line, length = 1, 0
            async for chunk in request.stream():
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    length += (len(chunk) if nl < 0 else nl) - start
                    if length > max_line:
                        raise RcllError(f"line {line}", f"longer than {max_line} bytes",
                                        "import an export stream unchanged, or raise RCLL_MAX_IMPORT_LINE_BYTES",
                                        code=Code.INVALID_STREAM)
                    if nl < 0:
                        break
                    line, length, start = line + 1, 0, nl + 1
                spool.write(chunk)
            spool.seek(0)
            return (await run_in_threadpool(svc.as_caller(who).import_lines, spool,
                                            on_conflict=on_conflict)).as_dict()

    # -- forget, correct, retention (docs/forgetting.md): the token needs the forget verb to forget,
    # write to correct, admin to set a retention policy; a dry run unless dry_run is false.

    @app.post("/forget", response_model=ForgetResponse)
    def forget(req: ForgetBody, who: Who) -> dict[str, Any]:
        """Forget memories by selector (several must all match) and everything derived from them, in
        one transaction. A dry run unless dry_run is false. No selector, a selector matching nothing, or
        one matching every memory of the bank without everything is refused (RC007)."""
        return svc.as_caller(who).forget(forget_request(req)).as_dict()

    @app.delete("/units/{unit_id}", response_model=ForgetResponse)
    def forget_unit(unit_id: UnitId, bank: Bank, who: Who, dry_run: DryRun = True, reason: Reason = None,
                    purge: Purge = False) -> dict[str, Any]:
        """Forget one unit and what was derived from it (a dry run unless dry_run=false)."""
        return svc.as_caller(who).forget(bank=bank, unit_ids=[unit_id], dry_run=dry_run, reason=reason,
                                         purge=purge).as_dict()

    @app.delete("/documents/{document_id}", response_model=ForgetResponse)
    def forget_document(document_id: Annotated[int, Path(ge=1, le=2**63 - 1)], bank: Bank, who: Who,
                        dry_run: DryRun = True, reason: Reason = None, purge: Purge = False) -> dict[str, Any]:
        """Forget a document with every unit of it (a dry run unless dry_run=false)."""
        return svc.as_caller(who).forget(bank=bank, document_ids=[document_id], dry_run=dry_run, reason=reason,
                                         purge=purge).as_dict()

    @app.delete("/threads/{thread:path}", response_model=ForgetResponse)
    def forget_thread(thread: Annotated[str, Path(min_length=1, max_length=TEXT)], bank: Bank, who: Who,
                      dry_run: DryRun = True, reason: Reason = None, purge: Purge = False) -> dict[str, Any]:
        """Forget every memory of a thread (URL-encode the name; a dry run unless dry_run=false)."""
        return svc.as_caller(who).forget(bank=bank, thread=thread, dry_run=dry_run, reason=reason,
                                         purge=purge).as_dict()

    @app.delete("/banks/{bank}", response_model=ForgetResponse)
    def drop_bank(bank: Annotated[str, Path(min_length=1, max_length=128, pattern=NAME)], who: Who,
                  confirm: Annotated[str, Query(min_length=1, max_length=128, description="the bank's name again")],
                  dry_run: DryRun = True, reason: Reason = None, purge: Purge = False) -> dict[str, Any]:
        """Drop a whole bank and every row of it (needs the forget and admin verbs; confirm repeats
        the name; a dry run unless dry_run=false)."""
        return svc.as_caller(who).drop_bank(bank, confirm=confirm, dry_run=dry_run, reason=reason,
                                            purge=purge).as_dict()

    @app.delete("/state", response_model=ForgetResponse)
    def forget_state(bank: Bank, room: Annotated[str, Query(min_length=1, max_length=TEXT)], who: Who,
                     key: Annotated[str | None, Query(min_length=1, max_length=TEXT)] = None,
                     all_keys: Annotated[bool, Query(description="every key of the room (instead of key)")] = False,
                     dry_run: DryRun = True, reason: Reason = None) -> dict[str, Any]:
        """Forget a room's keyed state with every version: one key, or all_keys=true (a dry run
        unless dry_run=false)."""
        return svc.as_caller(who).forget_state(room, key, all_keys=all_keys, bank=bank, dry_run=dry_run,
                                               reason=reason).as_dict()

    @app.patch("/units/{unit_id}", response_model=HistoryResponse)
    def correct(unit_id: UnitId, req: CorrectRequest, who: Who) -> dict[str, Any]:
        """Replace a unit's text with a reason (the write verb): recall returns the new text at once;
        the old one stays in the unit's history until the unit is forgotten."""
        versions = svc.as_caller(who).correct(unit_id, req.text, reason=req.reason, bank=req.bank)
        return {"bank": req.bank, "unit_id": unit_id, "versions": [v.as_dict() for v in versions]}

    @app.get("/units/{unit_id}/history", response_model=HistoryResponse)
    def history(unit_id: UnitId, bank: Bank, who: Who) -> dict[str, Any]:
        """Every version of a unit's text, the current one first, with who corrected it, when and why."""
        versions = svc.as_caller(who).history(unit_id, bank=bank)
        if not versions:
            raise RcllError("unit_id", f"no unit {unit_id} in bank {bank!r}",
                            "unit ids come from retain and recall; a forgotten unit has no history", code=Code.NOT_FOUND)
        return {"bank": bank, "unit_id": unit_id, "versions": [v.as_dict() for v in versions]}

    @app.get("/retention", response_model=RetentionResponse)
    def retention(bank: Bank, who: Who) -> dict[str, Any]:
        """The bank's retention policies, each with the units it covers and how many have expired."""
        return {"bank": bank, "policies": [policy(p) for p in svc.as_caller(who).retention(bank=bank)]}

    @app.put("/retention", response_model=RetentionPutResponse)
    def set_retention(req: RetentionPut, who: Who) -> dict[str, Any]:
        """Keep a bank's units (or one room's, hall's and/or layer's) for `keep` after they were
        retained; keep null removes that policy. Existing units follow at once. Needs admin."""
        changed = svc.as_caller(who).set_retention(req.keep, room=req.room, hall=req.hall, layer=req.layer,
                                                   bank=req.bank)
        return {**req.model_dump(), "changed": changed}

    app.include_router(console_router(svc))    # the console at /, and the endpoints it browses with
    return app


def serve(memory: Memory, *, host: str, port: int, upkeep_seconds: float | None = None) -> None:
    """Serve the HTTP API over `memory` until stopped (tokens from its settings: RCLL_TOKENS /
    RCLL_TOKENS_FILE), running the periodic jobs every upkeep_seconds (None: its settings'
    upkeep_seconds, RCLL_UPKEEP_SECONDS, default 300)."""
    every = memory.settings.upkeep_seconds if upkeep_seconds is None else upkeep_seconds
    uvicorn.run(create_app(service=memory, upkeep_seconds=every, host=host), host=host, port=port,
                log_level="warning")
