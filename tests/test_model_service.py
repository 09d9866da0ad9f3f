"""SQL recall complete on every PostgreSQL: rcll.recall reaches the model service through dblink.

The service (rcll.model_service) runs here in the test process on a Unix socket per leg - a
directory of mode 0700 owned by that leg's server user - exactly as `rcll serve` runs it beside
HTTP. The same bank and query give the same rows, in the same order, with the same scores through
SQL, Memory.recall and HTTP: the service embeds each query alone and reranks with
rcll.deadline.read_prefix, batching as the client does, so INT8 scores are equal to the bit.
"""

from __future__ import annotations

import contextlib
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import conninfo, sql

from conftest import PORTS, Leg
from rcll import cluster, models
from rcll.db import configure
from rcll.http import create_app
from rcll.memory import Memory
from rcll.model_service import ModelService, socket_path
from test_recall_seed import seed

Q = "how do we roll back a bad release?"
COLUMNS = "unit_id, text, fused_score, rerank_score, rank_dense, rank_lexical, rank_entity"
_services: dict[str, ModelService] = {}


@pytest.fixture
def service(leg: Leg, test_root: Path) -> Iterator[ModelService]:
    """The leg's model service (one per session: the models load once)."""
    if leg.name not in _services:
        models.get_embedder()
        models.get_reranker()
        _services[leg.name] = ModelService(test_root / f"m-{leg.name}", socket_owner=leg.cluster.os_user).start()
    yield _services[leg.name]


@pytest.fixture
def service_dsn(leg: Leg, service: ModelService) -> Iterator[str]:
    """A fresh database, seeded, with the leg's model service registered (no plpython3u)."""
    name = leg.new_database()
    try:
        with psycopg.connect(leg.url(name), autocommit=True) as db:
            configure(db)
            seed(db)
            out = db.execute("SELECT rcll.use_model_service(host => %s, port => %s, password => %s)",
                             (service.address.host, service.address.port, service.password)).fetchone()
            assert out is not None and "answering" in out[0] and "not answering" not in out[0], out
        yield leg.url(name)
    finally:
        leg.drop_database(name)


def _f32(x: float | None) -> float | None:
    return None if x is None else float(np.float32(x))


