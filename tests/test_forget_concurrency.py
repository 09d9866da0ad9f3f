"""A forget racing retains of the same document leaves nothing half-done: several threads retain one
document (and its neighbours in the same thread, naming the same people and rooms) while another
forgets the thread again and again; afterwards no row of the bank is an orphan - every document has
units, every entity a mention, every registered room a unit (or a reason to stay), every unit a
registered room, its lexicon row and every keyless entity link its text names - and every retain
either wrote all of its document or returned one that existed."""

from __future__ import annotations

import math
import threading
from typing import Any

import psycopg
import pytest

from sqlcall import call

DIM = 384
ROUNDS = int(__import__("os").environ.get("RACE_ROUNDS", "50"))
RETAINERS = 4


def vec(i: int) -> str:
    v = [0.0] * DIM
    v[i % DIM], v[(i * 7 + 1) % DIM] = 1.0, 0.5
    n = math.sqrt(sum(x * x for x in v))
    return "[" + ",".join(f"{x / n:.4f}" for x in v) + "]"


def _retain(conn: psycopg.Connection[Any], i: int) -> None:
    # The same document for every retainer (i % 3 picks one of three), so retains race each other
    # as well as the forget; new people and rooms, so a forget has entities and rooms to drop.
    k = i % 3
    chunks = [f"Person{k}: we moved the billing job to Frankfurt{k}.", f"Person{k}: Pepper{k} approved it."]
    conn.execute("SELECT rcll.retain_chunks(bank => 'b', content => %s, chunks => %s, embeddings => %s::vector[],"
                 " thread => 'hot', room => %s)", ("\n".join(chunks), chunks, [vec(2 * k), vec(2 * k + 1)], f"room{k}"))


@pytest.mark.slow
def test_a_forget_racing_retains_of_the_same_document_leaves_no_orphan(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("SELECT rcll.create_bank('b')")
    db.execute("SELECT rcll.retain_chunks(bank => 'b', content => 'Keeper: stays.', chunks => ARRAY['Keeper: stays.'],"
               " embeddings => ARRAY[%s::vector], thread => 'cold', room => 'room0')", (vec(50),))
    errors: list[BaseException] = []
    start = threading.Barrier(RETAINERS + 1)

    def retainer(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                start.wait()
                for i in range(ROUNDS):
                    _retain(conn, n + i)
        except BaseException as e:          # noqa: BLE001 - reported below, with the others
            errors.append(e)

    def forgetter() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                start.wait()
                for _ in range(ROUNDS * 2):
                    try:
                        call(conn, "rcll.forget", bank="b", thread="hot", dry_run=False)
                    except psycopg.Error as e:
                        if e.sqlstate != "RC007":       # nothing in the thread just now
                            raise
        except BaseException as e:          # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=retainer, args=(n,)) for n in range(RETAINERS)]
    threads.append(threading.Thread(target=forgetter))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    db.execute("SELECT rcll.fold_room_counts()")
    orphans = {
        "documents without units": "SELECT count(*) FROM rcll.documents d WHERE NOT EXISTS"
                                   " (SELECT 1 FROM rcll.memory_units u WHERE u.document_id = d.document_id)",
        "documents without their length": "SELECT count(*) FROM rcll.documents d WHERE NOT EXISTS"
                                          " (SELECT 1 FROM rcll.document_lexicon l WHERE l.document_id = d.document_id)",
        "units without their lexicon row": "SELECT count(*) FROM rcll.memory_units u WHERE NOT EXISTS"
                                           " (SELECT 1 FROM rcll.unit_lexicon l WHERE l.unit_id = u.unit_id)",
        "entities without a mention": "SELECT count(*) FROM rcll.entities e WHERE NOT EXISTS"
                                      " (SELECT 1 FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)",
        "miscounted entities": "SELECT count(*) FROM rcll.entities e WHERE e.mention_count <>"
                               " (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)",
        "chunks missing a keyless link": """
            SELECT count(*) FROM rcll.memory_units u, rcll._keyless_mentions(u.text, u.author) m
            WHERE NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue JOIN rcll.entity_aliases a USING (entity_id)
                              WHERE ue.unit_id = u.unit_id AND a.alias = rcll._entity_key(m.name))""",
        "units in an unregistered room": "SELECT count(*) FROM rcll.memory_units u WHERE u.room IS NOT NULL AND NOT EXISTS"
                                         " (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = u.bank_id AND r.name = u.room)",
        "registered rooms without units": "SELECT count(*) FROM rcll.rooms r WHERE r.status = 'live' AND NOT EXISTS"
                                          " (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = r.bank_id AND u.room = r.name)",
        "miscounted rooms": "SELECT count(*) FROM rcll.rooms r WHERE r.fact_count <>"
                            " (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = r.bank_id AND u.room = r.name)",
        "links to nothing": "SELECT count(*) FROM rcll.links l WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u"
                            " WHERE u.unit_id = l.from_unit) OR NOT EXISTS (SELECT 1 FROM rcll.memory_units u"
                            " WHERE u.unit_id = l.to_unit)",
    }
    found = {name: db.execute(query).fetchone()[0] for name, query in orphans.items()}  # type: ignore[index]
    assert found == {name: 0 for name in orphans}
    assert db.execute("SELECT count(*) FROM rcll.forget_log WHERE action = 'forget'").fetchone()[0] > 0  # type: ignore[index]
