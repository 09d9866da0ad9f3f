"""The server's periodic jobs: Memory.upkeep() (the expiry sweep, BM25 corpus statistics, room counts) every
RCLL_UPKEEP_SECONDS on a daemon thread of `rcll serve`. Recall only reads what these write: a bank
whose statistics were never refreshed is counted on every recall instead (docs/scaling.md).

The jobs also give big banks their own HNSW indexes (rcll.dense_index_plan, applied as `rcll dense-indexes
--apply` does) when a bank crosses RCLL_DENSE_INDEX_MIN_UNITS, unless RCLL_AUTO_DENSE_INDEXES=off: a fleet that
grows gets them without a DBA. The server builds them on a thread of their own, so a build of
minutes does not hold back the statistics of the next rounds."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rcll.dense_indexes import BuildUnderWay, Tracker
from rcll.settings import DEFAULTS, KNOBS

if TYPE_CHECKING:
    from rcll.memory import Memory

UPKEEP_SECONDS = DEFAULTS.upkeep_seconds
ENV = KNOBS["upkeep_seconds"].env
INDEXES_ENV = KNOBS["auto_dense_indexes"].env
MIN_UNITS_ENV = KNOBS["dense_index_min_units"].env


class Upkeeper:
    """Runs memory.upkeep() at once and then every `seconds`, until stop(). A failed round is one
    line on stderr and the next round comes as planned. With indexes on (None: the memory's
    settings.auto_dense_indexes, RCLL_AUTO_DENSE_INDEXES), each round that finds no run of the index plan under
    way starts one on a thread of its own (Memory.upkeep_dense_indexes, which does nothing when the indexes
    already match), with the memory's settings.dense_index_min_units."""

    def __init__(self, memory: Memory, seconds: float, *, dense_indexes: bool | None = None) -> None:
        self._memory, self._seconds = memory, seconds
        self._indexes = memory.settings.auto_dense_indexes if dense_indexes is None else dense_indexes
        self._min_units = memory.settings.dense_index_min_units
        self._stop = threading.Event()
        self.rounds = 0
        self.last_run: datetime | None = None
        self.last_error: str | None = None
        self.indexes = Tracker()
        self._index_thread: threading.Thread | None = None
        self._thread = threading.Thread(target=self._run, name="rcll-upkeep", daemon=True)

    def start(self) -> Upkeeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._memory.upkeep(dense_indexes=False)
                self.rounds += 1
                self.last_run, self.last_error = datetime.now(UTC), None
            except Exception as e:  # noqa: BLE001 - a job that failed once is tried again next round
                if self._stop.is_set():
                    return
                self.last_error = _line(e)
                print(f"rcll upkeep: {e}", file=sys.stderr, flush=True)
            else:
                # After a good round only: one that failed says the store is out of reach.
                if self._indexes and not self._stop.is_set() and not (self._index_thread and self._index_thread.is_alive()):
                    self._index_thread = threading.Thread(target=self._build_indexes, name="rcll-dense-indexes", daemon=True)
                    self._index_thread.start()
            self._stop.wait(self._seconds)

    def _build_indexes(self) -> None:
        self.indexes.begin()
        try:
            steps = self._memory.upkeep_dense_indexes(min_units=self._min_units, tracker=self.indexes)
        except BuildUnderWay:
            self.indexes.end(None, "another run is building the indexes; this server's next round looks again")
        except Exception as e:  # noqa: BLE001 - an interrupted build is cleared and retried by the next round's plan
            self.indexes.end(None, _line(e))
            if not self._stop.is_set():
                print(f"rcll upkeep (indexes): {e}", file=sys.stderr, flush=True)
        else:
            self.indexes.end(steps)

    def status(self) -> dict[str, Any]:
        """What /health says of the jobs: how often, rounds done, the last good run, the last error
        (None once a round succeeds again), and the indexes: whether the jobs build them, the run
        under way (its step, and PostgreSQL's progress of the index it builds) and the last run's."""
        indexes: dict[str, Any] = {"auto": self._indexes, **self.indexes.status()}
        if indexes["building"] is not None:
            try:
                indexes["index_builds"] = [b.as_dict() for b in self._memory.dense_index_builds()]
            except Exception as e:  # noqa: BLE001 - /health answers even when the database does not
                indexes["index_builds"] = _line(e)
        return {"every_seconds": self._seconds, "rounds": self.rounds,
                "last_run": self.last_run.isoformat() if self.last_run else None, "last_error": self.last_error,
                "dense_indexes": indexes}

    def stop(self) -> None:
        """Stops the rounds. An index build under way is left to finish on its daemon thread (its
        statement cannot be interrupted from here); if the process exits first, the build is
        abandoned and the next run's plan clears it."""
        self._stop.set()
        self._thread.join(timeout=30)


def _line(e: BaseException) -> str:
    return str(e).splitlines()[0][:300] if str(e) else type(e).__name__
