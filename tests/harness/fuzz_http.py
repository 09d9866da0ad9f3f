"""Fuzz the HTTP API from its own OpenAPI document (schemathesis): no 500s, every rejection names
the field. Prints requests, statuses and 5xx counts per operation.

    PYTHONPATH=tests .venv/bin/python -m harness.fuzz_http [--examples 200]   (RCLL_BENCH_DSN to reuse a database)

tests/test_fuzz.py runs it with 12 examples per operation.
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

from ._database import fresh_database

TOKEN = "fuzz-token-" + "z" * 24


def fuzz(dsn: str, examples: int, seed: int = 0) -> dict[str, Any]:
    import psycopg
    import schemathesis
    from fastapi.testclient import TestClient

    from rcll.auth import TokenMap
    from rcll.http import create_app

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('b')")
        conn.execute("SELECT rcll.retain_chunks(bank => 'b', content => 'seed fact', chunks => ARRAY['seed fact'], "
                     "embeddings => NULL, room => 'deployment')")
    @schemathesis.serializer("application/x-ndjson")
    def _ndjson(ctx: Any, value: Any) -> bytes:
        return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else str(value).encode()

    app = create_app(dsn, tokens=TokenMap.from_pairs({TOKEN: "fuzzer"}))
    statuses: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    with TestClient(app, base_url="http://127.0.0.1") as client:   # a Host the server answers to
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        for result in schema.get_all_operations():
            op = result.ok()
            _run_operation(client, op, f"{op.method.upper()} {op.path}", examples, statuses, failures)
    return {"statuses": {k: dict(v) for k, v in statuses.items()}, "failures": failures}


def _run_operation(client: Any, op: Any, label: str, examples: int,
                   statuses: dict[str, collections.Counter[int]], failures: list[str]) -> None:
    """Send `examples` generated requests to one operation; count statuses, collect failures.
    A function of its own so the test closure binds this operation's label, not the loop's."""
    import hypothesis
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
    @given(case=op.as_strategy())
    def run(case: Any) -> None:
        kwargs = case.as_transport_kwargs(base_url="")
        headers = {**(kwargs.get("headers") or {}), "Authorization": f"Bearer {TOKEN}"}
        kwargs["headers"] = headers
        method, url = kwargs.pop("method"), kwargs.pop("url")
        if isinstance(kwargs.get("data"), (bytes, str)):
            kwargs["content"] = kwargs.pop("data")
        r = client.request(method, url, **{k: v for k, v in kwargs.items()
                                           if k in ("params", "headers", "json", "content", "data")})
        statuses[label][r.status_code] += 1
        if r.status_code >= 500 and r.status_code != 503:
            failures.append(f"{label} -> {r.status_code}: {r.text[:200]}")
        elif r.status_code >= 400:
            body = r.json()
            if not isinstance(body, dict) or not {"code", "field", "error"} <= set(body):
                failures.append(f"{label} -> {r.status_code} without code/field/error: {r.text[:200]}")

    run()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--examples", type=int, default=200, help="generated requests per operation")
    args = p.parse_args()
    with fresh_database("fuzzhttp", port=55490) as dsn:
        out = fuzz(dsn, args.examples)
    total = sum(sum(v.values()) for v in out["statuses"].values())
    print(f"{'operation':<16} {'requests':>8}  statuses")
    for op, st in sorted(out["statuses"].items()):
        print(f"{op:<16} {sum(st.values()):>8}  " + ", ".join(f"{k}:{v}" for k, v in sorted(st.items())))
    fives = sum(n for st in out["statuses"].values() for k, n in st.items() if k >= 500)
    print(f"total {total} requests, {fives} 5xx, {len(out['failures'])} failures")
    for f in out["failures"][:20]:
        print("  " + f)
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
