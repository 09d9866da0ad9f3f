"""The token-budget cut: the last recall phase, shared by the Python client and the SQL tests."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cut_to_budget"]


def cut_to_budget(tokens: Sequence[int], budget: int | None, limit: int | None = None) -> list[int]:
    """Indexes of the items to keep, in order: walk the ranked list and take each item whose
    tokens still fit; an item that does not fit is skipped and a later, shorter one may still
    fill the budget. budget None = no cut; limit caps the number of items."""
    kept: list[int] = []
    used = 0
    for i, n in enumerate(tokens):
        if limit is not None and len(kept) >= limit:
            break
        if budget is not None and used + n > budget:
            continue
        kept.append(i)
        used += n
    return kept
