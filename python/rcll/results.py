"""What the verbs return: typed rows (dataclasses), each able to render itself as JSON-ready data.

recall's (Fact, Timings, RecallResult) are here too, so that rcll.recall and rcll.deadline (which
ranks Facts) both import them from below; rcll.recall hands them on. retain's (RetainResult) live
beside Document in rcll.document; export's and import's in rcll.export.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any, Self


def plain(value: Any) -> Any:
    """JSON-ready data: dataclasses and mappings as dicts, datetimes as ISO 8601, ranges as
    {lower, upper, bounds}, non-finite floats as None."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "lower") and hasattr(value, "upper") and hasattr(value, "bounds"):   # a psycopg Range
        return {"lower": plain(value.lower), "upper": plain(value.upper), "bounds": value.bounds}
    return value


class Renders:
    """as_dict() (JSON-ready data) and to_json() for a result dataclass."""

    def as_dict(self) -> dict[str, Any]:
        return dict(plain(self))

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """From a dict_row of the SQL function this type mirrors (extra columns are ignored)."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in row.items() if k in names})


@dataclass(frozen=True, slots=True)
class Health(Renders):
    status: str
    rcll: str
    pgvector: str | None
    read_only: bool


@dataclass(frozen=True, slots=True)
class Forgotten(Renders):
    """What a forget (or a bank drop, or a state forget) removed - or, on a dry run, would remove -
    counted per kind (documents, units, embeddings, lexicon_rows, links, entities, ...). purged:
    the tables vacuumed after the commit (purge=True), so the dead rows left no copy on disk pages
    the database reuses."""

    dry_run: bool
    counts: dict[str, int]
    purged: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Version(Renders):
    """One version of a unit's text (Memory.history): the current one has no replaced_* fields."""

    version: int
    text: str
    current: bool
    since: datetime | None
    replaced_at: datetime | None
    replaced_by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Upkeep(Renders):
    """What one round of Memory.upkeep() did: banks whose statistics were recounted
    (rcll.refresh_bank_stats), room-count deltas folded (rcll.fold_room_counts), expired units
    forgotten (rcll.expire) and the dense-index plan's steps it ran (why each; None when the round
    built no indexes: switched off, or another run was building them)."""

    banks: int
    room_deltas: int
    seconds: float
    expired: int = 0   # units the expiry sweep (rcll.expire) forgot this round
    index_steps: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Bank(Renders):
    """A row of rcll.list_banks()."""

    name: str
    description: str | None
    unit_count: int
    document_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Room(Renders):
    """A row of rcll.rooms(): a topic with its status, counts and aliases."""

    name: str
    status: str
    merged_into: str | None
    proposed_into: str | None
    fact_count: int
    aliases: list[str]
    created_by: str | None
    first_used: datetime | None
    last_used: datetime | None


@dataclass(frozen=True, slots=True)
class Tag(Renders):
    """A row of rcll.tags(): a tag in use and how many units carry it."""

    tag: str
    unit_count: int


@dataclass(frozen=True, slots=True)
class State(Renders):
    """One version of a room's keyed state (rcll.get_state, rcll.state_history)."""

    value: Any
    version: int
    provenance: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StateWritten(Renders):
    """What rcll.put_state wrote: the room, the key and the new version."""

    room: str
    key: str
    version: int


@dataclass(frozen=True, slots=True)
class Rule(Renders):
    """A row of rcll.session_start(): an L0 rule or procedure to load at the start of a session."""

    unit_id: int
    room: str | None
    hall: str | None
    text: str
    author: str | None
    tags: list[str]
    provenance: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TokenAccount(Renders):
    calls: int
    read_tokens: int
    write_input_tokens: int
    write_output_tokens: int


@dataclass(frozen=True, slots=True)
class Stats(Renders):
    """rcll.stats() by section: counts by kind, room, hall, layer, author, link type and extraction,
    and the token account per purpose (reading costs nothing; writing is what the model calls cost)."""

    bank: str
    totals: dict[str, int] = field(default_factory=dict)
    kind: dict[str, int] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    hall: dict[str, int] = field(default_factory=dict)
    layer: dict[str, int] = field(default_factory=dict)
    author: dict[str, int] = field(default_factory=dict)
    link_type: dict[str, int] = field(default_factory=dict)
    extraction: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, TokenAccount] = field(default_factory=dict)
    other: dict[str, dict[str, int]] = field(default_factory=dict)   # sections added after this client

    def as_dict(self) -> dict[str, Any]:
        out = dict(plain(self))
        out.update(out.pop("other"))
        return out


