"""What the cross-encoder reads of a long fact: its most query-relevant window, within a budget of words
(rcll.passages), and no context view for a fact the window cut."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from rcll import models, passages
from rcll.deadline import rerank_within
from rcll.results import Fact

FILLER = " ".join(f"Sentence {i} talks about the weather and nothing else." for i in range(40))
ANSWER = "The user's cat is named Biscuit and she is nine years old."
LONG = f"assistant: {FILLER} {ANSWER} {FILLER}"


class _Reader:
    """A stand-in cross-encoder: scores a passage by whether it holds the answer; records what it read."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def score(self, query: str, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        return np.array([5.0 if "Biscuit" in t else -1.0 for t in texts], dtype=np.float32)


def _fact(uid: int, text: str, context: str | None = None) -> Fact:
    return Fact(unit_id=uid, text=text, room=None, hall=None, layer=None, author=None, thread=None, tags=[],
                valid=None, occurred_start=None, mentioned_at=None, document_id=None, provenance={},
                fused_score=1.0 / uid, rank_dense=None, rank_lexical=None, rank_graph=None, rank_temporal=None,
                context=context)


def test_a_fact_that_fits_is_read_whole() -> None:
    texts, cut = passages.windows("what is my cat called?", ["user: my cat is Biscuit."])
    assert texts == ["user: my cat is Biscuit."] and cut == [False]


def test_a_long_fact_is_read_by_the_window_that_holds_the_query_words() -> None:
    query = "What is the name of my cat, and how old is she?"
    (text,), (cut,) = passages.windows(query, [LONG])
    assert cut and "Biscuit" in text and len(text) < len(LONG)
    assert len(text.split()) <= passages.WINDOW
    # the model reads it whole: well inside its 256 tokens with the query
    assert models.get_reranker().pair_lengths(query, [text])[0] < 256
    # the first 256 tokens, as the cross-encoder cut them before, never reach the answer
    assert "Biscuit" not in LONG[: LONG.index(ANSWER)]


def test_the_alternative_shrinks_the_longest_windows_only() -> None:
    # passages.SPEND = "window" (measured and set aside: research/longmemeval/RESEARCH.md)
    assert passages.fit_window([10, 20], extra=10, budget=1000) == passages.WINDOW
    w = passages.fit_window([500] * 40, extra=20, budget=3072)
    assert 40 * (20 + w) <= 3072 < 40 * (20 + w + 1)
    assert passages.fit_window([500] * 400, extra=20, budget=3072) == passages.MIN_WINDOW
    # short facts keep their length; the long ones share what is left
    w = passages.fit_window([30] * 20 + [1000] * 20, extra=10, budget=3000)
    assert 20 * (10 + 30) + 20 * (10 + w) <= 3000 and w > 30


def test_a_cut_fact_is_not_read_again_with_its_context() -> None:
    pool = [_fact(1, "user: where do cats sleep?", "assistant: hello"), _fact(2, LONG, "user: tell me about my pets")]
    reader = _Reader()
    out, depth = rerank_within("What is my cat called?", pool, reader, depth=2, context_depth=2)
    first, second = reader.calls
    assert first[0] == pool[0].text and first[1] != LONG and "Biscuit" in first[1]
    assert second == ["assistant: hello / user: where do cats sleep?"]   # only the fact read whole
    assert [f.unit_id for f in out] == [2, 1] and depth.context == 2


def test_the_budget_reads_the_fused_prefix_that_fits() -> None:
    pool = [_fact(i, f"assistant: {FILLER} {i}") for i in range(1, 41)]
    reader = _Reader()
    out, depth = rerank_within("What is my cat called?", pool, reader, depth=40, context_depth=15)
    # every fact is cut to its window of 128 words; 3,072 words hold the first 22 of 40 (at least MIN_DEPTH)
    per_pair = passages.WINDOW + 5 + 3          # the window, the query's five words, the special tokens
    read = max(passages.FIRST_VIEW_WORDS // per_pair, passages.MIN_DEPTH)
    assert sum(map(len, reader.calls)) == read == depth.rerank
    assert [f.unit_id for f in out[read:]] == list(range(read + 1, 41))      # the unread keep their fused order
    assert all(f.rerank_score is None for f in out[read:])
    # chat turns fit: all 40 are read, whole, as before
    short = [_fact(i, f"user: turn {i}") for i in range(1, 41)]
    texts, cut = passages.windows("What is my cat called?", [f.text for f in short])
    assert texts == [f.text for f in short] and not any(cut)
