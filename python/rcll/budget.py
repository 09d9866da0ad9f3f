"""The token-budget cut: the last recall phase, shared by the Python client and the SQL tests.

cut_to_budget walks counts already made. cut_counting is what recall runs: it counts only what the
cut needs to look at. A fact whose lower bound (fewest_tokens, no tokenizer) is over what is left of
the budget could not fit, whatever its count, so it is skipped uncounted; the rest are counted a
batch at a time, in rank order, until the limit is reached. The facts kept are the ones a count of
every candidate keeps. On long texts that is the difference between counting 100 candidates of
hundreds of words (~50-180 ms on 2 cores) and counting the dozen or so that could still fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

__all__ = ["approx_tokens", "cut_counting", "cut_to_budget", "fewest_tokens"]

BATCH = 8   # texts counted in one tokenizer call (one GIL release for the batch in a server)

# A run of non-spaces from an ASCII letter or digit to the next space: one per space-separated word
# that holds one (the match eats the rest of its word).
_WORD_WITH_ALNUM = re.compile(r"[A-Za-z0-9][^ ]*")


def fewest_tokens(text: str) -> int:
    """A lower bound of `text`'s bge wordpiece count (models.count_tokens), without the tokenizer:
    its space-separated words that hold an ASCII letter or digit. bge's tokenizer (BertNormalizer,
    BertPreTokenizer, WordPiece) splits at every space and never drops or merges across one; it
    removes only control characters and accents, so such a word keeps its letter or digit and
    gives one wordpiece at least ([UNK] at worst)."""
    return len(_WORD_WITH_ALNUM.findall(text))


def approx_tokens(text: str) -> int:
    """The estimate SQL's rcll._approx_tokens makes without the tokenizer: a token per four
    characters, rounded up, one at least."""
    return max(1, math.ceil(len(text) / 4))


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


def cut_counting(texts: Sequence[str], budget: int | None, limit: int | None,
                 count: Callable[[list[str]], list[int]], *,
                 in_time: Callable[[], bool] = lambda: True) -> tuple[list[int], list[int | None]]:
    """cut_to_budget over `texts` (ranked), counting only what it must: (indexes kept, each text's
    tokens - None for a text it never had to count). A text whose fewest_tokens is over what is
    left of the budget is skipped uncounted (what is left only shrinks); the others are counted
    by `count` BATCH at a time in rank order, and none once the limit is reached. The kept
    indexes are cut_to_budget's over every text's count. in_time: False once the deadline has
    passed - the texts not counted yet are then estimated (approx_tokens), as SQL recall
    estimates them when the deadline is spent, rather than counted past it."""
    n = len(texts)
    tokens: list[int | None] = [None] * n
    kept: list[int] = []
    used, i = 0, 0
    while i < n and (limit is None or len(kept) < limit):
        room = math.inf if budget is None else budget - used
        want = BATCH if limit is None else min(BATCH, limit - len(kept))
        batch: list[int] = []
        j = i
        while j < n and len(batch) < want:
            # fewest_tokens is at most one per two characters: no need to look when that fits
            if (len(texts[j]) + 1) // 2 <= room or fewest_tokens(texts[j]) <= room:
                batch.append(j)
            j += 1
        if batch:
            todo = [texts[k] for k in batch]
            counted = count(todo) if in_time() else [approx_tokens(t) for t in todo]
            for k, c in zip(batch, counted, strict=True):
                tokens[k] = c
        for k in batch:
            n_k = tokens[k]
            assert n_k is not None
            if limit is not None and len(kept) >= limit:
                break
            if budget is not None and used + n_k > budget:
                continue
            kept.append(k)
            used += n_k
        i = j
    return kept, tokens
