"""What a web page cannot make the HTTP server do, and how much any request may send.

A page the user visits can make the browser send requests to a server on loopback: a "simple"
cross-origin POST (text/plain, a form, a Blob) goes out without a preflight, and a DNS name the
attacker controls can be rebound to 127.0.0.1 so that the page's own origin reaches the server.
The guard, in front of everything else (before the body is read and before authentication):

- Host: answered only for the names the server answers to - loopback names and addresses, the
  address it is bound to (bound to every interface: any IP literal, which no rebinding can
  produce), and the names in RCLL_ALLOWED_HOSTS (a proxy's public names; * for any). Else 421.
- State-changing methods (POST, PUT, PATCH, DELETE): the body must be declared JSON or NDJSON
  (a type a page can send cross-origin only after a CORS preflight this server does not answer),
  else 415 - save a DELETE without a body, which declares nothing (DELETE is always preflighted);
  and the request must not come from another origin: an Origin that is not the Host's
  own, one of RCLL_ALLOWED_HOSTS's names or one of RCLL_CORS_ORIGINS, or a Sec-Fetch-Site of
  cross-site / same-site, is refused with 403 - with a token or without.
- Body size: at most RCLL_MAX_BODY_BYTES (POST /import: RCLL_MAX_IMPORT_BYTES), refused with 413
  from the Content-Length before anything is read, or as soon as a chunked body passes it.

No CORS header is sent unless RCLL_CORS_ORIGINS names origins (then Starlette's CORSMiddleware
answers those alone).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rcll.auth import is_loopback
from rcll.errors import Code
from rcll.settings import DEFAULTS, Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MIB = 1 << 20
DEFAULT_MAX_BODY_BYTES = DEFAULTS.max_body_bytes       # a retain of the largest document (1 MiB of text) escaped
DEFAULT_MAX_IMPORT_BYTES = DEFAULTS.max_import_bytes   # a whole bank's export stream
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BODY_TYPES = ("application/json", "application/x-ndjson")
FOREIGN_FETCH = frozenset({"cross-site", "same-site"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def _names(value: str | None) -> tuple[str, ...]:
    """RCLL_ALLOWED_HOSTS's names as a Host header's name is compared: a port given is dropped."""
    return tuple("*" if n.strip() == "*" else _host_name(n) for n in (value or "").replace(";", ",").split(",")
                 if n.strip())


def _host_name(host: str) -> str:
    """A Host header's name: lower case, without the port or IPv6 brackets or a trailing dot."""
    h = host.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h[1:]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _netloc(value: str, scheme: str) -> str:
    """host[:port] with the scheme's default port dropped, for comparing an Origin with a Host."""
    v = value.strip().lower()
    default = {"http": ":80", "https": ":443", "ws": ":80", "wss": ":443"}.get(scheme, "")
    return v[: -len(default)] if default and v.endswith(default) else v


