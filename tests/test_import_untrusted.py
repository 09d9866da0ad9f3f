"""An imported stream is untrusted input: a token that may import into one bank writes into that
bank and nothing else - no sequence, no other bank's row, no grant, no author, no lock that other
banks' writes wait on - and a refused or cut stream leaves no trace at all."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from rcll.auth import Caller, TokenMap
from rcll.http import create_app
from rcll.memory import Memory

TOKEN = "import-token-" + "i" * 24
AGENT = "importer"
BIG = 9_200_000_000_000_000_000

# Every import is sent as what it is: the HTTP guard refuses a write without its content type.
NDJSON = {"Content-Type": "application/x-ndjson"}


@dataclass
class World:
    dsn: str
    svc: Memory
    client: TestClient          # the importer: import, read and write into alpha* only
    export: bytes               # alpha's export stream, as GET /export gives it


def seed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for bank in ("alpha", "beta"):
            conn.execute("SELECT rcll.create_bank(%s)", (bank,))
            for i in range(3):
                text = f"{bank} note {i}: the {bank} team deploys on day {i}."
                conn.execute("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s], "
                             "embeddings => NULL, room => 'deployment', author => 'writer')", (bank, text, text))
            units = [r[0] for r in conn.execute(
                "SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s) ORDER BY 1", (bank,))]
            conn.execute("INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight) "
                         "VALUES (rcll._bank_id(%s), %s, %s, 'semantic', 0.5)", (bank, units[0], units[1]))
            entity = conn.execute("INSERT INTO rcll.entities (bank_id, name) VALUES (rcll._bank_id(%s), %s) "
                                  "RETURNING entity_id", (bank, f"{bank}-service")).fetchone()
            assert entity is not None
            conn.execute("INSERT INTO rcll.unit_entities (bank_id, unit_id, entity_id) VALUES (rcll._bank_id(%s), %s, %s)",
                         (bank, units[0], entity[0]))
            conn.execute("INSERT INTO rcll.entity_aliases (bank_id, alias, entity_id) VALUES (rcll._bank_id(%s), %s, %s)",
                         (bank, f"{bank}-svc", entity[0]))
        conn.execute("SELECT rcll.grant_bank('pg_monitor', 'beta')")


@pytest.fixture
def world(dsn: str) -> Iterator[World]:
    seed(dsn)
    svc = Memory(dsn)
    try:
        admin = TestClient(create_app(service=svc, tokens=TokenMap()))
        export = admin.get("/export", params={"bank": "alpha"}).content
        importer = Caller(AGENT, ("alpha*",), frozenset({"import", "read", "write"}))
        client = TestClient(create_app(service=svc, tokens=TokenMap.from_pairs({TOKEN: importer})),
                            headers={"Authorization": f"Bearer {TOKEN}"})
        yield World(dsn, svc, client, export)
    finally:
        svc.close()


# -- streams: parsed, changed, sealed again with a valid trailer ----------------------------------------

def parse(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """The header, the row lines and whether the stream ended with a trailer."""
    lines = [json.loads(x) for x in body.splitlines() if x.strip()]
    sealed = "trailer" in lines[-1]
    return lines[0], lines[1:-1] if sealed else lines[1:], sealed


def build(head: dict[str, Any], rows: list[dict[str, Any]], sealed: bool) -> bytes:
    """A stream of these lines; sealed: with the trailer an honest exporter would write for them
    (per-table row counts, SHA-256 over every line before it), so the stream's content is what
    is refused or accepted, not its trailer."""
    lines = [json.dumps(head).encode() + b"\n"] + [json.dumps(r).encode() + b"\n" for r in rows]
    if sealed:
        counts = {t: 0 for t in head.get("tables", [])}
        for r in rows:
            counts[r["table"]] = counts.get(r["table"], 0) + 1
        digest = hashlib.sha256(b"".join(lines)).hexdigest()
        lines.append(json.dumps({"trailer": {"rows": counts, "sha256": digest}}).encode() + b"\n")
    return b"".join(lines)


def renamed(body: bytes, bank: str, extra: list[dict[str, Any]] | None = None,
            change: Any = None) -> bytes:
    head, rows, sealed = parse(body)
    head["bank"] = bank
    for r in rows:
        if r["table"] == "banks":
            r["row"]["name"] = bank
        if change is not None:
            change(r)
    rows += extra or []
    order = {t: i for i, t in enumerate(head["tables"])}
    rows.sort(key=lambda r: order.get(r["table"], 99))
    return build(head, rows, sealed)


# -- what must not move ---------------------------------------------------------------------------------

def sequences(dsn: str) -> dict[str, tuple[int, bool]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        seqs = [str(r[0]) for r in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
            "AND c.relkind = 'S' ORDER BY 1")]
        out = {}
        for s in seqs:
            row = conn.execute(f"SELECT last_value, is_called FROM {s}").fetchone()  # s: a catalog regclass
            assert row is not None
            out[s] = (int(row[0]), bool(row[1]))
        return out


def outside(dsn: str, bank: str = "alpha") -> dict[str, list[str]]:
    """Every row no import into `bank` (or a new alpha-* bank) may change: other banks' rows in every
    table, database-wide rows (bank_id NULL), grants, identities, the global rules."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [str(r[0]) for r in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
            "AND c.relkind IN ('r', 'p') AND c.relname NOT IN ('migrations') ORDER BY 1")]
        out: dict[str, list[str]] = {}
        for t in tables:
            has_bank = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
                                    "AND attname = 'bank_id' AND NOT attisdropped)", (t,)).fetchone()
            where = ("WHERE r.bank_id IS NULL OR r.bank_id IN (SELECT bank_id FROM rcll.banks WHERE name NOT LIKE 'alpha%%')"
                     if has_bank and has_bank[0] else "")
            if t == "rcll.bank_grants":
                where = ""
            out[t] = [str(r[0]) for r in conn.execute(f"SELECT r::text FROM {t} r {where} ORDER BY 1")]
        return out


