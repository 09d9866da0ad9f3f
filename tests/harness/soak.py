"""Soak: writers and readers over HTTP, PostgreSQL and the server killed with -9 midway, then an audit.

    PYTHONPATH=tests .venv/bin/python -m harness.soak --writers 12 --readers 4 --seconds 40
    PYTHONPATH=tests .venv/bin/python -m harness.soak --short          # <= 60 s; tests/test_soak.py runs it in CI

It starts its own embedded PostgreSQL (in a temporary RCLL_HOME) and `rcll serve` on 127.0.0.1
only, and stops both when done. Phases, each --seconds long: writers alone, readers alone, both
(the rates and latencies docs/benchmarks.md quotes), then a chaos phase under both loads: kill -9 of the
postmaster and every backend, `rcll db start`; later kill -9 of the RCLL server and a restart.
Writers retry a refused or unanswered write (503, connection error) until it is acknowledged, so
retried writes must come back as the same document (retain is idempotent on content).

The audit reads the database directly: every acknowledged write present with all its units, no
partial document (units = chunks of its content), no document twice, no document nobody sent, the
room registry's counts (rcll.rooms) equal to count(*) per room, no HTTP 500. Exit status 0 when
the audit holds; the rate and latency criteria are printed beside it (they depend on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from rcll import cluster
from rcll.chunking import chunk_text
from rcll.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

HOST = "127.0.0.1"   # loopback only: the soak server is anonymous
BANK = "default"
ROOMS = ("deployment", "billing", "incidents", "onboarding", "security", "roadmap")
_VOCABULARY = (
    "cluster latency deploy rollback invoice customer ticket alert pager runbook migration schema "
    "index vacuum replica failover budget quarter launch review token certificate rotation audit "
    "kubernetes helm argo terraform grafana prometheus postgres backup restore snapshot queue worker "
    "retry timeout deadline throughput release canary feature flag experiment metric dashboard")
WORDS = tuple(_VOCABULARY.split())
QUERIES = ("how do we deploy?", "what happened during the last incident?", "who owns billing invoices?",
           "how is the database backed up?", "when was the certificate rotated?", "what is on the roadmap?",
           "how do we roll back a release?", "which alerts page the on-call?")
REQUEST_TIMEOUT = 30.0


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# -- the server and its database ---------------------------------------------------------------------

class Server:
    """`rcll serve` on 127.0.0.1 with its embedded PostgreSQL in a private RCLL_HOME."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port
        self.base = f"http://{HOST}:{port}"
        self.env = {**os.environ, "RCLL_HOME": str(home), "LLM_PROVIDER": "none",
                    "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
        self.env.pop("RCLL_DSN", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "serve.log"
        self.cluster = cluster.embedded(home / "pg18", config=Settings.from_env())

    def start(self, wait: float = 240.0) -> float:
        """Start the server; seconds until /health answers."""
        t = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "rcll.cli", "serve", "--host", HOST,
                                          "--port", str(self.port)], env=self.env, stdout=log, stderr=log)
        while time.monotonic() - t < wait:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rcll serve exited ({self.proc.returncode}); see {self.log}:\n"
                                   + self.log.read_text()[-2000:])
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return time.monotonic() - t
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"rcll serve did not answer /health within {wait:.0f} s; see {self.log}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def db_url(self) -> str:
        return self.cluster.url("rcll")

    def kill_postgres(self) -> int:
        """kill -9 of the postmaster and every process it started (backends, walwriter, ...)."""
        pid = int((self.cluster.datadir / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(stat.parent.name))
        for p in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in [pid, *children]):
            time.sleep(0.05)
        return 1 + len(children)

    def start_postgres(self) -> float:
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "rcll.cli", "db", "start"], env=self.env, check=True,
                       capture_output=True)
        return time.monotonic() - t

    def shutdown(self) -> None:
        self.stop()
        self.cluster.stop("immediate")


