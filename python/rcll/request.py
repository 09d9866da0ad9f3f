"""One recall request: every field a recall takes, typed, validated once, frozen - and one forget
request, the same way (ForgetRequest, FORGET_PARAMETERS: rcll.forget's parameters plus purge).

Every interface builds one RecallRequest in one place - Memory.recall from its keywords, HTTP from
the POST /recall body, MCP from the memory_recall tool's arguments, the CLI from `rcll recall`'s
flags (the console posts to HTTP) - and the three that describe their parameters derive them from
the fields below (`PARAMETERS`), so a new field reaches every one of them
(tests/test_recall_request.py proves each accepts each field).

The scope fields are rcll.recall_scope's parameters, the rest rcll.recall_candidates' (time_from
and time_to are its time_range; its deadline_ms bounds the channels) plus the client's phases:
the rerank depths, the token budget and the deadline's rest. The test holds those lists equal to the functions' arguments in the catalog.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Literal

from rcll import defaults
from rcll.defaults import CHANNELS
from rcll.errors import RcllError
from rcll.validate import (
    MAX_BANK_NAME,
    MAX_BUDGET,
    MAX_NAME,
    MAX_QUERY,
    bool_arg,
    check_bank,
    int_arg,
    list_arg,
    required_text,
    text_arg,
    time_arg,
)

__all__ = ["ANNOTATIONS", "CHANNELS", "FORGET_ANNOTATIONS", "FORGET_PARAMETERS", "FORGET_SQL", "MAX_DEADLINE_MS",
           "MAX_DEPTH", "MAX_LIMIT", "PARAMETERS", "SCOPE", "ForgetParameter", "ForgetRequest", "Parameter",
           "RecallRequest"]

MAX_DEPTH: Final = 1000
MAX_DEADLINE_MS: Final = 600_000
MAX_LIMIT: Final = 10_000
MAX_WEIGHT: Final = 1000.0

Kind = Literal["text", "names", "flag", "time", "int", "weights"]


def _f(kind: Kind, help: str, default: Any = None, *, scope: bool = False) -> Any:
    """A field with what an interface needs to offer it (default MISSING: required)."""
    meta = {"kind": kind, "help": help, "scope": scope}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallRequest:
    """A recall, checked when it is made: a value that exists is valid (an RcllError names the
    field otherwise). Lists are kept as tuples, timestamps as datetimes (ISO 8601 strings are
    read), weights as every channel's weight (the ones not given at their default)."""

    query: str = _f("text", "what to recall (at most 4000 characters)", MISSING)
    bank: str = _f("text", "the bank to read", MISSING, scope=True)
    rooms: Sequence[str] | None = _f("names", "only these rooms (topics; aliases and approved merges followed)",
                                     scope=True)
    authors: Sequence[str] | None = _f("names", "only what these authors wrote", scope=True)
    mine: bool = _f("flag", "only what the caller's identity wrote", False, scope=True)
    include_unattributed: bool = _f("flag", "with authors or mine: also units that have no author", False,
                                    scope=True)
    halls: Sequence[str] | None = _f("names", "only these halls (fact types)", scope=True)
    layers: Sequence[str] | None = _f("names", "only these layers (L0 rules, L1 decisions, L2 observations)",
                                      scope=True)
    tags_any: Sequence[str] | None = _f("names", "units carrying any of these tags", scope=True)
    tags_all: Sequence[str] | None = _f("names", "units carrying all of these tags", scope=True)
    thread: str | None = _f("text", "only this thread", scope=True)
    as_of: datetime | str | None = _f("time", "what was valid at this time (ISO 8601; default now)", scope=True)
    include_self_declared: bool = _f("flag", "with authors or mine: also units whose author was declared by the "
                                             "writer, not resolved by the server", False, scope=True)
    time_from: datetime | str | None = _f("time", "what happened at or after this time (ISO 8601)")
    time_to: datetime | str | None = _f("time", "what happened before this time (ISO 8601)")
    reference_time: datetime | str | None = _f("time", "the 'now' a relative date in the query counts from "
                                                       "(ISO 8601; default now)")
    weights: Mapping[str, float] = _f("weights", "each channel's weight in the fusion, by channel name "
                                                 f"({', '.join(CHANNELS)}); 0 skips a channel", defaults.WEIGHTS)
    channel_limit: int = _f("int", "candidates each channel returns", defaults.CHANNEL_LIMIT)
    limit: int = _f("int", "facts returned at most (fused candidates kept)", defaults.CANDIDATE_LIMIT)
    rerank_depth: int = _f("int", "fused candidates the cross-encoder reads (0: no rerank)", defaults.RERANK_DEPTH)
    context_depth: int = _f("int", "of those, how many it reads again with the chunk before them",
                            defaults.CONTEXT_DEPTH)
    budget: int | None = _f("int", "tokens of fact text returned at most (none: only the limit cuts)",
                            defaults.BUDGET)
    deadline_ms: int | None = _f("int", "latency budget in ms: the cross-encoder reads candidates in fused order "
                                        "while time is left, and the answer says how deep it read (none: no deadline)")

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {
            "query": required_text(self.query, "query", limit=MAX_QUERY),
            "bank": check_bank(self.bank),
            "mine": bool(bool_arg(self.mine, "mine")),
            "include_unattributed": bool(bool_arg(self.include_unattributed, "include_unattributed")),
            "include_self_declared": bool(bool_arg(self.include_self_declared, "include_self_declared")),
            "thread": text_arg(self.thread, "thread"),
            "weights": _weights(self.weights),
            # None: the default (these have no "none")
            "channel_limit": int_arg(self.channel_limit, "channel_limit", 1, MAX_LIMIT, defaults.CHANNEL_LIMIT),
            "limit": int_arg(self.limit, "limit", 1, MAX_LIMIT, defaults.CANDIDATE_LIMIT),
            "rerank_depth": int_arg(self.rerank_depth, "rerank_depth", 0, MAX_DEPTH, defaults.RERANK_DEPTH),
            "context_depth": int_arg(self.context_depth, "context_depth", 0, MAX_DEPTH, defaults.CONTEXT_DEPTH),
            "budget": int_arg(self.budget, "budget", 1, MAX_BUDGET),
            "deadline_ms": int_arg(self.deadline_ms, "deadline_ms", 1, MAX_DEADLINE_MS),
        }
        for name in ("rooms", "authors", "halls", "layers", "tags_any", "tags_all"):
            names = list_arg(getattr(self, name), name)
            checked[name] = None if names is None else tuple(names)
        for name in ("as_of", "time_from", "time_to", "reference_time"):
            checked[name] = time_arg(getattr(self, name), name)
        lo, hi = checked["time_from"], checked["time_to"]
        if lo is not None and hi is not None and lo > hi:
            raise RcllError("time_to", "is before time_from", "swap them, or leave one out")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def scope(self) -> dict[str, Any]:
        """rcll.recall_scope's arguments (as_of None: the transaction's time, the SQL default)."""
        return {name: _sql(getattr(self, name)) for name in SCOPE} | {"as_of": self.as_of or "now"}

    @property
    def time_range(self) -> str | None:
        """time_from/time_to as the tstzrange literal rcll.recall_candidates takes: [from, to)."""
        lo, hi = self.time_from, self.time_to
        if lo is None and hi is None:
            return None
        return f"[{_iso(lo)},{_iso(hi)})"


