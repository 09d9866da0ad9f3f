"""Adapters for agent frameworks, each an optional install (its framework is not a dependency of
rcll): `rcll.integrations.langgraph` (pip install 'rcll[langgraph]'), `rcll.integrations.langchain`
('rcll[langchain]') and `rcll.integrations.llamaindex` ('rcll[llamaindex]'). The OpenAI Agents SDK,
Claude Code and Claude Desktop need no adapter: they speak MCP (`rcll mcp`). docs/integrations.md.
"""
