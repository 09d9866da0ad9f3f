"""Load LongMemEval (Wu et al., ICLR 2025; MIT) into questions with their haystacks.

Stdlib only. The data set lives in shared/ beside the repository (not vendored; see
data/longmemeval/ATTRIBUTION.md); RCLL_LONGMEMEVAL names another file. Every question carries
its own haystack (S: 38-58 sessions of user and assistant turns, ~115k tokens) with a date per
session; the question date is its reference time. Abstention questions (`_abs` ids) are loaded
but not scored (`scored`). Halves: a question belongs to half a or b by a hash of its id, so the
split does not follow the file's order (sorted by id) or the question types.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "longmemeval"
DEFAULT_PATH = Path(os.environ.get("RCLL_LONGMEMEVAL") or DATA_DIR / "longmemeval_s.json.gz")
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
         "multi-session", "temporal-reasoning", "knowledge-update")


@dataclass(frozen=True, slots=True)
class Turn:
    session: str      # haystack session id
    index: int        # position in its session (0-based, user and assistant turns alike)
    role: str         # "user" | "assistant"
    content: str
    has_answer: bool

    @property
    def key(self) -> str:
        return f"{self.session}:{self.index}"

    @property
    def text(self) -> str:
        """The chunk retained for this turn (the session date is its occurred_at, not in the text,
        so the same turn embeds the same in every haystack that holds it)."""
        return f"{self.role}: {self.content}"


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    date: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    type: str
    question: str
    answer: str
    date: datetime                   # the question's date: recall's reference time
    sessions: tuple[Session, ...]    # the haystack, in the file's order
    answer_sessions: frozenset[str]  # gold at session level

    @property
    def abstention(self) -> bool:
        return self.id.endswith("_abs")

    @property
    def half(self) -> str:
        return "a" if hashlib.sha256(self.id.encode()).digest()[0] % 2 == 0 else "b"

    def answer_turns(self, roles: tuple[str, ...] = ("user", "assistant")) -> frozenset[str]:
        """Gold at turn level: the has_answer turns (of these roles)."""
        return frozenset(t.key for s in self.sessions for t in s.turns if t.has_answer and t.role in roles)


def parse_date(s: str) -> datetime:
    """'2023/05/30 (Tue) 10:18' -> datetime(2023, 5, 30, 10, 18, tzinfo=UTC)."""
    day, _, clock = s.split(" ")
    return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def load(path: Path | str = DEFAULT_PATH) -> list[Question]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    out: list[Question] = []
    for q in data:
        sessions = tuple(
            Session(sid, parse_date(date), tuple(Turn(sid, i, t["role"], t["content"], bool(t.get("has_answer")))
                                                 for i, t in enumerate(turns)))
            for sid, date, turns in zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"],
                                        strict=True))
        out.append(Question(q["question_id"], q["question_type"], q["question"], str(q["answer"]),
                            parse_date(q["question_date"]), sessions, frozenset(q["answer_session_ids"])))
    return out


def scored(questions: list[Question]) -> list[Question]:
    """The questions the benchmark's retrieval metrics average over: abstention left out."""
    return [q for q in questions if not q.abstention]


def stratified(questions: list[Question], per_type: int, seed: int = 1) -> list[Question]:
    """per_type questions of each type (all of a type that has fewer), drawn with `seed`, in id order."""
    by_type: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_type[q.type].append(q)
    rnd = random.Random(seed)
    picked = {q.id for qs in by_type.values() for q in rnd.sample(qs, min(per_type, len(qs)))}
    return [q for q in questions if q.id in picked]


if __name__ == "__main__":
    qs = load()
    s = scored(qs)
    print(f"{len(qs)} questions, {len(s)} scored (abstention left out); "
          f"half a {sum(q.half == 'a' for q in s)}, half b {sum(q.half == 'b' for q in s)}")
    for t in TYPES:
        print(f"  {t}: {sum(q.type == t for q in s)}")
