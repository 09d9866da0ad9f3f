"""Mutated real export streams through POST /import with a bank-scoped token: no 5xx, no row
outside the token's banks changed, no sequence moved by a refused stream (the long run:
`python -m harness.fuzz_import --streams 10000`)."""

from __future__ import annotations

import pytest

from harness import fuzz_import


@pytest.mark.slow
def test_mutated_export_streams_never_reach_past_their_bank(dsn: str) -> None:
    out = fuzz_import.fuzz(dsn, streams=300)
    assert out["failures"] == [], out["failures"][:5]
    assert out["counts"]["all"].get("refused", 0) > 50 and out["counts"]["all"].get("imported", 0) > 10, out["counts"]