@dataclass(frozen=True, slots=True)
class FloorRoom(Renders):
    """A row of rcll.floor_plan(): a room as rcll.rooms() lists it, with its units counted by hall,
    layer and author. name None is the units filed in no room."""

    name: str | None
    status: str
    merged_into: str | None
    proposed_into: str | None
    fact_count: int
    aliases: list[str]
    created_by: str | None
    first_used: datetime | None
    last_used: datetime | None
    halls: dict[str, int]
    layers: dict[str, int]
    authors: dict[str, int]


@dataclass(frozen=True, slots=True)
class Unit(Renders):
    """A row of rcll.units(): a unit as browsed (at: when it happened, else was said, else written)."""

    unit_id: int
    kind: str
    text: str
    room: str | None
    hall: str | None
    layer: str
    author: str | None
    author_source: str
    thread: str | None
    tags: list[str]
    at: datetime
    occurred_start: datetime | None
    mentioned_at: datetime | None
    created_at: datetime
    superseded_by: int | None
    document_id: int | None


@dataclass(frozen=True, slots=True)
class UnitPage(Renders):
    """One page of rcll.units(): the units, and how many match in all."""

    total: int
    limit: int
    offset: int
    units: list[Unit]


@dataclass(frozen=True, slots=True)
class MergeProposal(Renders):
    """A row of rcll.merge_proposals(): a room merge a person decides."""

    proposal_id: int
    from_room: str
    into_room: str
    reason: str
    status: str
    proposed_by: str
    proposed_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    from_units: int
    into_units: int


@dataclass(frozen=True, slots=True)
class StateKey(Renders):
    """A row of rcll.state_keys(): one room's key at its current version."""

    room: str
    key: str
    version: int
    value: Any
    provenance: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Fact:
    unit_id: int
    text: str
    room: str | None
    hall: str | None
    layer: str | None
    author: str | None
    thread: str | None
    tags: list[str]
    valid: Any
    occurred_start: datetime | None
    mentioned_at: datetime | None
    document_id: int | None
    provenance: dict[str, Any]
    fused_score: float
    rank_dense: int | None
    rank_lexical: int | None
    rank_graph: int | None
    rank_temporal: int | None
    rank_context: int | None = None
    rank_entity: int | None = None
    rank_session: int | None = None
    context: str | None = None  # the end (16 words) of the chunk before this one in its document, in scope
    rerank_score: float | None = None
    tokens: int = 0  # its bge wordpieces, once the budget cut counted it (0 for a candidate it skipped uncounted)


@dataclass(frozen=True, slots=True)
class Timings:
    """Milliseconds per recall phase. embed: the query embeddings (model work only); sql: the
    database's part - the query's entity names (rcll.query_without_entities), which runs before
    the embedding, and the channels with their fusion; rerank: the cross-encoder; cut: the token
    budget. queue: from the request's arrival (`started`) to the start of recall - a server's wait
    for a worker thread and an admission place - counted against the deadline like every phase.
    The waits inside the phases, for a model slot (embed and rerank) and for a database
    connection (sql), are shown apart as well; they are parts of those phases."""

    embed: float = 0.0
    sql: float = 0.0
    rerank: float = 0.0
    cut: float = 0.0
    queue: float = 0.0
    slot_wait: float = 0.0
    connection_wait: float = 0.0

    @property
    def total(self) -> float:
        return self.queue + self.embed + self.sql + self.rerank + self.cut


@dataclass(frozen=True, slots=True)
class RecallResult:
    """The facts that fit the budget, in rank order, with the per-phase timings."""

    facts: list[Fact]
    timings: Timings
    candidates: int = 0
    tokens: int = 0
    ranked: list[Fact] = field(default_factory=list)  # every candidate, reranked, before the cut
    # How deep the cross-encoder read (first view, then the context view), the deadline it had
    # (None: none) and whether that deadline stopped it short of the depths asked for.
    rerank_depth_reached: int = 0
    context_depth_reached: int = 0
    deadline_ms: float | None = None
    deadline_cut: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data: facts, candidates, tokens, timings_ms, the depths reached and the
        deadline (what HTTP, MCP and `--json` return). A fact's context (the chunk before it, which
        the reranker read) stays out: the token budget counts fact text only, and that chunk is
        returned on its own when it is relevant."""
        facts = [{k: v for k, v in plain(f).items() if k != "context"} for f in self.facts]
        return {"facts": facts, "candidates": self.candidates, "tokens": self.tokens,
                "timings_ms": plain(self.timings), "rerank_depth_reached": self.rerank_depth_reached,
                "context_depth_reached": self.context_depth_reached, "deadline_ms": self.deadline_ms,
                "deadline_cut": self.deadline_cut}

    def to_json(self) -> str:
        return json.dumps(self.as_dict())
