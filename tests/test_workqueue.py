"""Bounded model work: admission refuses at once, slots bound the batches, writes and reads share fairly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from rcll import workqueue
from rcll.workqueue import READ, WRITE, Busy, WorkQueue, model_slot

HOLD = 0.04  # seconds a fake model batch holds its slot


class Probe:
    """Counts the batches running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def batch(self, hold: float = HOLD) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(hold)
        with self.lock:
            self.running -= 1


def run_threads(n: int, target: Callable[[int], None]) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def test_admission_over_the_limit_is_refused_at_once_with_a_retry_after() -> None:
    q = WorkQueue(2, read_limit=3, write_limit=5)
    release = threading.Event()
    entered = threading.Barrier(4)

    def hold(_: int) -> None:
        with q.admit(READ):
            entered.wait()
            release.wait(10)

    threads = run_threads(3, hold)
    entered.wait()
    started = time.perf_counter()
    with pytest.raises(Busy) as refused, q.admit(READ):
        pass
    assert time.perf_counter() - started < 0.05
    assert refused.value.retry_after >= 1 and refused.value.field == "server"
    assert "busy" in refused.value.message
    with q.admit(WRITE):        # writes have their own places
        pass
    release.set()
    for t in threads:
        t.join()
    with q.admit(READ):         # and the places come back
        pass
    assert q.snapshot().refused == {READ: 1, WRITE: 0}


def test_never_more_batches_at_once_than_slots() -> None:
    q = WorkQueue(2)
    probe = Probe()

    def work(i: int) -> None:
        for _ in range(5):
            with q.slot(READ if i % 2 else WRITE):
                probe.batch(0.005)

    for t in run_threads(8, work):
        t.join()
    assert probe.most == 2
    snap = q.snapshot()
    assert snap.active == {READ: 0, WRITE: 0} and snap.waiting == {READ: 0, WRITE: 0}
    assert snap.grants[READ] + snap.grants[WRITE] == 40


def test_the_default_is_one_slot_per_core() -> None:
    import os

    assert WorkQueue().slots == (os.cpu_count() or 1)


def _flood(q: WorkQueue, kind: str, threads: int, stop: threading.Event, probe: Probe) -> list[threading.Thread]:
    def work(_: int) -> None:
        while not stop.is_set():
            with q.slot(kind):  # type: ignore[arg-type]
                probe.batch()

    return run_threads(threads, work)


def test_a_write_waits_about_one_batch_while_reads_saturate_the_slots() -> None:
    q = WorkQueue(2)
    stop = threading.Event()
    readers = _flood(q, READ, 8, stop, Probe())
    time.sleep(0.2)
    overtaken = []
    for _ in range(10):
        before = q.snapshot().grants[READ]
        with q.slot(WRITE):
            overtaken.append(q.snapshot().grants[READ] - before)
            time.sleep(0.005)
    stop.set()
    for t in readers:
        t.join()
    # Eight reads queue ahead of the write; first come, first served would let all eight go
    # first. The write takes the next free slot (a read may slip in before it joins the queue).
    assert max(overtaken) <= 1, overtaken


def test_a_bulk_retain_cannot_take_every_slot_from_reads() -> None:
    q = WorkQueue(2)
    stop = threading.Event()
    writers = _flood(q, WRITE, 12, stop, Probe())
    time.sleep(0.2)
    overtaken = []
    for _ in range(10):
        before = q.snapshot().grants[WRITE]
        with q.slot(READ):
            overtaken.append(q.snapshot().grants[WRITE] - before)
            time.sleep(0.005)
    stop.set()
    for t in writers:
        t.join()
    assert max(overtaken) <= 1, overtaken


@pytest.mark.parametrize("write_share", [0.5, 0.6])
def test_reads_and_writes_both_waiting_share_the_slots_as_configured(write_share: float) -> None:
    q = WorkQueue(2, write_share=write_share)
    stop = threading.Event()
    done = {READ: 0, WRITE: 0}
    lock = threading.Lock()

    def work(i: int) -> None:
        kind = READ if i < 8 else WRITE
        while not stop.is_set():
            with q.slot(kind):
                time.sleep(0.01)
            with lock:
                done[kind] += 1

    threads = run_threads(16, work)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    share = done[WRITE] / (done[READ] + done[WRITE])
    assert write_share - 0.1 <= share <= write_share + 0.1, done


