"""The budget cut counts only what it must (rcll.budget.cut_counting) and keeps what counting every
candidate keeps; its lower bound never exceeds the tokenizer's count."""

from __future__ import annotations

import random

from rcll import models
from rcll.budget import approx_tokens, cut_counting, cut_to_budget, fewest_tokens

TRICKY = [
    "", " ", "hello world", "a\x1cb c\x1fd", "e\u0301te\u0301 cafe\u0301", "zero\u200bwidth\u200b joined",
    "\u4e2d\u6587 mixed with English 42", "x" * 250 + " tail", "don't stop-believing, (ok)!", "\t\ttabs\tand\nnewlines\r\n",
    "emoji \U0001f600 and 3.14159", "\u00c5ngstr\u00f6m \u00c6sir \u00df", "---- ... ????", "A1 b2 C3 d4 e5 " * 40,
    "\x00nul\x00 inside", "\u00a0nbsp\u00a0separated\u00a0words", "https://example.com/a/b?c=d&e=f#g",
    "\ufffdreplacement\ufffd", "Hangul \ud55c\uad6d\uc5b4 text", "\u0661\u0662\u0663 arabic digits 123",
]


def _texts(rnd: random.Random, n: int) -> list[str]:
    words = ["the", "user", "asked", "about", "Biscuit", "the", "cat,", "nine", "years", "old.", "assistant:",
             "recommendations", "include", "\u00e9t\u00e9", "1984", "--", "(see", "above)", "don't", "e-mail"]
    return [" ".join(rnd.choice(words) for _ in range(rnd.choice([3, 8, 20, 60, 150, 400]))) for _ in range(n)]


def test_the_lower_bound_never_exceeds_the_count() -> None:
    texts = TRICKY + _texts(random.Random(7), 200)
    counts = models.count_tokens(texts)
    assert all(fewest_tokens(t) <= c for t, c in zip(texts, counts, strict=True)), \
        [(t, fewest_tokens(t), c) for t, c in zip(texts, counts, strict=True) if fewest_tokens(t) > c]
    # and it is a useful bound on prose: most of the count
    prose = _texts(random.Random(8), 50)
    assert sum(map(fewest_tokens, prose)) > 0.5 * sum(models.count_tokens(prose))


def test_counting_what_it_must_keeps_what_counting_all_keeps() -> None:
    rnd = random.Random(1)
    saved = 0
    for trial in range(60):
        texts = _texts(rnd, rnd.choice([0, 1, 5, 40, 100]))
        budget = rnd.choice([None, 0, 50, 400, 4096])
        limit = rnd.choice([None, 1, 10, 100])
        asked: list[str] = []
        every = models.count_tokens(texts)
        keep, tokens = cut_counting(texts, budget, limit, lambda b, asked=asked: (asked.extend(b), models.count_tokens(b))[1])
        assert keep == cut_to_budget(every, budget, limit), (trial, budget, limit)
        assert all(tokens[i] == every[i] for i in keep)
        assert all(n is None or n == every[i] for i, n in enumerate(tokens))
        saved += len(texts) - len(asked)
    assert saved > 0


def test_a_full_budget_leaves_long_texts_uncounted() -> None:
    long = " ".join(["word"] * 600)
    texts = [long] * 7 + ["short one"] + [long] * 50
    asked: list[str] = []
    keep, tokens = cut_counting(texts, 4096, 100, lambda b: (asked.extend(b), models.count_tokens(b))[1])
    assert keep == [0, 1, 2, 3, 4, 5, 7]          # six of 600 fit 4,096; the short one fills in after
    assert len(asked) <= 16 and tokens[20] is None


def test_past_the_deadline_the_rest_is_estimated_not_counted() -> None:
    texts = ["one two three", "four five six seven"]

    def never(batch: list[str]) -> list[int]:
        raise AssertionError("counted past the deadline")

    keep, tokens = cut_counting(texts, 4096, 10, never, in_time=lambda: False)
    assert keep == [0, 1] and tokens == [approx_tokens(t) for t in texts]
