"""A real LangGraph agent keeps its long-term memory in RcllStore: a ReAct graph of LangGraph's own
parts (StateGraph, the prebuilt ToolNode and tools_condition, a checkpointer), driven by a scripted chat model from langchain_core (no network, no API key), saves a memory
in one thread and finds it again in another, through the store's put and search."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore, ToolNode, tools_condition
from langgraph.store.base import BaseStore

from rcll import Memory
from rcll.integrations.langgraph import RcllStore


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers from a script and accepts tools (as a real model would)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


@tool
def save_memory(text: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Save a memory about the user for later conversations."""
    user = config["configurable"]["user_id"]
    key = f"m{len(store.search(('memories', user), limit=1000)) + 1}"
    store.put(("memories", user), key, {"text": text})
    return f"saved {key}"


@tool
def search_memory(query: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Search the user's memories."""
    user = config["configurable"]["user_id"]
    return "\n".join(f"{h.value['text']} ({h.score:.2f})" for h in store.search(("memories", user), query=query,
                                                                                  limit=3))


def call(name: str, args: dict[str, Any], n: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{n}", "type": "tool_call"}])


def react_agent(model: ScriptedModel, tools: list[Any], store: BaseStore) -> Any:
    """The ReAct loop: the model answers or calls tools; tool results go back to the model."""
    bound = model.bind_tools(tools)

    def think(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", think)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver(), store=store)


@pytest.fixture
def memory(dsn: str) -> Iterator[Memory]:
    with Memory(dsn, bank="assistant") as m:
        yield m


def test_an_agent_finds_in_a_later_thread_what_it_saved_in_an_earlier_one(memory: Memory) -> None:
    store = RcllStore(memory, index={"fields": ["text"]})
    script = iter([
        # thread 1: the user says two things worth keeping
        call("save_memory", {"text": "The user deploys the API with Argo CD"}, 1),
        call("save_memory", {"text": "The user's cat is called Miso"}, 2),
        AIMessage(content="Noted."),
        # thread 2, another day: the user asks; the agent searches its memory
        call("search_memory", {"query": "how do I deploy?"}, 3),
        AIMessage(content="You deploy with Argo CD."),
    ])
    agent = react_agent(ScriptedModel(messages=script), [save_memory, search_memory], store)
    first = {"configurable": {"thread_id": "monday", "user_id": "alice"}}
    agent.invoke({"messages": [("user", "I deploy with Argo CD. My cat is Miso.")]}, first)
    later = {"configurable": {"thread_id": "friday", "user_id": "alice"}}
    out: list[BaseMessage] = agent.invoke({"messages": [("user", "How do I deploy again?")]}, later)["messages"]

    found = [m for m in out if isinstance(m, ToolMessage) and m.name == "search_memory"]
    assert len(found) == 1 and str(found[0].content).startswith("The user deploys the API with Argo CD")
    # the later thread saw none of the earlier one's messages: the memory came through the store
    assert not any("Miso" in str(m.content) for m in out if not isinstance(m, ToolMessage))
    assert out[-1].content == "You deploy with Argo CD."
    assert sorted(i.key for i in store.search(("memories", "alice"))) == ["m1", "m2"]
    # and another user's memories are not alice's
    assert store.search(("memories", "bob"), query="how do I deploy?") == []
