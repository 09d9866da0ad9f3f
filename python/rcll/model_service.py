"""The model service: the embedder and the cross-encoder answering SQL over the PostgreSQL protocol.

rcll.recall runs inside PostgreSQL; its two model phases (the query embedding, the cross-encoder)
need the models. Where the server has no plpython3u (the embedded PostgreSQL 18, the managed
services) or should not load a copy of both models into every backend, the database reaches this
service through dblink, a contrib extension every PostgreSQL ships: dblink speaks libpq, so the
service speaks the PostgreSQL wire protocol (pygwire's codec; SCRAM-SHA-256 below,
from hashlib and hmac - scramp, the SCRAM library pg8000 uses, refuses the empty user name libpq
sends inside SCRAM, as PostgreSQL ignores it) on a Unix
socket - and on a loopback TCP port if asked. `rcll serve` runs one beside HTTP, sharing its models
and its work queue (rcll.workqueue: the same admission limits, slot fairness and deadlines as HTTP
callers); `rcll models` runs one alone for a database with no RCLL server beside it.

A request is one simple-protocol Query whose text is a JSON object built by
rcll._model_service_ask (sql/functions/175-model-service.sql), never SQL:

    {"op": "embed", "texts": [...], "deadline_ms": 1000 | null, "started": <epoch seconds>}
    {"op": "rerank", "query": "...", "texts": [...], "deadline_ms": ..., "started": ..., "count": [...] | null}
    {"op": "first_view", ... as rerank}
    {"op": "cut", "texts": [...], "budget": 4096 | null, "limit": 100 | null, "deadline_ms": ..., "started": ...}
    {"op": "count", "texts": [...]}

The answer is rows of one text column: one vector literal per text (embed), one real[] literal of
the logits of the prefix read while time was left (rerank: rcll.deadline.read_prefix, so it batches
and stops as the Python client does; with "count", a second row: the wordpiece counts of those
texts), one integer[] literal of wordpiece counts (count). first_view is recall's first view of its
top candidates: the texts are read by their windows, the prefix that fits the budget
(rcll.passages.first_view, the client's own), and a second row, a boolean[] literal, says which of
that prefix the window cut (then the counts, if asked). cut is recall's token-budget cut over texts
in final order (rcll.budget.cut_counting, the client's own: only the texts it must look at are
counted, and past the deadline the rest are estimated): two integer[] rows, the positions kept
(1-based) and their counts. A model
phase that cannot start within the deadline, or a request over the admission limit, is an
ErrorResponse: the SQL side turns it into a NOTICE and recall answers without it.

Privacy: the socket's directory is mode 0700 and owned by the OS user the database server runs as
(the one client that must reach it), the socket is 0700 too, and every connection authenticates
with the password registered in the database by rcll.use_model_service (kept in a user mapping
that only the rcll schema's owner reads). dblink requires a password of any role but a superuser.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import pwd
import secrets
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo
from pygwire import BackendConnection
from pygwire.constants import TransactionStatus
from pygwire.messages import (
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    BackendKeyData,
    CancelRequest,
    CommandComplete,
    DataRow,
    EmptyQueryResponse,
    ErrorResponse,
    FieldDescription,
    GSSEncRequest,
    GSSResponse,
    ParameterStatus,
    PGMessage,
    Query,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SASLResponse,
    SSLRequest,
    SSLResponse,
    StartupMessage,
    Terminate,
)

from rcll import models, passages
from rcll.budget import cut_counting
from rcll.deadline import Deadline, read_prefix
from rcll.errors import RcllError
from rcll.settings import DEFAULTS, KNOBS, Settings
from rcll.workqueue import READ, Busy, admitted, model_slot

__all__ = ["DEFAULT_PORT", "SERVER_NAME", "ModelService", "ServiceAddress", "default_socket_dir", "register",
           "serve_beside", "server_os_user", "socket_path"]

DEFAULT_PORT = DEFAULTS.models_port   # rcll serve is 8765, rcll mcp 8766: the socket is <dir>/.s.PGSQL.8767
SERVER_NAME = "rcll_models"  # the foreign server rcll.use_model_service creates (dblink_fdw)
MAX_CONNECTIONS = 256        # one per database backend that recalled; more is refused (53300)
MAX_REQUEST = 16 * 1024 * 1024
TEXT_OID = 25
_MECHANISM = "SCRAM-SHA-256"
# What libpq reads at startup: dblink sets no client encoding when the server reports UTF8.
_PARAMETERS = {"server_version": "18.0 (rcll model service)", "server_encoding": "UTF8",
               "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "integer_datetimes": "on",
               "standard_conforming_strings": "on", "TimeZone": "UTC"}


def socket_path(directory: Path, port: int) -> Path:
    """Where libpq looks for a server at host=<directory> port=<port>."""
    return directory / f".s.PGSQL.{port}"


@dataclass(frozen=True)
class ServiceAddress:
    """Where the database reaches the service: host is the socket directory (or a loopback address)."""

    host: str
    port: int


@dataclass(frozen=True)
class _ScramKeys:
    """SCRAM-SHA-256's server-side keys for one password (RFC 5802, RFC 7677): the service keeps
    these, not the password's hash alone, so a connection proves the password without sending it."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def of(cls, password: str, iterations: int = 4096) -> _ScramKeys:
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        return cls(salt, iterations, hashlib.sha256(client_key).digest(), hmac.digest(salted, b"Server Key", "sha256"))

    def server_first(self, client_first: str) -> tuple[str, str, str]:
        """(server-first message, client-first-bare, the combined nonce) for libpq's client-first
        ("n,,n=,r=<nonce>": no channel binding over a Unix socket or plain TCP)."""
        header, sep, bare = client_first.partition(",,")
        attrs = dict(a.split("=", 1) for a in bare.split(",") if "=" in a)
        if header not in ("n", "y") or not sep or not attrs.get("r"):
            raise _AuthFailed
        nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        first = f"r={nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
        return first, bare, nonce

    def server_final(self, bare: str, server_first: str, nonce: str, client_final: str) -> str:
        """The server-final message when the client's proof holds; _AuthFailed otherwise."""
        without_proof, _, proof = client_final.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        if attrs.get("r") != nonce or attrs.get("c") not in ("biws", "eSws"):
            raise _AuthFailed
        message = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(self.stored_key, message, "sha256")
        try:
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof, validate=True), signature, strict=True))
        except ValueError as e:
            raise _AuthFailed from e
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key):
            raise _AuthFailed
        return "v=" + base64.b64encode(hmac.digest(self.server_key, message, "sha256")).decode()