def _sql_recall(url: str, query: str = Q, **args: Any) -> tuple[list[tuple[Any, ...]], list[str]]:
    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as db:
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        extra = sql.SQL("").join(sql.SQL(", {} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in args.items())
        rows = db.execute(sql.SQL("SELECT " + COLUMNS + " FROM rcll.recall({}, rcll.recall_scope('b'){})").format(
            sql.Literal(query), extra)).fetchall()
    return rows, notices


def test_sql_recall_through_the_service_is_complete_and_silent(service_dsn: str) -> None:
    rows, notices = _sql_recall(service_dsn)
    assert notices == []
    assert rows and all(r[3] is not None for r in rows[:5]), "reranked"
    assert any(r[4] is not None for r in rows), "the dense channel ran"
    assert "rollback" in rows[0][1].lower()


def test_sql_memory_and_http_return_the_same_rows_in_the_same_order(service_dsn: str) -> None:
    rows, notices = _sql_recall(service_dsn)
    assert notices == []
    with Memory(service_dsn, install=False) as memory:
        py = memory.recall(Q, bank="b")
        with TestClient(create_app(service=memory)) as client:
            http = client.post("/recall", json={"bank": "b", "query": Q, "deadline_ms": 600_000}).json()
    assert [r[0] for r in rows] == [f.unit_id for f in py.facts] == [f["unit_id"] for f in http["facts"]]
    # Equal to the bit: the same query vector and the same rerank batches (see the module docstring);
    # SQL's real is the float32 the cross-encoder gave, Python keeps it widened to a double.
    assert [_f32(r[3]) for r in rows] == [_f32(f.rerank_score) for f in py.facts] == [_f32(f["rerank_score"]) for f in http["facts"]]
    assert [r[2] for r in rows] == [f.fused_score for f in py.facts]
    assert [r[4:] for r in rows] == [(f.rank_dense, f.rank_lexical, f.rank_entity) for f in py.facts]


def test_service_down_gives_lexical_rows_within_the_deadline_and_a_notice(leg: Leg, service_dsn: str,
                                                                         test_root: Path) -> None:
    with psycopg.connect(service_dsn, autocommit=True) as db:
        db.execute("SELECT rcll.use_model_service(host => %s, port => 9, password => 'x')", (str(test_root),))
    t = time.perf_counter()
    rows, notices = _sql_recall(service_dsn, "helm rollback", deadline_ms=1000)
    elapsed = time.perf_counter() - t
    assert rows and all(r[3] is None and r[4] is None for r in rows), "lexical and the other channels only"
    assert any(r[5] is not None for r in rows)
    assert any("model service" in n and "dense channel and the rerank are skipped" in n for n in notices), notices
    assert elapsed < 1.0


def test_a_slow_service_is_waited_for_only_until_the_deadline(service_dsn: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The service accepts and authenticates, but its model work stalls (a saturated machine): the
    # recall polls until its deadline and answers from the other channels. The connection stays
    # open with the request unanswered: the next recall skips the service at once rather than
    # send another, and once the late answer is in, the one after reads it and is complete again.
    import rcll.model_service

    real = rcll.model_service.answer
    stall = {"s": 2.0}

    def stalled(request: dict[str, Any], *settings: Any) -> list[str]:
        time.sleep(stall["s"])
        return real(request, *settings)

    def timed_recall(db: psycopg.Connection[Any], deadline_ms: int) -> tuple[list[tuple[Any, ...]], float]:
        t = time.perf_counter()
        rows = db.execute("SELECT unit_id, rerank_score, rank_dense, rank_lexical FROM rcll.recall('helm rollback', "
                          "rcll.recall_scope('b'), deadline_ms => %s)", (deadline_ms,)).fetchall()
        return rows, time.perf_counter() - t

    with psycopg.connect(service_dsn, autocommit=True) as db:
        db.execute("SELECT rcll.recall('warm the connection', rcll.recall_scope('b'))")
        backend = db.execute("SELECT pg_backend_pid()").fetchone()
        monkeypatch.setattr(rcll.model_service, "answer", stalled)
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows, elapsed = timed_recall(db, 500)
        assert rows and all(r[1] is None and r[2] is None for r in rows) and any(r[3] for r in rows)
        service = [n for n in notices if "model service" in n or "rerank" in n]
        assert len(service) == 1 and "did not answer within 510 ms" in service[0], notices
        assert elapsed < 1.0

        notices.clear()
        rows, elapsed = timed_recall(db, 500)
        assert rows and all(r[1] is None and r[2] is None for r in rows) and any(r[3] for r in rows)
        service = [n for n in notices if "model service" in n or "rerank" in n]
        assert len(service) == 1 and "has not answered a request sent" in service[0], notices
        assert elapsed < 0.5

        stall["s"] = 0.0
        time.sleep(2.0)                       # the stalled request's answer arrives
        notices.clear()
        rows, _ = timed_recall(db, 600_000)
        assert notices == []
        assert rows and rows[0][1] is not None and any(r[2] for r in rows), "complete again"
        assert db.execute("SELECT pg_backend_pid()").fetchone() == backend


def test_an_answer_given_up_on_in_a_rolled_back_transaction_is_never_read_as_another_requests(
        service_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The rollback forgets the session setting that says a request is pending; the connection
    # itself still knows, so the next recall skips the service rather than read the late answer
    # (another query's embedding) as its own, and the one after that is complete and right.
    import rcll.model_service

    real = rcll.model_service.answer
    stall = {"s": 1.5}

    def stalled(request: dict[str, Any], *settings: Any) -> list[str]:
        time.sleep(stall["s"])
        return real(request, *settings)

    expected, _ = _sql_recall(service_dsn)
    with psycopg.connect(service_dsn, autocommit=True) as db:
        db.execute("SELECT rcll.recall('warm the connection', rcll.recall_scope('b'))")
        monkeypatch.setattr(rcll.model_service, "answer", stalled)
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        with pytest.raises(psycopg.errors.DivisionByZero), db.transaction():
            db.execute("SELECT count(*) FROM rcll.recall('other words', rcll.recall_scope('b'), deadline_ms => 300)")
            db.execute("SELECT 1 / 0")
        assert any("did not answer within 310 ms" in n for n in notices), notices
        notices.clear()
        rows = db.execute(sql.SQL("SELECT " + COLUMNS + " FROM rcll.recall(%s, rcll.recall_scope('b'))"), (Q,)).fetchall()
        assert any("has not answered an earlier request yet" in n for n in notices), notices
        assert all(r[3] is None for r in rows)
        stall["s"] = 0.0
        time.sleep(1.5)
        notices.clear()
        rows = db.execute(sql.SQL("SELECT " + COLUMNS + " FROM rcll.recall(%s, rcll.recall_scope('b'))"), (Q,)).fetchall()
        assert notices == []
        assert rows == expected


def test_the_service_socket_is_private_to_the_database_servers_user(leg: Leg, service: ModelService) -> None:
    assert service.socket_dir is not None
    d = service.socket_dir.lstat()
    s = socket_path(service.socket_dir, service.port).lstat()
    assert stat.S_IMODE(d.st_mode) == 0o700 and stat.S_IMODE(s.st_mode) == 0o700
    uid = leg.cluster.server_ids()[0]           # the OS user the server runs as (ours without root)
    assert d.st_uid == uid and s.st_uid == uid


def test_the_service_refuses_a_wrong_password(leg: Leg, service: ModelService) -> None:
    url = conninfo.make_conninfo(host=service.address.host, port=service.address.port, user="rcll",
                                 dbname="rcll", password="wrong", connect_timeout=2)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(url).close()


def _reader(service_dsn: str, login_role: Any) -> tuple[str, str]:
    """A plain LOGIN role, member of rcll_reader (roles are the cluster's; the grants come with the
    template every test database is made from), and its DSN for the service's database."""
    who = login_role(member_of="rcll_reader")
    return who.name, conninfo.make_conninfo(service_dsn, user=who.name)


def test_the_password_is_readable_by_no_recall_caller(service_dsn: str, login_role: Any) -> None:
    _name, url = _reader(service_dsn, login_role)
    with psycopg.connect(url, autocommit=True) as db:
        options = db.execute("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'rcll_models'").fetchall()
        assert all(o[0] is None for o in options)
        server = db.execute("SELECT srvoptions::text FROM pg_foreign_server WHERE srvname = 'rcll_models'").fetchone()
        assert server is not None and "password" not in server[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT umoptions FROM pg_user_mapping")
        # ...and yet that role's recall is complete: the SECURITY DEFINER helper connects.
        rows = db.execute("SELECT rerank_score FROM rcll.recall(%s, rcll.recall_scope('b'))", (Q,)).fetchall()
        assert rows and rows[0][0] is not None


def test_a_non_superuser_dblink_connection_to_the_service_uses_its_password(service_dsn: str, service: ModelService,
                                                                           login_role: Any) -> None:
    # dblink refuses a non-superuser's connection that used no password: the service asks for one.
    name, url = _reader(service_dsn, login_role)
    with psycopg.connect(service_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("GRANT USAGE ON FOREIGN SERVER rcll_models TO {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE USER MAPPING FOR {} SERVER rcll_models OPTIONS (user 'rcll', password {})").format(
            sql.Identifier(name), sql.Literal(service.password)))
    try:
        with psycopg.connect(url, autocommit=True) as db:
            row = db.execute("""SELECT a FROM public.dblink('rcll_models', '{"op": "count", "texts": ["hello world"]}') AS t(a text)""").fetchone()
            assert row == ("{2}",)
    finally:
        with psycopg.connect(service_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))


def test_recall_on_a_hot_standby_uses_the_service(leg: Leg, service_dsn: str) -> None:
    name = conninfo.conninfo_to_dict(service_dsn)["dbname"]
    standby: cluster.Cluster | None = None
    try:
        standby = cluster.replica(leg.cluster, leg.cluster.datadir.parent / f"{leg.name}-msb",
                                  port=PORTS[leg.name] + 200)
        with psycopg.connect(service_dsn, autocommit=True) as db:
            lsn = db.execute("SELECT pg_current_wal_lsn()").fetchone()
        with psycopg.connect(standby.url(name), autocommit=True) as sb:
            deadline = time.monotonic() + 30
            while sb.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn).fetchone() != (True,):
                assert time.monotonic() < deadline, "the standby did not catch up"
                time.sleep(0.1)
            assert sb.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        on_primary, _ = _sql_recall(service_dsn)
        on_standby, notices = _sql_recall(standby.url(name))
        assert notices == []
        assert on_standby == on_primary
        assert on_standby[0][3] is not None
    finally:
        if standby is not None:
            standby.destroy()


def test_recall_through_the_service_writes_nothing(service_dsn: str, login_role: Any) -> None:
    _name, url = _reader(service_dsn, login_role)
    with psycopg.connect(url) as db:
        db.execute("SET TRANSACTION READ ONLY")
        rows = db.execute("SELECT rerank_score, rank_dense FROM rcll.recall(%s, rcll.recall_scope('b'))", (Q,)).fetchall()
        assert rows and rows[0][0] is not None and any(r[1] for r in rows)
        assert db.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
        db.rollback()


def test_recall_candidates_given_a_text_query_is_embedded_by_the_service(service_dsn: str) -> None:
    notices: list[str] = []
    with psycopg.connect(service_dsn, autocommit=True) as db:
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows = db.execute("SELECT rank_dense, rank_entity FROM rcll.recall_candidates(%s, rcll.recall_scope('b'))",
                          (Q,)).fetchall()
    assert notices == []
    assert rows and any(r[0] is not None for r in rows)


def test_the_loopback_tcp_listener_answers_with_the_password_only() -> None:
    with ModelService(None, tcp_host="127.0.0.1", tcp_port=0) as tcp:
        base = {"host": "127.0.0.1", "port": tcp.address.port, "user": "rcll", "dbname": "rcll", "connect_timeout": 5}
        with psycopg.connect(conninfo.make_conninfo(**base, password=tcp.password), autocommit=True) as conn:
            assert conn.execute('{"op": "count", "texts": ["hello world", "ok"]}').fetchall() == [("{2,1}",)]
            with pytest.raises(psycopg.errors.SyntaxError, match="not SQL"):
                conn.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(conninfo.make_conninfo(**base, password="nope")).close()


def test_a_deadline_passed_in_the_queue_is_a_notice_not_an_error(service_dsn: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # No model slot within the deadline: the service says so with an error recall's PL/pgSQL can
    # catch (never query_canceled, which WHEN OTHERS lets through), and recall answers without it.
    from contextlib import contextmanager

    import rcll.model_service

    @contextmanager
    def no_slot(*_a: Any, **_k: Any) -> Iterator[None]:
        raise TimeoutError("no model slot")
        yield

    monkeypatch.setattr(rcll.model_service, "model_slot", no_slot)
    rows, notices = _sql_recall(service_dsn, "helm rollback", deadline_ms=1000)
    assert rows and all(r[4] is None for r in rows)
    assert any("deadline passed while waiting for a model slot" in n for n in notices), notices


class _FreezableProxy:
    """A loopback TCP door to the service that can freeze: it keeps accepting connections and
    reading what clients send, but passes nothing either way - a service process that is stopped
    (SIGSTOP, a wedged interpreter) while the kernel still accepts on its socket."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(client)
            if self.frozen.is_set():
                continue                               # accepted, never answered
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            self.held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.01)
                dst.sendall(data)

    def close(self) -> None:
        self.listener.close()
        for s in self.held:
            with contextlib.suppress(OSError):
                s.close()


def _recall_with(db: psycopg.Connection[Any], deadline_ms: int) -> tuple[list[tuple[Any, ...]], list[str], float]:
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    t = time.perf_counter()
    rows = db.execute("SELECT unit_id, rerank_score, rank_dense, rank_lexical FROM rcll.recall('helm rollback', "
                      "rcll.recall_scope('b'), deadline_ms => %s)", (deadline_ms,)).fetchall()
    return rows, notices, time.perf_counter() - t


def test_a_frozen_service_never_hangs_a_recall(leg: Leg, service_dsn: str, service: ModelService) -> None:
    assert service.socket_dir is not None
    proxy = _FreezableProxy(str(socket_path(service.socket_dir, service.port)))
    try:
        with psycopg.connect(service_dsn, autocommit=True) as db:
            out = db.execute("SELECT rcll.use_model_service(host => '127.0.0.1', port => %s, password => %s)",
                             (proxy.port, service.password)).fetchone()
            assert out is not None and "registered and answering" in out[0]
        with psycopg.connect(service_dsn, autocommit=True) as connected, \
             psycopg.connect(service_dsn, autocommit=True) as fresh:
            rows, notices, _ = _recall_with(connected, 600_000)
            assert notices == [] and rows[0][1] is not None, "through the proxy, complete"
            proxy.frozen.set()

            # A backend connected to the service: its deadline, lexical rows and a NOTICE - then
            # at once, without sending again, while the service stays frozen.
            rows, notices, elapsed = _recall_with(connected, 1000)
            assert rows and all(r[1] is None and r[2] is None for r in rows) and any(r[3] for r in rows)
            assert any("did not answer within 1010 ms" in n for n in notices), notices
            assert elapsed < 2.5                      # the deadline, and the channels on a loaded machine
            rows, notices, elapsed = _recall_with(connected, 1000)
            assert any("has not answered a request sent" in n for n in notices), notices
            assert rows and elapsed < 1.5             # no wait for the service at all

            # A backend's first connection: libpq's connect_timeout bounds dblink's connect on
            # PostgreSQL 15 (2 s, libpq's least); on 16 and later dblink ignores it and only
            # statement_timeout ends the wait - which then ends the wait, not the recall.
            fresh.execute("SET statement_timeout = '3s'")
            rows, notices, elapsed = _recall_with(fresh, 1000)
            assert rows and all(r[1] is None and r[2] is None for r in rows) and any(r[3] for r in rows)
            if fresh.info.server_version >= 160000:
                assert any("did not answer the connection within statement_timeout (3s)" in n for n in notices), notices
                assert 2.9 < elapsed < 6.0
            else:
                assert any("timeout expired" in n for n in notices), notices
                assert elapsed < 4.0

            # The timeout ends the wait for the service; a caller's cancel during that connect
            # still cancels the recall (on PostgreSQL 15 libpq's 2 s connect_timeout comes later).
            with psycopg.connect(service_dsn, autocommit=True) as cancelled:
                threading.Timer(0.5, cancelled.cancel_safe).start()
                with pytest.raises(psycopg.errors.QueryCanceled, match="user request"):
                    _recall_with(cancelled, 1000)

            proxy.frozen.clear()
            time.sleep(0.5)
            rows, notices, _ = _recall_with(connected, 600_000)
            assert notices == [] and rows[0][1] is not None, "thawed: complete again on the same connection"
    finally:
        proxy.close()


# A bank of long texts: assistant answers of hundreds of words, several to a document (so each
# but the first has the chunk before it as context), short user turns between them.
LONG_Q = "What did the assistant recommend for the cat named Biscuit's diet?"
_TOPICS = ["hiking boots", "sourdough bread", "the cat named Biscuit", "tax returns", "a trip to Lisbon",
           "learning the cello", "a vegetable garden", "the cat's diet and wet food"]


def _long_answer(topic: str, k: int) -> str:
    body = " ".join(f"Point {i} about {topic}: consider option {i + k} carefully, and compare prices. "
                    f"{'Biscuit should eat measured portions of wet food twice a day.' if i == 17 and 'cat' in topic else ''}"
                    for i in range(30))
    return f"assistant: Here is what I would suggest about {topic}. {body} I hope this helps with {topic}."


def _head(text: str) -> str:
    # The stored embeddings are of each chunk's first 48 words: what these tests compare is how the
    # rerank reads long texts, and embedding 48 answers of ~450 tokens took ~24 s of each test.
    return " ".join(text.split()[:48])


def _seed_long(db: psycopg.Connection[Any]) -> None:
    emb = models.get_embedder()
    db.execute("SELECT rcll.create_bank('long')")
    for d, topic in enumerate(_TOPICS * 3):
        chunks = [f"user: can you tell me about {topic}? ({d})", _long_answer(topic, d),
                  f"user: thanks, and what about {_TOPICS[(d + 1) % len(_TOPICS)]}?", _long_answer(_TOPICS[(d + 1) % len(_TOPICS)], d + 1)]
        db.execute("""SELECT rcll.retain_chunks(bank => 'long', content => %s, chunks => %s, embeddings => %s::vector[],
                          occurred_at => %s::timestamptz)""",
                   ("\n".join(chunks), chunks, list(emb.embed([_head(c) for c in chunks])), f"2024-01-{d + 1:02d} 10:00+00"))
    db.execute("ANALYZE")


def test_sql_and_memory_recall_read_long_texts_alike(leg: Leg, service: ModelService) -> None:
    """Long facts: SQL recall (through the model service) reads each by its window and only the
    prefix its budget of words holds, as Memory.recall does - the same facts, in the same order,
    with the same scores; and the budget does cut the depth here."""
    name = leg.new_database()
    try:
        with psycopg.connect(leg.url(name), autocommit=True) as db:
            configure(db)
            _seed_long(db)
            db.execute("SELECT rcll.use_model_service(host => %s, port => %s, password => %s)",
                       (service.address.host, service.address.port, service.password))
        notices: list[str] = []
        with psycopg.connect(leg.url(name), autocommit=True) as db:
            db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            rows = db.execute("SELECT " + COLUMNS + " FROM rcll.recall(%s, rcll.recall_scope('long'))",
                              (LONG_Q,)).fetchall()
        assert notices == []
        with Memory(leg.url(name), install=False) as memory:
            py = memory.recall(LONG_Q, bank="long")
        assert py.rerank_depth_reached < 40, "the budget of words cut the first view"
        assert len(rows) == len(py.facts) > 10
        assert [r[0] for r in rows] == [f.unit_id for f in py.facts]
        assert [_f32(r[3]) for r in rows] == [_f32(f.rerank_score) for f in py.facts]
        assert "Biscuit should eat" in rows[0][1]
    finally:
        leg.drop_database(name)