def test_reads_holding_slots_longer_do_not_get_more_of_the_cores() -> None:
    """A rerank batch holds a slot far longer than a retain's embedding: with both kinds waiting,
    slots go by time held lately, not by turns, so writes get their share (0.6) of the slot time."""
    q = WorkQueue(2)
    stop = threading.Event()
    held = {READ: 0.0, WRITE: 0.0}
    lock = threading.Lock()

    def work(i: int) -> None:
        kind, hold = (READ, 0.04) if i < 6 else (WRITE, 0.005)
        while not stop.is_set():
            with q.slot(kind):
                time.sleep(hold)
            with lock:
                held[kind] += hold

    threads = run_threads(12, work)
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join()
    share = held[WRITE] / (held[READ] + held[WRITE])
    assert 0.45 <= share <= 0.75, held        # by turns it would be ~0.11


def test_a_query_embedding_goes_ahead_of_the_rerank_batches_waiting() -> None:
    q = WorkQueue(1)
    release = threading.Event()
    order: list[str] = []
    lane = threading.Event()
    holders = _hold_slots_and_lane(q, READ, release, lane)    # the slot, and the express lane
    batches = run_threads(3, lambda i: _batch(q, order, i))
    while q.snapshot().waiting[READ] < 3:
        time.sleep(0.005)
    embed = _query_embedding(q, order)
    while q.snapshot().waiting[READ] < 4:
        time.sleep(0.005)
    _release_all(release, lane, [embed, *batches], holders)
    assert order[0] == "embed" and len(order) == 4


def _query_embedding(q: WorkQueue, order: list[str]) -> threading.Thread:
    """A started thread that takes a slot as a recall's query embedding (first) and records it."""
    def query_embedding() -> None:
        with q.slot(READ, first=True):
            order.append("embed")

    embed = threading.Thread(target=query_embedding)
    embed.start()
    return embed


def _release_all(release: threading.Event, lane: threading.Event, waiting: list[threading.Thread],
                 holders: list[threading.Thread]) -> None:
    """Free the slots (the express lane stays taken) until the waiting threads are done, then the lane."""
    release.set()
    for t in waiting:
        t.join()
    lane.set()
    for t in holders:
        t.join()


def _hold_slots_and_lane(q: WorkQueue, kind: str, release: threading.Event,
                         lane: threading.Event) -> list[threading.Thread]:
    """Threads holding every slot (as `kind`) until `release`, then the express lane until `lane`."""
    def hold(_: int, first: bool = False) -> None:
        with q.slot(kind, first=first):  # type: ignore[arg-type]
            (lane if first else release).wait(10)

    holders = run_threads(q.slots, hold)
    while sum(q.snapshot().active.values()) < q.slots:
        time.sleep(0.002)
    holders += run_threads(1, lambda i: hold(i, first=True))
    while q.snapshot().express < 1:
        time.sleep(0.002)
    return holders


def _batch(q: WorkQueue, order: list[str], i: int) -> None:
    with q.slot(READ):
        order.append(f"batch {i}")


def test_a_query_embedding_goes_ahead_of_the_writes_waiting_even_when_it_is_their_turn() -> None:
    q = WorkQueue(1)
    release = threading.Event()
    order: list[str] = []

    def write(i: int) -> None:
        with q.slot(WRITE):
            order.append(f"write {i}")

    # The slot (the last grant was a read: writes have the next turn), and the express lane.
    lane = threading.Event()
    holders = _hold_slots_and_lane(q, READ, release, lane)
    writes = run_threads(3, write)
    while q.snapshot().waiting[WRITE] < 3:
        time.sleep(0.005)
    embed = _query_embedding(q, order)
    while q.snapshot().waiting[READ] < 1:
        time.sleep(0.005)
    _release_all(release, lane, [embed, *writes], holders)
    assert order[0] == "embed" and len(order) == 4, order


