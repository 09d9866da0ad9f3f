"""Export streams on connections of their own, so a slow download cannot starve the pool.

An export reads a bank from one REPEATABLE READ snapshot for as long as the client takes to read
it. On a pooled connection, four slow downloads held every connection of a four-connection pool
(every other request then waited and failed with 503) and their snapshots held back vacuum. Here
each export opens its own connection, at most RCLL_MAX_EXPORTS at once (default 2; one more is
refused at once: 503 with Retry-After), and a download that stops reading for
RCLL_EXPORT_IDLE_SECONDS (default 60) is ended by PostgreSQL (idle_in_transaction_session_timeout),
which releases its snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from rcll.db import connect
from rcll.errors import Code, RcllError
from rcll.settings import DEFAULTS, Settings
from rcll.workqueue import READ, Busy

DEFAULT_MAX_EXPORTS = DEFAULTS.max_exports
DEFAULT_EXPORT_IDLE_SECONDS = DEFAULTS.export_idle_seconds
RETRY_AFTER = 5


class ExportsBusy(Busy):
    """As many exports as the server runs at once are already running."""

    def __init__(self, limit: int) -> None:
        RcllError.__init__(self, "server", f"busy: {limit} exports in progress is the limit",
                           f"retry after {RETRY_AFTER} s (Retry-After), or raise RCLL_MAX_EXPORTS",
                           code=Code.UNAVAILABLE)
        self.kind = READ
        self.retry_after = RETRY_AFTER


class _Held(Iterator[bytes]):
    """An export's lines; closing it (or running out, or failing, or being dropped) closes its
    connection and frees its slot, once."""

    def __init__(self, lines: Iterator[bytes], conn: psycopg.Connection[Any], release: Callable[[], None]) -> None:
        self._lines, self._conn, self._release = lines, conn, release
        self._open = True

    def __next__(self) -> bytes:
        try:
            return next(self._lines)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            close = getattr(self._lines, "close", None)
            if close is not None:
                close()
            self._conn.close()
        finally:
            self._release()

    def __del__(self) -> None:
        self.close()


class ExportBudget:
    """The connections export streams may hold at once (see the module's docstring)."""

    def __init__(self, limit: int, idle_seconds: int) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self._slots = threading.BoundedSemaphore(limit)

    @classmethod
    def from_settings(cls, settings: Settings) -> ExportBudget:
        """settings.max_exports (RCLL_MAX_EXPORTS) at once, each ended after settings.export_idle_seconds."""
        return cls(settings.max_exports, settings.export_idle_seconds)

    def stream(self, dsn: str, lines: Callable[[psycopg.Connection[Any]], Iterator[bytes]]) -> Iterator[bytes]:
        """lines(conn) on a connection of its own, or ExportsBusy at once when none is left."""
        if not self._slots.acquire(blocking=False):
            raise ExportsBusy(self.limit)
        try:
            conn = connect(dsn, autocommit=True)
            conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                         (f"{self.idle_seconds}s",))
        except BaseException:
            self._slots.release()
            raise
        return _Held(lines(conn), conn, self._slots.release)
