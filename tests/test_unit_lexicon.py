"""rcll.unit_lexicon, the narrow table the lexical channel reads instead of the wide unit rows: it
holds exactly what memory_units holds for every unit, through writes, moves, merges,
supersession, edits, deletes and imports, so BM25 ranks exactly as it did over memory_units; and
rcll.document_lexicon holds every document's length, the sum of its units' lengths there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from conftest import Leg
from rcll.db import configure
from rcll.export import export_bank, import_bank
from test_recall_seed import BANK, seed

# Units whose copy differs from memory_units (or is missing, or is left over).
DRIFT = """SELECT count(*) FROM rcll.memory_units u FULL JOIN rcll.unit_lexicon x USING (unit_id)
           WHERE (u.bank_id, u.lexical_length, u.layer, u.room, u.author, u.hall, u.thread, u.tags, u.valid, u.lexical)
                 IS DISTINCT FROM
                 (x.bank_id, x.lexical_length, x.layer, x.room, x.author, x.hall, x.thread, x.tags, x.valid, x.lexical)"""


# Documents whose stored BM25 length is not the sum of their units' lengths (or is missing).
DOCUMENT_DRIFT = """SELECT count(*) FROM rcll.documents d
                    LEFT JOIN (SELECT l.document_id, l.bank_id, sum(l.lexical_length) AS s FROM rcll.unit_lexicon l
                               GROUP BY l.document_id, l.bank_id) u ON u.document_id = d.document_id AND u.bank_id = d.bank_id
                    LEFT JOIN rcll.document_lexicon x ON x.document_id = d.document_id
                    WHERE (u.s IS NOT NULL OR x.document_id IS NOT NULL)
                      AND (x.bank_id IS DISTINCT FROM d.bank_id OR x.lexical_length IS DISTINCT FROM coalesce(u.s, 0))"""


def _drift(db: psycopg.Connection[Any]) -> int:
    """Units whose copy drifted, plus documents whose length did."""
    row = db.execute(DRIFT).fetchone()
    docs = db.execute(DOCUMENT_DRIFT).fetchone()
    assert row is not None and docs is not None
    return int(row[0]) + int(docs[0])


def _lexical(db: psycopg.Connection[Any], q: str, **filters: Any) -> list[int]:
    args = "".join(f", {k} => %({k})s" for k in filters)
    sql = f"SELECT unit_id FROM rcll.channel_lexical(%(q)s, rcll.recall_scope(%(bank)s{args})) ORDER BY rank"
    return [int(r[0]) for r in db.execute(sql, {"q": q, "bank": BANK, **filters}).fetchall()]


def test_every_unit_written_has_its_copy(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    assert _drift(db) == 0
    assert db.execute("SELECT count(*) FROM rcll.unit_lexicon").fetchone() == (len(ids),)
    assert db.execute("SELECT count(*) FROM rcll.document_lexicon").fetchone() == db.execute(
        "SELECT count(DISTINCT document_id) FROM rcll.memory_units").fetchone() != (0,)


def test_a_bulk_copy_into_memory_units_is_copied_too(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT rcll.create_bank(%s)", (BANK,))
    bank_id = db.execute("SELECT rcll._bank_id(%s)", (BANK,)).fetchone()[0]  # type: ignore[index]
    with db.cursor() as cur, cur.copy("COPY rcll.memory_units (bank_id, text, room, author, provenance) FROM STDIN") as cp:
        for i in range(50):
            cp.write_row((bank_id, f"bulk note {i} about the helm rollout", "deployment", "alice", '{"via": "test"}'))
    assert _drift(db) == 0
    assert len(_lexical(db, "helm rollout")) == 50


def test_the_copy_follows_moves_merges_supersession_edits_and_deletes(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    db.execute("SELECT rcll.move_units(%s, ARRAY[%s]::bigint[], 'database', 'misfiled')", (BANK, ids["lunch"]))
    assert _drift(db) == 0
    assert _lexical(db, "pizza lunch", rooms=["database"]) == [ids["lunch"]]

    db.execute("SELECT rcll.propose_room_merge(%s, 'social', 'deployment', 'test')", (BANK,))
    db.execute("SELECT rcll.approve_room_merge(%s, 'social')", (BANK,))
    assert _drift(db) == 0
    assert ids["berlin"] in _lexical(db, "carol berlin office", rooms=["deployment"])

    db.execute("SELECT rcll.supersede(%s, %s)", (ids["helm"], ids["rollback"]))
    assert _drift(db) == 0
    assert ids["helm"] not in _lexical(db, "helm charts kubernetes")            # as of now: closed
    assert ids["helm"] in _lexical(db, "helm charts kubernetes", as_of=None)

    db.execute("UPDATE rcll.memory_units SET text = 'Backups now go to Glacier every night.' WHERE unit_id = %s",
               (ids["backups"],))
    db.execute("UPDATE rcll.memory_units SET tags = array_append(tags, 'moved'), hall = 'decision', layer = 'L1', "
               "thread = 'C' WHERE unit_id = %s", (ids["pgvector"],))
    assert _drift(db) == 0
    assert _lexical(db, "glacier") == [ids["backups"]]
    assert _lexical(db, "pgvector embeddings", tags_any=["moved"], thread="C") == [ids["pgvector"]]

    db.execute("DELETE FROM rcll.memory_units WHERE unit_id = %s", (ids["pipeline"],))
    assert _drift(db) == 0
    db.execute("DELETE FROM rcll.banks WHERE name = %s", (BANK,))
    assert db.execute("SELECT count(*) FROM rcll.unit_lexicon").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM rcll.document_lexicon").fetchone() == (0,)


def test_an_import_brings_the_copy_with_the_units(leg: Leg, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    seed(db)
    export_bank(db, BANK, tmp_path / "x")
    clean = leg.new_database()
    try:
        with psycopg.connect(leg.url(clean), autocommit=True) as fresh:
            configure(fresh)
            import_bank(fresh, tmp_path / "x")
            assert _drift(fresh) == 0
            for q in ("helm rollback deploy", "carol berlin", "database backups"):
                assert _lexical(fresh, q) == _lexical(db, q)
    finally:
        leg.drop_database(clean)
