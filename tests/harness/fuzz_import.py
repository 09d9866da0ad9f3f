"""Fuzz POST /import with mutated real export streams, sent with a token that may import into the
target bank (and new target-* banks) only: no 5xx, no row changed outside the banks in reach, and
every sequence unchanged after each refused stream. Prints the counts per mutation.

    PYTHONPATH=tests:. .venv/bin/python -m harness.fuzz_import [--streams 10000] [--seed 0]
                                                     (RCLL_BENCH_DSN to reuse a database)

tests/test_import_fuzz.py runs it with a few hundred streams.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import sys
from collections.abc import Callable
from typing import Any

from ._database import fresh_database

TOKEN = "fuzz-import-" + "f" * 24
HUGE = [2**63 - 1, 2**63, -1, 0, 9_200_000_000_000_000_000, 10**30, 2**31]

Stream = tuple[dict[str, Any], list[dict[str, Any]]]     # header, row lines (no trailer)

# Every import is sent as what it is: the HTTP guard refuses a write without its content type.
NDJSON = {"Content-Type": "application/x-ndjson"}


def seed(dsn: str) -> None:
    """Two banks with every kind of row an export carries: target (in the token's reach) and other."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        x = conn.execute
        for bank in ("target", "other"):
            x("SELECT rcll.create_bank(%s)", (bank,))
            for i in range(6):
                text = f"{bank} note {i}: deploys go through tool {i} on day {i}."
                x("SELECT rcll.retain_chunks(bank => %s, content => %s, chunks => ARRAY[%s, %s], embeddings => NULL, "
                  "room => %s, tags => ARRAY['ops'], author => 'writer')",
                  (bank, text, text, text + " again", ["deployment", "database", "social"][i % 3]))
            units = [r[0] for r in x("SELECT unit_id FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s) "
                                     "ORDER BY 1", (bank,))]
            x("SELECT rcll.supersede(%s, %s)", (units[0], units[3]))
            for a, b in zip(units, units[1:]):
                x("INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight) "
                  "VALUES (rcll._bank_id(%s), %s, %s, 'semantic', 0.5) ON CONFLICT DO NOTHING", (bank, a, b))
            for n in range(2):
                row = x("INSERT INTO rcll.entities (bank_id, name) VALUES (rcll._bank_id(%s), %s) RETURNING entity_id",
                        (bank, f"{bank}-service-{n}")).fetchone()
                assert row is not None
                x("INSERT INTO rcll.entity_aliases (bank_id, alias, entity_id) VALUES (rcll._bank_id(%s), %s, %s)",
                  (bank, f"{bank}-svc-{n}", row[0]))
                x("INSERT INTO rcll.unit_entities (bank_id, unit_id, entity_id) VALUES (rcll._bank_id(%s), %s, %s)",
                  (bank, units[n], row[0]))
            for v in range(2):
                x("SELECT rcll.put_state(%s, 'deployment', 'spread', %s, %s)", (bank, json.dumps({"v": v}), v))
            x("SELECT rcll.propose_room_merge(%s, 'social', 'database', 'fuzz')", (bank,))
            x("SELECT rcll.move_units(%s, ARRAY[%s]::bigint[], 'database', 'fuzz')", (bank, units[2]))
            x("SELECT rcll.record_llm_calls(%s, %s)", (bank, json.dumps([
                {"purpose": "extract", "provider": "anthropic", "model": "m", "input_tokens": 1,
                 "output_tokens": 1, "outcome": "ok"}])))
        x("SELECT rcll.grant_bank('pg_monitor', 'other')")
        x("SELECT rcll.refresh_bank_stats('other')")


# -- streams ----------------------------------------------------------------------------------------------

def parse(body: bytes) -> Stream:
    lines = [json.loads(x) for x in body.splitlines() if x.strip()]
    assert "trailer" in lines[-1], "an export ends with its trailer"
    return lines[0], lines[1:-1]


def seal(head: dict[str, Any], rows: list[Any]) -> bytes:
    """The stream's lines with the trailer an honest exporter would write for them."""
    lines = [json.dumps(head).encode() + b"\n"] + [
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows]
    counts = dict.fromkeys(head.get("tables") or [], 0)
    for r in rows:
        if isinstance(r, dict) and isinstance(r.get("table"), str):
            counts[r["table"]] = counts.get(r["table"], 0) + 1
    trailer = {"trailer": {"rows": counts, "sha256": hashlib.sha256(b"".join(lines)).hexdigest()}}
    return b"".join(lines) + json.dumps(trailer).encode() + b"\n"


def _id_cells(rows: list[Any]) -> list[tuple[dict[str, Any], str]]:
    cols = ("unit_id", "document_id", "entity_id", "from_unit", "to_unit", "superseded_by", "proposal_id",
            "call_id", "audit_id", "bank_id")
    return [(r["row"], c) for r in rows if isinstance(r, dict) and isinstance(r.get("row"), dict)
            for c in cols if c in r["row"]]


def mutations(other_ids: list[int], other_rows: list[dict[str, Any]]) -> dict[str, Callable[[random.Random, Stream], None]]:
    def drop(rnd: random.Random, s: Stream) -> None:
        if s[1]:
            del s[1][rnd.randrange(len(s[1]))]

    def duplicate(rnd: random.Random, s: Stream) -> None:
        i = rnd.randrange(len(s[1]))
        s[1].insert(i, json.loads(json.dumps(s[1][i])))

    def reorder(rnd: random.Random, s: Stream) -> None:
        i, j = rnd.randrange(len(s[1])), rnd.randrange(len(s[1]))
        s[1][i], s[1][j] = s[1][j], s[1][i]

    def other_bank_id(rnd: random.Random, s: Stream) -> None:
        cells = _id_cells(s[1])
        for _ in range(rnd.randint(1, 4)):
            row, col = rnd.choice(cells)
            row[col] = rnd.choice(other_ids)

    def huge_id(rnd: random.Random, s: Stream) -> None:
        row, col = rnd.choice(_id_cells(s[1]))
        row[col] = rnd.choice(HUGE)

    def wrong_type(rnd: random.Random, s: Stream) -> None:
        r = rnd.choice([r for r in s[1] if isinstance(r, dict) and isinstance(r.get("row"), dict) and r["row"]])
        col = rnd.choice(sorted(r["row"]))
        r["row"][col] = rnd.choice(["x", "", [1, 2], {"a": 1}, None, True, 1.5, -7, "\u0000", "9" * 40])

    def foreign_bank(rnd: random.Random, s: Stream) -> None:
        name = rnd.choice(["other", "target", "nope", "", "a b", "x" * 200, None])
        for r in s[1]:
            if r.get("table") == "banks":
                r["row"]["name"] = name
                if rnd.random() < 0.5:
                    r["row"]["bank_id"] = rnd.choice(other_ids[:1] + [1, 2, 2**31 - 1])
        s[0]["bank"] = rnd.choice(["other", "target", name])

    def grant_row(rnd: random.Random, s: Stream) -> None:
        s[1].insert(rnd.randrange(1, len(s[1]) + 1), {"table": "bank_grants", "row": {
            "role_name": rnd.choice(["intruder", "postgres", "pg_monitor"]), "created_at": "2024-01-01 00:00:00+00"}})

    def foreign_rows(rnd: random.Random, s: Stream) -> None:
        """Rows of the other bank, ids and all (links, aliases, units...)."""
        for _ in range(rnd.randint(1, 3)):
            s[1].insert(rnd.randrange(1, len(s[1]) + 1), json.loads(json.dumps(rnd.choice(other_rows))))

    def audit_row(rnd: random.Random, s: Stream) -> None:
        s[1].append({"table": "audit_log", "row": {"audit_id": rnd.choice(HUGE), "bank_id": None, "actor": "admin",
                                                   "action": "grant", "at": "2024-01-01 00:00:00+00",
                                                   "target": {}, "detail": {}}})

    def unknown_table(rnd: random.Random, s: Stream) -> None:
        s[1].append({"table": rnd.choice(["identities", "pg_authid", "migrations", "room_rules", ""]),
                     "row": {"role_name": "x", "agent": "ceo"}})

    def forged_author(rnd: random.Random, s: Stream) -> None:
        for r in s[1]:
            if r.get("table") == "memory_units":
                r["row"].update(author="ceo", author_source="server", tags=["author:ceo"])

    return {"drop": drop, "duplicate": duplicate, "reorder": reorder, "other_bank_id": other_bank_id,
            "huge_id": huge_id, "wrong_type": wrong_type, "foreign_bank": foreign_bank, "grant_row": grant_row,
            "foreign_rows": foreign_rows, "audit_row": audit_row, "unknown_table": unknown_table,
            "forged_author": forged_author}


def damage(rnd: random.Random, body: bytes) -> tuple[str, bytes]:
    """What happens to the bytes after the stream was sealed: cuts, a broken trailer, garbage."""
    lines = body.splitlines(keepends=True)
    kind = rnd.choice(["cut_at_line", "truncated_trailer", "cut_mid_line", "garbage_line", "no_trailer", "bad_utf8"])
    if kind == "cut_at_line":
        return kind, b"".join(lines[:rnd.randrange(1, len(lines))])
    if kind == "truncated_trailer":
        return kind, b"".join(lines[:-1]) + lines[-1][:rnd.randrange(1, len(lines[-1]))]
    if kind == "cut_mid_line":
        return kind, body[:rnd.randrange(1, len(body))]
    if kind == "garbage_line":
        lines.insert(rnd.randrange(1, len(lines)), rnd.choice([b"{\n", b"[]\n", b"null\n", b'{"table": 1}\n',
                                                               b'{"table":"links","row":{oops}\n', b"\n"]))
        return kind, b"".join(lines)
    if kind == "bad_utf8":
        i = rnd.randrange(1, len(lines) - 1)
        lines[i] = lines[i][:20] + b"\xff\xfe" + lines[i][20:]
        return kind, b"".join(lines)
    return kind, b"".join(lines[:-1])


# -- what must hold -----------------------------------------------------------------------------------------

def watch_query(conn: Any) -> str:
    """One query giving a digest of every row no import by the token may change (other banks' rows
    in every table, database-wide rows, grants, identities, global rules) and every rcll sequence's
    position: run after each stream, it is also the state before the next."""
    tables = [str(r[0]) for r in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'rcll'::regnamespace "
        "AND c.relkind IN ('r', 'p') ORDER BY 1")]
    parts = []
    for t in tables:
        banked = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
                              "AND attname = 'bank_id' AND NOT attisdropped)", (t,)).fetchone()[0]
        where = ("WHERE r.bank_id IS NULL OR r.bank_id NOT IN (SELECT bank_id FROM rcll.banks "
                 "WHERE name = 'target' OR name LIKE 'target-%')") if banked and t != "rcll.bank_grants" else ""
        # t: a catalog regclass, already quoted
        parts.append(f"SELECT '{t}' AS t, md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) AS d "
                     f"FROM {t} r {where}")
    return (f"SELECT (SELECT md5(string_agg(t || ':' || d, ';' ORDER BY t)) FROM ({' UNION ALL '.join(parts)}) x), "
            "(SELECT string_agg(sequencename || '=' || coalesce(last_value::text, '-'), ',' ORDER BY sequencename) "
            "FROM pg_sequences WHERE schemaname = 'rcll')")