# -- load ------------------------------------------------------------------------------------------------

@dataclass
class Sent:
    content: str
    room: str
    attempts: int = 0
    acked: dict[str, Any] | None = None


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    writes: list[tuple[float, float, str]] = field(default_factory=list)    # (end time, latency s, phase)
    recalls: list[tuple[float, float, str]] = field(default_factory=list)
    depth: list[tuple[int, int, bool, str]] = field(default_factory=list)    # recalls: depths, cut, phase
    phase_ms: list[dict[str, float]] = field(default_factory=list)           # their server-side timings
    status: dict[int, int] = field(default_factory=dict)
    by_phase: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (phase, verb, status) -> count
    refused: list[tuple[str, str, float]] = field(default_factory=list)      # recall 503s: (phase, field, ms)
    unreachable: int = 0
    errors_500: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    retried_acks: int = 0
    retried_existing: int = 0

    def count(self, code: int, verb: str = "", phase: str = "") -> None:
        with self.lock:
            self.status[code] = self.status.get(code, 0) + 1
            key = (phase, verb, code)
            self.by_phase[key] = self.by_phase.get(key, 0) + 1


class Load:
    def __init__(self, base: str, stats: Stats, deadline_ms: int | None, seed: int) -> None:
        self.base = base
        self.stats = stats
        self.deadline_ms = deadline_ms
        self.seed = seed
        self.phase = "warmup"
        self.stop = threading.Event()

    def document(self, rng: random.Random, writer: int, n: int) -> Sent:
        paragraphs = []
        for _ in range(rng.randint(1, 4)):
            sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
                         for _ in range(rng.randint(3, 7))]
            paragraphs.append(" ".join(sentences))
        tag = f"[soak {self.seed} {self.phase} writer {writer} doc {n}]"
        return Sent(content=tag + " " + "\n\n".join(paragraphs), room=rng.choice(ROOMS))

    def _pause(self, response: httpx.Response | None) -> None:
        wait = 0.2
        if response is not None and response.headers.get("retry-after", "").isdigit():
            wait = min(float(response.headers["retry-after"]), 1.0)
        self.stop.wait(wait)

    def writer(self, i: int, client: httpx.Client) -> None:
        rng = random.Random(self.seed * 1000 + i)
        n = 0
        while not self.stop.is_set():
            doc = self.document(rng, i, n)
            n += 1
            with self.stats.lock:
                self.stats.sent.append(doc)
            while not self.stop.is_set():
                doc.attempts += 1
                t = time.monotonic()
                try:
                    r = client.post(f"{self.base}/retain", json={"bank": BANK, "content": doc.content,
                                                                 "room": doc.room}, timeout=REQUEST_TIMEOUT)
                except httpx.HTTPError:
                    with self.stats.lock:
                        self.stats.unreachable += 1
                    self._pause(None)
                    continue
                self.stats.count(r.status_code, "retain", self.phase)
                if r.status_code == 200:
                    body = r.json()
                    with self.stats.lock:
                        doc.acked = body
                        self.stats.writes.append((time.monotonic(), time.monotonic() - t, self.phase))
                        if doc.attempts > 1:
                            self.stats.retried_acks += 1
                            self.stats.retried_existing += not body["created"]
                    break
                if r.status_code >= 500 and r.status_code != 503:
                    with self.stats.lock:
                        self.stats.errors_500.append(f"retain {r.status_code}: {r.text[:200]}")
                elif r.status_code != 503:
                    with self.stats.lock:
                        self.stats.rejected.append(f"retain {r.status_code}: {r.text[:200]}")
                    break
                self._pause(r)

    def reader(self, i: int, client: httpx.Client) -> None:
        rng = random.Random(self.seed * 1000 + 500 + i)
        while not self.stop.is_set():
            body: dict[str, Any] = {"bank": BANK, "query": rng.choice(QUERIES)}
            if self.deadline_ms:
                body["deadline_ms"] = self.deadline_ms
            t = time.monotonic()
            try:
                r = client.post(f"{self.base}/recall", json=body, timeout=REQUEST_TIMEOUT)
            except httpx.HTTPError:
                with self.stats.lock:
                    self.stats.unreachable += 1
                self._pause(None)
                continue
            self.stats.count(r.status_code, "recall", self.phase)
            if r.status_code == 200:
                out = r.json()
                latency = time.monotonic() - t
                with self.stats.lock:
                    self.stats.recalls.append((time.monotonic(), latency, self.phase))
                    self.stats.depth.append((int(out.get("rerank_depth_reached", -1)),
                                             int(out.get("context_depth_reached", -1)),
                                             bool(out.get("deadline_cut", False)), self.phase))
                    if self.phase == "mixed":
                        self.stats.phase_ms.append({**out.get("timings_ms", {}),
                                                    "server": float(out.get("elapsed_ms", 0.0)),
                                                    "client": latency * 1000})
            elif r.status_code >= 500 and r.status_code != 503:
                with self.stats.lock:
                    self.stats.errors_500.append(f"recall {r.status_code}: {r.text[:200]}")
            elif r.status_code != 503:
                with self.stats.lock:
                    self.stats.rejected.append(f"recall {r.status_code}: {r.text[:200]}")
            else:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    why = str(r.json()["field"])      # server: admission limit; deadline_ms: passed waiting
                    with self.stats.lock:
                        self.stats.refused.append((self.phase, why, (time.monotonic() - t) * 1000))
                self._pause(r)

    def run(self, phase: str, writers: int, readers: int, seconds: float,
            during: Callable[[], None] | None = None) -> float:
        """Run the load for `seconds` (or until `during` returns, when given); the phase's length."""
        self.phase = phase
        self.stop.clear()
        limits = httpx.Limits(max_connections=writers + readers + 4)
        with httpx.Client(limits=limits) as client:
            threads = [threading.Thread(target=self.writer, args=(i, client), daemon=True) for i in range(writers)]
            threads += [threading.Thread(target=self.reader, args=(i, client), daemon=True) for i in range(readers)]
            t = time.monotonic()
            for th in threads:
                th.start()
            if during is None:
                self.stop.wait(seconds)
            else:
                during()
            self.stop.set()
            elapsed = time.monotonic() - t
            for th in threads:
                th.join(REQUEST_TIMEOUT + 5)
        return elapsed