class _AuthFailed(Exception):
    pass


class _RequestError(Exception):
    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


def _vector(v: Any) -> str:
    # repr of each float32 (as a double) is exact: pgvector's input rounds it back to the same bits.
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def _array(values: Sequence[Any]) -> str:
    return "{" + ",".join(repr(float(x)) if isinstance(x, float) else str(int(x)) for x in values) + "}"


def _flags(values: Sequence[bool]) -> str:
    return "{" + ",".join("t" if v else "f" for v in values) + "}"


def _deadline(request: dict[str, Any]) -> Deadline:
    """The request's deadline: deadline_ms counted from `started`, the statement's start (epoch
    seconds, this host's clock), so the time the database spent before asking counts."""
    ms = request.get("deadline_ms")
    started = request.get("started")
    if ms is None:
        return Deadline(None)
    since = max(time.time() - float(started), 0.0) if started is not None else 0.0
    return Deadline(float(ms), time.perf_counter() - since)


def _texts(request: dict[str, Any]) -> list[str]:
    texts = request.get("texts")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise _RequestError("22023", "texts: expected an array of strings")
    return texts


def answer(request: dict[str, Any], settings: Settings = DEFAULTS) -> list[str]:
    """The rows for one request (see the module docstring), with the models settings load. Model
    batches take slots of the process's work queue, when one is installed (rcll serve, rcll models)."""
    op = request.get("op")
    if op == "count":
        return [_array(models.get_embedder(settings).count_tokens(_texts(request)))]
    if op == "embed":
        texts = _texts(request)
        deadline = _deadline(request)
        embedder = models.get_embedder(settings)
        try:
            # Each text alone, as recall's client embeds them: INT8 activations are quantised per
            # batch, and the query's vector must be the one Memory.recall computes.
            with model_slot(READ, None if deadline.ms is None else max(deadline.left(), 0.0), first=True):
                return [_vector(embedder.embed_query(t)) for t in texts]
        except TimeoutError as e:
            # 53000, never 57014: dblink re-raises the service's SQLSTATE, and PL/pgSQL's WHEN OTHERS
            # does not catch query_canceled - the recall would fail instead of going on without it.
            raise _RequestError("53000", f"the {deadline.ms:g} ms deadline passed while waiting for a model slot "
                                         "for the query embedding") from e
    if op == "cut":
        # recall's budget cut over the texts in final order: the client's own rule
        # (rcll.budget.cut_counting), counting past the deadline no more.
        texts = _texts(request)
        budget, limit = request.get("budget"), request.get("limit")
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (budget, limit)):
            raise _RequestError("22023", "budget, limit: expected integers or null")
        deadline = _deadline(request)
        kept, counts = cut_counting(texts, budget, limit, models.get_embedder(settings).count_tokens,
                                    in_time=lambda: deadline.left() > 0)
        return [_array([k + 1 for k in kept]), _array([counts[k] for k in kept])]
    if op in ("rerank", "first_view"):
        query = request.get("query")
        if not isinstance(query, str):
            raise _RequestError("22023", "query: expected a string")
        counted = request.get("count")
        if counted is not None and (not isinstance(counted, list) or not all(isinstance(t, str) for t in counted)):
            raise _RequestError("22023", "count: expected an array of strings")
        # The counts first (the tokenizer, a few ms): they must arrive even when the deadline
        # stops the cross-encoder, and the budget cut needs them after it.
        tokens = None if counted is None else _array(models.get_embedder(settings).count_tokens(counted))
        if op == "first_view":
            # recall's first view: each text by its window, the prefix that fits the budget
            # (rcll.passages.first_view, as the client reads them); which were cut, a row of its own.
            texts, trimmed = passages.first_view(query, _texts(request))
            scores = read_prefix(query, texts, models.get_reranker(settings), _deadline(request))
            return [_array([float(s) for s in scores]), _flags(trimmed)] + ([] if tokens is None else [tokens])
        scores = read_prefix(query, _texts(request), models.get_reranker(settings), _deadline(request))
        return [_array([float(s) for s in scores])] + ([] if tokens is None else [tokens])
    raise _RequestError("22023", f"op: unknown operation {op!r}", "expected embed, rerank, first_view, cut or count")


