"""Memory: the Python API, and the one door every interface goes through (CLI, HTTP, MCP).

    from rcll import Memory

    with Memory() as memory:                  # the embedded database `rcll serve` uses
        memory.retain("We deploy with Argo CD since March.", room="deployment")
        print(memory.recall("how do we deploy?").facts[0].text)

Memory(dsn=...) (or RCLL_DSN) opens any PostgreSQL. Opening installs or upgrades the rcll schema
when it is missing or behind, as `rcll serve` does (install=False never does; read-only never
can). Each verb checks its input (rcll.validate: every rejection is an RcllError naming the field),
takes a pooled connection, sets rcll.agent for the transaction to the identity this Memory acts
as, and calls the named SQL function; database errors reach the caller as RcllError
(rcll.errors.from_database) when they are the caller's to fix.

Identity is the server's word: a Memory acts as the agent it was opened with (agent=, the
process's configured identity, honoured only when the database role is a member of
rcll_identity_server), and servers hand each request a view with as_agent(<the token's agent>).
No verb takes an author.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from rcll import citus, cluster, install, models
from rcll import dense_indexes as hnsw  # the module: Memory.dense_indexes is a verb
from rcll.auth import ANONYMOUS, Caller, act_as, can_write, identity_server_ok
from rcll.consolidate import Observation, consolidate
from rcll.db import configure, connect, resolve_dsn, retried_once, standby_dsn, writer_dsn
from rcll.db import pool as db_pool
from rcll.dense_indexes import BuildUnderWay
from rcll.document import Document, RetainResult
from rcll.errors import Code, RcllError, database_errors
from rcll.export import ExportSummary, ImportSummary, export_bank, import_bank, import_stream, iter_export
from rcll.recall import Pooled, RecallResult, recall
from rcll.request import FORGET_PARAMETERS, FORGET_SQL, PARAMETERS, ForgetRequest, RecallRequest
from rcll.results import (
    Bank,
    FloorRoom,
    Forgotten,
    Health,
    MergeProposal,
    Room,
    Rule,
    State,
    StateKey,
    StateWritten,
    Stats,
    Tag,
    TokenAccount,
    Unit,
    UnitPage,
    Upkeep,
    Version,
)
from rcll.retain import InBank, Prepared, prepare, retain, retain_in_bank, retain_many
from rcll.settings import Settings
from rcll.sqlsource import extension_version, migrations
from rcll.streams import ExportBudget
from rcll.validate import (
    MAX_VERSION,
    bool_arg,
    check_bank,
    int_arg,
    list_arg,
    metadata_arg,
    on_conflict_arg,
    required_text,
    state_value_arg,
    text_arg,
    time_arg,
)
from rcll.workqueue import WRITE, Busy, WorkQueue, admitted
from rcll.workqueue import install as install_queue
from rcll.workqueue import installed as installed_queue

__all__ = [
    "DEFAULT_BANK", "Bank", "Busy", "Document", "ExportSummary", "FloorRoom", "Health", "ImportSummary", "Memory",
    "MergeProposal", "Observation", "RecallResult", "RetainResult", "Room", "Rule", "State", "StateKey",
    "StateWritten", "Stats", "Tag", "TokenAccount", "Unit", "UnitPage", "bounded_model_work",
]

DEFAULT_BANK = "default"
Progress = Callable[[str, int], None]


# The tables a forget deletes from or rewrites, vacuumed by purge=True (fixed statements: VACUUM
# takes no parameters and Python builds no SQL).
PURGE_UNITS: tuple[tuple[str, str], ...] = (
    ("rcll.memory_units", "VACUUM rcll.memory_units"),
    ("rcll.unit_lexicon", "VACUUM rcll.unit_lexicon"),
    ("rcll.documents", "VACUUM rcll.documents"),
    ("rcll.document_lexicon", "VACUUM rcll.document_lexicon"),
    ("rcll.unit_entities", "VACUUM rcll.unit_entities"),
    ("rcll.entities", "VACUUM rcll.entities"),
    ("rcll.entity_aliases", "VACUUM rcll.entity_aliases"),
    ("rcll.links", "VACUUM rcll.links"),
    ("rcll.unit_versions", "VACUUM rcll.unit_versions"),
    ("rcll.audit_log", "VACUUM rcll.audit_log"),
    ("rcll.room_state", "VACUUM rcll.room_state"),
)
# rcll.forget's arguments, each by name (ForgetRequest.arguments; FORGET_SQL is the function's parameters).
_FORGET_ARGS = sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(n), sql.Placeholder(n)) for n in FORGET_SQL)
# On a Citus cluster: its twin with the bank's id first, delegated to the bank's worker
# (sql/functions/615-citus-delegated-writes.sql), and the agent the transaction would have set.
_FORGET_IN_BANK = sql.SQL("SELECT kind, count FROM rcll.forget_in_bank(bank_id => %(bank_id)s, {}, "
                          "agent => %(agent)s)").format(_FORGET_ARGS)
PURGE_BANK = (*PURGE_UNITS, ("rcll.rooms", "VACUUM rcll.rooms"), ("rcll.room_aliases", "VACUUM rcll.room_aliases"),
              ("rcll.llm_calls", "VACUUM rcll.llm_calls"))


def _expiry(expires_at: datetime | str | None, ttl: timedelta | None) -> datetime | None:
    """When a retain's units expire: expires_at, or now + ttl (not both)."""
    at = time_arg(expires_at, "expires_at")
    if ttl is not None:
        if at is not None:
            raise RcllError("ttl", "give expires_at or ttl, not both", "drop one of them")
        if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
            raise RcllError("ttl", "must be a positive time span", "e.g. ttl=timedelta(days=30)")
        return datetime.now(UTC) + ttl
    return at


@dataclass
class _Shared:
    """What every view of one Memory shares: the database, its pool and the server's mode."""

    dsn: str
    read_only: bool
    pool_size: int
    configure: Callable[[psycopg.Connection[Any]], None]
    settings: Settings
    pool: ConnectionPool[psycopg.Connection[Any]] | None = None
    recall_from_standby: bool = False
    recall_pool: ConnectionPool[psycopg.Connection[Any]] | None = None   # on a standby when allowed
    opened: bool = False
    identity_honoured: bool = False
    installed: str | None = None
    in_bank: bool = False          # rcll's tables distributed by bank (Citus): recall delegates to the bank's worker
    bank_ids: dict[str, int] = dataclasses.field(default_factory=dict)   # on Citus: the delegated calls' bank ids
    exports: ExportBudget = dataclasses.field(init=False)     # export streams' own connections

    def __post_init__(self) -> None:
        self.exports = ExportBudget.from_settings(self.settings)


T = TypeVar("T")


@dataclass
class _Unit:
    """A unit of work's connection, shared by its views (Memory.transaction); None once it ended."""

    conn: psycopg.Connection[Any] | None


@contextmanager
def bounded_model_work(settings: Settings) -> Iterator[WorkQueue]:
    """For servers, while they serve: model work (query embedding, rerank, retain embedding) goes
    through one bounded queue sized to the cores (rcll.workqueue) - a request over the limit is
    refused at once with Busy (HTTP 503 + Retry-After) instead of waiting without bound, and reads
    and writes share the model slots fairly (sized by settings: RCLL_MODEL_SLOTS and the limits). A
    Python caller of Memory has no queue otherwise."""
    queue = installed_queue() or WorkQueue.from_settings(settings)
    previous = install_queue(queue)
    try:
        yield queue
    finally:
        install_queue(previous)


