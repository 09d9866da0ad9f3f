"""HTTP API: retain, recall and health over the same SQL functions every other client calls."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool
from pydantic import BaseModel, ConfigDict, Field

from rcll import __version__
from rcll.db import configure
from rcll.errors import RcllError, from_database
from rcll.retain import Document, retain


class RetainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128)
    content: str = Field(min_length=1)
    source: str | None = None
    occurred_at: datetime | None = None
    room: str | None = None
    thread: str | None = None
    tags: list[str] = Field(default_factory=list)
    hall: str | None = None
    layer: str | None = Field(default=None, pattern="^L[012]$")
    metadata: dict[str, Any] = Field(default_factory=dict)


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bank: str = Field(min_length=1, max_length=128)
    query: str = Field(min_length=1, max_length=4000)
    rooms: list[str] | None = None
    authors: list[str] | None = None
    mine: bool = False
    halls: list[str] | None = None
    layers: list[str] | None = None
    tags_any: list[str] | None = None
    tags_all: list[str] | None = None
    thread: str | None = None
    as_of: datetime | None = None
    budget: int = Field(default=4096, ge=1, le=200_000)


def create_app(dsn: str, *, pool_size: int = 4) -> FastAPI:
    pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, configure=configure, open=False)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        pool.open(wait=True)
        yield
        pool.close()

    app = FastAPI(title="RCLL", version=__version__, lifespan=lifespan,
                  description="Memory for agent fleets: retain facts, recall them with SQL.")

    @contextmanager
    def connection() -> Iterator[psycopg.Connection[Any]]:
        with pool.connection() as conn:
            yield conn

    @app.exception_handler(RcllError)
    async def rcll_error(request: Request, exc: RcllError) -> JSONResponse:
        status = 404 if exc.message.startswith("unknown bank") else 400
        return JSONResponse(status_code=status, content=exc.as_dict())

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": ".".join(str(p) for p in e["loc"] if p != "body"), "error": e["msg"]}
                  for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "error": "invalid request"}
        return JSONResponse(status_code=422, content={**first, "hint": None, "errors": errors})

    @app.exception_handler(psycopg.Error)
    async def database_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        mapped = from_database(exc)
        if mapped is not None:
            return JSONResponse(status_code=400, content=mapped.as_dict())
        return JSONResponse(status_code=503, content={"field": None, "error": "database error", "hint": str(exc)})

    @app.get("/health")
    def health() -> dict[str, Any]:
        with connection() as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return {"status": "ok", "rcll": __version__, "pgvector": row[0] if row else None}

    @app.post("/retain")
    def retain_endpoint(req: RetainRequest) -> dict[str, Any]:
        doc = Document(content=req.content, source=req.source, occurred_at=req.occurred_at, room=req.room,
                       thread=req.thread, tags=req.tags, hall=req.hall, layer=req.layer, metadata=req.metadata)
        with connection() as conn:
            result = retain(conn, req.bank, doc, via="http")
        return {"document_id": result.document_id, "unit_ids": result.unit_ids, "created": result.created,
                "mode": result.mode}

    @app.post("/recall")
    def recall_endpoint(req: RecallRequest) -> dict[str, Any]:
        from rcll.recall import recall

        started = time.perf_counter()
        filters = req.model_dump(exclude={"bank", "query", "budget"}, exclude_none=True)
        with connection() as conn:
            result = recall(conn, req.query, req.bank, budget=req.budget, **filters)
        out = result.as_dict()
        out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return out

    return app
