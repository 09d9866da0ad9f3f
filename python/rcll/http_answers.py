"""What the HTTP API answers, as schemas in /openapi.json, so a client generated from it
(clients/typescript) has its answers typed, not only its requests.

Documentation only: the routes still return their dicts unchanged (no response_model, which would
filter them). The schemas are derived from the result dataclasses the dicts are rendered from
(rcll.results, rcll.export), so a field added there is documented at once; and
tests/test_typescript_client.py validates live answers against them with every undocumented key
refused, so they cannot drift from what the server sends.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from rcll.export import ImportSummary
from rcll.results import Fact, Room, State, Stats, Tag, Timings, Version


def _derived(cls: type, *, exclude: tuple[str, ...] = (), name: str | None = None,
             extra: dict[str, Any] | None = None, config: ConfigDict | None = None) -> type[BaseModel]:
    """A model of a dataclass as plain() renders it: every field present (datetimes as ISO 8601
    strings), less `exclude`, plus `extra` fields."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {f.name: (hints[f.name], ...) for f in dataclasses.fields(cls) if f.name not in exclude}
    model: type[BaseModel] = create_model(name or cls.__name__, __config__=config, **fields, **(extra or {}))
    return model


def _list(model: type[BaseModel], nullable: bool = False) -> Any:
    """list[model] (or None) as a field type of create_model: a model made at run time is no static type."""
    return list[model] | None if nullable else list[model]  # type: ignore[valid-type]


# One version of a unit's text (GET /units/{id}/history, PATCH /units/{id}), as Memory.history returns it.
VersionBody = _derived(Version, name="VersionBody")
HistoryResponse = create_model(
    "HistoryResponse", bank=(str, ...), unit_id=(int, ...),
    versions=(_list(VersionBody), Field(description="the current version first")))

# A fact as recall returns it: its context (the chunk before it, which the reranker read) stays out.
FactAnswer = _derived(Fact, exclude=("context",))
CutFact = _derived(Fact, exclude=("context",), name="CutFact",
                   extra={"rank": (int, Field(description="its place in the reranked order"))})

RecallAnswer = create_model(
    "RecallAnswer",
    facts=(_list(FactAnswer), Field(description="the facts that fit the budget, in rank order")),
    candidates=(int, Field(description="fused candidates the channels found")),
    tokens=(int, Field(description="tokens of fact text returned")),
    timings_ms=(_derived(Timings), Field(description="milliseconds per phase")),
    rerank_depth_reached=(int, ...),
    context_depth_reached=(int, ...),
    deadline_ms=(float | None, ...),
    deadline_cut=(bool, Field(description="the deadline stopped the cross-encoder short of the depths asked for")),
    elapsed_ms=(float, Field(description="from the request's arrival to the answer")),
    # With explain: true (rcll.http_console.explain).
    budget=(int | None, Field(default=None, description="explain: the token budget")),
    ranks=(list[int | None] | None, Field(default=None, description="explain: each fact's final rank")),
    cut=(_list(CutFact, nullable=True), Field(default=None, description="explain: the ranked candidates the "
                                                "budget or the limit left out")),
    timings_ms_total=(float | None, Field(default=None, description="explain: the phases' total")),
)


class UpkeepAnswer(BaseModel):
    every_seconds: float = Field(description="how often the periodic jobs run (0: this server runs none)")
    rounds: int | None = None
    last_run: str | None = None
    last_error: str | None = None
    dense_indexes: dict[str, Any] | None = Field(default=None, description=(
        "the periodic jobs' runs of the dense-index plan (big banks' own HNSW indexes): auto, building (step, steps, why, started), index_builds, "
        "last_end, last_steps, last_error"))


class HealthAnswer(BaseModel):
    status: str = Field(description='"ok"; "alive" alone to a caller without a token on a server with tokens')
    rcll: str | None = None
    pgvector: str | None = None
    read_only: bool | None = None
    upkeep: UpkeepAnswer | None = None


RoomsAnswer = create_model("RoomsAnswer", bank=(str, ...), rooms=(_list(_derived(Room)), ...))
TagsAnswer = create_model("TagsAnswer", bank=(str, ...), tags=(_list(_derived(Tag)), ...))
StateAnswer = _derived(State)
ImportAnswer = _derived(ImportSummary)
# Sections added to rcll.stats() after this server are sent too (Stats.other, flattened): extra allowed.
StatsAnswer = _derived(Stats, exclude=("other",), config=ConfigDict(extra="allow"))


def answer(model: type[BaseModel], description: str = "Successful Response") -> dict[int | str, dict[str, Any]]:
    """A route's `responses` entry documenting its 200 answer (the route sets response_model=None)."""
    return {200: {"model": model, "description": description}}