# -- audit -----------------------------------------------------------------------------------------------

@dataclass
class Audit:
    acknowledged: int = 0
    documents: int = 0
    lost: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    room_mismatches: list[str] = field(default_factory=list)
    rooms_checked: int = 0
    errors_500: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.partial or self.duplicated or self.unknown or self.room_mismatches
                    or self.errors_500)


def audit(url: str, stats: Stats) -> Audit:
    a = Audit(errors_500=len(stats.errors_500))
    sent = {s.content: s for s in stats.sent}
    with psycopg.connect(url) as conn:
        docs = conn.execute(
            "SELECT d.document_id, d.content, count(u.unit_id), array_agg(u.unit_id ORDER BY u.chunk_index)"
            " FROM rcll.documents d JOIN rcll.banks b USING (bank_id)"
            " LEFT JOIN rcll.memory_units u ON u.document_id = d.document_id"
            " WHERE b.name = %s GROUP BY d.document_id", (BANK,)).fetchall()
        by_content: dict[str, list[tuple[int, int, list[int]]]] = {}
        for doc_id, content, units, ids in docs:
            by_content.setdefault(content, []).append((doc_id, units, [i for i in ids if i is not None]))
            if units != len(chunk_text(content)):
                a.partial.append(f"document {doc_id}: {units} units for {len(chunk_text(content))} chunks")
            if content not in sent:
                a.unknown.append(f"document {doc_id} was never sent")
        a.documents = len(docs)
        for content, rows in by_content.items():
            if len(rows) > 1:
                a.duplicated.append(f"{content[:40]!r} stored {len(rows)} times")
        for s in stats.sent:
            if s.acked is None:
                continue
            a.acknowledged += 1
            rows = by_content.get(s.content, [])
            if not rows or rows[0][0] != s.acked["document_id"] or rows[0][2] != s.acked["unit_ids"]:
                a.lost.append(f"{s.content[:40]!r} acknowledged as document {s.acked['document_id']}")
        registry: dict[str, int] = dict(conn.execute("SELECT name, fact_count FROM rcll.rooms(bank => %s)", (BANK,)).fetchall())
        actual: dict[str, int] = dict(conn.execute(
            "SELECT u.room, count(*) FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id)"
            " WHERE b.name = %s AND u.room IS NOT NULL GROUP BY u.room", (BANK,)).fetchall())
        for room in sorted(set(registry) | set(actual)):
            a.rooms_checked += 1
            if registry.get(room, 0) != actual.get(room, 0):
                a.room_mismatches.append(f"{room}: registry {registry.get(room)} vs {actual.get(room, 0)} units")
    return a


