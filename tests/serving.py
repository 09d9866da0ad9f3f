"""`rcll serve` in a child process for the tests that start the real server (test_serve,
test_citus_serve, test_typescript_client): its output read as it comes - the tests read what it
printed, and a full pipe would stall the server - and its /health awaited."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

import httpx


class Serving:
    """`python -m rcll.cli serve <args>` started with env; output holds what it printed so far,
    stdout and stderr, line by line."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "serve", *args], env=dict(env),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        self._reader = threading.Thread(target=lambda: self.output.extend(self.proc.stdout or ()), daemon=True)
        self._reader.start()

    def said(self) -> str:
        return "".join(self.output)

    def wait_healthy(self, base: str, seconds: float, what: str = "rcll serve") -> None:
        """Until base/health answers 200; an AssertionError with the output if the server exits
        first or does not answer within seconds."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError(f"{what} exited: " + self.said())
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise AssertionError(f"{what} did not answer /health within {seconds:.0f} s: " + self.said())

    def stop(self, seconds: float) -> int:
        """SIGTERM, then wait up to seconds (killed if it is still running then); the exit code."""
        self.proc.terminate()
        try:
            return self.proc.wait(seconds)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(5)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
