"""The server's periodic jobs: Memory.upkeep() (the expiry sweep, BM25 corpus statistics, room counts) every
RCLL_UPKEEP_SECONDS on a daemon thread of `rcll serve`. Recall only reads what these write: a bank
whose statistics were never refreshed is counted on every recall instead (docs/scaling.md)."""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rcll.errors import RcllError

if TYPE_CHECKING:
    from rcll.memory import Memory

UPKEEP_SECONDS = 300.0
ENV = "RCLL_UPKEEP_SECONDS"


def interval() -> float:
    """RCLL_UPKEEP_SECONDS (0 switches the jobs off), default 300."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return UPKEEP_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:
        raise RcllError(ENV, f"{raw!r} is not a number of seconds from 0 to 86400",
                        f"set {ENV}=300 (the default), or 0 to leave the jobs to cron (`rcll upkeep`)")
    return value


class Upkeeper:
    """Runs memory.upkeep() at once and then every `seconds`, until stop(). A failed round is one
    line on stderr and the next round comes as planned."""

    def __init__(self, memory: Memory, seconds: float) -> None:
        self._memory, self._seconds = memory, seconds
        self._stop = threading.Event()
        self.rounds = 0
        self.last_run: datetime | None = None
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="rcll-upkeep", daemon=True)

    def start(self) -> Upkeeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._memory.upkeep()
                self.rounds += 1
                self.last_run, self.last_error = datetime.now(UTC), None
            except Exception as e:  # noqa: BLE001 - a job that failed once is tried again next round
                if self._stop.is_set():
                    return
                self.last_error = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                print(f"rcll upkeep: {e}", file=sys.stderr, flush=True)
            self._stop.wait(self._seconds)

    def status(self) -> dict[str, Any]:
        """What /health says of the jobs: how often, rounds done, the last good run, the last error
        (None once a round succeeds again)."""
        return {"every_seconds": self._seconds, "rounds": self.rounds,
                "last_run": self.last_run.isoformat() if self.last_run else None, "last_error": self.last_error}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
