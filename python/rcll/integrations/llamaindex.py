"""RCLL for LlamaIndex: a retriever (llama_index.core BaseRetriever) and a memory block
(llama_index.core.memory BaseMemoryBlock) for its Memory.

    from rcll import Memory
    from rcll.integrations.llamaindex import RcllMemoryBlock, RcllRetriever

    nodes = RcllRetriever(Memory(), filters={"rooms": ["deployment"]}).retrieve("how do we deploy?")

    from llama_index.core.memory import Memory as ChatMemory
    chat_memory = ChatMemory.from_defaults(memory_blocks=[RcllMemoryBlock(memory=Memory())])

The retriever returns NodeWithScore (TextNode id = the unit's id, the fact's room, thread, tags and
time in metadata). The memory block recalls for the latest user message and retains the messages
LlamaIndex's short-term memory lets go of.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from rcll.memory import Memory
from rcll.request import RecallRequest
from rcll.results import Fact

__all__ = ["RcllMemoryBlock", "RcllRetriever", "node_of"]


def node_of(fact: Fact) -> NodeWithScore:
    """A recalled fact as a LlamaIndex node with its score."""
    score = fact.rerank_score if fact.rerank_score is not None else fact.fused_score
    node = TextNode(id_=str(fact.unit_id), text=fact.text,
                    metadata={"unit_id": fact.unit_id, "document_id": fact.document_id, "room": fact.room,
                              "thread": fact.thread, "tags": list(fact.tags), "author": fact.author,
                              "occurred_at": fact.occurred_start.isoformat() if fact.occurred_start else None})
    return NodeWithScore(node=node, score=float(score))


def _request(memory: Memory, query: str, bank: str | None, filters: dict[str, Any]) -> RecallRequest:
    return RecallRequest(query=query, **({"bank": bank or memory.bank} | filters))


class RcllRetriever(BaseRetriever):
    """RCLL recall as a LlamaIndex retriever: `filters` takes RecallRequest's fields (deadline_ms
    among them), checked when the retriever is made; top_k: nodes returned at most."""

    def __init__(self, memory: Memory, *, bank: str | None = None, filters: dict[str, Any] | None = None,
                 top_k: int = 8, **kwargs: Any) -> None:
        self.memory, self.bank, self.filters, self.top_k = memory, bank, dict(filters or {}), top_k
        _request(memory, "check", bank, self.filters)     # every field checked now
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self.memory.recall(_request(self.memory, query_bundle.query_str, self.bank, self.filters))
        return [node_of(f) for f in result.facts[:self.top_k]]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


class RcllMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for LlamaIndex's Memory: `aget` recalls for the latest user message (the
    facts as lines), `aput` retains the messages the short-term memory flushes (role: text)."""

    memory: Any = Field(description="the rcll.Memory to use")
    name: str = "rcll"
    bank: str | None = None
    filters: dict[str, Any] = Field(default_factory=dict)
    top_k: int = 5
    thread: str | None = None

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        asked = [m.content for m in messages or [] if m.role == MessageRole.USER and m.content]
        if not asked:
            return ""
        request = _request(self.memory, str(asked[-1]), self.bank, self.filters)
        facts = (await asyncio.to_thread(self.memory.recall, request)).facts
        return "\n".join(f"- {f.text}" for f in facts[:self.top_k])

    async def _aput(self, messages: list[ChatMessage]) -> None:
        text = "\n".join(f"{m.role.value}: {m.content}" for m in messages if m.content)
        if text.strip():
            await asyncio.to_thread(self.memory.retain, text, bank=self.bank, thread=self.thread, via="llamaindex")