def _sql(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _iso(value: datetime | str | None) -> str:
    return "" if value is None else value.isoformat() if isinstance(value, datetime) else value


def _weights(value: Any) -> Mapping[str, float]:
    if value is None:
        return defaults.WEIGHTS
    if not isinstance(value, Mapping):
        raise RcllError("weights", f"must be an object of channel weights, got {type(value).__name__}",
                        f"e.g. {{\"dense\": 1.0, \"context\": 0.5}}; channels: {', '.join(CHANNELS)}")
    out = dict(defaults.WEIGHTS)
    for name, w in value.items():
        if name not in out:
            raise RcllError(f"weights.{name}", "is not a recall channel", f"use {', '.join(CHANNELS)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise RcllError(f"weights.{name}", "must be a finite number")
        if not 0 <= w <= MAX_WEIGHT:
            raise RcllError(f"weights.{name}", f"{w} is out of range", f"use 0..{MAX_WEIGHT:g} (0 skips the channel)")
        out[name] = float(w)
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class Parameter:
    """One field of RecallRequest as an interface offers it: its name, kind, help and default."""

    name: str
    kind: Kind
    help: str
    default: Any
    scope: bool


# The type an interface's schema gives each kind of field (a JSON Schema through pydantic: HTTP's body,
# MCP's tool); RecallRequest reads the values and checks them.
ANNOTATIONS: Final[Mapping[Kind, Any]] = MappingProxyType({
    "text": str | None, "names": list[str] | None, "flag": bool, "time": datetime | None, "int": int | None,
    "weights": dict[str, float] | None})

PARAMETERS: Final = tuple(
    Parameter(f.name, f.metadata["kind"], f.metadata["help"],
              f.default_factory() if f.default_factory is not MISSING else f.default, f.metadata["scope"])
    for f in fields(RecallRequest))
SCOPE: Final = tuple(p.name for p in PARAMETERS if p.scope)


# -- forget ----------------------------------------------------------------------------------------

ForgetKind = Literal["text", "ids", "time", "flag", "int"]
MAX_IDS: Final = 100_000


def _g(kind: ForgetKind, help: str, default: Any = None, *, limit: int = MAX_NAME, flag: str | None = None,
       sql: bool = True) -> Any:
    """A ForgetRequest field: its kind, help, default (MISSING: required), the longest text it takes,
    the CLI's name for it when not the field's, and whether rcll.forget takes it (purge is the client's)."""
    return field(default=default, metadata={"kind": kind, "help": help, "limit": limit, "flag": flag, "sql": sql})


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetRequest:
    """A forget, checked when it is made (an RcllError names the field otherwise): which memories
    (selectors, several must all match, or everything = the bank's name), whether to do it (a dry
    run unless dry_run is False), why, and how (batch: units per transaction; purge: VACUUM after).
    Its fields other than purge are rcll.forget's parameters (tests/test_forget_request.py); every
    interface offers every field (FORGET_PARAMETERS)."""

    bank: str = _g("text", "the bank to forget in", MISSING, limit=MAX_BANK_NAME)
    unit_ids: Sequence[int] | None = _g("ids", "these units", flag="unit")
    document_ids: Sequence[int] | None = _g("ids", "these documents, with every unit of theirs", flag="document")
    thread: str | None = _g("text", "every memory of this thread")
    author: str | None = _g("text", "every memory this agent wrote")
    tag: str | None = _g("text", "every memory with this tag")
    room: str | None = _g("text", "every memory of this room (aliases followed)")
    occurred_from: datetime | str | None = _g("time", "[from, to) of when it happened (else said)")
    occurred_to: datetime | str | None = _g("time", "the end of that range (not included)")
    retained_from: datetime | str | None = _g("time", "[from, to) of when it was written")
    retained_to: datetime | str | None = _g("time", "the end of that range (not included)")
    everything: str | None = _g("text", "the bank's name, to forget every memory of it (a selector that matches "
                                        "everything is refused otherwise)", limit=MAX_BANK_NAME)
    dry_run: bool = _g("flag", "true (the default): count what would go and change nothing; false: forget", True)
    reason: str | None = _g("text", "why (kept in the forget log; never put the forgotten text here)", limit=1000)
    batch: int | None = _g("int", "units (whole documents) per transaction until none is left, so writes into the "
                                  "bank wait one batch at most (not with ids; ignored in a dry run)")
    purge: bool = _g("flag", "after the commit, VACUUM the tables the forget touched (needs their owner; "
                             "docs/forgetting.md)", False, sql=False)

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {"bank": check_bank(self.bank),
                                   "dry_run": True if self.dry_run is None else bool(self.dry_run),
                                   "purge": bool(self.purge)}
        for p in FORGET_PARAMETERS:
            value = getattr(self, p.name)
            if p.kind == "ids":
                checked[p.name] = _ids(value, p.name)
            elif p.kind == "text" and p.name != "bank":
                checked[p.name] = text_arg(value, p.name, limit=p.limit)
            elif p.kind == "time":
                checked[p.name] = time_arg(value, p.name)
        checked["batch"] = None if checked["dry_run"] else _batch(self.batch)
        if checked["batch"] is not None and (checked["unit_ids"] is not None or checked["document_ids"] is not None):
            # A later batch would find the ids an earlier one forgot gone, and refuse them as typos.
            raise RcllError("batch", "forgets by thread, author, tag, room, time range or everything in batches, "
                            "not by ids", "pass the ids in lists of the size you want, one forget each")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def arguments(self) -> dict[str, Any]:
        """rcll.forget's arguments, by name (FORGET_SQL)."""
        return {name: _sql(getattr(self, name)) for name in FORGET_SQL}


def _ids(values: Any, field: str) -> tuple[int, ...] | None:
    """A list of integer ids, or None (not given); anything else is the caller's error."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise RcllError(field, "must be a list of integer ids", f"pass {field}=[12, 34]")
    return tuple(int(v) for v in values)


def _batch(batch: Any) -> int | None:
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise RcllError("batch", "must be a positive number of units", "pass batch=1000, or leave it out")
    return batch


@dataclass(frozen=True, slots=True)
class ForgetParameter:
    """One field of ForgetRequest as an interface offers it: its name, kind, help, default, the
    longest text, the CLI's flag (without dashes) and whether rcll.forget takes it."""

    name: str
    kind: ForgetKind
    help: str
    default: Any
    limit: int
    flag: str
    sql: bool


# The type an interface's schema gives each kind of forget field (HTTP's body, MCP's tool).
FORGET_ANNOTATIONS: Final[Mapping[ForgetKind, Any]] = MappingProxyType({
    "text": str | None, "ids": list[int] | None, "time": datetime | None, "flag": bool, "int": int | None})

FORGET_PARAMETERS: Final = tuple(
    ForgetParameter(f.name, f.metadata["kind"], f.metadata["help"], f.default, f.metadata["limit"],
                    (f.metadata["flag"] or f.name).replace("_", "-"), f.metadata["sql"])
    for f in fields(ForgetRequest))
FORGET_SQL: Final = tuple(p.name for p in FORGET_PARAMETERS if p.sql)
