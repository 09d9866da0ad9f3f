"""MCP server (official `mcp` SDK, 2.x MCPServer): the memory tools over stdio or streamable HTTP.

Tools: memory_retain, memory_recall, memory_rooms, memory_tags, memory_state_get,
memory_state_put, memory_session_start, memory_history, and the destructive memory_forget (a dry
run unless dry_run is false) and memory_correct, which carry destructiveHint. Read tools carry
readOnlyHint. Read-only mode registers only the read tools, connects as a role that cannot write (refusing to start otherwise), never
needs an LLM key, and refuses to start if write tools are asked for too.

Errors: a refused call is an MCP error result (isError) whose text is the JSON of
{code, kind, field, error, hint} - the code and its kind from rcll.errors' one table (docs/errors.md).

Identity: over stdio the agent is the server's configuration (--agent / RCLL_AGENT), set by whoever
launched the process; over HTTP it is the bearer token's agent (RCLL_TOKENS). A tool argument never
names the author.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from rcll.auth import Caller, TokenMap
from rcll.errors import Code, RcllError, status
from rcll.http_guard import GuardConfig, body_capped
from rcll.memory import Memory, bounded_model_work
from rcll.request import (
    ANNOTATIONS,
    FORGET_ANNOTATIONS,
    FORGET_PARAMETERS,
    PARAMETERS,
    ForgetRequest,
    RecallRequest,
)
from rcll.settings import DEFAULTS, Settings
from rcll.sqlsource import extension_version
from rcll.validate import duration_arg

READ_TOOLS = ("memory_recall", "memory_rooms", "memory_tags", "memory_state_get", "memory_session_start",
              "memory_history")
WRITE_TOOLS = ("memory_retain", "memory_state_put", "memory_forget", "memory_correct")
DESTRUCTIVE_TOOLS = ("memory_forget", "memory_correct")      # among WRITE_TOOLS: they remove or replace

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                               open_world_hint=False)
_TIME = "ISO 8601 timestamp"


def _recall_signature() -> inspect.Signature:
    """memory_recall's parameters: every RecallRequest field (rcll.request.PARAMETERS, so none is
    left out), bank optional (the server's default bank), then the SDK's context."""
    params = [inspect.Parameter("query", inspect.Parameter.KEYWORD_ONLY,
                                annotation=Annotated[str, Field(description=PARAMETERS[0].help)])]
    for p in PARAMETERS[1:]:
        default = None if p.name in ("bank", "deadline_ms") or isinstance(p.default, Mapping) else p.default
        params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[ANNOTATIONS[p.kind], Field(description=p.help)]))
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context | None))
    return inspect.Signature(params, return_annotation=dict[str, Any])


RECALL_SIGNATURE = _recall_signature()


def _forget_signature() -> inspect.Signature:
    """memory_forget's parameters: every ForgetRequest field (rcll.request.FORGET_PARAMETERS, so
    none is left out), bank optional (the server's default bank), then the SDK's context."""
    params = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=None if p.name == "bank" else p.default,
                                annotation=Annotated[FORGET_ANNOTATIONS[p.kind], Field(description=p.help)])
              for p in FORGET_PARAMETERS]
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context | None))
    return inspect.Signature(params, return_annotation=dict[str, Any])


FORGET_SIGNATURE = _forget_signature()


def forget_request(fields: dict[str, Any], default_bank: str) -> ForgetRequest:
    """The one place MCP builds a forget: the tool's arguments (None: the field's default; no bank:
    the server's default bank)."""
    given = {k: v for k, v in fields.items() if v is not None}
    given.setdefault("bank", default_bank)
    return ForgetRequest(**given)


def recall_request(fields: dict[str, Any], default_bank: str, deadline_ms: int = DEFAULTS.deadline_ms) -> RecallRequest:
    """The one place MCP builds a recall: the tool's arguments (None: the field's default; no bank:
    the server's default bank; no deadline_ms: the server's, settings.deadline_ms)."""
    given = {k: v for k, v in fields.items() if v is not None}
    given.setdefault("bank", default_bank)
    given.setdefault("deadline_ms", deadline_ms)
    return RecallRequest(**given)


def error_result(e: RcllError) -> dict[str, str | None]:
    """What an MCP error result says about an RcllError: its body as HTTP sends it, and the kind
    of its code (rcll.errors.Code.kind), which an agent reads more easily than the code."""
    return {"code": e.code.value, "kind": e.code.kind} | e.as_dict()


def _error(e: RcllError) -> ToolError:
    return ToolError(json.dumps(error_result(e)))


def build_server(service: Memory, *, agent: str | None = None, tokens: TokenMap | None = None,
                 default_bank: str | None = None, write_tools: bool | None = None) -> MCPServer:
    """The MCP server over `service` (each tool calls it acting as the caller's agent).
    write_tools defaults to not service.read_only; asking for write tools on a read-only service
    is refused."""
    if write_tools is None:
        write_tools = not service.read_only
    if write_tools and service.read_only:
        raise RcllError("write_tools", "a read-only server cannot serve write tools",
                        "drop --write-tools, or run a read-write server", code=Code.NOT_PERMITTED)
    tokens = tokens or TokenMap()
    bank_default = default_bank or service.settings.bank
    mcp = MCPServer(name="rcll", version=extension_version(),
                    instructions="Memory for an agent fleet: recall before you act, retain what you learn. "
                                 "Rooms are topics; the author of a write is who this server says you are.")

    def who(ctx: Context | None) -> Caller:
        """The caller: over HTTP with tokens, the bearer token's agent and scope; otherwise the
        server's configured agent with every bank and verb (stdio is the launcher's own process)."""
        request = None
        if ctx is not None:
            try:
                request = ctx.request_context.request
            except ValueError:
                request = None
        headers = getattr(request, "headers", None)
        if headers is not None:
            return tokens.caller_for(headers.get("authorization")) if tokens.enabled else Caller(agent)
        return Caller(agent)

    async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
        except RcllError as e:
            raise _error(e) from e

    async def memory_recall(ctx: Context | None = None, **fields: Any) -> dict[str, Any]:
        started = time.perf_counter()
        a = await call(who, ctx)
        request = await call(recall_request, fields, bank_default, service.settings.deadline_ms)
        result = await call(service.as_caller(a).recall, request, started=started)
        return dict(result.as_dict())

    memory_recall.__signature__ = RECALL_SIGNATURE  # type: ignore[attr-defined]
    mcp.tool(annotations=_READ, description="Recall facts for a query. Filters: rooms (topics), mine (only what "
             "you wrote), authors, halls (fact types), layers (L0 rules, L1 decisions, L2 observations), tags_any, "
             "tags_all, thread, time_from/time_to (ISO 8601), as_of; budget is the token budget of the answer; "
             "deadline_ms the latency budget (default 1000: the reranker reads while time is left, and the answer "
             "says how deep it read). A busy server refuses at once with field 'server': retry after the hint's "
             "seconds.")(memory_recall)

    @mcp.tool(annotations=_READ, description="The rooms (topics) of a bank with unit counts, status and aliases; "
              "pattern takes * and ? wildcards.")
    async def memory_rooms(bank: str | None = None, pattern: str | None = None,
                           ctx: Context | None = None) -> dict[str, Any]:
        a = await call(who, ctx)
        found = await call(service.as_caller(a).rooms, pattern, bank=bank or bank_default)
        return {"rooms": [r.as_dict() for r in found]}

    @mcp.tool(annotations=_READ, description="Tags in use with counts; pattern takes wildcards "
              "(author:* lists everyone who wrote to the bank).")
    async def memory_tags(bank: str | None = None, pattern: str | None = None,
                          ctx: Context | None = None) -> dict[str, Any]:
        a = await call(who, ctx)
        found = await call(service.as_caller(a).tags, pattern, bank=bank or bank_default)
        return {"tags": [t.as_dict() for t in found]}

    @mcp.tool(annotations=_READ, description="Read a room's keyed state (exact room and key; the latest "
              "version unless version is given). Returns state null when there is none.")
    async def memory_state_get(room: str, key: str, bank: str | None = None, version: int | None = None,
                               ctx: Context | None = None) -> dict[str, Any]:
        a = await call(who, ctx)
        st = await call(service.as_caller(a).get_state, room, key, bank=bank or bank_default, version=version)
        return {"state": None if st is None else st.as_dict()}

    @mcp.tool(annotations=_READ, description="The L0 rules and procedures to load at the start of a session, "
              "for the given rooms (plus bank-wide rules) and thread.")
    async def memory_session_start(bank: str | None = None, rooms: list[str] | None = None,
                                   thread: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
        a = await call(who, ctx)
        rules = await call(service.as_caller(a).session_start, rooms=rooms, thread=thread, bank=bank or bank_default)
        return {"rules": [r.as_dict() for r in rules]}

    @mcp.tool(annotations=_READ, description="Every version of a unit's text, the current one first, with who "
              "corrected it, when and why.")
    async def memory_history(unit_id: int, bank: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
        a = await call(who, ctx)
        versions = await call(service.as_caller(a).history, unit_id, bank=bank or bank_default)
        return {"unit_id": unit_id, "versions": [v.as_dict() for v in versions]}

    if write_tools:
        @mcp.tool(annotations=_WRITE, description="Retain text into memory. room is a topic label (free text, "
                  "canonicalised by spelling); the author is who this server says you are.")
        async def memory_retain(content: str, bank: str | None = None, room: str | None = None,
                                thread: str | None = None, tags: list[str] | None = None,
                                hall: str | None = None, layer: str | None = None, source: str | None = None,
                                occurred_at: str | None = None, metadata: dict[str, Any] | None = None,
                                expires_at: Annotated[str | None, Field(description=(
                                    f"{_TIME}: the units stop being recalled then, and are forgotten"))] = None,
                                ttl: Annotated[str | float | None, Field(description=(
                                    "time to live instead of expires_at: an ISO 8601 duration (P30D, PT12H) or "
                                    "seconds"))] = None,
                                ctx: Context | None = None) -> dict[str, Any]:
            a = await call(who, ctx)
            span = await call(duration_arg, ttl, "ttl")
            result = await call(service.as_caller(a).retain, content, bank=bank or bank_default, room=room,
                                thread=thread, tags=tags, hall=hall, layer=layer, source=source,
                                occurred_at=occurred_at, metadata=metadata, via="mcp", expires_at=expires_at,
                                ttl=span)
            return dict(result.as_dict())

        @mcp.tool(annotations=_WRITE, description="Write a room's keyed state if expected_version is the current "
                  "version (0 when there is none); fails naming both versions otherwise.")
        async def memory_state_put(room: str, key: str, value: Any, expected_version: int = 0,
                                   bank: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
            a = await call(who, ctx)
            written = await call(service.as_caller(a).put_state, room, key, value, expected_version=expected_version,
                                 bank=bank or bank_default, via="mcp")
            return dict(written.as_dict())

        async def memory_forget(ctx: Context | None = None, **fields: Any) -> dict[str, Any]:
            a = await call(who, ctx)
            request = await call(forget_request, fields, bank_default)
            gone = await call(service.as_caller(a).forget, request)
            return dict(gone.as_dict())

        memory_forget.__signature__ = FORGET_SIGNATURE  # type: ignore[attr-defined]
        mcp.tool(annotations=_DESTRUCTIVE, description="Forget memories and everything derived from them. A DRY "
                 "RUN unless dry_run is false: first call it as is, read the counts per kind, and only then repeat "
                 "with dry_run false. Selectors (several must all match): unit_ids, document_ids, thread, author, "
                 "tag, room, occurred_from/occurred_to, retained_from/retained_to (ISO 8601, [from, to)); or "
                 "everything = the bank's name. No selector, or one matching nothing or every memory, is refused. "
                 "Needs the forget verb.")(memory_forget)

        @mcp.tool(annotations=_DESTRUCTIVE, description="Replace a unit's wrong text with the right one, saying why: "
                  "recall returns the new text at once; the old one stays in the unit's history (memory_history). "
                  "unit_id comes from memory_recall's facts.")
        async def memory_correct(unit_id: int, text: str, reason: str, bank: str | None = None,
                                 ctx: Context | None = None) -> dict[str, Any]:
            a = await call(who, ctx)
            versions = await call(service.as_caller(a).correct, unit_id, text, reason=reason,
                                  bank=bank or bank_default)
            return {"unit_id": unit_id, "versions": [v.as_dict() for v in versions]}

    return mcp


def http_app(mcp: MCPServer, tokens: TokenMap, *, path: str = "/mcp", host: str = "127.0.0.1",
             settings: Settings = DEFAULTS) -> Any:
    """The streamable-HTTP ASGI app, refusing requests without a valid bearer token when tokens
    are configured (401 with {field, error, hint}). host: where it listens; on loopback the SDK
    also refuses Host headers that are not loopback (DNS rebinding), beyond it they are accepted.
    settings: the body cap (settings.max_body_bytes)."""
    app = mcp.streamable_http_app(streamable_http_path=path, json_response=True, host=host)
    # Every body capped before it is read or the token checked (rcll.http_guard, RCLL_MAX_BODY_BYTES).
    limit = GuardConfig.from_settings(settings, host).max_body_bytes
    if not tokens.enabled:
        return body_capped(app, limit)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            try:
                tokens.agent_for(headers.get("authorization"))
            except RcllError as e:
                body = json.dumps(e.as_dict()).encode()
                await send({"type": "http.response.start", "status": status(e.code),
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return body_capped(guarded, limit)



def run(memory: Memory, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8766,
        agent: str | None = None, default_bank: str | None = None, tokens: TokenMap | None = None) -> None:
    """Serve the MCP tools over `memory` until stopped: over stdio (the agent is `agent`, the
    launcher's configuration) or streamable HTTP (the agent is each bearer token's; tokens default
    to memory's settings)."""
    tokens = tokens if tokens is not None else TokenMap.from_settings(memory.settings)
    if agent and not memory.identity_honoured:
        print("rcll mcp: warning: the database role is not a member of rcll_identity_server; "
              "writes will carry no server identity", file=sys.stderr)
    server = build_server(memory, agent=agent, tokens=tokens, default_bank=default_bank,
                          write_tools=not memory.read_only)
    # Model work through one bounded queue sized to the cores: over the limit a tool call is
    # refused at once (field "server", busy) instead of waiting without bound.
    with bounded_model_work(memory.settings):
        if transport == "stdio":
            server.run("stdio")
            return
        import uvicorn  # deferred: only the HTTP transport needs the ASGI server

        print(f"RCLL MCP (streamable HTTP) on http://{host}:{port}/mcp{' read-only' if memory.read_only else ''}",
              file=sys.stderr, flush=True)
        uvicorn.run(http_app(server, tokens, host=host, settings=memory.settings), host=host, port=port,
                    log_level="warning")
