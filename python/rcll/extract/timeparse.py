"""Time expressions in text, resolved against the document's time ("yesterday" is the day before
the document, not before today).

Finding the expressions is rules (a fixed set of regular expressions: dateparser's own
`search_dates` also matches words like "may", "now" and "sun" in ordinary prose, and is ~100x
slower); turning a found expression into a date is the `dateparser` library, given the document
time as RELATIVE_BASE. Each expression resolves to a span [start, end) at its granularity
(day, week, month, year).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

_NUM = r"(?:\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of|couple of|several)"
_UNIT = r"(?:day|week|month|year)s?"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_ORD = r"(?:\d{1,2})(?:st|nd|rd|th)?"

PATTERNS = [
    r"\b(?:the )?day before yesterday\b",
    r"\b(?:yesterday|today|tonight|tomorrow|last night)\b",
    r"\bthis (?:morning|afternoon|evening)\b",
    rf"\b(?:last|next|this|past) (?:week(?:end)?|month|year|{_WEEKDAY})\b",
    rf"\b{_NUM} {_UNIT} ago\b",
    rf"\bin {_NUM} {_UNIT}\b",
    rf"\b{_MONTH}\.? {_ORD}(?:,? \d{{4}})?\b",
    rf"\b{_ORD} (?:of )?{_MONTH}(?:,? \d{{4}})?\b",
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
    rf"\b{_MONTH} \d{{4}}\b",
    rf"\b(?:in|since|during|of) (?:{_MONTH}(?:,? \d{{4}})?|(?:19|20)\d{{2}})\b",
    rf"\bon {_WEEKDAY}\b",
]
_FINDER = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.IGNORECASE)
# "may" alone is a verb; a month name only counts with a day or a year (or after in/since/during).
_WORDS = {"a few": "3", "a couple of": "2", "couple of": "2", "several": "3", "past": "last"}


def _dateparser(base: datetime) -> Any:
    from dateparser.date import DateDataParser

    return DateDataParser(languages=["en"], settings={
        "RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_TIME_AS_PERIOD": True,
        "PREFER_DAY_OF_MONTH": "first", "RETURN_AS_TIMEZONE_AWARE": False,
    })


_parsers: dict[datetime, Any] = {}


def _parser(base: datetime) -> Any:
    p = _parsers.get(base)
    if p is None:
        if len(_parsers) > 256:
            _parsers.clear()
        p = _parsers[base] = _dateparser(base)
    return p


def _span(start: datetime, period: str) -> tuple[datetime, datetime | None]:
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=7)
    if period == "month":
        first = day.replace(day=1)
        return first, (first + timedelta(days=32)).replace(day=1)
    if period == "year":
        first = day.replace(month=1, day=1)
        return first, first.replace(year=first.year + 1)
    return start, None


def parse_expression(text: str, reference: datetime) -> tuple[datetime, datetime | None, str] | None:
    """(start, end, period) of one time expression relative to `reference`, or None."""
    tz = reference.tzinfo or UTC
    base = reference.astimezone(tz).replace(tzinfo=None)
    phrase = re.sub(r"\s+", " ", text.strip().lower())
    phrase = re.sub(r"^(?:in|since|during|of|on|the) ", "", phrase)
    for word, repl in _WORDS.items():
        phrase = re.sub(rf"\b{word}\b", repl, phrase)
    phrase = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", phrase)
    if phrase.endswith("weekend"):
        # dateparser has no weekend: the Saturday of that week
        offset = {"last": -7, "next": 7}.get(phrase.split()[0], 0)
        sat = base + timedelta(days=(5 - base.weekday()) + offset)
        if phrase.startswith("last") and sat >= base:
            sat -= timedelta(days=7)
        day = sat.replace(hour=0, minute=0, second=0, microsecond=0)
        return day.replace(tzinfo=tz), (day + timedelta(days=2)).replace(tzinfo=tz), "weekend"
    if phrase == "tonight":
        phrase = "today"
    if phrase == "last night":
        phrase = "yesterday"
    if re.fullmatch(r"\d{4}", phrase):
        start = datetime(int(phrase), 1, 1)
        return start.replace(tzinfo=tz), datetime(int(phrase) + 1, 1, 1, tzinfo=tz), "year"
    data = _parser(base).get_date_data(phrase)
    if data is None or data.date_obj is None:
        return None
    period = data.period or "day"
    if re.fullmatch(rf"{_MONTH}\.?", phrase):
        period = "month"
    if period in ("time", "part_of_day", "hour", "minute", "second"):
        return data.date_obj.replace(tzinfo=tz), None, period
    start, end = _span(data.date_obj, period)
    return start.replace(tzinfo=tz), end.replace(tzinfo=tz) if end else None, period


def find_times(text: str, reference: datetime) -> list[tuple[str, datetime, datetime | None, str]]:
    """Every time expression in `text`: (matched text, start, end, period), in order."""
    out = []
    for m in _FINDER.finditer(text):
        span = parse_expression(m.group(0), reference)
        if span is not None:
            out.append((m.group(0), span[0], span[1], span[2]))
    return out