class ModelService:
    """The service's listeners (a Unix socket, optionally a loopback TCP port) and one thread per
    connection. password: what rcll.use_model_service registers (None: a random one, see
    .password). socket_owner: the OS user the database server runs as (default: ours). settings:
    which models answer (rcll.models.get_embedder)."""

    def __init__(self, socket_dir: Path | None, *, port: int = DEFAULT_PORT, password: str | None = None,
                 socket_owner: str | None = None, tcp_host: str | None = None, tcp_port: int | None = None,
                 settings: Settings = DEFAULTS) -> None:
        self.settings = settings
        self.socket_dir = socket_dir
        self.port = port
        self.password = password or secrets.token_urlsafe(24)
        self.socket_owner = socket_owner
        self.tcp_host = tcp_host
        self.tcp_port = tcp_port
        if not self.password.isascii() or not self.password.isprintable():
            raise RcllError("password", "must be printable ASCII", "e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'")
        self._scram = _ScramKeys.of(self.password)
        self._listeners: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._bound = False              # whether the socket file is ours (close() removes only ours)
        self.requests = 0

    # -- addresses --------------------------------------------------------------------------------

    @property
    def address(self) -> ServiceAddress:
        """The address the database registers: the socket directory, else the TCP listener."""
        if self.socket_dir is not None:
            return ServiceAddress(str(self.socket_dir), self.port)
        assert self.tcp_host is not None and self.tcp_port is not None
        return ServiceAddress(self.tcp_host, self.tcp_port)

    def _owner_ids(self) -> tuple[int, int]:
        if self.socket_owner is None or os.geteuid() != 0:
            return os.geteuid(), os.getegid()
        entry = pwd.getpwnam(self.socket_owner)
        return entry.pw_uid, entry.pw_gid

    def _private_dir(self, path: Path, uid: int, gid: int) -> None:
        """The socket's directory: mode 0700, owned by the database server's OS user; a symlink or
        another user's directory in its place is refused (it lives in the shared temporary dir)."""
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise RcllError("socket_dir", f"{path} is not a directory (a symlink or a file is in its place)",
                            "remove it and start again")
        if st.st_uid != uid:
            if os.geteuid() != 0 or st.st_uid not in (0, uid):
                raise RcllError("socket_dir", f"{path} belongs to uid {st.st_uid}, not to the database server's "
                                              f"user (uid {uid})", "remove it, or choose another --socket-dir")
            os.chown(path, uid, gid, follow_symlinks=False)
        if stat.S_IMODE(st.st_mode) != 0o700:
            path.chmod(0o700)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> ModelService:
        try:
            return self._start()
        except BaseException:        # refused, or stopped meanwhile: no socket or directory left behind
            self.close()
            raise

    def _start(self) -> ModelService:
        if self.socket_dir is not None:
            uid, gid = self._owner_ids()
            self._private_dir(self.socket_dir, uid, gid)
            path = socket_path(self.socket_dir, self.port)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    self._refuse_if_alive(path)
                    path.unlink()
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(path))
            self._bound = True
            os.chown(path, uid, gid, follow_symlinks=False)
            path.chmod(0o700)
            unix.listen(64)
            self._listeners.append(unix)
        if self.tcp_port is not None:
            host = self.tcp_host or "127.0.0.1"
            tcp = socket.create_server((host, self.tcp_port), reuse_port=False)
            self.tcp_host, self.tcp_port = host, int(tcp.getsockname()[1])
            self._listeners.append(tcp)
        if not self._listeners:
            raise RcllError("socket_dir", "the model service has nowhere to listen", "give a socket directory or a TCP port")
        for listener in self._listeners:
            t = threading.Thread(target=self._accept, args=(listener,), name="rcll-models-accept", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    @staticmethod
    def _refuse_if_alive(path: Path) -> None:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            return                       # a socket left by a process that is gone
        finally:
            probe.close()
        raise RcllError("socket_dir", f"another model service is listening on {path}",
                        "stop it, or give this one another --models-port")

    def close(self) -> None:
        self._closed.set()
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.close()
        with self._lock:
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        if self.socket_dir is not None:
            if self._bound:
                with contextlib.suppress(FileNotFoundError):
                    socket_path(self.socket_dir, self.port).unlink()
            with contextlib.suppress(OSError):     # the service's own directory: none left behind
                self.socket_dir.rmdir()                # (kept if something else lives in it)

    def __enter__(self) -> ModelService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                crowded = len(self._open) >= MAX_CONNECTIONS
                if not crowded:
                    self._open.add(conn)
            if crowded:
                with contextlib.suppress(OSError):
                    conn.sendall(ErrorResponse(fields={"S": "FATAL", "V": "FATAL", "C": "53300",
                                                       "M": "the model service has too many connections"}).to_wire())
                    conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="rcll-models-conn", daemon=True).start()

    # -- one connection ---------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        try:
            _Session(self, sock).run()
        except (OSError, _Closed):
            pass
        finally:
            with self._lock:
                self._open.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()


