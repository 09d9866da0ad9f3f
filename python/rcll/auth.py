"""Who is calling, what they may touch, and where the server may listen.

The author axis is the server's word, never the request body's. A server that authenticates a
caller sets the transaction-local GUC rcll.agent (set_config('rcll.agent', agent, true));
rcll.current_agent() honours it only when the connecting role is a member of
rcll_identity_server (see sql/functions/030-authors.sql), so a psql user cannot forge it.

Tokens: RCLL_TOKENS (inline) and/or RCLL_TOKENS_FILE (a path). Each token names an agent and,
optionally, a scope: the banks it reaches (names or patterns with * and ?) and the verbs it may use
(read, write, forget, export, import, admin). Either source holds

  - a JSON object: {"<token>": "<agent>"} or {"<token>": {"agent": "<agent>", "banks": ["team-a",
    "team-a-*"], "can": ["read", "write"]}};
  - or lines "<token> <agent> [banks=<pattern>,...] [can=<verb>,...]" (# comments; inline, entries
    are separated by newlines or ";", and a line without banks=/can= may list several
    "<token> <agent>" entries separated by commas, as before). A line is read completely or
    refused, naming it: a misspelled word is never taken as part of the agent's name.

A token without banks= reaches every bank; without can= it may use every verb. So a token written
the old way ("<token> <agent>") keeps its old meaning: every bank, every verb. Only SHA-256 digests
of tokens are kept in memory; comparison is constant-time. With no tokens configured the server is
anonymous: requests are accepted, writes carry no author, every bank is reachable; such a server
listens on loopback only unless the operator says --allow-anonymous-network.

A bank outside a token's scope answers exactly as a bank that does not exist (the same 404 and
body), so a token cannot even learn which other banks exist.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from rcll.errors import Code, RcllError, unknown_bank
from rcll.settings import Settings

# What a token may do. read: recall, rooms, tags, stats, state get, session start. write: retain,
# state put, correct. forget: forget memories and state (destructive, so apart from write; dropping
# a whole bank needs admin too). export / import: a whole bank out or in. admin: approve room
# merges, create banks and anything else that changes a bank's shape rather than its memory.
VERBS = ("read", "write", "forget", "export", "import", "admin")
ALL_VERBS = frozenset(VERBS)
_PATTERN = re.compile(r"^[A-Za-z0-9_.:*?-]{1,128}$")
_FIELD = re.compile(r"\s(banks|can)=", re.IGNORECASE)
_SCOPE_WORD = re.compile(r"^(banks|can)=(.*)$", re.IGNORECASE)
TRUE = ("1", "true", "yes", "on")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _glob(pattern: str) -> re.Pattern[str]:
    """A bank pattern: * is any run of characters, ? one character, everything else literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z")


