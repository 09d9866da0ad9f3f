"""Load LoCoMo (locomo10.json) into turns and scored questions.

Stdlib only. LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0 (see data/locomo/ATTRIBUTION.md).

Evidence repair (categories 1-4 only; category 5 "adversarial" is not scored):
  * ``D:11:26`` -> ``D11:26`` (stray colon after the ``D``)
  * ``D30:05``  -> ``D30:5``  (zero-padded turn number)
  * several ids in one string (``"D8:6; D9:17"``, ``"D9:1 D4:4 D4:6"``) are split apart
  * ids that do not name an existing turn of that conversation (``"D"``, ``"D10:19"`` ...) are
    dropped; a question left without any valid evidence is dropped.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

# The data set lives in shared/ beside the repository (not vendored: CC BY-NC 4.0); RCLL_LOCOMO overrides.
DEFAULT_PATH = Path(os.environ.get("RCLL_LOCOMO")
                    or Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json")
SCORED_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
EXPECTED_QUESTIONS = 1536

_DATE_RE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.IGNORECASE)
_ID_RE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_RE = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True, slots=True)
class Turn:
    conv: int  # conversation index 0..9 (one memory bank per conversation)
    dia_id: str  # canonical "D<session>:<turn>"
    session: int
    date: datetime  # session start, timezone-aware (UTC; LoCoMo gives no zone)
    speaker: str
    text: str  # utterance, plus "[shares a photo of: ...]" when the turn carries an image caption

    @property
    def date_str(self) -> str:
        return f"{self.date.day} {self.date:%B %Y}"


@dataclass(frozen=True, slots=True)
class Question:
    conv: int
    qid: int  # index in the conversation's qa list
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # canonical dia ids, all existing, deduplicated, order kept


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: tuple[Turn, ...]


def parse_session_date(s: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> datetime(2023, 5, 8, 13, 56, tzinfo=UTC)."""
    m = _DATE_RE.match(s)
    if not m:
        raise ValueError(f"unparsable LoCoMo session date: {s!r}")
    hh, mm, ampm, day, month, year = m.groups()
    h = int(hh) % 12 + (12 if ampm.lower() == "pm" else 0)
    mon = datetime.strptime(month[:3].title(), "%b").month
    return datetime(int(year), mon, int(day), h, int(mm), tzinfo=UTC)


def canonical_ids(raw: str) -> list[str]:
    """Every dia id found in one raw evidence string, canonicalised ("D30:05" -> "D30:5")."""
    return [f"D{int(s)}:{int(t)}" for s, t in _ID_RE.findall(raw)]


def _turn_text(t: dict) -> str:
    text = str(t.get("text", "")).strip()
    cap = t.get("blip_caption")
    if cap:
        cap = str(cap).strip()
        if cap.lower().startswith("a photo of "):
            cap = cap[len("a photo of "):]
        text = f"{text} [shares a photo of: {cap}]" if text else f"[shares a photo of: {cap}]"
    return text


def load_conversations(path: Path | str = DEFAULT_PATH) -> list[Conversation]:
    data = json.loads(Path(path).read_text())
    convs: list[Conversation] = []
    for ci, sample in enumerate(data):
        c = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), k) for k in c if (m := _SESSION_RE.match(k)) and isinstance(c[k], list)
        )
        turns: list[Turn] = []
        for sn, key in sessions:
            date = parse_session_date(c[f"{key}_date_time"])
            for t in c[key]:
                (did,) = canonical_ids(t["dia_id"])
                turns.append(Turn(ci, did, sn, date, t["speaker"], _turn_text(t)))
        convs.append(Conversation(ci, str(sample.get("sample_id", ci)), c["speaker_a"], c["speaker_b"], tuple(turns)))
    return convs


def load_questions(
    convs: list[Conversation] | None = None,
    path: Path | str = DEFAULT_PATH,
    categories: tuple[int, ...] = SCORED_CATEGORIES,
) -> list[Question]:
    if convs is None:
        convs = load_conversations(path)
    data = json.loads(Path(path).read_text())
    out: list[Question] = []
    for ci, sample in enumerate(data):
        valid = {t.dia_id for t in convs[ci].turns}
        for qi, q in enumerate(sample["qa"]):
            if q.get("category") not in categories:
                continue
            ev: list[str] = []
            for raw in q.get("evidence", []):
                for did in canonical_ids(str(raw)):
                    if did in valid and did not in ev:
                        ev.append(did)
            if not ev:
                continue
            out.append(Question(ci, qi, q["question"], str(q.get("answer", "")), int(q["category"]), tuple(ev)))
    return out


def load(path: Path | str = DEFAULT_PATH) -> tuple[list[Conversation], list[Question]]:
    convs = load_conversations(path)
    return convs, load_questions(convs, path)


if __name__ == "__main__":

    convs, qs = load()
    print(f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
          f"{len({(t.conv, t.session) for c in convs for t in c.turns})} sessions")
    print(f"{len(qs)} scored questions", dict(sorted(Counter(q.category for q in qs).items())))
    assert len(qs) == EXPECTED_QUESTIONS, len(qs)


def vocabulary() -> tuple[list[str], np.ndarray]:
    """LoCoMo's words with their frequencies (a real Zipf distribution of English chat)."""
    counts: Counter[str] = Counter()
    data = json.loads(DEFAULT_PATH.read_text())
    for sample in data:
        for turns in sample["conversation"].values():
            if isinstance(turns, list):
                for t in turns:
                    counts.update(re.findall(r"[a-z']+", str(t.get("text", "")).lower()))
    words = [w for w, _ in counts.most_common() if len(w) > 1]
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return words, freq / freq.sum()