@dataclass(frozen=True)
class GuardConfig:
    """Which hosts the server answers to, which origins may write, and the body caps."""

    bound_host: str | None = None
    extra_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_import_bytes: int = DEFAULT_MAX_IMPORT_BYTES
    any_host: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "any_host", "*" in self.extra_hosts)

    @classmethod
    def from_env(cls, bound_host: str | None, env: Mapping[str, str]) -> GuardConfig:
        """The rules `env` sets (from_settings of its settings)."""
        return cls.from_settings(Settings.from_env(env), bound_host)

    @classmethod
    def from_settings(cls, settings: Settings, bound_host: str | None = None) -> GuardConfig:
        """RCLL_ALLOWED_HOSTS (names, comma-separated; * for any), RCLL_CORS_ORIGINS (exact origins,
        e.g. https://app.example.com), RCLL_MAX_BODY_BYTES, RCLL_MAX_IMPORT_BYTES, read into settings."""
        return cls(bound_host=bound_host, extra_hosts=_names(settings.allowed_hosts), cors_origins=settings.cors_origins,
                   max_body_bytes=settings.max_body_bytes, max_import_bytes=settings.max_import_bytes)

    def answers_to(self, host: str) -> bool:
        name = _host_name(host)
        if not name:
            return False
        if self.any_host or is_loopback(name) or name in self.extra_hosts:
            return True
        bound = (self.bound_host or "").strip().lower()
        if bound in WILDCARD_BINDS and self.bound_host is not None:
            return _is_ip(name)          # a rebound DNS name always arrives as a name, never as an IP
        return bool(bound) and name == _host_name(bound)

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Whether a request with this Origin, arriving with this Host, comes from this server's own
        pages (or from an origin the operator configured)."""
        o = origin.strip().lower().rstrip("/")
        if o in (c.lower() for c in self.cors_origins):
            return True
        parts = urlsplit(o)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False                 # "null" (sandboxed frames, file:, data:) and the like
        if _netloc(parts.netloc, parts.scheme) == _netloc(host, parts.scheme):
            return True
        return (parts.hostname or "") in self.extra_hosts and "*" not in self.extra_hosts

    def body_limit(self, method: str, path: str) -> int:
        return self.max_import_bytes if method == "POST" and path.rstrip("/") == "/import" else self.max_body_bytes


class _TooLarge(Exception):
    pass


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in scope.get("headers") or []:
        name = k.decode("latin-1").lower()
        # A repeated Host or Origin is ambiguous: keep a value that cannot match.
        out[name] = "\x00" if name in out and name in ("host", "origin") else v.decode("latin-1")
    return out


# The guard's refusals carry an RCLL code like every other error (docs/errors.md), with the HTTP
# status that names the transport-level reason (421, 413, 415) where one exists.
_CODES = {421: Code.NOT_PERMITTED, 403: Code.NOT_PERMITTED, 413: Code.INVALID_INPUT, 415: Code.INVALID_INPUT}


async def _refuse(send: Send, status: int, field_: str, error: str, hint: str,
                  extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"code": _CODES[status].value, "field": field_, "error": error, "hint": hint}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *extra]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The ASGI middleware (see the module's docstring)."""

    def __init__(self, app: Any, config: GuardConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cfg = self.config
        headers = _headers(scope)
        host = headers.get("host", "")
        if not cfg.answers_to(host):
            await _refuse(send, 421, "host", f"this server does not answer to the host {host[:200]!r}",
                          "use http://127.0.0.1:<port>/ (or the address it listens on); behind a proxy, add its "
                          "public name to RCLL_ALLOWED_HOSTS")
            return
        method = str(scope.get("method", "GET")).upper()
        limit = cfg.body_limit(method, str(scope.get("path", "")))
        length = headers.get("content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > limit):
            await _refuse(send, 413, "body", f"the body is over the limit of {limit} bytes",
                          "send less; the operator sets RCLL_MAX_BODY_BYTES (RCLL_MAX_IMPORT_BYTES for /import)")
            return
        if method not in SAFE_METHODS:
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            # A DELETE without a body may omit the type: a page can send DELETE elsewhere only after
            # a CORS preflight, and there is no body whose type could smuggle a form in.
            bodiless_delete = (method == "DELETE" and length in (None, "0") and "transfer-encoding" not in headers
                               and not ctype)
            if ctype not in BODY_TYPES and not bodiless_delete:
                await _refuse(send, 415, "content-type",
                              f"a {method} body must be declared application/json (application/x-ndjson for "
                              f"/import), not {ctype or 'nothing'!r}",
                              "send Content-Type: application/json")
                return
            origin = headers.get("origin")
            fetch_site = headers.get("sec-fetch-site", "").strip().lower()
            cors = origin is not None and origin.strip().rstrip("/").lower() in (c.lower() for c in cfg.cors_origins)
            if (origin is not None and not cfg.origin_allowed(origin, host)) or (fetch_site in FOREIGN_FETCH
                                                                                 and not cors):
                await _refuse(send, 403, "origin",
                              f"a write from another origin ({(origin or fetch_site)[:200]!r}) is refused",
                              "a web page cannot write here; the operator lists trusted origins in RCLL_CORS_ORIGINS")
                return
        await capped(self.app, scope, receive, send, limit)


async def capped(app: Any, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    """Pass the request on, counting the body as it is read: past `limit` the app's answer is
    dropped and 413 sent instead (a chunked body has no Content-Length to refuse up front)."""
    seen = 0
    over = False
    started = False

    async def counted() -> Message:
        nonlocal seen, over
        message = await receive()
        if message.get("type") == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                over = True
                raise _TooLarge
        return message

    async def sending(message: Message) -> None:
        nonlocal started
        if over:
            return
        if message.get("type") == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, counted, sending)
    except Exception:
        if not over:        # the app's own error, not the cap's: ServerErrorMiddleware answers it
            raise
    if over and not started:
        await _refuse(send, 413, "body", f"the body is over the limit of {limit} bytes",
                      "send less; the operator sets RCLL_MAX_BODY_BYTES (RCLL_MAX_IMPORT_BYTES for /import)")


def body_capped(app: Any, limit: int) -> Any:
    """`app` behind the body cap alone (the MCP server's HTTP app: its SDK checks Host, Origin and
    the content type itself): over `limit` bytes, 413 before the body is read or a token checked."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        length = _headers(scope).get("content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > limit):
            await _refuse(send, 413, "body", f"the body is over the limit of {limit} bytes",
                          "send less; the operator sets RCLL_MAX_BODY_BYTES")
            return
        await capped(app, scope, receive, send, limit)

    return guarded
