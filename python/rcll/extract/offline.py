"""Keyless extraction (LLM_PROVIDER=offline): deterministic rules, no model, no key.

Sentence-level facts; times found by rules and resolved against the document's time by
`dateparser` (rcll.extract.timeparse); entities by rules - "Name:" speakers, @handles,
capitalised sequences, CamelCase and ALL-CAPS words (the bank's known entities are matched in SQL,
rcll._known_entities); the hall by keyword rules; supersession by change cues ("moved to",
"switched to", "no longer", "instead of"...). The room is left to the classifier in SQL.
The same text always gives the same facts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from rcll.extract.schema import Fact
from rcll.extract.timeparse import find_times

_SPEAKER = re.compile(r"^\s*([A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,2}):\s+(.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9@])")
_HANDLE = re.compile(r"(?<![\w@])@([A-Za-z][\w.-]{1,38}[A-Za-z0-9_])")
_CAP_WORD = r"[A-Z][\w'&.+-]*"
_CAP_SEQ = re.compile(rf"\b{_CAP_WORD}(?:(?:\s+(?:of|the|de|van|von)){{0,2}}\s+{_CAP_WORD})*")
_TECHY = re.compile(r"\b(?:[a-z]+[A-Z]\w*|[A-Z]{2,}[a-z0-9]*\w*|[A-Za-z]+\d\w*)\b")
_TRIVIAL = re.compile(
    r"^(?:hi|hey|hello|thanks|thank you|thx|ok|okay|yes|yeah|yep|no|nope|wow|cool|great|nice|lol|haha|"
    r"bye|goodbye|sure|awesome|amazing|right|totally|absolutely|exactly|indeed|same|me too|oh|ah|hmm)"
    r"(?:[\s,!.?]+(?:so much|a lot|you|man|dude|there|[A-Z]\w+))*[\s!.?]*$", re.IGNORECASE)

_NOT_ENTITIES = {w.lower() for w in ["I", "I'm", "I've", "I'd", "I'll", "Im", "Ive", "Me", "My", "Mine", "We", "We're", "We've", "Our", "Us", "You", "You're", "Your", "He", "She", "It", "It's", "They", "Their", "Them", "His", "Her", "The", "A", "An", "This", "That", "These", "Those", "There", "Here", "Then", "So", "But", "And", "Or", "If", "When", "While", "Where", "What", "Why", "How", "Who", "Which", "Whose", "Yes", "No", "Not", "Oh", "Ah", "Hey", "Hi", "Hello", "Thanks", "Thank", "Wow", "Cool", "Great", "Nice", "Sure", "Okay", "OK", "Yeah", "Yep", "Lol", "Haha", "Hmm", "Well", "Also", "Just", "Really", "Totally", "Absolutely", "Definitely", "Maybe", "Perhaps", "Still", "Even", "Only", "Actually", "Anyway", "Congrats", "Congratulations", "Good", "Awesome", "Amazing", "Love", "Glad", "Sorry", "Please", "Let", "Let's", "Do", "Don't", "Did", "Didn't", "Is", "Isn't", "Are", "Aren't", "Was", "Wasn't", "Be", "Been", "Have", "Has", "Had", "Can", "Can't", "Could", "Would", "Should", "Will", "Won't", "Must", "Might", "May", "Yesterday", "Today", "Tomorrow", "Tonight", "Last", "Next", "Every", "Some", "Any", "All", "Both", "Each", "Few", "Many", "Most", "Other", "Such", "After", "Before", "Since", "Until", "During", "About", "Above", "Across", "At", "By", "For", "From", "In", "Into", "On", "Of", "Off", "Out", "Over", "To", "Up", "With", "Without", "Through", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March", "April", "June", "July", "August", "September", "October", "November", "December", "Mr", "Mrs", "Ms", "Dr", "Bye", "Goodbye", "Speaking", "Talking", "Sounds", "Looks", "Seems", "Keep", "Take", "Make", "Go", "Going", "Got", "Get", "Glad", "Happy", "Ever", "Always", "Never", "Often", "Sometimes", "Usually", "Once", "Twice", "Again", "Right", "Exactly", "Indeed", "Same", "True", "Wait", "Check", "Btw", "Yup", "Nope", "Alright", "Hope", "Hopefully", "Honestly", "Plus", "Though", "Although", "Because", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays", "Weekends"]}

# Hall by keywords, tested in this order; the first that matches wins.
_HALL_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("rule", re.compile(r"\b(?:always|never|must(?: not)?|mustn't|do not ever|policy|is required|are required|"
                        r"required to|not allowed|forbidden|mandatory|only ever)\b", re.IGNORECASE)),
    ("procedure", re.compile(r"\b(?:to \w+, (?:run|use|open|click|go)|step \d|first,? .* then|runbook|procedure|"
                             r"how to|in order to|run `|run the)\b", re.IGNORECASE)),
    ("warning", re.compile(r"\b(?:warning|careful|beware|danger(?:ous)?|avoid|watch out|breaks?|broke|broken|"
                           r"fails?|failed|failing|bug|outage|crash(?:es|ed)?|incident|risk)\b", re.IGNORECASE)),
    ("decision", re.compile(r"\b(?:decided|decide|decision|we will|we'll|going with|go with|chose|chosen|choose|"
                            r"agreed|settled on|(?:moved|switched|migrated)\b.{0,40}?\bto|"
                            r"adopt(?:ed)?|plan to|planning to|are going to)\b", re.IGNORECASE)),
    ("preference", re.compile(r"\b(?:prefer(?:s|red)?|like|likes|love|loves|loved|favou?rite|enjoy(?:s|ed)?|"
                              r"hate|hates|dislike|rather|fan of|passionate)\b", re.IGNORECASE)),
    ("discovery", re.compile(r"\b(?:found out|found that|discovered|turns out|turned out|realized|realised|"
                             r"learned|learnt|noticed|figured out)\b", re.IGNORECASE)),
    ("event", re.compile(r"\b(?:went|attended|visited|met|happened|started|finished|launched|released|deployed|"
                         r"joined|left|moved|ran|took|had|got|bought|made|signed up|celebrated|won|lost)\b", re.IGNORECASE)),
]
_SUPERSEDE = re.compile(r"\b(?:moved|switched|migrated|changed|transitioned) (?:\w+ ){0,2}(?:to|from|over to)\b|"
                        r"\bno longer\b|\binstead of\b|\breplac(?:ed|es|ing)\b|\bnot anymore\b|\bnow (?:use|uses|using)\b",
                        re.IGNORECASE)


def sentences(text: str) -> list[tuple[str | None, str]]:
    """(speaker or None, sentence) pairs, in order."""
    out: list[tuple[str | None, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        speaker = None
        m = _SPEAKER.match(line)
        if m and m.group(1).lower() not in _NOT_ENTITIES:
            speaker, line = m.group(1), m.group(2)
        for s in _SENTENCE_END.split(line.strip()):
            if s.strip():
                out.append((speaker, s.strip()))
    return out


def entities(sentence: str, doc_capitalised: set[str]) -> list[dict[str, str]]:
    """Named entities by rules. A lone capitalised word opening the sentence counts if the document
    also capitalises it elsewhere, or if it does not look like an inflected common word (-ing, -ly,
    -ed, -s, -ness, -ment, -tion): "Painting is fun." names nothing, "Biscuit barked." names Biscuit."""
    found: dict[str, dict[str, str]] = {}
    for m in _HANDLE.finditer(sentence):
        found.setdefault(m.group(1).lower(), {"name": "@" + m.group(1), "type": "agent"})
    starts = {m.start() for m in re.finditer(r"(?:^|[.!?:;\"(]\s*)(?=\S)", sentence)}
    starts.add(0)
    for m in _CAP_SEQ.finditer(sentence):
        words = m.group(0).split()
        while words and words[0].lower().rstrip("'s") in _NOT_ENTITIES | {"of", "the", "and", "&"}:
            words = words[1:]
        while words and words[-1].lower() in _NOT_ENTITIES | {"of", "the", "and", "&", "de", "van", "von"}:
            words = words[:-1]
        if not words:
            continue
        name = re.sub(r"(?:'s|')$", "", " ".join(words)).strip(".,'&+-")
        if len(name) < 2 or name.lower() in _NOT_ENTITIES:
            continue
        at_start = m.start() in starts and name == m.group(0).split()[0].rstrip(".,")
        if (at_start and len(words) == 1 and name not in doc_capitalised and not _TECHY.fullmatch(name)
                and (len(name) < 3 or re.search(r"(?:ing|ly|ed|s|ness|ment|tion)$", name))):
            continue
        found.setdefault(name.lower(), {"name": name})
    for m in _TECHY.finditer(sentence):
        w = m.group(0)
        if (w.lower() not in _NOT_ENTITIES and not w.isdigit() and not re.fullmatch(r"\d+\w{0,2}", w)
                and not any(w.lower() in k.split() for k in found)):
            found.setdefault(w.lower(), {"name": w})
    return list(found.values())


def _capitalised_mid_sentence(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"(?<=[a-z,;] )([A-Z][\w'-]+)", text)}


def hall_of(sentence: str, dated: bool) -> str:
    for hall, pattern in _HALL_RULES:
        if hall == "event" and dated:
            return "event"
        if pattern.search(sentence):
            return hall
    return "event" if dated else "fact"


def _absolute(expr: str, start: datetime, period: str) -> str:
    if period in ("day", "weekend"):
        return f"{expr} ({start:%Y-%m-%d})"
    if period == "week":
        return f"{expr} (week of {start:%Y-%m-%d})"
    if period == "month":
        return f"{expr} ({start:%B %Y})"
    if period == "year":
        return f"{expr} ({start:%Y})"
    return expr


def extract(text: str, occurred_at: datetime | None = None) -> list[Fact]:
    """Facts of a document: one per non-trivial sentence (at least one for any non-empty text)."""
    reference = occurred_at or datetime.now(UTC)
    if reference.tzinfo is None:
        reference = reference.replace(tzinfo=UTC)
    doc_caps = _capitalised_mid_sentence(text)
    pairs = sentences(text)
    kept = [(sp, s) for sp, s in pairs if len(s.split()) >= 3 and not _TRIVIAL.match(s)]
    if not kept:
        kept = [(pairs[0][0], " ".join(s for _, s in pairs))] if pairs else [(None, text.strip())]
    facts: list[Fact] = []
    for speaker, sentence in kept:
        times = find_times(sentence, reference)
        body = sentence
        for expr, start, _end, period in times:
            if not re.search(r"\d{4}", expr):       # relative: say the absolute date in the fact
                body = body.replace(expr, _absolute(expr, start, period), 1)
        ents = entities(sentence, doc_caps)
        if speaker:
            ents = [{"name": speaker, "type": "person", "role": "speaker"}] + [
                e for e in ents if e["name"].lower() != speaker.lower()]
        first = times[0] if times else None
        facts.append(Fact(
            text=f"{speaker}: {body}" if speaker else body,
            hall=hall_of(sentence, first is not None),
            occurred_start=first[1].isoformat() if first else None,
            occurred_end=first[2].isoformat() if first and first[2] else None,
            entities=ents,
            supersedes=[f"{speaker}: {sentence}" if speaker else sentence] if _SUPERSEDE.search(sentence) else [],
            metadata={"extractor": "offline", **({"times": [t[0] for t in times]} if times else {})},
        ))
    return facts