# -- the run ---------------------------------------------------------------------------------------------

@dataclass
class Report:
    phases: dict[str, float]
    stats: Stats
    audit: Audit
    recovery: dict[str, float]
    deadline_ms: int | None
    log: list[str]

    def rate(self, kind: str, phase: str) -> float:
        rows = self.stats.writes if kind == "write" else self.stats.recalls
        return sum(1 for r in rows if r[2] == phase) / self.phases[phase] if self.phases.get(phase) else 0.0

    def latencies(self, kind: str, phase: str) -> list[float]:
        rows = self.stats.writes if kind == "write" else self.stats.recalls
        return [r[1] * 1000 for r in rows if r[2] == phase]

    def criteria(self) -> list[tuple[str, bool, str]]:
        out = []
        p95 = percentile(self.latencies("recall", "mixed"), 95)
        if self.deadline_ms:
            out.append((f"recall p95 (mixed) <= 1.5 x deadline ({1.5 * self.deadline_ms:.0f} ms)",
                        p95 <= 1.5 * self.deadline_ms, f"{p95:.0f} ms"))
        alone, mixed = self.rate("write", "writers-alone"), self.rate("write", "mixed")
        out.append(("mixed write rate >= 50% of writers alone", alone > 0 and mixed >= 0.5 * alone,
                    f"{mixed:.2f}/s vs {alone:.2f}/s ({100 * mixed / alone if alone else 0:.0f}%)"))
        a = self.audit
        out.append(("0 lost acknowledged writes", not a.lost, f"{len(a.lost)} of {a.acknowledged}"))
        out.append(("0 partial documents", not a.partial, f"{len(a.partial)} of {a.documents}"))
        out.append(("0 duplicated or unknown documents", not (a.duplicated or a.unknown),
                    f"{len(a.duplicated)} duplicated, {len(a.unknown)} unknown"))
        out.append(("exact room registry counts", not a.room_mismatches,
                    f"{a.rooms_checked - len(a.room_mismatches)}/{a.rooms_checked} rooms exact"))
        out.append(("0 HTTP 500", not a.errors_500, f"{a.errors_500}"))
        return out

    @staticmethod
    def _ptiles(xs: list[float]) -> str:
        return " / ".join(f"{percentile(xs, p):.0f}" for p in (50, 95, 99)) if xs else "-"

    def render(self) -> str:
        lines = ["", "| phase | writes/s | write p50 / p95 / p99 ms | recalls/s | recall p50 / p95 / p99 ms |",
                 "|---|---|---|---|---|"]
        for phase in self.phases:
            w, r = self.latencies("write", phase), self.latencies("recall", phase)
            lines.append(f"| {phase} ({self.phases[phase]:.1f} s) | {self.rate('write', phase):.2f} | {self._ptiles(w)} | "
                         f"{self.rate('recall', phase):.2f} | {self._ptiles(r)} |")
        s = self.stats
        lines.append("")
        lines.append("responses: " + ", ".join(f"{k}: {v}" for k, v in sorted(s.status.items()))
                     + f"; unreachable (connection refused/reset): {s.unreachable}; "
                     f"writes retried then acknowledged: {s.retried_acks} ({s.retried_existing} found already stored)")
        for phase in self.phases:
            depth = [d for d in s.depth if d[3] == phase]
            if depth:
                cut = sum(1 for d in depth if d[2])
                lines.append(f"{phase} recalls: rerank depth reached p50 {percentile([d[0] for d in depth], 50):.0f}"
                             f" (min {min(d[0] for d in depth)}, max {max(d[0] for d in depth)}), context depth p50 "
                             f"{percentile([d[1] for d in depth], 50):.0f}, cut by the deadline {cut}/{len(depth)}")
        for phase in self.phases:
            counts = {(verb, code): n for (p, verb, code), n in s.by_phase.items() if p == phase}
            if counts:
                lines.append(f"{phase}: " + ", ".join(f"{verb} {code}: {n}" for (verb, code), n in sorted(counts.items())))
        for phase in self.phases:
            refused = [(why, ms) for p, why, ms in s.refused if p == phase]
            for why in sorted({w for w, _ in refused}):
                ms = [m for w, m in refused if w == why]
                lines.append(f"{phase}: recall 503 ({'deadline passed' if why == 'deadline_ms' else why}) x{len(ms)}, "
                             f"answered in p50 / p95 {self._ptiles(ms).rsplit(' / ', 1)[0]} ms")
        if s.phase_ms:
            lines.append("")
            lines.append(f"mixed-phase recalls answered ({len(s.phase_ms)}), server-side ms per phase - queue: arrival "
                         "to recall start (worker thread, admission); slot wait (inside embed and rerank) and "
                         "connection wait (inside sql); server: arrival to response; client: the reader's latency")
            lines.append("")
            lines.append("| phase | mean | p50 | p95 | p99 | max |")
            lines.append("|---|---|---|---|---|---|")
            for k in ("queue", "embed", "slot_wait", "sql", "connection_wait", "rerank", "cut", "server", "client"):
                xs = [t[k] for t in s.phase_ms if k in t]
                if xs:
                    lines.append(f"| {k} | {sum(xs) / len(xs):.0f} | {percentile(xs, 50):.0f} | {percentile(xs, 95):.0f} | "
                                 f"{percentile(xs, 99):.0f} | {max(xs):.0f} |")
            lines.append("")
            for t in sorted(s.phase_ms, key=lambda t: -t.get("client", 0.0))[:3]:
                lines.append("slowest mixed recalls, ms: " + ", ".join(
                    f"{k} {t[k]:.0f}" for k in ("client", "server", "queue", "embed", "slot_wait", "sql",
                                                "connection_wait", "rerank", "cut") if k in t))
        lines.append("recovery: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.recovery.items()))
        lines.extend(self.log)
        lines.append("")
        for name, ok, value in self.criteria():
            lines.append(f"[{'PASS' if ok else 'FAIL'}] {name}: {value}")
        for what, items in (("lost", self.audit.lost), ("partial", self.audit.partial),
                            ("duplicated", self.audit.duplicated), ("unknown", self.audit.unknown),
                            ("rooms", self.audit.room_mismatches), ("500", s.errors_500),
                            ("rejected", s.rejected)):
            for item in items[:5]:
                lines.append(f"  {what}: {item}")
        return "\n".join(lines)


def _first_after(rows: list[tuple[float, float, str]], lock: threading.Lock, since: float,
                 stop: threading.Event, limit: float) -> float | None:
    """Seconds from `since` to the first success that started after it (waits up to `limit`)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and not stop.is_set():
        with lock:
            done = [r[0] for r in rows if r[0] - r[1] >= since]
        if done:
            return min(done) - since
        time.sleep(0.05)
    return None


def soak(writers: int, readers: int, seconds: float, *, deadline_ms: int | None = 1000, seed: int = 13,
         kills: bool = True, out: Callable[[str], None] = print) -> Report:
    home = Path(tempfile.mkdtemp(prefix="rclsk-", dir="/tmp"))
    server = Server(home, free_port())
    stats = Stats()
    load = Load(server.base, stats, deadline_ms, seed)
    phases: dict[str, float] = {}
    recovery: dict[str, float] = {}
    marks: dict[str, float] = {}
    log: list[str] = [f"machine load average (1 / 5 / 15 min) before the soak: {load_average()} on {os.cpu_count()} cores"]
    try:
        out(f"soak: starting PostgreSQL and rcll serve on {server.base} (RCLL_HOME={home})")
        recovery["server first start"] = server.start()
        out(f"soak: {writers} writers, {readers} readers, {seconds:g} s per phase, deadline_ms {deadline_ms}")
        for phase, w, r in (("writers-alone", writers, 0), ("readers-alone", 0, readers), ("mixed", writers, readers)):
            phases[phase] = load.run(phase, w, r, seconds)
            log.append(f"load average after {phase}: {load_average()}")
        if kills:
            def chaos() -> None:
                lock = stats.lock
                load.stop.wait(seconds / 4)
                t = time.monotonic()
                n = server.kill_postgres()
                server.start_postgres()
                marks["postgres"] = up = time.monotonic()
                recovery["postgres kill -9 to `rcll db start` done"] = up - t
                log.append(f"chaos: killed PostgreSQL ({n} processes) with -9 and ran `rcll db start`")
                _first_after(stats.writes, lock, up, load.stop, 60)   # the server kill comes after recovery
                load.stop.wait(seconds / 4)
                t = time.monotonic()
                server.kill()
                server.start()
                marks["server"] = up = time.monotonic()
                recovery["server kill -9 to /health"] = up - t
                log.append("chaos: killed rcll serve with -9 and started it again")
                _first_after(stats.writes, lock, up, load.stop, 60)
                load.stop.wait(seconds / 4)

            phases["chaos"] = load.run("chaos", writers, readers, seconds, during=chaos)
            for what, up in marks.items():
                for kind, rows in (("write", stats.writes), ("recall", stats.recalls)):
                    done = [r[0] - up for r in rows if r[0] - r[1] >= up]
                    if done:
                        recovery[f"first {kind} after the {what} restart"] = min(done)
        # Writes still unanswered when a phase ended may or may not be stored; the audit allows either.
        report = Report(phases, stats, audit(server.db_url(), stats), recovery, deadline_ms, log)
    finally:
        server.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--writers", type=int, default=12)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=40.0, help="length of each phase")
    p.add_argument("--deadline-ms", type=int, default=1000, help="recall deadline sent by readers (0: none)")
    p.add_argument("--no-kills", action="store_true", help="skip the chaos phase")
    p.add_argument("--short", action="store_true", help="the CI version: 3 writers, 2 readers, 6 s phases")
    p.add_argument("--seed", type=int, default=13)
    args = p.parse_args(argv)
    if args.short:
        args.writers, args.readers, args.seconds = 3, 2, 6.0
    if not (1 <= args.writers <= 64 and 1 <= args.readers <= 64 and 1 <= args.seconds <= 600):
        p.error("writers and readers in 1..64, seconds in 1..600")
    started = time.monotonic()
    report = soak(args.writers, args.readers, args.seconds, deadline_ms=args.deadline_ms or None,
                  seed=args.seed, kills=not args.no_kills)
    print(report.render())
    print(f"\nsoak: {time.monotonic() - started:.0f} s in all; machine load average {os.getloadavg()[0]:.1f}"
          f" on {os.cpu_count()} cores")
    return 0 if report.audit.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