class Forbidden(RcllError):
    """A bank in the token's scope, a verb the token may not use (RC006, HTTP 403)."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        super().__init__(field, message, hint, code=Code.NOT_PERMITTED)


@dataclass(frozen=True)
class Caller:
    """Who a request comes from and what it may reach: the agent writes are authored by (None:
    no identity), the bank patterns and the verbs. Caller() is the anonymous caller: every bank,
    every verb."""

    agent: str | None = None
    banks: tuple[str, ...] = ("*",)
    can: frozenset[str] = ALL_VERBS
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(_glob(p) for p in self.banks))

    @property
    def unrestricted(self) -> bool:
        return "*" in self.banks and self.can == ALL_VERBS

    def reaches(self, bank: str) -> bool:
        return any(p.match(bank) for p in self._compiled)

    def check(self, bank: str, verb: str) -> None:
        """Refuse `verb` on `bank` unless the scope allows it: a bank out of reach is an unknown
        bank (404, whether it exists or not); a verb not granted on a reachable bank is Forbidden."""
        assert verb in ALL_VERBS, verb
        if not self.reaches(bank):
            raise unknown_bank(bank)
        if verb not in self.can:
            granted = ", ".join(v for v in VERBS if v in self.can) or "nothing"
            raise Forbidden("authorization", f'this token has no {verb} scope on bank "{bank}" (it has: {granted})',
                            f"ask the operator for a token with can={verb} for this bank")


ANONYMOUS = Caller()


def _verbs(value: Any, where: str) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) for v in items):
        raise RcllError(where, "can must be a list of verbs", f"use some of: {', '.join(VERBS)} (or all)")
    out: set[str] = set()
    for v in (x.strip().lower() for x in items):
        if v in ("all", "*"):
            out |= ALL_VERBS
        elif v in ALL_VERBS:
            out.add(v)
        else:
            raise RcllError(where, f"unknown verb {v!r}", f"use some of: {', '.join(VERBS)} (or all)")
    if not out:
        raise RcllError(where, "can is empty", f"use some of: {', '.join(VERBS)} (or all)")
    return frozenset(out)


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) for v in items):
        raise RcllError(where, "banks must be a list of bank names or patterns", 'e.g. ["team-a", "team-a-*"]')
    out = tuple(p.strip() for p in items if p.strip())
    if not out:
        raise RcllError(where, "banks is empty", 'name banks or patterns, e.g. banks=team-a,team-a-* (or banks=*)')
    for p in out:
        if not _PATTERN.match(p):
            raise RcllError(where, f"{p!r} is not a bank name or pattern",
                            "letters, digits, _ . : - and the wildcards * and ?")
    return out


def _caller(agent: Any, banks: Any, can: Any, where: str) -> Caller:
    if not isinstance(agent, str) or not agent.strip():
        raise RcllError(where, "an agent name is empty")
    return Caller(agent.strip(), ("*",) if banks is None else _patterns(banks, where),
                  ALL_VERBS if can is None else _verbs(can, where))


def _parse_json(text: str, where: str) -> dict[str, Caller]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise RcllError(where, f"not valid JSON: {e.msg}",
                        'use {"<token>": "<agent>"} or {"<token>": {"agent": ..., "banks": [...], "can": [...]}}') from e
    if not isinstance(obj, dict):
        raise RcllError(where, "must map token strings to agents")
    out: dict[str, Caller] = {}
    for token, v in obj.items():
        if isinstance(v, str):
            out[token] = _caller(v, None, None, where)
        elif isinstance(v, dict):
            extra = set(v) - {"agent", "banks", "can"}
            if extra:
                raise RcllError(where, f"unknown key {sorted(extra)[0]!r} for agent {v.get('agent')!r}",
                                "a token's object has agent, banks and can")
            out[token] = _caller(v.get("agent"), v.get("banks"), v.get("can"), where)
        else:
            raise RcllError(where, "must map token strings to agent strings or {agent, banks, can} objects")
    return out


def _parse_line(line: str, where: str) -> tuple[str, Caller]:
    """One entry, read completely or refused: "<token> <agent> [banks=...] [can=...]" (whitespace-
    separated) or the old "<token>=<agent>". Any other word - a misspelled bank=, a second word of
    an agent name - is an error naming the line: read loosely, a typo would widen the token to
    every bank and every verb. The error never repeats the token."""
    words = line.split()
    if len(words) == 1 and "=" in words[0]:
        token, _, agent = words[0].partition("=")
        words = [token, agent]
    if len(words) < 2 or "=" in words[0] or "=" in words[1] or not words[1]:
        raise RcllError(where, "expected '<token> <agent> [banks=...] [can=...]'",
                        "the token first, then the agent, then banks= and can=")
    scope: dict[str, str] = {}
    for word in words[2:]:
        m = _SCOPE_WORD.match(word)
        if m is None:
            key = word.partition("=")[0].lower()
            near = difflib.get_close_matches(key, ("banks", "can"), n=1, cutoff=0.5)
            raise RcllError(where, f"cannot read {word!r}: after the agent only banks=... and can=... may follow",
                            f"did you mean {near[0]}=?" if near and "=" in word else
                            "an agent name is one word; scope it with banks=<pattern,...> can=<verb,...>")
        key = m.group(1).lower()
        if key in scope:
            raise RcllError(where, f"{key}= given twice")
        scope[key] = m.group(2)
    return words[0], _caller(words[1], scope.get("banks"), scope.get("can"), where)


def _parse(text: str, where: str) -> dict[str, Caller]:
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        out = _parse_json(text, where)
    else:
        out = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            for part in (p.strip() for p in line.split(";")):
                # The old inline form "tokA alice,tokB bob": a comma separates entries unless the
                # entry carries a scope, whose lists are comma-separated.
                entries = [part] if _FIELD.search(" " + part) else [e.strip() for e in part.split(",")]
                for entry in (e for e in entries if e):
                    token, caller = _parse_line(entry, f"{where} line {n}")
                    out[token] = caller
    for token, caller in out.items():
        if len(token) < 16:
            raise RcllError(where, f"a token for agent {caller.agent!r} is shorter than 16 characters",
                            "use long random tokens (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')")
    return out


@dataclass
class TokenMap:
    """Bearer token -> Caller (agent and scope)."""

    _callers: dict[bytes, Caller] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenMap:
        """The tokens RCLL_TOKENS and RCLL_TOKENS_FILE set in `env` (from_settings of its settings)."""
        return cls.from_settings(Settings.from_env(env))

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenMap:
        """settings.tokens (RCLL_TOKENS) and the lines of settings.tokens_file (RCLL_TOKENS_FILE)."""
        callers: dict[str, Caller] = {}
        if settings.tokens:
            callers |= _parse(settings.tokens, "RCLL_TOKENS")
        if settings.tokens_file is not None:
            path = settings.tokens_file
            try:
                callers |= _parse(path.read_text(), "RCLL_TOKENS_FILE")
            except OSError as e:
                raise RcllError("RCLL_TOKENS_FILE", f"cannot read {path}: {e.strerror}") from e
        return cls.from_pairs(callers)

    @classmethod
    def from_text(cls, text: str, where: str = "tokens") -> TokenMap:
        """The tokens in `text` (either form RCLL_TOKENS takes)."""
        return cls.from_pairs(_parse(text, where))

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, str | Caller]) -> TokenMap:
        """token -> agent (every bank, every verb) or token -> Caller."""
        return cls({_digest(t): c if isinstance(c, Caller) else _caller(c, None, None, "tokens")
                    for t, c in pairs.items()})

    @property
    def enabled(self) -> bool:
        return bool(self._callers)

    def caller_for(self, authorization: str | None) -> Caller:
        """The Caller an Authorization header authenticates; ANONYMOUS when the server has no
        tokens. Raises RcllError(field="authorization") when tokens are configured and the header
        is missing or wrong."""
        if not self.enabled:
            return ANONYMOUS
        if not authorization:
            raise RcllError("authorization", "missing bearer token",
                            "send Authorization: Bearer <token> (tokens come from RCLL_TOKENS / RCLL_TOKENS_FILE)",
                            code=Code.UNAUTHENTICATED)
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise RcllError("authorization", "expected a bearer token", "send Authorization: Bearer <token>",
                            code=Code.UNAUTHENTICATED)
        d = _digest(token.strip())
        found: Caller | None = None
        for known, caller in self._callers.items():
            if hmac.compare_digest(known, d):
                found = caller
        if found is None:
            raise RcllError("authorization", "unknown token", "ask the operator for a token mapped to your agent",
                            code=Code.UNAUTHENTICATED)
        return found

    def agent_for(self, authorization: str | None) -> str | None:
        """The agent an Authorization header authenticates; None when the server is anonymous."""
        return self.caller_for(authorization).agent


# -- where the server may listen -------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped) and the name localhost. Other names are not resolved:
    a name that happens to resolve to loopback today may not tomorrow."""
    h = host.strip().strip("[]").lower()
    if h in ("localhost", "localhost."):
        return True
    try:
        ip = ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def allow_anonymous_network(flag: bool, settings: Settings) -> bool:
    """The --allow-anonymous-network flag or RCLL_ALLOW_ANONYMOUS_NETWORK=1 (settings.allow_anonymous_network)."""
    return flag or settings.allow_anonymous_network


