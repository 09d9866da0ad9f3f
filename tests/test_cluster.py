"""The settings an RCLL cluster starts with (rcll.cluster): shared_buffers sized from the machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Leg
from rcll import cluster
from rcll.settings import Settings

GIB = 1024**3


@pytest.mark.parametrize(("memory_gib", "expected"), [(1, "256MB"), (8, "1024MB"), (24, "3072MB"), (128, "4096MB")])
def test_shared_buffers_is_an_eighth_of_memory_between_256mb_and_4gb(
        monkeypatch: pytest.MonkeyPatch, memory_gib: int, expected: str) -> None:
    monkeypatch.setattr(cluster, "memory_bytes", lambda: memory_gib * GIB)
    assert cluster.shared_buffers() == expected


def test_rcll_shared_buffers_overrides_the_sizing() -> None:
    settings = Settings.from_env({"RCLL_SHARED_BUFFERS": "512MB"})
    assert cluster.shared_buffers(settings) == "512MB"
    assert cluster.embedded(Path("/nonexistent"), config=settings).settings["shared_buffers"] == "512MB"


def test_memory_is_the_machines_or_less() -> None:
    assert 0 < cluster.memory_bytes() <= cluster.os.sysconf("SC_PHYS_PAGES") * cluster.os.sysconf("SC_PAGE_SIZE")


def test_a_started_embedded_cluster_runs_with_that_setting(pg18: Leg) -> None:
    with pg18.admin() as conn:
        row = conn.execute("SELECT pg_size_bytes(current_setting('shared_buffers')) = pg_size_bytes(%s)",
                           (cluster.shared_buffers(),)).fetchone()
    assert row is not None and row[0]
