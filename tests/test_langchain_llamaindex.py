"""RCLL inside LangChain and LlamaIndex, through each framework's own base classes: a LangChain
BaseRetriever with filters and a deadline, the retain / recall tools as LangChain tools, a
LlamaIndex BaseRetriever and a memory block that LlamaIndex's own Memory flushes into and reads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from rcll import Memory
from rcll.errors import RcllError

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

# LangChain and LlamaIndex are imported inside the tests: every pytest-xdist worker collects this
# file, and the two frameworks' imports take seconds of the worker that does not run it.


@pytest.fixture
def memory(dsn: str) -> Iterator[Memory]:
    with Memory(dsn, bank="team") as m:
        m.create_bank("team")
        m.retain("We deploy the API with Argo CD since March.", room="deployment", tags=["ops"])
        m.retain("Rollbacks of the API use helm rollback.", room="deployment")
        m.retain("The billing service is owned by Carol.", room="billing")
        yield m


def test_the_langchain_retriever_returns_documents_best_first_inside_its_filters(memory: Memory) -> None:
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever as LangChainRetriever

    from rcll.integrations import langchain

    retriever = langchain.RcllRetriever(memory=memory, filters={"rooms": ["deployment"]}, k=5)
    assert isinstance(retriever, LangChainRetriever)
    docs = retriever.invoke("how do we deploy the API?")
    assert all(isinstance(d, Document) for d in docs)
    assert "Argo CD" in docs[0].page_content and docs[0].metadata["room"] == "deployment"
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)
    assert not any("Carol" in d.page_content for d in docs)
    tagged = langchain.RcllRetriever(memory=memory, filters={"tags_all": ["ops"]}).invoke("deploy")
    assert [d.page_content for d in tagged] == ["We deploy the API with Argo CD since March."]
    assert asyncio.run(retriever.ainvoke("how do we deploy the API?")) == docs


def test_the_langchain_retriever_passes_its_deadline_to_recall(memory: Memory) -> None:
    from rcll.integrations import langchain

    retriever = langchain.RcllRetriever(memory=memory, deadline_ms=5000)
    assert retriever.recall("who owns billing?").deadline_ms == 5000
    assert "Carol" in retriever.invoke("who owns billing?")[0].page_content


def test_a_retriever_with_a_wrong_filter_is_refused_when_made_naming_it(memory: Memory) -> None:
    from rcll.integrations import langchain, llamaindex

    with pytest.raises(RcllError) as e:
        langchain.RcllRetriever(memory=memory, filters={"room": ["deployment"]})
    assert e.value.field == "filters.room"
    with pytest.raises(RcllError) as e:
        langchain.RcllRetriever(memory=memory, filters={"budget": 0})
    assert e.value.field == "budget"
    with pytest.raises(RcllError) as e:
        llamaindex.RcllRetriever(memory, filters={"rerank_depth": -1})
    assert e.value.field == "rerank_depth"


def test_the_langchain_tools_retain_then_recall(memory: Memory) -> None:
    from langchain_core.tools import BaseTool

    from rcll.integrations import langchain

    tools = {t.name: t for t in langchain.rcll_tools(memory, room="people")}
    assert set(tools) == {"retain", "recall"} and all(isinstance(t, BaseTool) for t in tools.values())
    assert set(tools["retain"].args) == {"text", "tags"} and set(tools["recall"].args) == {"query"}
    assert tools["retain"].invoke({"text": "Dana is the on-call engineer this week."}).startswith("remembered")
    assert tools["retain"].invoke({"text": "Dana is the on-call engineer this week."}) == "already known"
    assert "Dana" in tools["recall"].invoke({"query": "who is on call?"}).splitlines()[0]
    assert "Dana" in asyncio.run(tools["recall"].ainvoke({"query": "who is on call?"})).splitlines()[0]


def test_the_llamaindex_retriever_returns_scored_nodes(memory: Memory) -> None:
    from llama_index.core.retrievers import BaseRetriever as LlamaIndexRetriever
    from llama_index.core.schema import NodeWithScore

    from rcll.integrations import llamaindex

    retriever = llamaindex.RcllRetriever(memory, filters={"rooms": ["billing"]}, top_k=3)
    assert isinstance(retriever, LlamaIndexRetriever)
    nodes = retriever.retrieve("who owns billing?")
    assert all(isinstance(n, NodeWithScore) for n in nodes) and nodes[0].score is not None
    assert "Carol" in nodes[0].node.get_content() and nodes[0].node.metadata["room"] == "billing"
    assert all(n.node.metadata["room"] == "billing" for n in nodes)
    assert [n.node.node_id for n in asyncio.run(retriever.aretrieve("who owns billing?"))] == \
        [n.node.node_id for n in nodes]


def test_llamaindex_memory_flushes_into_the_block_and_reads_it_back(memory: Memory) -> None:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import Memory as ChatMemory
    from sqlalchemy.ext.asyncio import create_async_engine

    from rcll.integrations import llamaindex

    block = llamaindex.RcllMemoryBlock(memory=memory, thread="chat-1", priority=0)

    async def chat() -> list[ChatMessage]:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")   # LlamaIndex's own default, closed here
        try:
            short_term = ChatMemory.from_defaults(session_id="s1", token_limit=40, token_flush_size=10,
                                                  chat_history_token_ratio=0.5, memory_blocks=[block],
                                                  tokenizer_fn=str.split, async_engine=engine)
            await short_term.aput_messages([
                ChatMessage(role="user", content="My favourite editor is Helix, please remember it."),
                ChatMessage(role="assistant", content="Noted: Helix."),
                ChatMessage(role="user", content="Also, the staging database is called orca."),
                ChatMessage(role="assistant", content="Got it.")])
            await short_term.aput(ChatMessage(role="user", content="Which editor do I like?"))
            return await short_term.aget()
        finally:
            await engine.dispose()

    history = asyncio.run(chat())
    units = memory.units(bank="team", threads=["chat-1"]).units
    assert units and any("Helix" in u.text for u in units)          # flushed out of the short-term memory
    assert "Helix" in str(history[0].content) and "<rcll>" in str(history[0].content)
