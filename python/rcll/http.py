"""HTTP API (OpenAPI at /openapi.json): retain, recall, rooms, tags, stats, state, export, import, health.

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
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import psycopg
import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rcll import upkeep
from rcll.auth import Caller, Forbidden, TokenMap
from rcll.errors import CODES, Code, RcllError, from_database, status
from rcll.http_answers import (
    HealthAnswer,
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
from rcll.memory import Memory, bounded_model_work, server_deadline_ms
from rcll.request import ANNOTATIONS, MAX_DEADLINE_MS, PARAMETERS, RecallRequest
from rcll.sqlsource import extension_version
from rcll.upkeep import Upkeeper
from rcll.validate import MAX_QUERY, max_import_line_bytes

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
            fields[p.name] = (int, Field(default_factory=server_deadline_ms, ge=1, le=MAX_DEADLINE_MS, description=(
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


def recall_request(body: BaseModel) -> RecallRequest:
    """The one place HTTP builds a recall: the body's fields, explain aside."""
    return RecallRequest(**body.model_dump(exclude={"explain"}))


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


def _caller(request: Request) -> Caller:
    """Who the bearer token authenticates: its agent and scope (rcll.auth). On a server without
    tokens, the anonymous caller: no agent, every bank, every verb."""
    tokens: TokenMap = request.app.state.tokens
    return tokens.caller_for(request.headers.get("authorization"))


Who = Annotated[Caller, Depends(_caller)]
Bank = Annotated[str, Query(min_length=1, max_length=128, pattern=NAME, description="bank name")]


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
               host: str | None = None, guard: GuardConfig | None = None) -> FastAPI:
    """The HTTP API over `service` (default: a Memory on `dsn`, opened when the app starts). Every
    endpoint calls the Memory acting as the agent the request's bearer token authenticates. With
    upkeep_seconds > 0 (`rcll serve`: RCLL_UPKEEP_SECONDS, default 300) a read-write, unscoped
    service runs Memory.upkeep() when the app starts and then that often (rcll.upkeep). host: the
    address it is served on; guard: the Host, Origin and body-size rules (rcll.http_guard; default
    from the environment for that host)."""
    svc = service if service is not None else Memory(dsn, read_only=read_only, pool_size=pool_size, open=False)
    auth = tokens if tokens is not None else TokenMap.from_env()
    rules = guard if guard is not None else GuardConfig.from_env(host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        svc.open()
        keeper = (Upkeeper(svc, upkeep_seconds).start()
                  if upkeep_seconds > 0 and svc.whole_store else None)
        app.state.upkeep = keeper
        try:
            with bounded_model_work():     # over the limit: 503 + Retry-After at once
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
                           allow_methods=["GET", "POST", "PUT"], allow_headers=["authorization", "content-type"])
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
                                        via="http").as_dict()

    @app.post("/recall", response_model=None, responses=answer(RecallAnswer))
    def recall_endpoint(req: RecallBody, who: Who, request: Request) -> dict[str, Any]:
        started = float(request.scope.get(ARRIVED) or time.perf_counter())
        recall = recall_request(req)
        result = svc.as_caller(who).recall(recall, started=started)
        out = result.as_dict() | (explain(result, recall.budget) if getattr(req, "explain", False) else {})
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
        max_line = max_import_line_bytes()
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

    app.include_router(console_router(svc))    # the console at /, and the endpoints it browses with
    return app


def serve(memory: Memory, *, host: str, port: int, upkeep_seconds: float | None = None) -> None:
    """Serve the HTTP API over `memory` until stopped (tokens from RCLL_TOKENS / RCLL_TOKENS_FILE),
    running the periodic jobs every upkeep_seconds (None: RCLL_UPKEEP_SECONDS, default 300)."""
    every = upkeep.interval() if upkeep_seconds is None else upkeep_seconds
    uvicorn.run(create_app(service=memory, upkeep_seconds=every, host=host), host=host, port=port,
                log_level="warning")