def watch(conn: Any, query: str) -> tuple[str, str]:
    row = conn.execute(query).fetchone()
    return str(row[0]), str(row[1])


def fuzz(dsn: str, streams: int, seed_value: int = 0, progress: bool = False) -> dict[str, Any]:
    import psycopg
    from fastapi.testclient import TestClient

    from rcll.auth import Caller, TokenMap
    from rcll.http import create_app

    seed(dsn)
    conn = psycopg.connect(dsn, autocommit=True)
    admin = TestClient(create_app(dsn, tokens=TokenMap()), base_url="http://127.0.0.1")   # a Host the server answers to
    importer = Caller("fuzzer", ("target", "target-*"), frozenset({"import", "read"}))
    app = create_app(dsn, tokens=TokenMap.from_pairs({TOKEN: importer}))
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    rnd = random.Random(seed_value)
    with admin, TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        target = parse(admin.get("/export", params={"bank": "target"}).content)
        other_head, other_rows = parse(admin.get("/export", params={"bank": "other"}).content)
        other_ids = sorted({v for row, c in _id_cells(other_rows) if isinstance(v := row[c], int)})
        foreign = [r for r in other_rows if r["table"] not in ("banks",)]
        ops = mutations(other_ids, foreign)
        query = watch_query(conn)
        outside, seqs = watch(conn, query)
        for i in range(streams):
            head, rows = json.loads(json.dumps(target))
            if rnd.random() < 0.7:       # most go to a new bank (an import that would create it)
                name = f"target-{i}"
                head["bank"] = name
                for r in rows:
                    if r["table"] == "banks":
                        r["row"]["name"] = name
            names = rnd.sample(sorted(ops), rnd.randint(1, 3))
            for name in names:
                ops[name](rnd, (head, rows))
            body = seal(head, rows)
            label = "+".join(sorted(names))
            if rnd.random() < 0.25:
                kind, body = damage(rnd, body)
                label += f"+{kind}"
            policy = rnd.choice(["error", "skip", "replace"])
            r = client.post("/import", headers=NDJSON, params={"on_conflict": policy}, content=body)
            outcome = ("5xx" if r.status_code >= 500 else "imported" if r.status_code == 200 else "refused")
            for name in label.split("+"):
                counts[name][outcome] += 1
            counts["all"][outcome] += 1
            if r.status_code >= 500:
                failures.append(f"#{i} {label} -> {r.status_code}: {r.text[:300]}")
            elif r.status_code != 200 and not (isinstance(r.json(), dict) and r.json().get("field")):
                failures.append(f"#{i} {label} -> {r.status_code} without a field: {r.text[:300]}")
            if progress and (i + 1) % 500 == 0:
                print(f"  {i + 1} streams: {dict(counts['all'])}", file=sys.stderr, flush=True)
            now, now_seqs = watch(conn, query)
            if r.status_code != 200 and now_seqs != seqs:
                counts["all"]["sequence_moved"] += 1
                failures.append(f"#{i} {label} refused ({r.status_code}) but a sequence moved: {r.text[:200]}")
            if now != outside:
                counts["all"]["outside_changed"] += 1
                failures.append(f"#{i} {label} ({r.status_code}) changed rows outside the token's banks")
            outside, seqs = now, now_seqs
    conn.close()
    return {"counts": {k: dict(v) for k, v in counts.items()}, "failures": failures}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=1000, help="mutated export streams to send")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    with fresh_database("fuzzimport", port=55492) as dsn:
        out = fuzz(dsn, args.streams, args.seed, progress=True)
    print(f"{'mutation':<22} {'streams':>8} {'imported':>9} {'refused':>8} {'5xx':>5}")
    for name, c in sorted(out["counts"].items(), key=lambda kv: (kv[0] == "all", kv[0])):
        print(f"{name:<22} {sum(v for k, v in c.items() if k in ('imported', 'refused', '5xx')):>8} "
              f"{c.get('imported', 0):>9} {c.get('refused', 0):>8} {c.get('5xx', 0):>5}")
    a = out["counts"].get("all", {})
    print(f"total {sum(a.get(k, 0) for k in ('imported', 'refused', '5xx'))} streams: {a.get('5xx', 0)} 5xx, "
          f"{a.get('outside_changed', 0)} changed rows outside the target banks, "
          f"{a.get('sequence_moved', 0)} refused streams moved a sequence, {len(out['failures'])} failures")
    for f in out["failures"][:20]:
        print("  " + f)
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
