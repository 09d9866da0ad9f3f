"""The short soak (tests/harness/soak.py --short): load over HTTP, kill -9 of PostgreSQL and of the server, and
the audit holds - every acknowledged write stored whole, once, registry counts exact, no HTTP 500.
The rates and latencies it prints depend on the machine and are not asserted here."""

from __future__ import annotations

import pytest

from harness import soak


@pytest.mark.slow
def test_short_soak_loses_nothing_across_both_kills() -> None:
    lines: list[str] = []
    report = soak.soak(3, 2, 6.0, deadline_ms=1000, out=lines.append)
    text = report.render()
    a = report.audit
    assert a.acknowledged > 0, text
    assert not a.lost, text
    assert not a.partial, text
    assert not (a.duplicated or a.unknown), text
    assert not a.room_mismatches and a.rooms_checked > 0, text
    assert not report.stats.errors_500, text
    assert not report.stats.rejected, text
    assert "postgres" in " ".join(report.recovery) and "server" in " ".join(report.recovery), text
    assert any(r[2] == "chaos" for r in report.stats.writes), text