class _Closed(Exception):
    pass


class _Session:
    def __init__(self, service: ModelService, sock: socket.socket) -> None:
        self.service = service
        self.sock = sock
        self.conn = BackendConnection(strict=False)
        self.pending: list[PGMessage] = []

    def send(self, *messages: PGMessage) -> None:
        self.sock.sendall(b"".join(self.conn.send(m) for m in messages))

    def messages(self) -> Iterator[PGMessage]:
        while True:
            while self.pending:
                yield self.pending.pop(0)
            data = self.sock.recv(65536)
            if not data:
                raise _Closed
            self.pending.extend(self.conn.receive(data))

    def next(self) -> PGMessage:
        return next(self.messages())

    def error(self, code: str, message: str, hint: str | None = None, fatal: bool = False) -> ErrorResponse:
        severity = "FATAL" if fatal else "ERROR"
        fields = {"S": severity, "V": severity, "C": code, "M": message}
        if hint:
            fields["H"] = hint
        return ErrorResponse(fields=fields)

    def run(self) -> None:
        msg = self.next()
        while isinstance(msg, (SSLRequest, GSSEncRequest)):
            # Neither TLS nor GSS encryption: the socket is private, a TCP listener loopback only.
            self.send(SSLResponse(accepted=False) if isinstance(msg, SSLRequest) else GSSResponse(accepted=False))
            msg = self.next()
        if isinstance(msg, CancelRequest):
            return                       # the client gives up by closing its connection instead
        if not isinstance(msg, StartupMessage):
            raise _Closed
        if not self.authenticate():
            return
        self.send(AuthenticationOk(), *(ParameterStatus(name=k, value=v) for k, v in _PARAMETERS.items()),
                  BackendKeyData(process_id=threading.get_native_id(), secret_key=secrets.token_bytes(4)),
                  ReadyForQuery(status=TransactionStatus.IDLE))
        for msg in self.messages():
            if isinstance(msg, Terminate):
                return
            if isinstance(msg, Query):
                self.query(msg.query_string)
            else:
                self.send(self.error("0A000", f"the model service answers simple queries only, not {type(msg).__name__}"),
                          ReadyForQuery(status=TransactionStatus.IDLE))

    def authenticate(self) -> bool:
        """SCRAM-SHA-256 against the service's password (libpq sends no user name inside SCRAM)."""
        keys = self.service._scram
        self.send(AuthenticationSASL(mechanisms=[_MECHANISM]))
        try:
            first = self.next()
            if not isinstance(first, SASLInitialResponse) or first.mechanism != _MECHANISM:
                raise _AuthFailed
            server_first, bare, nonce = keys.server_first(bytes(first.data).decode())
            self.send(AuthenticationSASLContinue(data=server_first.encode()))
            final = self.next()
            if not isinstance(final, SASLResponse):
                raise _AuthFailed
            self.send(AuthenticationSASLFinal(data=keys.server_final(bare, server_first, nonce,
                                                                     bytes(final.data).decode()).encode()))
        except (_AuthFailed, UnicodeDecodeError, ValueError):
            self.send(self.error("28P01", "password authentication failed for the model service", fatal=True))
            return False
        return True

    def query(self, text: str) -> None:
        idle = ReadyForQuery(status=TransactionStatus.IDLE)
        stripped = text.strip().rstrip(";").strip()
        if not stripped:
            self.send(EmptyQueryResponse(), idle)
            return
        if stripped.lower().startswith("set "):
            self.send(CommandComplete(tag="SET"), idle)   # libpq's client_encoding, if it ever asks
            return
        try:
            if len(text) > MAX_REQUEST:
                raise _RequestError("54000", f"request of {len(text)} characters is over {MAX_REQUEST}")
            try:
                request = json.loads(text)
            except json.JSONDecodeError as e:
                raise _RequestError("42601", "this is RCLL's model service: it answers rcll.recall's requests, not SQL",
                                    "connect to the database instead") from e
            if not isinstance(request, dict):
                raise _RequestError("22023", "request: expected a JSON object")
            with admitted(READ):
                rows = answer(request, self.service.settings)
            self.service.requests += 1
        except _RequestError as e:
            self.send(self.error(e.code, e.message, e.hint), idle)
            return
        except Busy as e:
            self.send(self.error("53000", e.message, e.hint), idle)
            return
        except Exception as e:  # noqa: BLE001 - a model failure is the caller's NOTICE, never the service's end
            self.send(self.error("XX000", f"the model service failed: {type(e).__name__}: {e}"), idle)
            return
        self.send(RowDescription(fields=[FieldDescription(name="answer", type_oid=TEXT_OID, type_size=-1)]),
                  *(DataRow(columns=[row.encode()]) for row in rows),
                  CommandComplete(tag=f"SELECT {len(rows)}"), idle)