def schema_is_current(conn: psycopg.Connection[Any]) -> bool:
    """Whether this database holds the rcll schema with every migration this package ships
    (as the extension at this version, or applied by `rcll install`)."""
    ext = install.installed_as_extension(conn)
    if ext is not None:
        return ext == extension_version()
    row = conn.execute("SELECT to_regclass('rcll.migrations') IS NOT NULL").fetchone()
    if not (row and row[0]):
        return False
    applied = {str(r[0]) for r in conn.execute("SELECT name FROM rcll.migrations")}
    return all(m.name in applied for m in migrations())


class Memory:
    """A memory store: a pool of connections to one database and the verbs.

    dsn: a PostgreSQL connection string (default: settings.dsn - $RCLL_DSN -, else the embedded
    database, started if needed). settings: every other knob (rcll.settings.Settings; None reads
    the environment once, here: Settings.from_env()), for every verb of this Memory. bank: the bank a verb uses when it is not given one. agent: the identity writes
    and `mine` recalls act as. read_only: only the read verbs, over a role that cannot write
    (opening refuses a role that can). install: None installs or upgrades the schema when it is
    missing or behind, True always (what `rcll serve` does), False never; extension: install as
    CREATE EXTENSION rcll (after `make install` on the server); citus: distribute the tables by bank
    on a Citus coordinator (None: when it has workers, True: required, False: never; rcll.citus). open=False defers
    connecting until open() (servers open in their start-up hook).

    High availability (docs/scaling.md): dsn may name every node of a Patroni cluster
    (`host=a,b,c port=...`); a read-write Memory then connects with
    target_session_attrs=read-write unless the DSN says otherwise, and its pool reconnects to
    the new primary after a failover. recall_from_standby=True lets recall read a hot standby
    (target_session_attrs=prefer-standby, the primary when none answers): off by default,
    because a standby replays what the primary committed a moment later, so a recall right
    after a retain may not see it there.
    """

    # A unit of work's views (Memory.transaction) run every verb on its connection, inside its
    # transaction; None for every other view.
    _unit: _Unit | None = None

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None, bank: str = DEFAULT_BANK,
                 agent: str | None = None, read_only: bool = False, pool_size: int = 4, install: bool | None = None,
                 extension: bool = False, citus: bool | None = None, open: bool = True,
                 recall_from_standby: bool | None = None) -> None:
        config = Settings.from_env() if settings is None else settings
        self.bank = check_bank(bank)
        self.agent = agent
        self.scope: Caller = ANONYMOUS
        self._install = install
        self._extension = extension
        self._citus = citus
        try:
            target = resolve_dsn(dsn or config.dsn, config)
        except cluster.ClusterError as e:
            raise RcllError("dsn", f"the embedded database cannot start: {e}",
                            "set RCLL_DSN (or pass dsn=) to use another PostgreSQL", code=Code.UNAVAILABLE) from e
        if not read_only:
            target = writer_dsn(target)
        standby = config.recall_from_standby if recall_from_standby is None else recall_from_standby
        self._shared = _Shared(target, read_only, pool_size, self._configure, config, recall_from_standby=standby)
        if open:
            self.open()

    @classmethod
    def _view(cls, shared: _Shared, bank: str, agent: str | None, scope: Caller) -> Memory:
        view = cls.__new__(cls)
        view.bank, view.agent, view._install, view._extension, view._shared = bank, agent, False, False, shared
        view.scope = scope
        return view

    def _bound_view(self, bank: str, agent: str | None, scope: Caller) -> Memory:
        view = Memory._view(self._shared, bank, agent, scope)
        view._unit = self._unit
        return view

    def as_agent(self, agent: str | None) -> Memory:
        """This Memory acting as `agent` (the identity a server authenticated), sharing the pool
        and keeping this view's scope (and its unit of work, inside one)."""
        return self._bound_view(self.bank, agent, self.scope)

    def as_caller(self, caller: Caller) -> Memory:
        """This Memory acting for `caller` (a bearer token's agent and scope, rcll.auth): every verb
        then reaches only the caller's banks and only with its verbs; a bank out of reach is an
        unknown bank, exactly as one that does not exist."""
        return self._bound_view(self.bank, caller.agent, caller)

    def as_login(self, configured: str | None = None) -> Memory:
        """This Memory acting as the identity the database resolves for its own login
        (rcll.login_agent): the agent the role is mapped to in rcll.identities; for a role trusted
        to name agents (a member of rcll_identity_server - superusers, the embedded database's
        postgres among them) `configured`, the process's configured identity (the CLI passes
        $RCLL_AGENT), else the login role's name; None for an unmapped role outside it. For a
        client that is one person's own connection, such as the CLI - never for a server
        serving many callers over one role (it uses as_caller with the agent it authenticated)."""
        name = text_arg(configured, "agent")
        with self._tx() as conn:
            row = conn.execute("SELECT rcll.login_agent(configured => %s)", (name,)).fetchone()
        return self.as_agent(row[0] if row else None)

    # -- the connection ---------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        return self._shared.dsn

    @property
    def read_only(self) -> bool:
        return self._shared.read_only

    @property
    def settings(self) -> Settings:
        """The settings every verb of this Memory (and of its views) uses."""
        return self._shared.settings

    @property
    def identity_honoured(self) -> bool:
        """Whether the database honours the identity this Memory sets (role in rcll_identity_server)."""
        return self._shared.identity_honoured

    @property
    def installed(self) -> str | None:
        """What opening did to the schema (None when it was current and left alone)."""
        return self._shared.installed

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        configure(conn)
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")
            conn.commit()

    def open(self) -> None:
        """Connect: check the role against read-only mode, install or upgrade the schema if needed
        (creating the default bank, as `rcll serve` does), then open the pool. Idempotent."""
        shared = self._shared
        if shared.opened:
            return
        with connect(shared.dsn, autocommit=True) as conn:
            if shared.read_only and can_write(conn):
                raise RcllError("dsn", "read-only mode connects as a role that can write",
                                "connect as a SELECT-only role (e.g. rcll_reader); see sql/migrations/006-reader-role.sql")
            if not shared.read_only and (self._install or (self._install is None and not schema_is_current(conn))):
                with database_errors():          # an InstallError is an RcllError already
                    shared.installed = install.install(conn, use_extension=self._extension, citus=self._citus)
            if not shared.read_only and can_write(conn):
                # The default bank, on a fresh schema or one another tool installed, as `rcll serve` does.
                # Looked up by name, not listed with the banks' counts: on a Citus cluster those
                # read every worker, and a server must open while one is down.
                try:
                    conn.execute("SELECT rcll._bank_id(%s)", (DEFAULT_BANK,))
                except psycopg.Error as e:
                    if e.sqlstate != Code.UNKNOWN_BANK.value:
                        raise
                    # an agent's role may write units without creating banks: its verbs name a bank
                    with suppress(psycopg.errors.InsufficientPrivilege):
                        conn.execute("SELECT rcll.create_bank(name => %s)", (DEFAULT_BANK,))
            shared.identity_honoured = identity_server_ok(conn)
            shared.in_bank = citus.is_distributed(conn)
        # Checked connections: a restarted PostgreSQL costs only the requests in flight (rcll.db.pool).
        shared.pool = db_pool(shared.dsn, max_size=shared.pool_size, configure=shared.configure)
        shared.pool.open(wait=True)
        if shared.recall_from_standby:
            shared.recall_pool = db_pool(standby_dsn(shared.dsn), max_size=shared.pool_size,
                                         configure=shared.configure)
            shared.recall_pool.open(wait=True)
        shared.opened = True

    def close(self) -> None:
        """Close the pool (every view of this Memory with it)."""
        if self._shared.opened and self._shared.pool is not None:
            self._shared.pool.close()
            if self._shared.recall_pool is not None:
                self._shared.recall_pool.close()
            self._shared.opened = False

    def __enter__(self) -> Memory:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def _tx(self, bank: str | None = None, *, resolve: bool = True,
            timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on a pooled connection, acting as this Memory's agent. With `bank`, the
        bank is resolved first (unless resolve=False: the verb's own SQL resolves it): a missing
        bank is then the same error on every verb, whatever plan the verb's SQL gets (a
        set-returning function over an empty table may never evaluate it), and the unknown bank
        the database reports is answered as one outside the caller's scope
        (rcll.errors.unknown_bank). timeout: seconds to wait for a pooled connection (default
        rcll.db.POOL_TIMEOUT), then psycopg_pool.PoolTimeout. Inside a unit of work
        (Memory.transaction): a savepoint on its connection."""
        if self._unit is not None:
            with self._in_unit(bank) as conn:
                if bank is not None and resolve:
                    conn.execute("SELECT rcll._bank_id(%s)", (bank,))
                yield conn
            return
        with (self._connection(timeout) as conn, database_errors(read_only=self.read_only, bank=bank),
              conn.transaction()):
            act_as(conn, self.agent)
            if bank is not None and resolve:
                conn.execute("SELECT rcll._bank_id(%s)", (bank,))
            yield conn

    @contextmanager
    def _in_unit(self, bank: str | None) -> Iterator[psycopg.Connection[Any]]:
        """A verb's step inside this view's unit of work: a savepoint, so that a verb that fails
        undoes only itself (as psycopg's nested transaction blocks do), acting as this view's agent."""
        conn = None if self._unit is None else self._unit.conn
        if conn is None:
            raise RcllError("transaction", "this unit of work has ended",
                            "run the verbs inside the with memory.transaction() block", code=Code.INVALID_INPUT)
        with database_errors(read_only=self.read_only, bank=bank), conn.transaction():
            act_as(conn, self.agent)
            yield conn

    def _outside_unit(self, what: str) -> None:
        """Refuse work that cannot join a unit of work's transaction (it takes connections of its own)."""
        if self._unit is not None:
            raise RcllError("transaction", f"{what} cannot run inside a unit of work (it uses connections of its "
                            "own)", "call it on the Memory, outside the with memory.transaction() block",
                            code=Code.INVALID_INPUT)

    @contextmanager
    def transaction(self, *, timeout: float | None = None) -> Iterator[Memory]:
        """A unit of work: several verbs in one transaction, as psycopg's `with conn.transaction()`.

            with memory.transaction() as tx:
                states = tx.lock_states([("deployment", "spread")])
                tx.put_state("deployment", "spread", {...}, expected_version=...)
                tx.forget(thread="t1", dry_run=False)

        `tx` is this Memory (its agent, its scope, its bank) bound to one pooled connection: each
        verb checks its input, the caller's scope and its own verb exactly as it does alone, and
        runs in a savepoint of the one transaction - a verb that raises undoes only itself, and
        the caller may go on. The block commits when it ends, and rolls everything back when an
        exception leaves it. Inside a unit of work, a transaction() block is a savepoint. Work that
        needs connections of its own is refused in one (RcllError on transaction): recall,
        retain_many, consolidate, export, import, purge, the dense indexes; so is any verb once the
        block has ended. READ COMMITTED (PostgreSQL's default) is what lock_states expects.
        timeout: seconds to wait for a pooled connection (default rcll.db.POOL_TIMEOUT)."""
        if self._unit is not None:
            with self._in_unit(None):
                yield self
            return
        with self._connection(timeout) as conn, database_errors(read_only=self.read_only), conn.transaction():
            act_as(conn, self.agent)
            unit = _Unit(conn)
            view = self._bound_view(self.bank, self.agent, self.scope)
            view._unit = unit
            try:
                yield view
            finally:
                unit.conn = None         # every view of it: the connection goes back to the pool

    @contextmanager
    def _session(self, bank: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit mode acting as the agent for the whole session, for
        work on `bank` that commits its own transactions (bulk retain, consolidation)."""
        self._outside_unit("this verb")
        with self._connection() as conn, database_errors(read_only=self.read_only, bank=bank):
            conn.autocommit = True
            try:
                act_as(conn, self.agent, session=True)
                yield conn
            finally:
                if not conn.closed:
                    act_as(conn, None, session=True)
                    conn.autocommit = False

    def _pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        self._outside_unit("this verb")
        if not self._shared.opened or self._shared.pool is None:
            raise RcllError("memory", "this Memory is closed", "open() it, or use it in a with block",
                            code=Code.UNAVAILABLE)
        return self._shared.pool

    @contextmanager
    def _connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; none within the timeout (the database down, or a failover under
        way) is RC010, unavailable and retryable - as every verb answers a lost connection."""
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self._pool().connection(timeout))
            except PoolTimeout as e:
                raise RcllError("dsn", f"no database connection: {e}",
                                "retry later: the database is restarting or failing over, or out of reach",
                                code=Code.UNAVAILABLE) from e
            yield conn

    def _bank(self, bank: str | None, verb: str = "read") -> str:
        """The bank a verb acts on, checked against this view's scope (rcll.auth.Caller.check): a
        bank out of reach raises the unknown-bank error before the database is asked anything."""
        b = check_bank(self.bank if bank is None else bank)
        self.scope.check(b, verb)
        return b

    def _known_bank(self, bank: str | None, verb: str = "read") -> str:
        b = self._bank(bank, verb)
        with self._tx(b):             # resolves it: an unknown bank is an error, not silence
            pass
        return b

    def _delegated(self) -> bool:
        """Whether a verb's bank-scoped call goes to the bank's worker: on a Citus cluster
        (rcll's tables distributed by bank), outside a unit of work (Citus delegates a call only
        when it is the client's own statement, outside a transaction block)."""
        return self._shared.in_bank and self._unit is None

    def _bank_id(self, bank: str, *, fresh: bool = False) -> int:
        """The bank's id, for a call delegated by it: looked up once per Memory (fresh: again)."""
        known = None if fresh else self._shared.bank_ids.get(bank)
        if known is None:
            with (self._connection() as conn, database_errors(read_only=self.read_only, bank=bank),
                  citus.own_statement(conn)):
                row = conn.execute("SELECT rcll._bank_id(%s)", (bank,)).fetchone()
            assert row is not None
            known = self._shared.bank_ids[bank] = int(row[0])
        return known

    def _in_bank(self, bank: str, call: Callable[[psycopg.Connection[Any], int], T]) -> T:
        """call(connection, the bank's id) on a pooled connection outside any transaction: a
        function delegated to the bank's worker (Citus; see _delegated). The id is the one this
        Memory looked up before; refused as not the bank's (RC001: the bank was dropped and made
        again under its name), it is looked up again, and the call made once more when it changed.
        (By the code and the ids: an error raised on a worker comes back without its COLUMN.)"""
        bank_id = self._bank_id(bank)
        try:
            with self._connection() as conn, database_errors(read_only=self.read_only, bank=bank):
                return call(conn, bank_id)
        except RcllError as e:
            self._shared.bank_ids.pop(bank, None)
            if e.code is not Code.INVALID_INPUT or self._bank_id(bank, fresh=True) == bank_id:
                raise
        with self._connection() as conn, database_errors(read_only=self.read_only, bank=bank):
            return call(conn, self._bank_id(bank))

    def _bank_call(self, bank: str, function: str, args: dict[str, Any], *, agent: bool = False,
                   resolve: bool = True, dicts: bool = True) -> list[Any]:
        """The rows of rcll.<function>(each of args by name) for one bank: on a Citus cluster its
        *_in_bank twin, delegated whole to the bank's worker (with this Memory's agent when the
        twin carries it: agent=True); elsewhere, and in a unit of work, the function itself in a
        transaction acting as the agent (resolve: the bank resolved first, as _tx). dicts: rows as
        dicts by column, else tuples."""
        rows: Any = dict_row if dicts else tuple_row
        if self._delegated():
            extra = {"agent": self.agent or None} if agent else {}
            query = citus.named_call(function, [*args, *extra], in_bank=True)
            return self._in_bank(bank, lambda conn, bank_id: citus.call_in_bank(
                conn, query, {**args, **extra, "bank_id": bank_id}, row_factory=rows))
        with self._tx(bank, resolve=resolve) as conn, conn.cursor(row_factory=rows) as cur:
            return cur.execute(citus.named_call(function, args), args).fetchall()

    def check_writable(self) -> None:
        """Raise RcllError(read_only) on a read-only Memory."""
        if self.read_only:
            raise RcllError("read_only", "this server is read-only", "send writes to a read-write RCLL server",
                            code=Code.NOT_PERMITTED)

    # -- banks ------------------------------------------------------------------------------------

    @retried_once
    def health(self) -> Health:
        """The server's state: ok, the rcll and pgvector versions, and whether it is read-only."""
        with self._tx() as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return Health("ok", extension_version(), row[0] if row else None, self.read_only)

    def create_bank(self, name: str, description: str | None = None) -> int:
        """Create a bank (idempotent); returns its id."""
        self.check_writable()
        n = check_bank(name)
        self.scope.check(n, "admin")
        d = text_arg(description, "description", limit=1 << 16)
        with self._tx() as conn:
            row = conn.execute("SELECT rcll.create_bank(name => %s, description => %s)", (n, d)).fetchone()
        assert row is not None
        return int(row[0])

    @retried_once
    def banks(self) -> list[Bank]:
        """Every bank with its unit and document counts."""
        with self._tx() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.list_banks()").fetchall()
        return [Bank.from_row(r) for r in rows if self.scope.reaches(r["name"])]

    # -- retain -----------------------------------------------------------------------------------

    def retain(self, content: str, *, bank: str | None = None, room: str | None = None,
               thread: str | None = None, tags: Sequence[str] | None = None, hall: str | None = None,
               layer: str | None = None, source: str | None = None, occurred_at: datetime | str | None = None,
               metadata: Mapping[str, Any] | None = None, via: str = "python",
               expires_at: datetime | str | None = None, ttl: timedelta | None = None,
               prepared: Prepared | None = None) -> RetainResult:
        """Retain one document: chunks embedded locally (LLM_PROVIDER=none), or facts extracted
        (offline, anthropic). The same content in the same bank and thread is stored once
        (created=False the second time). The author is this Memory's agent, never an argument.
        expires_at or ttl: when its units expire (recall stops returning them at once; the
        periodic sweep forgets them); the bank's retention policies may make it earlier.
        prepared: chunk mode's model work done already - the chunks (each one unit, in order) and
        their embeddings by rcll.models.get_embedder(), as rcll.retain.prepare makes them - so that
        a unit of work (Memory.transaction) does not wait on the model; the extraction modes
        ignore it."""
        self.check_writable()
        b = self._bank(bank, "write")
        expiry = _expiry(expires_at, ttl)
        text_arg(content, "content", required=True, limit=1 << 24)
        doc = Document(
            content=content,
            source=text_arg(source, "source"),
            occurred_at=time_arg(occurred_at, "occurred_at"),
            room=text_arg(room, "room"),
            thread=text_arg(thread, "thread"),
            tags=list_arg(tags, "tags") or [],
            hall=text_arg(hall, "hall"),
            layer=text_arg(layer, "layer"),
            metadata=metadata_arg(dict(metadata or {}), limit=self.settings.max_metadata_bytes),
        )
        v = required_text(via, "via")
        # rcll.agent is transaction-local (a session setting would leak to the next user of the
        # pooled connection), so retain() runs inside the transaction that sets it.
        # The model work waits for a slot (rcll.workqueue) before a connection is taken, so
        # writers queued behind the models hold no connection a reader needs, and vice versa.
        if prepared is not None:
            chunks, vectors = prepared
            if not isinstance(chunks, list) or not all(isinstance(c, str) and c.strip() for c in chunks):
                raise RcllError("prepared", "its chunks must be a list of non-empty texts",
                                "pass (chunks, embeddings) as rcll.retain.prepare makes them")
            if not chunks or len(vectors) != len(chunks):
                raise RcllError("prepared", f"{len(chunks)} chunks but {len(vectors)} embeddings",
                                "pass (chunks, embeddings) with one embedding per chunk, e.g. rcll.retain.prepare's")
        with admitted(WRITE):
            prepared = prepared if prepared is not None else prepare(doc, self.settings)
            if self._delegated():
                return self._in_bank(b, lambda conn, bank_id: retain_in_bank(
                    conn, b, InBank(bank_id, self.agent, expiry), doc, via=v, prepared=prepared, settings=self.settings))
            with self._tx(b, resolve=False) as conn:
                if expiry is not None:
                    # Read by the units' expiry trigger (rcll._units_expiry), for this transaction only.
                    conn.execute("SELECT set_config('rcll.expires_at', %s, true)", (expiry.isoformat(),))
                return retain(conn, b, doc, via=v, prepared=prepared, settings=self.settings)

    def retain_many(self, docs: Iterable[Document | str], *, bank: str | None = None, via: str = "python",
                    batch_size: int = 512, on_progress: Callable[[int], None] | None = None) -> list[RetainResult]:
        """Retain many documents (Documents or plain strings), embedding one batch while the
        previous one is written; each batch is one transaction, and an invalid document stops the
        run before its batch is written."""
        self.check_writable()
        b = self._bank(bank, "write")
        v = required_text(via, "via")
        size = int_arg(batch_size, "batch_size", 1, 100_000) or 512
        items = (Document(content=d) if isinstance(d, str) else d for d in docs)
        if self._delegated():
            bank_id = self._bank_id(b, fresh=True)
            with self._connection() as conn, database_errors(read_only=self.read_only, bank=b):
                return retain_many(conn, b, items, via=v, batch_size=size, on_progress=on_progress,
                                   settings=self.settings, in_bank=InBank(bank_id, self.agent))
        with self._session(b) as conn:
            return retain_many(conn, b, items, via=v, batch_size=size, on_progress=on_progress,
                               settings=self.settings)

    # -- recall -----------------------------------------------------------------------------------

    def recall(self, query: str | RecallRequest, *, started: float | None = None, **fields: Any) -> RecallResult:
        """The facts for a query that fit the token budget (default rcll.defaults.BUDGET), best
        first, with per-phase timings. `query` is the query (the keywords are RecallRequest's fields:
        bank - default this Memory's -, rooms (aliases and merges followed), authors, mine (only
        what this Memory's agent wrote), include_unattributed, halls, layers, tags_any, tags_all,
        thread, as_of (what was valid then), time_from/time_to (when it happened), reference_time,
        weights, the depths, budget, deadline_ms) or a whole RecallRequest (the keywords then
        replace its fields). A keyword given as None is left at its default.

        deadline_ms (default None: no deadline) bounds the latency from `started` (a
        time.perf_counter() value, default now): the cross-encoder reads candidates in fused order
        while time is left, and the result says how deep it read (rerank_depth_reached,
        context_depth_reached) and whether the deadline cut it (deadline_cut). The recall itself
        is rcll.recall.recall over this Memory's pool."""
        self._outside_unit("recall")
        unknown = sorted(set(fields) - {p.name for p in PARAMETERS})
        if unknown:
            raise RcllError(unknown[0], "is not a recall field",
                            f"use {', '.join(p.name for p in PARAMETERS if p.name != 'query')}")
        given = {k: v for k, v in fields.items() if v is not None}
        if isinstance(query, RecallRequest):
            request = replace(query, **given) if given else query
        else:
            request = RecallRequest(query=query, **({"bank": self.bank} | given))
        self._bank(request.bank)
        if request.mine and self.agent is None:
            raise RcllError("mine", "this server has no identity for you",
                            "authenticate (bearer token or --agent), or filter by authors")
        pool = self._pool()
        store = Pooled(self._shared.recall_pool or pool, agent=self.agent, read_only=self.read_only,
                       in_bank=self._shared.in_bank)
        with database_errors(read_only=self.read_only):    # no connection in time: RC010 (PoolTimeout)
            return recall(store, request, started=started, settings=self.settings)

    # -- rooms, tags, stats -------------------------------------------------------------------------

    @retried_once
    def rooms(self, pattern: str | None = None, *, bank: str | None = None) -> list[Room]:
        """A bank's rooms (topics) matching `pattern` (wildcards * and ?) with counts, status, aliases."""
        b = self._bank(bank)
        p = text_arg(pattern, "pattern") or "*"
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.rooms(bank => %s, pattern => %s)", (b, p)).fetchall()
        return [Room.from_row(r) for r in rows]

    @retried_once
    def tags(self, pattern: str | None = None, *, bank: str | None = None) -> list[Tag]:
        """Tags in use matching `pattern` (wildcards), with counts; 'author:*' lists every writer."""
        b = self._bank(bank)
        p = text_arg(pattern, "q") or "*"
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.tags(bank => %s, pattern => %s)", (b, p)).fetchall()
        return [Tag.from_row(r) for r in rows]

    @retried_once
    def stats(self, *, bank: str | None = None) -> Stats:
        """A bank by kind, room, hall, layer, author, link type and extraction, and its token account."""
        b = self._bank(bank)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.stats(bank => %s)", (b,)).fetchall()
        out = Stats(bank=b)
        for r in rows:
            if r["section"] == "tokens":
                out.tokens[r["name"]] = TokenAccount(r["value"], r["read_tokens"], r["write_input_tokens"],
                                                     r["write_output_tokens"])
            elif isinstance(getattr(out, r["section"], None), dict) and r["section"] != "other":
                getattr(out, r["section"])[r["name"]] = r["value"]
            else:
                out.other.setdefault(r["section"], {})[r["name"]] = r["value"]
        return out

    # -- state ------------------------------------------------------------------------------------

    @retried_once
    def get_state(self, room: str, key: str, *, bank: str | None = None, version: int | None = None) -> State | None:
        """A room's keyed state (exact room and key): the latest version, or `version`; None if none."""
        b = self._bank(bank)
        r, k = required_text(room, "room"), required_text(key, "key")
        v = int_arg(version, "version", 1, MAX_VERSION)
        rows = self._bank_call(b, "get_state", {"bank": b, "room": r, "key": k, "at_version": v})
        return State.from_row(rows[0]) if rows else None

    def put_state(self, room: str, key: str, value: Any, *, expected_version: int = 0, bank: str | None = None,
                  via: str = "python") -> StateWritten:
        """Write a new version of a room's keyed state if `expected_version` is the current one
        (0: none yet); otherwise an RcllError on expected_version naming both versions."""
        self.check_writable()
        b = self._bank(bank, "write")
        r, k = required_text(room, "room"), required_text(key, "key")
        ev = int_arg(expected_version, "expected_version", 0, MAX_VERSION, 0)
        state_value_arg(value, limit=self.settings.max_state_bytes)
        (version,), = self._bank_call(b, "put_state", {"bank": b, "room": r, "key": k, "value": Jsonb(value),
                                                       "expected_version": ev, "via": required_text(via, "via")},
                                      agent=True, resolve=False, dicts=False)
        return StateWritten(r, k, int(version))

    @retried_once
    def get_states(self, pairs: Iterable[tuple[str, str]], *, bank: str | None = None) -> list[StateKey]:
        """Many keyed states at once (rcll.get_states), each at its current version: the (room, key)
        pairs given, exact strings; a pair with no state has no row."""
        b = self._bank(bank)
        rooms, keys = self._pairs(pairs)
        return [StateKey.from_row(r) for r in self._bank_call(b, "get_states", {"bank": b, "rooms": rooms, "keys": keys})]

    def lock_states(self, pairs: Iterable[tuple[str, str]], *, bank: str | None = None) -> list[StateKey]:
        """In a unit of work (Memory.transaction), for a read-modify-write: lock these keyed states
        until it ends - every other writer of them waits - and return their current versions, as
        get_states (rcll.lock_states). A put_state with the version read here cannot lose: last
        write wins, and every version is kept. Needs the write verb."""
        self.check_writable()
        b = self._bank(bank, "write")
        rooms, keys = self._pairs(pairs)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.lock_states(bank => %s, rooms => %s, keys => %s)",
                               (b, rooms, keys)).fetchall()
        return [StateKey.from_row(r) for r in rows]

    @staticmethod
    def _pairs(pairs: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
        got = list(pairs)
        if not all(isinstance(p, tuple | list) and len(p) == 2 for p in got):
            raise RcllError("pairs", "must be (room, key) pairs", 'pass [("deployment", "spread"), ...]')
        return ([required_text(r, "room") for r, _ in got], [required_text(k, "key") for _, k in got])

    @retried_once
    def state_history(self, room: str, key: str, *, bank: str | None = None) -> list[State]:
        """Every version of a room's keyed state, newest first, each with its provenance."""
        b = self._bank(bank)
        r, k = required_text(room, "room"), required_text(key, "key")
        return [State.from_row(x) for x in self._bank_call(b, "state_history", {"bank": b, "room": r, "key": k})]

    @retried_once
    def session_start(self, *, rooms: Sequence[str] | None = None, thread: str | None = None,
                      bank: str | None = None) -> list[Rule]:
        """The L0 rules and procedures to load at the start of a session, for `rooms` (plus the
        bank-wide ones) and `thread`."""
        b = self._bank(bank)
        rs = list_arg(rooms, "rooms")
        t = text_arg(thread, "thread")
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.session_start(bank => %s, rooms => %s, thread => %s)",
                               (b, rs, t)).fetchall()
        return [Rule.from_row(r) for r in rows]

    # -- browsing (the console) ---------------------------------------------------------------------

    def floor_plan(self, *, bank: str | None = None) -> list[FloorRoom]:
        """Every room of a bank (rcll.rooms) with its units counted by hall, layer and author; a
        room with name None holds the units filed in no room."""
        b = self._bank(bank)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.floor_plan(bank => %s)", (b,)).fetchall()
        return [FloorRoom.from_row(r) for r in rows]

    def units(self, *, bank: str | None = None, rooms: Sequence[str] | None = None,
              halls: Sequence[str] | None = None, layers: Sequence[str] | None = None,
              authors: Sequence[str] | None = None, tags_any: Sequence[str] | None = None,
              tags_all: Sequence[str] | None = None, threads: Sequence[str] | None = None,
              time_from: datetime | str | None = None, time_to: datetime | str | None = None,
              limit: int = 50, offset: int = 0) -> UnitPage:
        """Browse a bank's units, newest first, by rooms (aliases and merges followed), halls,
        layers, authors, tags (any / all), threads and [time_from, time_to); not a recall - nothing
        is ranked. At most 500 per page."""
        b = self._bank(bank)
        args: dict[str, Any] = {"bank": b}
        for name, value in (("rooms", rooms), ("halls", halls), ("layers", layers), ("authors", authors),
                            ("tags_any", tags_any), ("tags_all", tags_all), ("threads", threads)):
            args[name] = list_arg(value, name)
        args["time_from"], args["time_to"] = time_arg(time_from, "time_from"), time_arg(time_to, "time_to")
        args["limit"] = int_arg(limit, "limit", 1, 500, 50)
        args["offset"] = int_arg(offset, "offset", 0, 2**31 - 1, 0)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT * FROM rcll.units(bank => %(bank)s, rooms => %(rooms)s, halls => %(halls)s, "
                "layers => %(layers)s, authors => %(authors)s, tags_any => %(tags_any)s, tags_all => %(tags_all)s, "
                "threads => %(threads)s, time_from => %(time_from)s, time_to => %(time_to)s, "
                '"limit" => %(limit)s, "offset" => %(offset)s)', args).fetchall()
        total = int(rows[0]["total"]) if rows else 0
        return UnitPage(total, args["limit"], args["offset"], [Unit.from_row(r) for r in rows])

    def merge_proposals(self, *, bank: str | None = None, include_decided: bool = False) -> list[MergeProposal]:
        """Room merges awaiting a person, oldest first (include_decided: the decided ones too)."""
        b = self._bank(bank)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.merge_proposals(bank => %s, include_decided => %s)",
                               (b, bool(bool_arg(include_decided, "include_decided")))).fetchall()
        return [MergeProposal.from_row(r) for r in rows]

    def decide_merge(self, from_room: str, *, approve: bool, reason: str | None = None,
                     person: str | None = None, bank: str | None = None) -> int:
        """A person approves (the room's units move, its name stays readable as an alias) or
        rejects a pending merge of `from_room`; refused for an agent. person: who decided, for the
        audit log - a server passes the person it authenticated. Returns the units moved."""
        self.check_writable()
        b = self._bank(bank, "admin")
        with self._tx(b, resolve=False) as conn:
            row = conn.execute(
                "SELECT rcll.decide_room_merge(bank => %s, from_room => %s, approve => %s, reason => %s, person => %s)",
                (b, required_text(from_room, "from_room"), bool_arg(approve, "approve"),
                 text_arg(reason, "reason", limit=2000), text_arg(person, "person"))).fetchone()
        assert row is not None
        return int(row[0])

    def state_keys(self, *, bank: str | None = None, rooms: Sequence[str] | None = None) -> list[StateKey]:
        """Every keyed state of a bank (or of `rooms`, exact strings) at its current version."""
        b = self._bank(bank)
        return [StateKey.from_row(r) for r in self._bank_call(b, "state_keys", {"bank": b, "rooms": list_arg(rooms, "rooms")})]

    # -- export / import --------------------------------------------------------------------------

    def export(self, to: str | os.PathLike[str] | IO[bytes], *, bank: str | None = None,
               progress: Progress | None = None) -> ExportSummary:
        """Export a whole bank: to a directory path (PAM view + lossless sidecar + manifest, see
        rcll.export), or to a binary file as NDJSON (the form GET /export streams)."""
        b = self._known_bank(bank, "export")
        if isinstance(to, (str, os.PathLike)):
            bank_id = self._bank_id(b, fresh=True) if self._delegated() else None
            with self._connection() as conn:
                return export_bank(conn, b, Path(to), progress=progress, bank_id=bank_id)
        summary = ExportSummary(b, Path(getattr(to, "name", "-")))
        for line in self.export_lines(bank=b):
            to.write(line)
            if line.startswith(b'{"table":"'):
                table = line[10:line.index(b'"', 10)].decode()
                summary.tables[table] = summary.tables.get(table, 0) + 1
        return summary

    @retried_once
    def export_lines(self, *, bank: str | None = None) -> Iterator[bytes]:
        """The bank as NDJSON lines from one snapshot: a header, then {"table", "row"} per row. An
        unknown bank is refused here, before the first line; so is an export beyond the budget of
        connections exports may hold (rcll.streams: Busy, HTTP 503). Close the iterator (or read it
        to the end) to give its connection back."""
        self._outside_unit("export")
        b = self._known_bank(bank, "export")
        # On a Citus cluster the whole export is one call delegated to the bank's worker, by the
        # bank's id as it is now (a stream is not made again when the id turns out stale).
        bank_id = self._bank_id(b, fresh=True) if self._delegated() else None
        # Not from the pool: a download lasts as long as its client reads (rcll.streams).
        return self._shared.exports.stream(self.dsn, lambda conn: iter_export(conn, b, bank_id=bank_id))

    def import_(self, source: str | os.PathLike[str] | IO[bytes], *, on_conflict: str = "error",
                progress: Progress | None = None, restore: bool = False) -> ImportSummary:
        """Load an export (a directory `export` wrote, or an NDJSON file) in one transaction, into
        the bank it names - the one bank it writes, with new ids, its authors kept as provenance
        only, as this Memory's agent. on_conflict: error (default), skip or replace rows that
        already exist. restore: the exact, trigger-less restore (ids, authors and grants as
        exported) - for the store's owner only: an unscoped Memory on the tables' owner role."""
        self.check_writable()
        policy = on_conflict_arg(on_conflict)
        if restore:
            self._whole_store("a restore", field="restore")
        if isinstance(source, (str, os.PathLike)):
            with self._connection() as conn:
                return import_bank(conn, Path(source), on_conflict=policy, progress=progress, allow=self._may_import,
                                   agent=self.agent, restore=restore)
        return self.import_lines(source, on_conflict=policy, restore=restore)

    def _may_import(self, bank: str) -> None:
        """Called with the bank an import's bank row names (where rcll.import_begin would write),
        before anything is written: an import reaches only a bank in scope."""
        self.scope.check(bank, "import")

    def import_lines(self, lines: Iterable[bytes], *, on_conflict: str = "error", restore: bool = False) -> ImportSummary:
        """Load the NDJSON form of an export (export_lines' output, trailer included) in one
        transaction; restore as in import_()."""
        self.check_writable()
        policy = on_conflict_arg(on_conflict)
        if restore:
            self._whole_store("a restore", field="restore")
        with self._connection() as conn:
            return import_stream(conn, lines, on_conflict=policy, allow=self._may_import, agent=self.agent,
                                 restore=restore, max_line=self.settings.max_import_line_bytes)

    # -- the store's HNSW indexes (a DBA's operation) -----------------------------------------------

    @property
    def whole_store(self) -> bool:
        """Whether this Memory may run whole-store operations (the indexes, upkeep): read-write and
        with no token scope."""
        return self.scope.unrestricted and not self.read_only

    def _whole_store(self, what: str, field: str = "indexes") -> None:
        if not self.whole_store:
            raise RcllError(field, f"{what} is an operation on the whole store; this memory is scoped "
                            "or read-only", "run it as the database's owner, with no token scope",
                            code=Code.NOT_PERMITTED)

    def dense_indexes(self) -> list[hnsw.DenseIndex]:
        """The HNSW indexes of the store (rcll.dense_indexes): the global one and big banks' own."""
        self._whole_store("listing the indexes")
        with self._connection() as conn:
            return hnsw.indexes(conn)

    def dense_index_plan(self, *, min_units: int | None = None, max_share: float | None = None,
                         m: int | None = None, ef_construction: int | None = None) -> list[hnsw.Step]:
        """What rcll.dense_index_plan says to run to give big banks their own index (built with m and
        ef_construction; None: the defaults, 32 and 128); runs nothing."""
        self._whole_store("planning the indexes")
        with self._connection() as conn, database_errors():
            return hnsw.plan(conn, min_units, max_share, m, ef_construction)

    def apply_dense_index_plan(self, *, min_units: int | None = None, max_share: float | None = None,
                               m: int | None = None, ef_construction: int | None = None,
                               maintenance_work_mem: str | None = None,
                               progress: Callable[[hnsw.Step, float], None] | None = None,
                               tracker: hnsw.Tracker | None = None) -> list[hnsw.Step]:
        """Run that plan, statement by statement on a connection of its own (the index builds are
        CONCURRENTLY: retains and recalls go on meanwhile). Minutes on a big store. Refused
        (hnsw.BuildUnderWay, RC004) while another session runs it."""
        self._whole_store("rebuilding the indexes")
        self._outside_unit("rebuilding the indexes")
        with database_errors():
            return hnsw.apply(self.dsn, min_units, progress, max_share, maintenance_work_mem, m, ef_construction,
                                tracker)

    def dense_index_builds(self) -> list[hnsw.Build]:
        """The index builds under way on the store's units (rcll.dense_index_builds), whoever runs them."""
        self._whole_store("watching the indexes' builds")
        with self._connection() as conn:
            return hnsw.builds(conn)

    def upkeep_dense_indexes(self, *, min_units: int | None = None, tracker: hnsw.Tracker | None = None) -> list[hnsw.Step]:
        """The periodic jobs' part in the indexes: apply rcll.dense_index_plan with its defaults
        (min_units None: settings.dense_index_min_units - RCLL_DENSE_INDEX_MIN_UNITS -, else the plan's 20,000), which gives every bank that
        crossed min_units its own index and the global index without it - built concurrently and
        swapped in by renames, so writes and recalls go on. Nothing when the indexes already match;
        hnsw.BuildUnderWay while another run is under way. Returns the steps run."""
        return self.apply_dense_index_plan(min_units=self.settings.dense_index_min_units if min_units is None else min_units,
                                           tracker=tracker)

    # -- forget and correct -----------------------------------------------------------------------

    def forget(self, request: ForgetRequest | None = None, *,
               progress: Callable[[dict[str, int]], None] | None = None, **fields: Any) -> Forgotten:
        """Forget memories by selector (rcll.forget; several selectors must all match;
        everything=<the bank's name> for all of it). The keywords are ForgetRequest's fields (bank -
        default this Memory's -, unit_ids, document_ids, thread, author, tag, room, occurred_from/
        occurred_to, retained_from/retained_to, everything, dry_run, reason, batch, purge), or pass a
        whole ForgetRequest (the keywords then replace its fields); a keyword given as None is left
        at its default. A dry run by default: it counts what would go and changes nothing - pass
        dry_run=False to forget. A selector matching nothing, or every memory without everything=,
        is refused. Everything derived goes in the same transaction (docs/forgetting.md). purge=True
        vacuums the touched tables after the commit. batch=n forgets n units (whole documents) per
        transaction until none is left, so writes into the bank wait one batch at most; progress, if
        given, receives the counts so far and what remains ({"units": ..., "remaining": ...}) after each."""
        unknown = sorted(set(fields) - {p.name for p in FORGET_PARAMETERS})
        if unknown:
            raise RcllError(unknown[0], "is not a forget field", f"use {', '.join(p.name for p in FORGET_PARAMETERS)}")
        self.check_writable()
        given = {k: v for k, v in fields.items() if v is not None}
        base = {} if request is None else {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
        b = self._bank(given.get("bank", base.get("bank")), "forget")
        asked = ForgetRequest(**(base | given | {"bank": b}))
        if asked.purge:
            self._outside_unit("purge")
        counts: dict[str, int] = {}
        while True:
            if self._delegated():
                rows = self._in_bank(b, lambda conn, bank_id: citus.call_in_bank(
                    conn, _FORGET_IN_BANK, {**asked.arguments, "bank_id": bank_id, "agent": self.agent or None}))
            else:
                with self._tx() as conn:
                    rows = conn.execute(sql.SQL("SELECT kind, count FROM rcll.forget({})").format(_FORGET_ARGS),
                                        asked.arguments).fetchall()
            step = {str(k): int(n) for k, n in rows}
            remaining = step.pop("remaining", 0)
            for k, n in step.items():
                counts[k] = counts.get(k, 0) + n
            if progress is not None and asked.batch is not None:
                progress({**counts, "remaining": remaining})
            if remaining == 0:
                break
        return Forgotten(asked.dry_run, counts, self._purge(PURGE_UNITS, b) if asked.purge and not asked.dry_run else [])

    def forget_state(self, room: str, key: str | None = None, *, all_keys: bool = False, bank: str | None = None,
                     dry_run: bool = True, reason: str | None = None) -> Forgotten:
        """Forget a room's keyed state with every version: one key, or every key of the room with
        all_keys=True. A dry run by default (counts the versions)."""
        self.check_writable()
        b = self._bank(bank, "forget")
        rows = self._bank_call(b, "forget_state", {"bank": b, "room": required_text(room, "room"), "key": text_arg(key, "key"),
                                                   "all_keys": bool(all_keys), "dry_run": bool(dry_run),
                                                   "reason": text_arg(reason, "reason", limit=1000)},
                               agent=True, resolve=False, dicts=False)
        return Forgotten(bool(dry_run), {"state_versions": int(rows[0][0]) if rows else 0})

    def drop_bank(self, name: str, *, confirm: str | None = None, dry_run: bool = True, reason: str | None = None,
                  purge: bool = False) -> Forgotten:
        """Drop a whole bank and every row of it; confirm must repeat its name. A dry run by
        default. Needs the forget and admin verbs."""
        self.check_writable()
        b = self._bank(name, "forget")
        self.scope.check(b, "admin")
        with self._tx() as conn:
            rows = conn.execute("SELECT kind, count FROM rcll.drop_bank(bank => %s, confirm => %s, dry_run => %s, "
                                "reason => %s)",
                                (b, text_arg(confirm, "confirm"), bool(dry_run),
                                 text_arg(reason, "reason", limit=1000))).fetchall()
        counts = {str(k): int(n) for k, n in rows}
        return Forgotten(bool(dry_run), counts, self._purge(PURGE_BANK, b) if purge and not dry_run else [])

    def _purge(self, statements: tuple[tuple[str, str], ...], bank: str) -> list[str]:
        # VACUUM cannot run inside a transaction block: after the forget committed, on a connection
        # of its own in autocommit. A role that does not own the tables gets PostgreSQL's
        # "skipping" warning, not an error; the tables it could vacuum are listed.
        done = []
        with self._session(bank) as conn:
            for table, statement in statements:
                owner = conn.execute("SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c"
                                     " WHERE c.oid = %s::regclass", (table,)).fetchone()
                if owner and owner[0]:
                    conn.execute(statement)
                    done.append(table)
        return done

    def correct(self, unit_id: int, text: str, *, reason: str, bank: str | None = None) -> list[Version]:
        """Replace a unit's text with a reason: the new text is embedded here and written with its
        lexical rows in one transaction; the old text stays in the unit's history (who, why, when).
        Returns the history, the current version first."""
        self.check_writable()
        b = self._bank(bank, "write")
        uid = int_arg(unit_id, "unit_id", 1, 2**63 - 1)
        new = required_text(text, "text", limit=1 << 20)
        why = required_text(reason, "reason", limit=1000)
        with admitted(WRITE):
            embedding = models.get_embedder(self.settings).embed([new])[0]
            # Not delegated on a Citus cluster: rcll._in_bank_twins says why.
            with self._tx() as conn:
                conn.execute("SELECT rcll.correct(bank => %s, unit_id => %s, text => %s, embedding => %s, reason => %s)",
                             (b, uid, new, embedding, why))
        # The write verb was checked: the history of what one just wrote needs no read verb besides.
        return self._history(b, int(uid or 0))

    @retried_once
    def history(self, unit_id: int, *, bank: str | None = None) -> list[Version]:
        """Every version of a unit's text, the current one first (rcll.unit_history)."""
        return self._history(self._bank(bank), int_arg(unit_id, "unit_id", 1, 2**63 - 1) or 0)

    def _history(self, b: str, uid: int) -> list[Version]:
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM rcll.unit_history(bank => %s, unit_id => %s)", (b, uid)).fetchall()
        return [Version(**r) for r in rows]

    def set_retention(self, keep: timedelta | None, *, room: str | None = None, hall: str | None = None,
                      layer: str | None = None, bank: str | None = None) -> int:
        """Keep the bank's units (or those of one room, hall and/or layer) for `keep` after they
        were retained; keep=None removes that policy. Existing units follow at once. Needs the
        admin verb. Returns how many units' expiry changed."""
        self.check_writable()
        b = self._bank(bank, "admin")
        if keep is not None and (not isinstance(keep, timedelta) or keep <= timedelta(0)):
            raise RcllError("keep", "must be a positive time span, or None to remove the policy",
                            "e.g. keep=timedelta(days=90)")
        with self._tx() as conn:
            row = conn.execute("SELECT rcll.set_retention(bank => %s, keep => %s, room => %s, hall => %s, layer => %s)",
                               (b, keep, text_arg(room, "room"), text_arg(hall, "hall"),
                                text_arg(layer, "layer"))).fetchone()
        return int(row[0]) if row else 0

    @retried_once
    def retention(self, *, bank: str | None = None) -> list[dict[str, Any]]:
        """The bank's retention policies, each with the units it covers and how many have expired."""
        b = self._bank(bank)
        with self._tx(b) as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute("SELECT * FROM rcll.retention_policies(bank => %s)", (b,)).fetchall()

    # -- background -------------------------------------------------------------------------------

    def upkeep(self, *, dense_indexes: bool | None = None, dense_index_min_units: int | None = None) -> Upkeep:
        """The store's periodic jobs, once: rcll.refresh_bank_stats() recounts every bank's BM25
        corpus statistics (recall reads them; a bank never refreshed is counted on every recall,
        0.7-3 s in a bank of 333,333 units), and rcll.fold_room_counts() folds the room registry's
        pending deltas. Then, with dense_indexes (None: settings.auto_dense_indexes, RCLL_AUTO_DENSE_INDEXES, on unless
        off), the dense-index plan (upkeep_dense_indexes; dense_index_min_units None: settings.dense_index_min_units,
        RCLL_DENSE_INDEX_MIN_UNITS, else 20,000): minutes when a big bank has just crossed it, nothing
        otherwise. `rcll serve` runs it every RCLL_UPKEEP_SECONDS (default 300, the indexes on a
        thread of their own); `rcll upkeep` runs it once (for cron). A whole-store write: refused on a scoped or read-only Memory."""
        self._whole_store("upkeep (every bank's statistics)", "upkeep")
        build = self.settings.auto_dense_indexes if dense_indexes is None else dense_indexes
        t = time.perf_counter()
        with self._tx() as conn:
            # Expired units first, so the statistics recounted next no longer hold them.
            expired = conn.execute("SELECT coalesce(sum(units), 0) FROM rcll.expire()").fetchone()
            banks = conn.execute("SELECT count(*) FROM rcll.refresh_bank_stats()").fetchone()
            folded = conn.execute("SELECT rcll.fold_room_counts()").fetchone()
        steps: list[str] | None = None
        if build:
            try:
                steps = [s.why for s in self.upkeep_dense_indexes(min_units=dense_index_min_units)]
            except BuildUnderWay:
                steps = None      # another run is building them: it does what this one would
        return Upkeep(int(banks[0]) if banks else 0, int(folded[0] or 0) if folded else 0,
                      round(time.perf_counter() - t, 3), int(expired[0]) if expired else 0, steps)

    def consolidate(self, *, bank: str | None = None, time_window: timedelta = timedelta(days=7),
                    min_size: int = 2, max_groups: int = 100) -> list[Observation]:
        """Compact related pending L2 units into one observation per group (a background job;
        needs LLM_PROVIDER offline or anthropic). Returns what was written."""
        self.check_writable()
        b = self._bank(bank, "write")
        lo = int_arg(min_size, "min_size", 2, 10_000) or 2
        groups = int_arg(max_groups, "max_groups", 1, 1_000_000) or 100
        with self._session(b) as conn:
            return consolidate(conn, b, time_window=time_window, min_size=lo, max_groups=groups,
                               settings=self.settings)
