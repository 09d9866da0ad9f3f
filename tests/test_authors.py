"""Authors: resolved by the server, never taken from the caller; carried on an author: tag."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import MakeLoginRole
from rcll.db import configure
from sqlcall import call_one

Db = psycopg.Connection[Any]


def retain(db: Db, text: str, **kw: Any) -> dict[str, Any]:
    args = {"bank": "b", "content": text, "chunks": [text], "embeddings": None, **kw}
    uid = call_one(db, "rcll.retain_chunks", **args)["unit_ids"][0]
    row = db.execute("""SELECT u.author, u.author_source, u.tags, u.provenance, d.provenance
                        FROM rcll.memory_units u JOIN rcll.documents d USING (document_id)
                        WHERE u.unit_id = %s""", (uid,)).fetchone()
    assert row is not None
    return dict(zip(["author", "author_source", "tags", "provenance", "doc_provenance"], row))


def author_tags(u: dict[str, Any]) -> list[str]:
    return sorted(t for t in u["tags"] if t.startswith("author"))


@pytest.fixture
def bank(db: Db) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


def test_forged_author_is_replaced(db: Db, bank: str) -> None:
    db.execute("SET rcll.agent = 'alice'")          # the server authenticated alice (postgres is a member)
    u = retain(db, "deploys go out on Tuesdays", author="mallory", tags=["author:mallory", "author-source:server"])
    assert (u["author"], u["author_source"]) == ("alice", "server")
    assert author_tags(u) == ["author:alice"]
    assert u["provenance"]["who"] == "alice" and u["doc_provenance"]["who"] == "alice"
    # A direct INSERT gets the same treatment: the database decides, whatever the client is.
    row = db.execute("""
        INSERT INTO rcll.memory_units (bank_id, text, author, author_source, tags, provenance)
        SELECT bank_id, 'raw insert', 'mallory', 'server', ARRAY['author:mallory'], '{"via": "psql", "who": "mallory"}'
        FROM rcll.banks WHERE name = 'b' RETURNING author, author_source, tags, provenance ->> 'who'""").fetchone()
    assert row == ("alice", "server", ["author:alice"], "alice")


def test_self_declared_author_is_kept_and_marked(db: Db, bank: str) -> None:
    u = retain(db, "a fact", author="bob", tags=["author:mallory"])
    assert (u["author"], u["author_source"]) == ("bob", "self_declared")
    assert author_tags(u) == ["author-source:self_declared", "author:bob"]
    assert u["provenance"]["author_source"] == "self_declared"


def test_no_identity_means_no_author_and_one_warning(db: Db, bank: str) -> None:
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(f"{d.severity_nonlocalized}: {d.message_primary}"))
    db.execute("SELECT rcll.retain_chunks('b', 'two chunks', ARRAY['one', 'two'], NULL)")
    rows = db.execute("SELECT author, author_source, tags FROM rcll.memory_units").fetchall()
    assert rows == [(None, "none", []), (None, "none", [])]           # never the connection's account
    assert [n for n in notices if n.startswith("WARNING: author:")] == \
        ["WARNING: author: no identity for this write; 2 unit(s) stored without an author"]


def test_mapped_role_writes_as_its_agent(db: Db, bank: str, login_role: MakeLoginRole) -> None:
    role, role_dsn = login_role(member_of="rcll_agent")      # may write to rcll
    db.execute("INSERT INTO rcll.identities (role_name, agent) VALUES (%s, 'deployer')", (role,))
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        configure(conn)
        conn.execute("SET rcll.agent = 'alice'")                     # a mapped role's identity is fixed
        u = retain(conn, "rolled back the release", author="mallory")
    assert (u["author"], u["author_source"]) == ("deployer", "server")
    assert author_tags(u) == ["author:deployer"]


def test_rcll_agent_is_honoured_only_for_the_identity_server(db: Db, bank: str, login_role: MakeLoginRole) -> None:
    role, role_dsn = login_role(member_of="rcll_agent")      # may write to rcll
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        configure(conn)
        conn.execute("SET rcll.agent = 'alice'")                     # a psql user forging the server's GUC
        assert conn.execute("SELECT rcll.current_agent()").fetchone() == (None,)
        assert retain(conn, "forged", author="eve")["author_source"] == "self_declared"
    db.execute(sql.SQL("GRANT rcll_identity_server TO {}").format(sql.Identifier(role)))
    try:
        with psycopg.connect(role_dsn, autocommit=True) as conn:
            configure(conn)
            conn.execute("SET rcll.agent = 'alice'")
            u = retain(conn, "authenticated", author="eve")
        assert (u["author"], u["author_source"]) == ("alice", "server")
    finally:
        db.execute(sql.SQL("REVOKE rcll_identity_server FROM {}").format(sql.Identifier(role)))


def test_consolidation_may_carry_author_tags_only_as_the_server(db: Db, bank: str, login_role: MakeLoginRole) -> None:
    insert = """INSERT INTO rcll.memory_units (bank_id, kind, text, tags, provenance)
                SELECT bank_id, 'observation', 'merged observation', ARRAY['author:alice', 'author:bob'],
                       '{"via": "consolidate"}' FROM rcll.banks WHERE name = 'b' RETURNING tags"""
    db.execute("SET rcll.carry_tags = on")
    assert db.execute(insert).fetchone() == (["author:alice", "author:bob"],)
    role, role_dsn = login_role(member_of="rcll_agent")      # may write to rcll
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        conn.execute("SET rcll.carry_tags = on")
        assert conn.execute(insert).fetchone() == ([],)


def test_a_self_declared_author_does_not_count_as_mine(db: Db, bank: str) -> None:
    """Anyone may write author => 'alice'; only what the server resolved as alice is hers in a
    recall's mine or authors filter - unless the caller opts in with include_self_declared."""
    def unit(text: str, **kw: Any) -> int:
        return int(call_one(db, "rcll.retain_chunks", bank="b", content=text, chunks=[text], embeddings=None, **kw)
                   ["unit_ids"][0])

    with db.transaction():
        db.execute("SET LOCAL rcll.agent = 'alice'")
        hers = unit("alice rolled back the deploy")
    claimed = unit("alice approved the deploy", author="alice")          # self-declared by whoever wrote it

    def found(scope: str) -> set[int]:
        with db.transaction():
            db.execute("SET LOCAL rcll.agent = 'alice'")
            rows = db.execute(f"SELECT unit_id FROM rcll.recall_channels('deploy', rcll.recall_scope('b'{scope}))")
            return {int(r[0]) for r in rows}

    assert found("") == {hers, claimed}
    assert found(", mine => true") == {hers}
    assert found(", authors => '{alice}'") == {hers}
    assert found(", mine => true, include_self_declared => true") == {hers, claimed}
    assert found(", authors => '{alice}', include_self_declared => true") == {hers, claimed}
