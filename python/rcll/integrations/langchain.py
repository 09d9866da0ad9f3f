"""RCLL for LangChain: a retriever (langchain_core BaseRetriever) and the retain / recall tools.

    from rcll import Memory
    from rcll.integrations.langchain import RcllRetriever, rcll_tools

    retriever = RcllRetriever(Memory(), filters={"rooms": ["deployment"]}, deadline_ms=300)
    docs = retriever.invoke("how do we deploy?")        # Documents, best first, scores in metadata
    tools = rcll_tools(Memory())                          # [retain, recall] for an agent

A recall is RCLL's (rcll.Memory.recall): `filters` takes any of its fields (rooms, authors, mine,
halls, layers, tags_any, tags_all, thread, as_of, time_from, time_to, weights, depths, budget ...:
rcll.request.RecallRequest), checked when the retriever is made; an unknown one is an RcllError
naming it. The async methods run the synchronous Memory on a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields as dataclass_fields
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ConfigDict, model_validator

from rcll.errors import RcllError
from rcll.memory import Memory
from rcll.recall import RecallResult
from rcll.request import RecallRequest
from rcll.results import Fact

__all__ = ["RcllRetriever", "document_of", "rcll_tools"]

FIELDS = frozenset(f.name for f in dataclass_fields(RecallRequest)) - {"query"}


def document_of(fact: Fact) -> Document:
    """A recalled fact as a LangChain Document: its text, with its id, place, time and score."""
    score = fact.rerank_score if fact.rerank_score is not None else fact.fused_score
    return Document(page_content=fact.text, id=str(fact.unit_id),
                    metadata={"unit_id": fact.unit_id, "document_id": fact.document_id, "room": fact.room,
                              "thread": fact.thread, "tags": list(fact.tags), "author": fact.author,
                              "hall": fact.hall, "layer": fact.layer, "score": float(score),
                              "occurred_at": fact.occurred_start.isoformat() if fact.occurred_start else None})


class RcllRetriever(BaseRetriever):
    """RCLL recall as a LangChain retriever. memory: the Memory to read; bank: the bank (default
    the Memory's); filters: RecallRequest fields; k: documents returned at most; deadline_ms: the
    recall's latency budget (the cross-encoder reads while time is left)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    bank: str | None = None
    filters: dict[str, Any] = {}
    k: int = 8
    deadline_ms: int | None = None

    def __init__(self, memory: Memory | None = None, /, **fields: Any) -> None:
        # The Memory may come first, as for every other RCLL adapter, or as memory= (pydantic's way).
        if memory is not None:
            fields["memory"] = memory
        super().__init__(**fields)

    @model_validator(mode="after")
    def _check(self) -> RcllRetriever:
        unknown = sorted(set(self.filters) - FIELDS)
        if unknown:
            raise RcllError(f"filters.{unknown[0]}", "is not a recall field", f"use {', '.join(sorted(FIELDS))}")
        self._request("check")          # every field checked now, not at the first query
        return self

    def _request(self, query: str) -> RecallRequest:
        given = {"bank": self.bank or self.memory.bank, "deadline_ms": self.deadline_ms} | self.filters
        return RecallRequest(query=query, **{k: v for k, v in given.items() if v is not None})

    def recall(self, query: str) -> RecallResult:
        """The whole recall behind a retrieval (timings, depth reached, whether the deadline cut it)."""
        return self.memory.recall(self._request(query))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [document_of(f) for f in self.recall(query).facts[:self.k]]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        facts = (await asyncio.to_thread(self.recall, query)).facts
        return [document_of(f) for f in facts[:self.k]]


def rcll_tools(memory: Memory, *, bank: str | None = None, room: str | None = None, k: int = 5,
               deadline_ms: int | None = None) -> list[BaseTool]:
    """The `retain` and `recall` tools for a LangChain agent, on `bank` (default the Memory's);
    room: where retained memories are filed (default: RCLL files them)."""

    def retain(text: str, tags: list[str] | None = None) -> str:
        """Remember a fact or an event for later conversations. text: what to remember, in one or
        a few sentences; tags: optional labels."""
        r = memory.retain(text, bank=bank, room=room, tags=tags, via="langchain")
        return f"remembered ({len(r.unit_ids)} units, document {r.document_id})" if r.created else "already known"

    def recall(query: str) -> str:
        """Recall what is known about something: the most relevant remembered facts, best first."""
        facts = memory.recall(RecallRequest(query=query, bank=bank or memory.bank, deadline_ms=deadline_ms)).facts
        return "\n".join(f"- {f.text}" for f in facts[:k]) or "nothing relevant is remembered"

    async def aretain(text: str, tags: list[str] | None = None) -> str:
        return await asyncio.to_thread(retain, text, tags)

    async def arecall(query: str) -> str:
        return await asyncio.to_thread(recall, query)

    return [StructuredTool.from_function(retain, coroutine=aretain, name="retain"),
            StructuredTool.from_function(recall, coroutine=arecall, name="recall")]
