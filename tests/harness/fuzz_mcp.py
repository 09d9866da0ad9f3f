"""Fuzz the MCP tools with generated arguments (hypothesis): no crashes, every error names a field.

    PYTHONPATH=tests .venv/bin/python -m harness.fuzz_mcp [--examples 200]   (RCLL_BENCH_DSN to reuse a database)

tests/test_fuzz.py runs it with 12 examples per tool.
"""

from __future__ import annotations

import argparse
import collections
import json
from typing import Any

from ._database import fresh_database

JSON = None


def _strategies() -> dict[str, Any]:
    from hypothesis import strategies as st

    text = st.one_of(st.text(max_size=40), st.sampled_from(["b", "deployment", "*", "author:*", "", "\x00"]))
    anything = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | text,
                            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                            max_leaves=8)
    maybe = lambda s: st.one_of(st.none(), s, anything)
    bank = st.one_of(st.just("b"), text, anything)
    texts = st.one_of(st.none(), st.lists(text, max_size=4), anything)
    return {
        "memory_recall": st.fixed_dictionaries({"query": st.one_of(text, anything)}, optional={
            "bank": bank, "rooms": texts, "mine": maybe(st.booleans()), "authors": texts, "halls": texts,
            "layers": texts, "tags_any": texts, "tags_all": texts, "include_unattributed": maybe(st.booleans()),
            "thread": maybe(text), "budget": maybe(st.integers()), "time_from": maybe(text), "time_to": maybe(text),
            "as_of": maybe(text), "reference_time": maybe(text)}),
        "memory_retain": st.fixed_dictionaries({"content": st.one_of(text, anything)}, optional={
            "bank": bank, "room": maybe(text), "thread": maybe(text), "tags": texts, "hall": maybe(text),
            "layer": maybe(text), "source": maybe(text), "occurred_at": maybe(text), "metadata": anything,
            "expires_at": maybe(text), "ttl": maybe(st.one_of(text, st.floats(), st.integers()))}),
        "memory_rooms": st.fixed_dictionaries({}, optional={"bank": bank, "pattern": maybe(text)}),
        "memory_tags": st.fixed_dictionaries({}, optional={"bank": bank, "pattern": maybe(text)}),
        "memory_state_get": st.fixed_dictionaries({"room": st.one_of(text, anything), "key": st.one_of(text, anything)},
                                                  optional={"bank": bank, "version": maybe(st.integers())}),
        "memory_state_put": st.fixed_dictionaries({"room": st.one_of(text, anything), "key": st.one_of(text, anything),
                                                   "value": anything},
                                                  optional={"bank": bank, "expected_version": maybe(st.integers())}),
        "memory_session_start": st.fixed_dictionaries({}, optional={"bank": bank, "rooms": texts,
                                                                     "thread": maybe(text)}),
        "memory_history": st.fixed_dictionaries({"unit_id": st.one_of(st.integers(), anything)},
                                                optional={"bank": bank}),
        # dry_run is never false here: the fuzzer probes the arguments, it does not empty the bank
        "memory_forget": st.fixed_dictionaries({}, optional={
            "bank": bank, "unit_ids": maybe(st.lists(st.integers(), max_size=3)), "document_ids": maybe(st.integers()),
            "thread": maybe(text), "author": maybe(text), "tag": maybe(text), "room": maybe(text),
            "occurred_from": maybe(text), "retained_to": maybe(text), "everything": maybe(text),
            "dry_run": st.just(True), "reason": maybe(text)}),
        "memory_correct": st.fixed_dictionaries({"unit_id": st.one_of(st.integers(), anything),
                                                 "text": st.one_of(text, anything), "reason": st.one_of(text, anything)},
                                                optional={"bank": bank}),
    }


def names_a_field(text: str) -> bool:
    """An MCP error names the field: our {field, error, hint} JSON, or the SDK's argument validation
    message (which lists the failing argument)."""
    if "{" in text:
        try:
            return bool(json.loads(text[text.index("{"):]).get("field"))
        except (json.JSONDecodeError, AttributeError):
            pass
    return "validation error" in text.lower() or "input should be" in text.lower()


def fuzz(dsn: str, examples: int) -> dict[str, Any]:
    import psycopg

    from rcll.mcp_server import build_server
    from rcll.memory import Memory

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
    svc = Memory(dsn)
    svc.open()
    server = build_server(svc, agent="fuzzer", default_bank="b")
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    try:
        for tool, strategy in _strategies().items():
            _run_tool(server, tool, strategy, examples, counts, failures)
    finally:
        svc.close()
    return {"counts": {k: dict(v) for k, v in counts.items()}, "failures": failures}


def _run_tool(server: Any, tool: str, strategy: Any, examples: int,
              counts: dict[str, collections.Counter[str]], failures: list[str]) -> None:
    import anyio
    from hypothesis import HealthCheck, Phase, given, settings
    from mcp import Client

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(args=strategy)
    def run(args: dict[str, Any]) -> None:
        async def go() -> Any:
            async with Client(server) as client:
                return await client.call_tool(tool, args)
        r = anyio.run(go)
        if not r.is_error:
            counts[tool]["ok"] += 1
            return
        text = r.content[0].text if r.content else ""
        if "Error executing tool" in text and "{" not in text and not names_a_field(text):
            counts[tool]["crash"] += 1
            failures.append(f"{tool}({args!r}) -> {text[:200]}")
        elif names_a_field(text):
            counts[tool]["rejected"] += 1
        else:
            counts[tool]["unnamed"] += 1
            failures.append(f"{tool}({args!r}) -> {text[:200]}")
    run()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--examples", type=int, default=200)
    args = p.parse_args()
    with fresh_database("fuzzmcp", port=55491) as dsn:
        out = fuzz(dsn, args.examples)
    print(f"{'tool':<22} {'calls':>6} {'ok':>6} {'rejected':>9} {'crash':>6} {'unnamed':>8}")
    for tool, c in sorted(out["counts"].items()):
        print(f"{tool:<22} {sum(c.values()):>6} {c.get('ok', 0):>6} {c.get('rejected', 0):>9} "
      f"{c.get('crash', 0):>6} {c.get('unnamed', 0):>8}")
    print(f"{len(out['failures'])} failures")
    for f in out["failures"][:20]:
        print("  " + f)
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
