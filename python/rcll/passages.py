"""What the cross-encoder reads of a fact: its most query-relevant window, within a budget of words.

A chat turn fits the cross-encoder whole; an assistant's answer, a note or a document page does
not, and read whole (cut at 256 tokens) it costs several short facts' time and shows the model
its first lines, which need not be the part the query asks about. So the first view reads each
fact's window of at most WINDOW words (~170 of the model's tokens) that holds the most of the
query's words (windows start at a sentence or line, ties go to the earliest: a fact that fits is
read whole, as before), and it reads the fused prefix whose pairs fit FIRST_VIEW_WORDS together
(MIN_DEPTH facts at least, never more than the depth asked): a budget of words, not of pairs, so
a recall over long texts costs about what one over chat turns does. Words, not the model's
tokens: counting them needs no tokenizer pass over long texts, and they are what was measured. What it does not read keeps its fused order behind
what it read, as under a deadline. A fact the window cut is not read again with the chunk before
it (the context view): a long text carries its own context, and its second pair would cost as
much as the first. (SPEND = "window" instead shrinks every window until the depth fits: the
alternative research/longmemeval/RESEARCH.md measured and set aside.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["FIRST_VIEW_WORDS", "MIN_DEPTH", "MIN_WINDOW", "SPEND", "WINDOW", "first_view", "fit_window", "query_terms",
           "window_of", "windows"]

WINDOW = 128               # words of one fact the cross-encoder reads, at most
FIRST_VIEW_WORDS = 3072    # words of the first view's pairs (query, passage, 3 for the model's marks) together
MIN_WINDOW = 48            # the budget never cuts a window below this
MIN_DEPTH = 10             # the budget never cuts the first view below this many facts
SPEND = "depth"            # "window": shrink the windows instead (research/longmemeval/RESEARCH.md)

_WORD = re.compile(r"[a-z0-9]+")
_BREAK = re.compile(r"(?<=[.!?:;])\s+|\n+")
_STOP = frozenset(re.findall(r"\S+",
    "the and for are was were you your yours what when where which who whom whose why how did does doing done "
    "have has had that this these those with from about into onto than then them they their there here can "
    "could would should will shall may might must not but any all some our ours his her hers its "
    "been being also just very much many more most such only own same other each few both too again once "
    "out off over under why tell know remember mentioned said say"))

Offsets = list[tuple[int, int]]


def query_terms(query: str) -> frozenset[str]:
    """The query's words a window is scored by: lower-cased, three letters or more, no stop words."""
    return frozenset(w for w in _WORD.findall(query.lower()) if len(w) >= 3 and w not in _STOP)


def window_of(text: str, offsets: Offsets, terms: frozenset[str], size: int) -> str:
    """The span of `text` of at most `size` words (offsets: each word's characters) starting at
    a sentence or line that holds the most distinct query terms; the earliest among equals."""
    n = len(offsets)
    if n <= size:
        return text
    starts = [0]
    k = 0
    for m in _BREAK.finditer(text):
        while k < n and offsets[k][0] < m.end():
            k += 1
        if k < n and k != starts[-1]:
            starts.append(k)
    best, best_hits = 0, -1
    for start in starts:
        s = min(start, n - size)   # a window near the end: the last `size` words
        span = text[offsets[s][0]:offsets[min(n, s + size) - 1][1]]
        hits = len(terms & set(_WORD.findall(span.lower())))
        if hits > best_hits:
            best, best_hits = s, hits
    return text[offsets[best][0]:offsets[min(n, best + size) - 1][1]]


def fit_window(lengths: Sequence[int], extra: int, budget: int, window: int = WINDOW,
               floor: int = MIN_WINDOW) -> int:
    """The largest window w <= `window` (and >= `floor`) for which the pairs, each `extra` words
    (the query and the model's three marks) plus min(length, w), fit `budget` together."""
    def cost(w: int) -> int:
        return sum(extra + min(n, w) for n in lengths)
    if cost(window) <= budget:
        return window
    lo, hi = floor, window
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _word_offsets(texts: Sequence[str]) -> list[Offsets]:
    return [[(m.start(), m.end()) for m in re.finditer(r"\S+", t)] for t in texts]


def windows(query: str, texts: Sequence[str], window: int = WINDOW,
            budget: int | None = FIRST_VIEW_WORDS) -> tuple[list[str], list[bool]]:
    """What the first view reads: a prefix of `texts`, each by its window, and whether each was cut.
    Words are runs of non-space characters."""
    if window <= 0 or not texts:
        return list(texts), [False] * len(texts)
    offsets = _word_offsets(texts)
    size = window
    if budget is not None:
        extra = len(query.split()) + 3        # [CLS] query [SEP] passage [SEP]
        if SPEND == "depth":
            # keep the window, read the fused prefix whose pairs fit the budget
            spent, k = 0, 0
            for o in offsets:
                spent += extra + min(len(o), window)
                if spent > budget and k >= MIN_DEPTH:
                    break
                k += 1
            texts, offsets = texts[:k], offsets[:k]
        else:
            size = fit_window([len(o) for o in offsets], extra, budget, window)
    terms = query_terms(query)
    return ([window_of(t, o, terms, size) for t, o in zip(texts, offsets, strict=True)],
            [len(o) > size for o in offsets])


def first_view(query: str, texts: Sequence[str]) -> tuple[list[str], list[bool]]:
    """What recall's first view reads of its top candidates (`texts`, in fused order): windows()
    with this module's WINDOW and FIRST_VIEW_WORDS. The one definition both recalls use: the
    client's rerank (rcll.deadline.rerank_within), and SQL's through the model service or the
    in-database models (rcll._model_first_view)."""
    return windows(query, texts, WINDOW, FIRST_VIEW_WORDS)
