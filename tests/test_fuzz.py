"""Bounded fuzzing: the HTTP API from its OpenAPI document, the MCP tools with generated arguments.
No 500s, no crashes, every rejection names the field (tests/harness/fuzz_*.py run the long versions)."""

from __future__ import annotations

from harness import fuzz_http, fuzz_mcp


def test_http_api_survives_schema_fuzzing(dsn: str) -> None:
    out = fuzz_http.fuzz(dsn, examples=12)
    assert out["failures"] == []
    assert not any(code >= 500 and code != 503 for st in out["statuses"].values() for code in st)


def test_mcp_tools_survive_generated_arguments(dsn: str) -> None:
    out = fuzz_mcp.fuzz(dsn, examples=12)
    assert out["failures"] == []
