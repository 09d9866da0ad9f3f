"""HTTP API (OpenAPI at /openapi.json): retain, recall, rooms, tags, stats, state, export, import, health.

Identity for the author axis comes from authentication only: a bearer token mapped to an agent
(RCLL_TOKENS / RCLL_TOKENS_FILE, see rcll.auth). The server sets rcll.agent for each transaction;
nothing in a request body can name the author. Every error body is {field, error, hint}.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

import psycopg
import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rcll import defaults
from rcll.auth import TokenMap
from rcll.errors import RcllError, from_database
from rcll.memory import Memory
from rcll.sqlsource import extension_version
from rcll.validate import MAX_BUDGET, MAX_QUERY

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


class ErrorBody(BaseModel):
    field: str | None
    error: str
    hint: str | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "refused: the field at fault and the fix"},
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    404: {"model": ErrorBody, "description": "unknown bank"},
    409: {"model": ErrorBody, "description": "conflict (stale state version, existing rows)"},
    422: {"model": ErrorBody, "description": "the request does not match the schema"},
    503: {"model": ErrorBody, "description": "the database is unavailable"},
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


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128, pattern=NAME)
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    rooms: list[str] | None = Field(default=None, max_length=256)
    authors: list[str] | None = Field(default=None, max_length=256)
    mine: bool = False
    include_unattributed: bool | None = None
    halls: list[str] | None = Field(default=None, max_length=256)
    layers: list[str] | None = Field(default=None, max_length=256)
    tags_any: list[str] | None = Field(default=None, max_length=256)
    tags_all: list[str] | None = Field(default=None, max_length=256)
    thread: str | None = Field(default=None, max_length=512)
    as_of: datetime | None = None
    time_from: datetime | None = None
    time_to: datetime | None = None
    budget: int = Field(default=defaults.BUDGET, ge=1, le=MAX_BUDGET)


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


def _agent(request: Request) -> str | None:
    """The agent the bearer token authenticates (None on an anonymous server)."""
    tokens: TokenMap = request.app.state.tokens
    return tokens.agent_for(request.headers.get("authorization"))


Agent = Annotated[str | None, Depends(_agent)]
Bank = Annotated[str, Query(min_length=1, max_length=128, pattern=NAME, description="bank name")]


def _status(e: RcllError) -> int:
    """The one mapping of RcllError to an HTTP status."""
    if e.field == "authorization":
        return 401
    if e.message.startswith("unknown bank"):
        return 404
    if e.field in ("expected_version", "on_conflict") or "already exists" in e.message:
        return 409
    if e.field == "dsn" and not e.message.startswith("refused by the database"):
        return 503                             # cannot connect, or no schema: the server's state, not the request
    return 400


def create_app(dsn: str | None = None, *, pool_size: int = 4, service: Memory | None = None,
               tokens: TokenMap | None = None, read_only: bool = False) -> FastAPI:
    """The HTTP API over `service` (default: a Memory on `dsn`, opened when the app starts). Every
    endpoint calls the Memory acting as the agent the request's bearer token authenticates."""
    svc = service if service is not None else Memory(dsn, read_only=read_only, pool_size=pool_size, open=False)
    auth = tokens if tokens is not None else TokenMap.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        svc.open()
        yield
        svc.close()

    app = FastAPI(title="RCLL", version=extension_version(), lifespan=lifespan, responses=ERRORS,
                  description="Memory for agent fleets: retain facts, recall them with SQL. Authenticate with "
                              "Authorization: Bearer <token>; the token decides the author of every write.")

    app.state.tokens = auth
    app.state.memory = svc

    @app.exception_handler(RcllError)
    async def rcll_error(request: Request, exc: RcllError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.field == "authorization" else None
        return JSONResponse(status_code=_status(exc), content=exc.as_dict(), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": ".".join(str(p) for p in (e["loc"][1:] if e["loc"] and e["loc"][0] in
                                                        ("body", "query", "path", "header") else e["loc"])) or "body",
                   "error": e["msg"]} for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "error": "invalid request"}
        return JSONResponse(status_code=422, content={**first, "hint": None, "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        field = "path" if exc.status_code == 404 else "method" if exc.status_code == 405 else "body"
        return JSONResponse(status_code=exc.status_code, content={"field": field, "error": str(exc.detail), "hint": None})

    @app.exception_handler(psycopg.Error)
    async def database_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        mapped = from_database(exc, read_only=svc.read_only)
        if mapped is not None:
            return JSONResponse(status_code=_status(mapped), content=mapped.as_dict())
        return JSONResponse(status_code=503, content={"field": None, "error": "database error",
                                                      "hint": str(exc).strip().splitlines()[0] if str(exc) else None})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return svc.health().as_dict()

    @app.post("/retain", response_model=RetainResponse)
    def retain_endpoint(req: RetainRequest, who: Agent) -> dict[str, Any]:
        return svc.as_agent(who).retain(req.content, bank=req.bank, source=req.source,
                                        occurred_at=req.occurred_at, room=req.room, thread=req.thread,
                                        tags=req.tags, hall=req.hall, layer=req.layer, metadata=req.metadata,
                                        via="http").as_dict()

    @app.post("/recall")
    def recall_endpoint(req: RecallRequest, who: Agent) -> dict[str, Any]:
        started = time.perf_counter()
        filters = req.model_dump(exclude={"bank", "query", "budget"}, exclude_none=True)
        if not filters.get("mine"):
            filters.pop("mine", None)
        out = svc.as_agent(who).recall(req.query, bank=req.bank, budget=req.budget, **filters).as_dict()
        out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return out

    @app.get("/rooms")
    def rooms(bank: Bank, who: Agent, q: Annotated[str, Query(max_length=512)] = "*") -> dict[str, Any]:
        return {"bank": bank, "rooms": [r.as_dict() for r in svc.rooms(q, bank=bank)]}

    @app.get("/tags")
    def tags(bank: Bank, who: Agent, q: Annotated[str, Query(max_length=512, description="wildcards * ?; "
                                                             "author:* is the roster of writers")] = "*") -> dict[str, Any]:
        return {"bank": bank, "tags": [t.as_dict() for t in svc.tags(q, bank=bank)]}

    @app.get("/stats")
    def stats(bank: Bank, who: Agent) -> dict[str, Any]:
        return svc.stats(bank=bank).as_dict()

    @app.get("/state")
    def state_get(bank: Bank, room: Annotated[str, Query(min_length=1, max_length=512)],
                  key: Annotated[str, Query(min_length=1, max_length=512)], who: Agent,
                  version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None) -> dict[str, Any]:
        st = svc.get_state(room, key, bank=bank, version=version)
        if st is None:
            raise RcllError("key", f"no state for room {room!r} key {key!r}" + (f" version {version}" if version else ""),
                            "put it first (PUT /state with expected_version 0)")
        return st.as_dict()

    @app.put("/state", response_model=StatePutResponse)
    def state_put(req: StatePut, who: Agent) -> dict[str, Any]:
        return svc.as_agent(who).put_state(req.room, req.key, req.value, expected_version=req.expected_version,
                                           bank=req.bank, via="api").as_dict()

    @app.get("/export", responses={200: {"content": {"application/x-ndjson": {}},
                                         "description": "the bank as NDJSON: a header line, then {table, row} lines"}})
    def export(bank: Bank, who: Agent) -> StreamingResponse:
        return StreamingResponse(svc.export_lines(bank=bank), media_type="application/x-ndjson")

    @app.post("/import", openapi_extra={"requestBody": {"required": True, "content": {
        "application/x-ndjson": {"schema": {"type": "string"}}}}})
    async def import_(request: Request, who: Agent,
                      on_conflict: Annotated[str, Query(pattern="^(error|skip|replace)$")] = "error") -> dict[str, Any]:
        svc.check_writable()   # refused before the body is read
        raw = await request.body()
        return (await run_in_threadpool(svc.import_lines, raw.splitlines(), on_conflict=on_conflict)).as_dict()

    return app


def serve(memory: Memory, *, host: str, port: int) -> None:
    """Serve the HTTP API over `memory` until stopped (tokens from RCLL_TOKENS / RCLL_TOKENS_FILE)."""
    uvicorn.run(create_app(service=memory), host=host, port=port, log_level="warning")
