"""The README's framework snippets run as written (each fenced as ```python snippet=<name>): against
the test's database through RCLL_DSN, the Agents SDK one through the real `rcll mcp` - only the
model call (Runner.run) is replaced by the tool call a model would make, so nothing leaves the
machine."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def snippets() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    return dict(re.findall(r"```python snippet=([\w-]+)\n(.*?)```", text, flags=re.S))


def run(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    return out.getvalue()


def test_the_readme_has_the_framework_snippets() -> None:
    assert set(snippets()) == {"openai-agents", "frameworks"}


def test_the_frameworks_snippet_runs(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCLL_DSN", dsn)
    printed = run(snippets()["frameworks"]).splitlines()
    assert printed[0] == "{'text': 'Alice deploys the API with Argo CD'}"
    assert "Argo CD" in printed[1] and "Argo CD" in printed[2]


@pytest.mark.slow
def test_the_openai_agents_snippet_runs(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents import Agent, FunctionTool, RunContextWrapper, Runner, set_tracing_disabled
    from agents.tool_context import ToolContext

    from rcll import Memory

    set_tracing_disabled(True)      # the SDK's traces would go to OpenAI's servers
    with Memory(dsn) as memory:
        memory.retain("Alice deploys the API with Argo CD.")
    monkeypatch.setenv("RCLL_DSN", dsn)
    # `rcll` as the snippet names it: this environment's own command (the venv need not be on PATH)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    class Answered:
        def __init__(self, final_output: str) -> None:
            self.final_output = final_output

    async def model_free_run(agent: Agent[Any], question: str, **_: Any) -> Answered:
        # What a model's first step would be: call memory_recall through the agent's own tools.
        tools = {t.name: t for t in await agent.get_all_tools(RunContextWrapper(context=None))}
        recall = tools["memory_recall"]
        assert isinstance(recall, FunctionTool)
        args = json.dumps({"query": question})
        out = await recall.on_invoke_tool(ToolContext(context=None, tool_name="memory_recall", tool_call_id="c1",
                                                      tool_arguments=args), args)
        return Answered(str(out))

    monkeypatch.setattr(Runner, "run", model_free_run)
    assert "Argo CD" in run(snippets()["openai-agents"])