def banks(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute("SELECT name FROM rcll.banks")}


def refused(r: Any) -> bool:
    """A refusal the caller can act on: 4xx with the field named (never a 5xx)."""
    return 400 <= r.status_code < 500 and bool(r.json().get("field"))


# -- the promises -----------------------------------------------------------------------------------------

def test_a_refused_import_leaves_every_sequence_unchanged(world: World) -> None:
    head, rows, sealed = parse(world.export)
    # The stream names the bank that exists (refused: on_conflict error) and claims ids at the top of the range.
    head["max_ids"] = {"banks": 2**31 - 10} | {t: BIG for t in ("documents", "memory_units", "entities", "room_merge_proposals",
                                        "audit_log", "llm_calls")}
    before, rows_before = sequences(world.dsn), outside(world.dsn)
    r = world.client.post("/import", headers=NDJSON, content=build(head, rows, sealed))
    assert refused(r) and r.json()["field"] == "bank", r.text
    assert sequences(world.dsn) == before
    # A stream refused deep inside (a unit of no known kind) into a bank it would create.
    bad = renamed(world.export, "alpha-new", change=lambda x: x["row"].update(kind="bogus")
                  if x["table"] == "memory_units" and "note 2" in x["row"]["text"] else None)
    r = world.client.post("/import", headers=NDJSON, content=bad)
    assert refused(r), r.text
    assert sequences(world.dsn) == before
    assert outside(world.dsn) == rows_before and "alpha-new" not in banks(world.dsn)
    # and the next write in another bank gets an ordinary id
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT unit_ids FROM rcll.retain_chunks(bank => 'beta', content => 'after', "
                           "chunks => ARRAY['after'], embeddings => NULL)").fetchone()
        assert row is not None and row[0][0] < 10**9


def test_an_import_cannot_touch_another_banks_rows(world: World) -> None:
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        beta_units = [r[0] for r in conn.execute(
            "SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id('beta') ORDER BY 1")]
        beta_entity = conn.execute("SELECT entity_id FROM rcll.entities WHERE bank_id = rcll._bank_id('beta')").fetchone()
    assert beta_entity is not None
    before = outside(world.dsn)
    aimed = [  # rows whose keys are beta's: its link, its unit-entity row, a unit id, an alias of its entity
        {"table": "links", "row": {"from_unit": beta_units[0], "to_unit": beta_units[1], "link_type": "semantic",
                                   "weight": 0.01, "provenance": {"by": "attacker"}, "created_at": "2024-01-01 00:00:00+00"}},
        {"table": "unit_entities", "row": {"unit_id": beta_units[0], "entity_id": beta_entity[0], "role": "owned"}},
        {"table": "entity_aliases", "row": {"alias": "owned", "entity_id": beta_entity[0], "source": "human",
                                            "created_at": "2024-01-01 00:00:00+00"}},
    ]
    for extra in ([a] for a in aimed):
        for policy in ("error", "skip", "replace"):
            target = "alpha" if policy != "error" else "alpha-new"
            r = world.client.post("/import", headers=NDJSON, params={"on_conflict": policy},
                                  content=renamed(world.export, target, extra))
            assert r.status_code < 500, r.text
    # Units that carry beta's unit ids (and links between them) are new units of alpha, not beta's.
    head, rows, sealed = parse(world.export)
    ours = sorted(r["row"]["unit_id"] for r in rows if r["table"] == "memory_units")
    theirs = dict(zip(ours, beta_units))
    for r in rows:
        for col in ("unit_id", "from_unit", "to_unit", "superseded_by"):
            if r["table"] in ("memory_units", "links", "unit_entities") and r["row"].get(col) in theirs:
                r["row"][col] = theirs[r["row"][col]]
        if r["table"] == "memory_units":
            r["row"]["text"] = "overwritten by an import"
    for policy in ("skip", "replace"):
        r = world.client.post("/import", headers=NDJSON, params={"on_conflict": policy}, content=build(head, rows, sealed))
        assert r.status_code < 500, r.text
    assert outside(world.dsn) == before


