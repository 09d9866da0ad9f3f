"""A small deterministic store for the recall tests (real embeddings), and a check of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from rcll import models

BANK = "b"


@dataclass(frozen=True)
class Unit:
    key: str
    text: str
    room: str
    author: str | None
    hall: str | None
    tags: tuple[str, ...]
    thread: str | None
    when: str


UNITS = (
    Unit("helm", "We deploy the API with Helm charts to the Kubernetes cluster every Tuesday.",
         "deployment", "alice", "decision", ("ops", "k8s"), None, "2024-05-07 10:00+00"),
    Unit("rollback", "Rollbacks use helm rollback to return to the previous release.",
         "deployment", "bob", "procedure", ("ops",), None, "2024-05-08 10:00+00"),
    Unit("pipeline", "The deploy pipeline runs in GitHub Actions after the tests pass.",
         "deployment", None, "fact", ("ci",), "B", "2024-04-10 10:00+00"),
    Unit("pgvector", "Postgres 18 with pgvector stores the embeddings.",
         "database", "alice", "fact", ("db",), None, "2024-03-01 10:00+00"),
    Unit("backups", "Nightly backups of the database go to S3 with pg_dump.",
         "database", "bob", "procedure", ("db", "ops"), "B", "2024-05-09 10:00+00"),
    Unit("lunch", "Team lunch on Friday was pizza with Carol.",
         "social", "carol", "event", (), None, "2023-05-12 12:00+00"),
    Unit("berlin", "Carol moved to the Berlin office in May 2023.",
         "social", "carol", "event", ("people",), None, "2023-05-20 12:00+00"),
)


def seed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Retain UNITS into bank b (one document each), add entities, aliases and links; return
    unit ids by key."""
    emb = models.get_embedder()
    vectors = emb.embed([u.text for u in UNITS])
    conn.execute("SELECT rcll.create_bank(%s)", (BANK,))
    ids: dict[str, int] = {}
    for u, v in zip(UNITS, vectors, strict=True):
        # Each unit written as its author, resolved by the server (the seeding role is a superuser,
        # a member of rcll_identity_server), so author filters match it as they would in use.
        with conn.transaction():
            conn.execute("SELECT set_config('rcll.agent', coalesce(%s, ''), true)", (u.author,))
            row = conn.execute(
                """SELECT unit_ids[1] FROM rcll.retain_chunks(
                       bank => %(bank)s, content => %(text)s, chunks => ARRAY[%(text)s], embeddings => ARRAY[%(v)s::vector],
                       room => %(room)s, author => %(author)s, hall => %(hall)s, tags => %(tags)s,
                       thread => %(thread)s, occurred_at => %(when)s::timestamptz)""",
                {"bank": BANK, "text": u.text, "v": v, "room": u.room, "author": u.author, "hall": u.hall,
                 "tags": list(u.tags), "thread": u.thread, "when": u.when}).fetchone()
            assert row is not None
            ids[u.key] = int(row[0])
            conn.execute("SELECT set_config('rcll.agent', '', true)")   # an outer transaction goes on as before
    graph = {"Carol": ["carol", "caroline"], "Helm": ["helm"], "Kubernetes": ["kubernetes", "k8s"],
             "Berlin": ["berlin"]}
    ent: dict[str, int] = {}
    for name, aliases in graph.items():
        # Retain already linked each chunk to its author and the names it writes (keyless links):
        # the extractor's entities below extend those.
        r = conn.execute("SELECT entity_id FROM rcll.entity_aliases WHERE bank_id = rcll._bank_id(%s) AND alias = lower(%s)",
                         (BANK, name)).fetchone()
        if r is None:
            r = conn.execute("""INSERT INTO rcll.entities (bank_id, name) VALUES (rcll._bank_id(%s), %s)
                                RETURNING entity_id""", (BANK, name)).fetchone()
        assert r is not None
        ent[name] = int(r[0])
        for a in aliases:
            conn.execute("""INSERT INTO rcll.entity_aliases (bank_id, alias, entity_id) VALUES (rcll._bank_id(%s), %s, %s)
                            ON CONFLICT DO NOTHING""", (BANK, a, ent[name]))
    mentions = {"helm": ["Helm", "Kubernetes"], "rollback": ["Helm"], "lunch": ["Carol"],
                "berlin": ["Carol", "Berlin"]}
    for key, names in mentions.items():
        for n in names:
            # The extractor's link (no role), where retain's keyless link named the same entity too.
            conn.execute("""INSERT INTO rcll.unit_entities (unit_id, entity_id, bank_id) VALUES (%s, %s, rcll._bank_id(%s))
                            ON CONFLICT (unit_id, entity_id) DO UPDATE SET role = NULL""", (ids[key], ent[n], BANK))
    for a, b, kind, w in [("berlin", "backups", "semantic", 0.8), ("pipeline", "helm", "causal", 1.0)]:
        conn.execute("""INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight)
                        VALUES (rcll._bank_id(%s), %s, %s, %s, %s)""", (BANK, ids[a], ids[b], kind, w))
    conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (BANK,))
    return ids


def test_seed_stores_every_unit_with_its_axes(db: psycopg.Connection[Any]) -> None:
    ids = seed(db)
    rows = db.execute("SELECT unit_id, room, author, thread FROM rcll.memory_units ORDER BY unit_id").fetchall()
    assert len(rows) == len(UNITS) == len(ids)
    by_id = {r[0]: r for r in rows}
    assert by_id[ids["pipeline"]][2] is None and by_id[ids["pipeline"]][3] == "B"