def check_listen(host: str, tokens: TokenMap, *, allow_anonymous: bool, flag: str = "--allow-anonymous-network") -> None:
    """Refuse to serve anonymously beyond loopback: anyone who reaches the port would read, write
    and export every bank. Called before anything binds or connects."""
    if tokens.enabled or is_loopback(host) or allow_anonymous:
        return
    raise RcllError("host", f"refusing to listen on {host} (not loopback) without tokens",
                    "set RCLL_TOKENS or RCLL_TOKENS_FILE (see README: token scopes), or listen on 127.0.0.1, "
                    f"or pass {flag} (RCLL_ALLOW_ANONYMOUS_NETWORK=1) to serve every bank to anyone who can "
                    "reach the port", code=Code.NOT_PERMITTED)


# -- the database side -------------------------------------------------------------------------------

def act_as(conn: psycopg.Connection[Any], agent: str | None, *, session: bool = False) -> None:
    """Inside an open transaction: write and recall as `agent` (None clears it). session: for the
    rest of the session instead (for work that commits several transactions; clear it after)."""
    conn.execute("SELECT set_config('rcll.agent', %s, %s)", (agent or "", not session))


def identity_server_ok(conn: psycopg.Connection[Any]) -> bool:
    """Whether rcll.agent set by this connection is honoured (member of rcll_identity_server)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rcll_identity_server') "
        "AND pg_has_role(session_user, 'rcll_identity_server', 'MEMBER')").fetchone()
    return bool(row and row[0])


def can_write(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connected role could write memory (superuser, or INSERT/UPDATE/DELETE on a table)."""
    row = conn.execute(
        "SELECT r.rolsuper OR EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
        "AND c.relkind = 'r' AND (has_table_privilege(c.oid, 'INSERT') OR has_table_privilege(c.oid, 'UPDATE') "
        "OR has_table_privilege(c.oid, 'DELETE'))) FROM pg_roles r WHERE r.rolname = current_user").fetchone()
    return bool(row and row[0])