# -- beside a database: rcll serve, rcll models ------------------------------------------------------

PASSWORD_ENV = KNOBS["models_password"].env
SOCKET_DIR_ENV = KNOBS["models_socket_dir"].env


def server_os_user(dsn: str) -> str | None:
    """The OS user the database server runs as, when it is on this machine behind a Unix socket: the
    owner of its socket directory (the one client the model service's socket must admit). None for
    a server reached over TCP: the service's socket is then ours, and only a password guards it."""
    host = conninfo.conninfo_to_dict(dsn).get("host") or ""
    first = str(host).split(",")[0]
    if not first.startswith("/"):
        return None
    try:
        return pwd.getpwuid(Path(first).stat().st_uid).pw_name
    except (OSError, KeyError):
        return None


def default_socket_dir(dsn: str, settings: Settings = DEFAULTS) -> Path:
    """settings.models_socket_dir ($RCLL_MODELS_SOCKET_DIR), else a short directory in the temporary
    directory named after the database server's address (socket paths are limited to 107 bytes)."""
    if settings.models_socket_dir is not None:
        return settings.models_socket_dir
    params = conninfo.conninfo_to_dict(dsn)
    digest = hashlib.sha1(f"{params.get('host')}:{params.get('port')}".encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"rcll-models-{digest}"


def register(dsn: str, service: ModelService) -> str:
    """rcll.use_model_service in the database at dsn, for this service: psql's recall is then complete."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT rcll.use_model_service(host => %s, port => %s, password => %s)",
                           (service.address.host, service.address.port, service.password)).fetchone()
    return str(row[0]) if row else ""


def serve_beside(dsn: str, *, socket_dir: Path | None = None, port: int = DEFAULT_PORT,
                 tcp_port: int | None = None, password: str | None = None,
                 registering: bool = True, settings: Settings = DEFAULTS) -> tuple[ModelService, str]:
    """Start a model service for the database at dsn (its socket private to that server's OS user)
    and register it there; returns the service and what the registration said. A database that
    refuses it (no dblink and no right to create it, a standby) is reported, not fatal: HTTP and
    the Python client need no registration. settings: the models it serves, and its password
    (settings.models_password) unless password is given."""
    service = ModelService(socket_dir or default_socket_dir(dsn, settings), port=port,
                           password=password or settings.models_password or None,
                           socket_owner=server_os_user(dsn), tcp_host="127.0.0.1" if tcp_port is not None else None,
                           tcp_port=tcp_port, settings=settings).start()
    if not registering:
        return service, "not registered (run SELECT rcll.use_model_service(...) as the rcll schema's owner)"
    try:
        return service, register(dsn, service)
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return service, f"not registered in the database ({first}): psql's recall skips the dense channel and the rerank"
    except BaseException:            # a server stopped meanwhile (SIGTERM as SystemExit): nothing left behind
        service.close()
        raise