def test_with_every_slot_taken_a_query_embedding_runs_at_once_in_the_express_lane() -> None:
    q = WorkQueue(2)
    release = threading.Event()
    held = threading.Barrier(3)
    probe = Probe()

    def hold(_: int) -> None:
        with q.slot(WRITE):
            held.wait()
            release.wait(10)

    holders = run_threads(2, hold)
    held.wait()
    started = time.perf_counter()
    with q.slot(READ, first=True):                       # no slot free: the express lane
        waited = time.perf_counter() - started
        assert q.snapshot().express == 1 and q.snapshot().active == {READ: 0, WRITE: 2}
        with pytest.raises(TimeoutError), q.slot(READ, timeout=0.02, first=True):
            pass                                         # the lane holds one embedding at a time
    assert waited < 0.05
    with pytest.raises(TimeoutError), q.slot(READ, timeout=0.02):
        pass                                             # a batch never takes the lane

    def embeddings(_: int) -> None:
        for _ in range(5):
            with q.slot(READ, first=True):
                probe.batch(0.002)

    for t in run_threads(6, embeddings):
        t.join()
    release.set()
    for t in holders:
        t.join()
    assert probe.most == 1                               # slots + 1 model runs at most
    snap = q.snapshot()
    assert snap.express == 0 and snap.active == {READ: 0, WRITE: 0} and snap.waiting == {READ: 0, WRITE: 0}


def test_a_slot_wait_past_its_timeout_raises_and_leaves_the_queue_clean() -> None:
    q = WorkQueue(1)
    release = threading.Event()
    held = threading.Event()

    def hold(_: int) -> None:
        with q.slot(WRITE):
            held.set()
            release.wait(10)

    (t,) = run_threads(1, hold)
    held.wait()
    started = time.perf_counter()
    with pytest.raises(TimeoutError), q.slot(READ, timeout=0.05):
        pass
    assert 0.04 < time.perf_counter() - started < 0.5
    assert q.snapshot().waiting == {READ: 0, WRITE: 0}
    release.set()
    t.join()
    with q.slot(READ, timeout=0):   # a free slot is granted even with no time to wait
        pass


def test_a_timed_out_wait_removes_only_its_own_waiter_and_leaks_no_slot() -> None:
    # Issue 13: waiters compared by value, so a rerank batch timing out removed another read's
    # waiter queued before it (left waiting forever) and left its own to be granted a slot
    # nobody released - after two such leaks no model work ran at all.
    q = WorkQueue(1)
    release, lane = threading.Event(), threading.Event()
    granted = threading.Event()

    def patient_batch(_: int) -> None:      # a batch of a recall without a deadline
        with q.slot(READ):
            granted.set()

    holders = _hold_slots_and_lane(q, WRITE, release, lane)
    (patient,) = run_threads(1, patient_batch)
    while q.snapshot().waiting[READ] < 1:
        time.sleep(0.001)
    with pytest.raises(TimeoutError), q.slot(READ, timeout=0.02):
        pass
    assert q.snapshot().waiting == {READ: 1, WRITE: 0}
    release.set()
    assert granted.wait(2), "the patient waiter was removed by another thread's timeout"
    patient.join()
    lane.set()
    for t in holders:
        t.join()
    assert q.snapshot().active == {READ: 0, WRITE: 0} and q.snapshot().express == 0


def test_recalls_with_deadlines_keep_getting_slots_under_a_write_flood() -> None:
    # Recalls as the server runs them: a query embedding (no timeout), then rerank batches that
    # wait only while their deadline leaves time. Under a flood of writes every recall finishes
    # and no slot is left held.
    q = WorkQueue(2)
    stop = threading.Event()
    writers = _flood(q, WRITE, 12, stop, Probe())
    done = [0] * 4

    def recall(i: int) -> None:
        for _ in range(5):
            with q.slot(READ, first=True):
                time.sleep(0.005)
            deadline = time.monotonic() + 0.1
            for _ in range(5):
                try:
                    with q.slot(READ, timeout=deadline - time.monotonic()):
                        time.sleep(0.01)
                except TimeoutError:
                    break
            done[i] += 1

    readers = run_threads(4, recall)
    for t in readers:
        t.join(10)
    stop.set()
    for t in writers:
        t.join()
    assert done == [5, 5, 5, 5], done
    assert q.snapshot().active == {READ: 0, WRITE: 0} and q.snapshot().waiting == {READ: 0, WRITE: 0}


def test_without_an_installed_queue_model_slots_cost_nothing() -> None:
    previous = workqueue.install(None)
    try:
        with model_slot(READ, timeout=0):
            pass
        q = WorkQueue(1)
        workqueue.install(q)
        with model_slot(WRITE):
            assert q.snapshot().active[WRITE] == 1
        assert workqueue.installed() is q
    finally:
        workqueue.install(previous)