def test_an_import_cannot_grant_a_bank(world: World) -> None:
    grant = {"table": "bank_grants", "row": {"role_name": "intruder", "created_at": "2024-01-01 00:00:00+00"}}
    for target, policy in (("alpha-new", "error"), ("alpha", "skip"), ("alpha", "replace")):
        r = world.client.post("/import", headers=NDJSON, params={"on_conflict": policy}, content=renamed(world.export, target, [grant]))
        assert r.status_code < 500, r.text
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM rcll.bank_grants WHERE role_name = 'intruder'").fetchone() == (0,)


def test_imported_units_keep_their_author_as_provenance_only(world: World) -> None:
    def forge(x: dict[str, Any]) -> None:
        if x["table"] == "memory_units":
            x["row"].update(author="ceo", author_source="server", tags=["author:ceo", "ops"])
    r = world.client.post("/import", headers=NDJSON, content=renamed(world.export, "alpha-new", change=forge))
    assert r.status_code == 200, r.text
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        units = conn.execute("SELECT author, author_source, tags, provenance FROM rcll.memory_units "
                             "WHERE bank_id = rcll._bank_id('alpha-new')").fetchall()
        assert len(units) == 3
        for author, source, tags, provenance in units:
            assert author is None and source == "imported", (author, source)
            assert not any(t.startswith("author:") for t in tags), tags
            assert provenance["imported"]["author"] == "ceo", provenance
        # recorded as the caller's act, in the bank it wrote
        audit = conn.execute("SELECT actor, bank_id = rcll._bank_id('alpha-new') FROM rcll.audit_log "
                             "WHERE action = 'import'").fetchall()
        assert audit == [(AGENT, True)], audit
    # an authors filter or mine never counts them
    for body in ({"authors": ["ceo"]}, {"mine": True}):
        r = world.client.post("/recall", json={"bank": "alpha-new", "query": "how does the team deploy", **body})
        assert r.status_code == 200 and r.json()["facts"] == [], r.text


@pytest.mark.parametrize("cut", ["last_line", "trailer_and_a_row", "a_table", "a_count", "the_checksum", "a_row_edited"])
def test_a_cut_export_stream_is_refused(world: World, cut: str) -> None:
    body = renamed(world.export, "alpha-new")
    lines = body.splitlines(keepends=True)
    if cut == "last_line":
        body = b"".join(lines[:-1])
    elif cut == "trailer_and_a_row":
        body = b"".join(lines[:-2])
    elif cut == "a_table":
        body = b"".join(x for x in lines if not x.startswith(b'{"table": "links"'))
    elif cut in ("a_count", "the_checksum"):
        trailer = json.loads(lines[-1]) if b'"trailer"' in lines[-1] else {"trailer": {"rows": {}, "sha256": ""}}
        if cut == "a_count":
            trailer["trailer"]["rows"]["memory_units"] = 4
        else:
            trailer["trailer"]["sha256"] = "0" * 64
        body = b"".join(lines[:-1]) + json.dumps(trailer).encode() + b"\n"
    else:
        body = b"".join(lines).replace(b"alpha note 1", b"alpha note X", 1)
    before = sequences(world.dsn)
    r = world.client.post("/import", headers=NDJSON, content=body)
    assert refused(r), (cut, r.status_code, r.text)
    assert "trailer" in r.json()["field"] or "trailer" in r.json()["error"], r.text
    assert "alpha-new" not in banks(world.dsn) and sequences(world.dsn) == before


def test_an_import_does_not_block_writes_into_other_banks(world: World) -> None:
    lines = renamed(world.export, "alpha-new").splitlines(keepends=True)
    written: list[str] = []

    def other_bank_write() -> None:
        try:
            with psycopg.connect(world.dsn, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '2s'")
                conn.execute("SELECT rcll.retain_chunks(bank => 'beta', content => 'during the import', "
                             "chunks => ARRAY['during the import'], embeddings => NULL)")
            written.append("ok")
        except psycopg.Error as e:
            written.append(f"{type(e).__name__}: {e}")

    def stream() -> Iterator[bytes]:
        # Every table but the last has reached the database when the last line is asked for.
        for i, line in enumerate(lines):
            if i == len(lines) - 1:
                t = threading.Thread(target=other_bank_write)
                t.start()
                t.join(10)
            yield line

    world.svc.import_lines(stream())
    assert written == ["ok"]
