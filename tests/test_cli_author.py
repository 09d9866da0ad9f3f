"""Writes from the CLI carry the author the database resolves for the CLI's own login
(rcll.login_agent): the role's agent in rcll.identities; for a role trusted to name agents
(rcll_identity_server, superusers included) the configured $RCLL_AGENT, else the login role's
name; for any other role none. The caller never types it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from conftest import LEGS, MakeLoginRole

ROOT = Path(__file__).resolve().parents[1]

# The CLI is the same on every leg and each verb is a process start: one leg is enough.
pytestmark = pytest.mark.parametrize("leg", LEGS[:1], indirect=True)


def rcll(dsn: str, *args: str, agent: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RCLL_DSN", "RCLL_AGENT")}
    env |= {"LLM_PROVIDER": "none", "PYTHONPATH": str(ROOT / "python")}
    if agent is not None:
        env["RCLL_AGENT"] = agent
    return subprocess.run([sys.executable, "-m", "rcll.cli", *args, "--dsn", dsn], env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout


def authors(dsn: str) -> list[tuple[str | None, str]]:
    with psycopg.connect(dsn) as conn:
        return [(a, s) for a, s in conn.execute(
            "SELECT DISTINCT author, author_source FROM rcll.memory_units ORDER BY 1")]


@pytest.fixture
def fleet(dsn: str) -> str:
    ok(rcll(dsn, "bank", "create", "fleet"))
    return dsn


def test_the_login_role_is_the_author_when_nothing_is_configured(fleet: str) -> None:
    # The test database's login is postgres, a superuser: the database names it, the CLI does not.
    ok(rcll(fleet, "retain", "--bank", "fleet", "--room", "deployment", "We deploy with Argo CD."))
    assert ok(rcll(fleet, "tags", "--bank", "fleet", "author:*")).split() == ["author:postgres", "1"]
    assert authors(fleet) == [("postgres", "server")]


def test_the_configured_identity_is_the_author(fleet: str) -> None:
    ok(rcll(fleet, "retain", "--bank", "fleet", "Rollbacks use helm rollback.", agent="deployer"))
    ok(rcll(fleet, "state", "put", "deployment", "spread", '{"n": 1}', "--bank", "fleet", agent="deployer"))
    assert ok(rcll(fleet, "tags", "--bank", "fleet", "author:*")).split() == ["author:deployer", "1"]
    assert authors(fleet) == [("deployer", "server")]
    assert "(deployer," in ok(rcll(fleet, "state", "history", "deployment", "spread", "--bank", "fleet"))
    # --mine recalls what this identity wrote.
    mine = ok(rcll(fleet, "recall", "--bank", "fleet", "--mine", "how do we roll back?", agent="deployer"))
    assert "helm rollback" in mine
    assert ok(rcll(fleet, "recall", "--bank", "fleet", "--mine", "how do we roll back?", agent="other")) == ""


def test_a_mapped_role_writes_as_its_agent_whatever_is_configured(fleet: str, login_role: MakeLoginRole) -> None:
    role, role_dsn = login_role(member_of="rcll_agent")
    with psycopg.connect(fleet, autocommit=True) as conn:
        conn.execute("INSERT INTO rcll.identities (role_name, agent) VALUES (%s, 'carol')", (role,))
    p = rcll(role_dsn, "retain", "--bank", "fleet", "Carol owns billing.", agent="mallory")
    assert "note:" not in ok(p) + p.stderr
    assert ok(rcll(fleet, "tags", "--bank", "fleet", "author:*")).split() == ["author:carol", "1"]
    assert authors(fleet) == [("carol", "server")]


def test_an_unmapped_plain_role_writes_no_author_and_is_told_why(fleet: str, login_role: MakeLoginRole) -> None:
    # The database cannot tell a person's login from an account many agents share: absent rather
    # than wrong, and $RCLL_AGENT is not honoured for a role outside rcll_identity_server.
    role, role_dsn = login_role(member_of="rcll_agent")
    p = rcll(role_dsn, "retain", "--bank", "fleet", "Invoices go out on the first.", agent="mallory")
    ok(p)
    assert p.stderr.startswith("rcll: note: the database has no identity for this login")
    assert ok(rcll(fleet, "tags", "--bank", "fleet", "author:*")).strip() == "(no tags)"
    assert authors(fleet) == [(None, "none")]


def test_a_jsonl_line_cannot_name_its_author(fleet: str) -> None:
    p = rcll(fleet, "retain", "--bank", "fleet", "--jsonl", "-",
             stdin='{"content": "fine"}\n{"content": "forged", "author": "mallory"}\n')
    assert p.returncode == 2 and p.stderr.startswith("rcll: line 2.author: ") and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert authors(fleet) == []
