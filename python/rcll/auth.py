"""Who is calling: bearer tokens mapped to agents, and the identity a transaction writes as.

The author axis is the server's word, never the request body's. A server that authenticates a
caller sets the transaction-local GUC rcll.agent (set_config('rcll.agent', agent, true));
rcll.current_agent() honours it only when the connecting role is a member of
rcll_identity_server (see sql/functions/030-authors.sql), so a psql user cannot forge it.

Tokens: RCLL_TOKENS (inline) and/or RCLL_TOKENS_FILE (a path). Either holds a JSON object
{"<token>": "<agent>"} or lines "<token> <agent>" (# comments allowed). Only SHA-256 digests of
tokens are kept in memory; comparison is constant-time. With no tokens configured the server is
anonymous: requests are accepted and writes carry no author (absent rather than wrong).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from rcll.errors import RcllError


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _parse(text: str, where: str) -> dict[str, str]:
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise RcllError(where, f"not valid JSON: {e.msg}", 'use {"<token>": "<agent>"}') from e
        if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
            raise RcllError(where, "must map token strings to agent strings")
        pairs = dict(obj)
    else:
        pairs = {}
        for n, line in enumerate(text.replace(",", "\n").splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            token, _, agent = line.replace("=", " ", 1).partition(" ")
            if not agent.strip():
                raise RcllError(f"{where} line {n}", "expected '<token> <agent>'")
            pairs[token] = agent.strip()
    for token, agent in pairs.items():
        if len(token) < 16:
            raise RcllError(where, f"a token for agent {agent!r} is shorter than 16 characters",
                            "use long random tokens (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')")
        if not agent.strip():
            raise RcllError(where, "an agent name is empty")
    return pairs


@dataclass
class TokenMap:
    """Bearer token -> agent."""

    _agents: dict[bytes, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TokenMap:
        env = dict(os.environ) if env is None else env
        pairs: dict[str, str] = {}
        if env.get("RCLL_TOKENS"):
            pairs |= _parse(env["RCLL_TOKENS"], "RCLL_TOKENS")
        if env.get("RCLL_TOKENS_FILE"):
            path = Path(env["RCLL_TOKENS_FILE"])
            try:
                pairs |= _parse(path.read_text(), "RCLL_TOKENS_FILE")
            except OSError as e:
                raise RcllError("RCLL_TOKENS_FILE", f"cannot read {path}: {e.strerror}") from e
        return cls.from_pairs(pairs)

    @classmethod
    def from_pairs(cls, pairs: dict[str, str]) -> TokenMap:
        return cls({_digest(t): a.strip() for t, a in pairs.items()})

    @property
    def enabled(self) -> bool:
        return bool(self._agents)

    def agent_for(self, authorization: str | None) -> str | None:
        """The agent an Authorization header authenticates; None when the server is anonymous.
        Raises RcllError(field="authorization") when tokens are configured and the header is
        missing or wrong."""
        if not self.enabled:
            return None
        if not authorization:
            raise RcllError("authorization", "missing bearer token",
                            "send Authorization: Bearer <token> (tokens come from RCLL_TOKENS / RCLL_TOKENS_FILE)")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise RcllError("authorization", "expected a bearer token", "send Authorization: Bearer <token>")
        d = _digest(token.strip())
        for known, agent in self._agents.items():
            if hmac.compare_digest(known, d):
                return agent
        raise RcllError("authorization", "unknown token", "ask the operator for a token mapped to your agent")


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
