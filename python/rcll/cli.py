"""The `rcll` command: serve, mcp, db, install, bank, retain, recall, rooms, tags, stats, state, export, import."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any, TextIO

from rcll.errors import RcllError
from rcll.validate import decode_text

DEFAULT_PORT = 8765
DEFAULT_BANK = "default"


def _out(args: argparse.Namespace, human: str, data: Any) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, default=str))
    else:
        print(human)


# -- db -----------------------------------------------------------------------------------------

def cmd_db(args: argparse.Namespace) -> int:
    from rcll import cluster
    from rcll.db import embedded_dsn

    c = cluster.embedded()
    if args.action == "start":
        url = embedded_dsn(start=True)
        _out(args, f"embedded PostgreSQL running: {url}", {"running": True, "url": url})
    elif args.action == "stop":
        c.stop()
        _out(args, "embedded PostgreSQL stopped", {"running": False})
    elif args.action == "status":
        running = c.initialized and c.running()
        _out(args, f"embedded PostgreSQL {'running' if running else 'stopped'} ({c.datadir})",
             {"running": running, "datadir": str(c.datadir)})
        return 0 if running else 3
    elif args.action == "url":
        print(embedded_dsn(start=False))
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from rcll import install
    from rcll.db import connect

    with connect(args.dsn) as conn:
        print(install.install(conn, use_extension=args.extension))
    return 0


def cmd_bank(args: argparse.Namespace) -> int:
    from rcll.db import connect

    with connect(args.dsn, autocommit=True) as conn:
        if args.action == "create":
            conn.execute("SELECT rcll.create_bank(name => %(name)s, description => %(d)s)",
                         {"name": args.name, "d": args.description})
            _out(args, f"bank {args.name} ready", {"bank": args.name})
        else:
            rows = conn.execute("SELECT * FROM rcll.list_banks()").fetchall()
            _out(args, "\n".join(f"{r[0]}\t{r[2]} units\t{r[3]} documents" for r in rows) or "(no banks)",
                 [{"name": r[0], "units": r[2], "documents": r[3]} for r in rows])
    return 0


# -- retain -------------------------------------------------------------------------------------

def _read_jsonl(stream: TextIO | Any, defaults: dict[str, Any]) -> Iterator[Any]:
    from rcll.retain import Document

    for lineno, raw in enumerate(stream, 1):
        line = decode_text(raw, f"line {lineno}") if isinstance(raw, bytes) else raw
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise RcllError(f"line {lineno}", f"not valid JSON: {e.msg}", 'each line is {"content": "..."}') from e
        if not isinstance(obj, dict) or "content" not in obj:
            raise RcllError(f"line {lineno}", "expected a JSON object with a content field")
        fields = {**defaults, **obj}
        if isinstance(fields.get("occurred_at"), str):
            try:
                fields["occurred_at"] = datetime.fromisoformat(fields["occurred_at"])
            except ValueError as e:
                raise RcllError(f"line {lineno}.occurred_at", "not an ISO 8601 timestamp") from e
        unknown = set(fields) - set(Document.__dataclass_fields__)
        if unknown:
            raise RcllError(f"line {lineno}.{sorted(unknown)[0]}", "unknown field",
                            f"known fields: {', '.join(Document.__dataclass_fields__)}")
        doc = Document(**fields)
        try:
            doc.check()
        except RcllError as e:
            raise RcllError(f"line {lineno}.{e.field}", e.message, e.hint) from e
        yield doc


def cmd_retain(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rcll.db import connect
    from rcll.retain import Document, retain, retain_many

    defaults: dict[str, Any] = {k: v for k, v in {"room": args.room, "thread": args.thread, "source": args.source,
                                                  "tags": args.tag or None}.items() if v is not None}
    with connect(args.dsn) as conn:
        if args.jsonl:
            stream = sys.stdin.buffer if args.jsonl == "-" else open(args.jsonl, "rb")  # noqa: SIM115
            with stream, tqdm(unit="doc", disable=args.json or not sys.stderr.isatty()) as bar:
                results = retain_many(conn, args.bank, _read_jsonl(stream, defaults),
                                      via="cli", on_progress=bar.update)
            created = sum(r.created for r in results)
            _out(args, f"retained {len(results)} documents ({created} new, {len(results) - created} already there)",
                 {"documents": len(results), "created": created})
            return 0
        if args.text is None or args.text == "-":
            text = decode_text(sys.stdin.buffer.read())
        else:
            text = args.text
        result = retain(conn, args.bank, Document(content=text, **defaults), via="cli")
        _out(args, f"document {result.document_id}: {len(result.unit_ids)} unit(s)"
                   f"{'' if result.created else ' (already retained)'}",
             {"document_id": result.document_id, "unit_ids": result.unit_ids, "created": result.created})
    return 0


# -- recall -------------------------------------------------------------------------------------

def cmd_recall(args: argparse.Namespace) -> int:
    from rcll.api import recall_dict
    from rcll.db import connect
    from rcll.recall import recall

    filters: dict[str, Any] = {k: v for k, v in {
        "rooms": args.room, "halls": args.hall, "layers": args.layer, "authors": args.author,
        "tags_any": args.tag, "thread": args.thread}.items() if v}
    if args.mine:
        filters["mine"] = True
    with connect(args.dsn) as conn:
        depths = {k: v for k, v in {"rerank_depth": args.rerank_depth,
                                    "context_depth": args.context_depth}.items() if v is not None}
        result = recall(conn, args.query, args.bank, budget=args.budget, **depths, **filters)
    data = recall_dict(result)
    if args.json:
        print(json.dumps(data, default=str))
        return 0
    for i, f in enumerate(data["facts"], 1):
        where = "/".join(x for x in (f.get("room"), f.get("hall"), f.get("layer")) if x)
        print(f"{i:>3}. {f['text']}" + (f"  [{where}]" if where else ""))
    timings = ", ".join(f"{k} {v:.0f} ms" for k, v in data.get("timings_ms", {}).items())
    print(f"-- {len(data['facts'])} facts; {timings}", file=sys.stderr)
    return 0


# -- rooms, tags, stats, state --------------------------------------------------------------------

def _service(args: argparse.Namespace, read_only: bool = False) -> Any:
    from rcll.api import Service
    from rcll.db import resolve_dsn

    svc = Service(resolve_dsn(args.dsn), read_only=read_only, pool_size=1)
    svc.open()
    return svc


def cmd_rooms(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        rows = svc.rooms(args.bank, args.pattern)
    finally:
        svc.close()
    human = "\n".join(f"{r['name']:<24} {r['fact_count']:>8}  {r['status']}"
                      + (f" -> {r['merged_into']}" if r.get("merged_into") else "")
                      + (f"  aliases: {', '.join(r['aliases'])}" if r.get("aliases") else "") for r in rows)
    _out(args, human or "(no rooms)", rows)
    return 0


def cmd_tags(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        rows = svc.tags(args.bank, args.pattern)
    finally:
        svc.close()
    _out(args, "\n".join(f"{r['tag']:<40} {r['unit_count']:>8}" for r in rows) or "(no tags)", rows)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        data = svc.stats(args.bank)
    finally:
        svc.close()
    lines = [f"bank {data['bank']}"]
    for section in ("totals", "kind", "room", "hall", "layer", "author", "link_type", "extraction"):
        if data.get(section):
            lines.append(f"{section}: " + ", ".join(f"{k} {v}" for k, v in data[section].items()))
    for purpose, t in data.get("tokens", {}).items():
        lines.append(f"tokens {purpose}: {t['calls']} calls, read {t['read_tokens']}, "
                     f"write {t['write_input_tokens']} in / {t['write_output_tokens']} out")
    _out(args, "\n".join(lines), data)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        if args.action == "get":
            st = svc.state_get(args.bank, args.room, args.key, args.version)
            if st is None:
                _out(args, f"no state for {args.room}/{args.key}", None)
                return 3
            _out(args, f"v{st['version']}: {json.dumps(st['value'])}", st)
        else:
            if args.value is None:
                raise RcllError("value", "a JSON value is required", "rcll state put ROOM KEY '<json>'")
            try:
                value = json.loads(args.value)
            except json.JSONDecodeError as e:
                raise RcllError("value", f"not valid JSON: {e.msg}") from e
            res = svc.state_put(None, args.bank, args.room, args.key, value, args.expected_version)
            _out(args, f"{args.room}/{args.key} is now version {res['version']}", res)
    finally:
        svc.close()
    return 0


# -- export / import ------------------------------------------------------------------------------

def _bar(args: argparse.Namespace, total: int | None, unit: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=args.json or not sys.stderr.isatty(), file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    from rcll.db import connect
    from rcll.export import export_bank

    with connect(args.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM rcll.memory_units WHERE bank_id = rcll._bank_id(%s)",
                           (args.bank,)).fetchone()
        conn.commit()
        with _bar(args, None, "row") as bar:
            def progress(table: str, n: int) -> None:
                bar.set_description(table)
                bar.update(n)
            summary = export_bank(conn, args.bank, args.out, progress=progress)
    data = summary.as_dict()
    _out(args, f"exported bank {args.bank} to {args.out}: {summary.tables.get('memory_units', 0)} units "
               f"(of {row[0] if row else '?'}), {summary.tables.get('links', 0)} links, "
               f"{sum(summary.tables.values())} rows in {len(summary.tables)} tables; "
               f"PAM view {summary.memories} memories", data)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from rcll import install
    from rcll.db import connect
    from rcll.export import import_bank, read_manifest

    manifest = read_manifest(args.path)
    total = sum(int(t["rows"]) for t in manifest["tables"])
    with connect(args.dsn) as conn:
        install.install(conn)
        conn.commit()
        with _bar(args, total, "row") as bar:
            def progress(table: str, n: int) -> None:
                bar.set_description(table)
                bar.update(n)
            res = import_bank(conn, args.path, on_conflict=args.on_conflict, progress=progress)
    _out(args, f"imported bank {res.bank} ({'new' if res.fresh else 'merged, ' + args.on_conflict}): "
               f"{sum(res.rows.values())} rows", res.as_dict())
    return 0


def cmd_validate_pam(args: argparse.Namespace) -> int:
    from rcll.export import validate_pam

    problems = validate_pam(args.path)
    _out(args, "\n".join(problems) or "PAM view valid", {"valid": not problems, "problems": problems})
    return 0 if not problems else 1


# -- mcp ------------------------------------------------------------------------------------------

def cmd_mcp(args: argparse.Namespace) -> int:
    from rcll.api import Service
    from rcll.auth import TokenMap
    from rcll.db import resolve_dsn
    from rcll.mcp_server import build_server, http_app

    if args.read_only and args.write_tools:
        raise RcllError("write_tools", "read-only mode serves only read tools", "drop --write-tools or --read-only")
    if args.read_only:
        os.environ["LLM_PROVIDER"] = "none"      # a read-only server holds no key and calls no model
        os.environ.pop("ANTHROPIC_API_KEY", None)
    service = Service(resolve_dsn(args.dsn), read_only=args.read_only)
    service.open()
    tokens = TokenMap.from_env()
    agent = args.agent or os.environ.get("RCLL_AGENT") or None
    if agent and not service.identity_honoured:
        print("rcll mcp: warning: the database role is not a member of rcll_identity_server; "
              "writes will carry no server identity", file=sys.stderr)
    server = build_server(service, agent=agent, tokens=tokens, default_bank=args.bank,
                          write_tools=not args.read_only)
    try:
        if args.transport == "stdio":
            server.run("stdio")
        else:
            import uvicorn

            print(f"RCLL MCP (streamable HTTP) on http://{args.host}:{args.port}/mcp"
                  f"{' read-only' if args.read_only else ''}", file=sys.stderr, flush=True)
            uvicorn.run(http_app(server, tokens), host=args.host, port=args.port, log_level="warning")
    finally:
        service.close()
    return 0


# -- serve --------------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rcll import install
    from rcll.db import connect, resolve_dsn
    from rcll.http import create_app

    dsn = resolve_dsn(args.dsn)
    with connect(dsn) as conn:
        print(install.install(conn), file=sys.stderr)
        conn.execute("SELECT rcll.create_bank(%s)", (DEFAULT_BANK,))
        conn.commit()
    # Load the models before listening, so the first request does not pay for it.
    from rcll.models import get_embedder, get_reranker

    get_embedder().embed(["warm up"])
    get_reranker().score("warm up", ["warm up"])
    base = f"http://{args.host}:{args.port}"
    print(f"RCLL listening on {base}  (database: {dsn})")
    print(f"  try: curl -s {base}/retain -H 'content-type: application/json' "
          f"-d '{{\"bank\": \"{DEFAULT_BANK}\", \"content\": \"We deploy with Argo CD since March.\"}}'")
    print(f"       curl -s {base}/recall -H 'content-type: application/json' "
          f"-d '{{\"bank\": \"{DEFAULT_BANK}\", \"query\": \"how do we deploy?\"}}'", flush=True)
    uvicorn.run(create_app(dsn), host=args.host, port=args.port, log_level="warning")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=None,
                        help="PostgreSQL connection string (default: $RCLL_DSN, else the embedded database)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    p = argparse.ArgumentParser(prog="rcll", description="RCLL: PostgreSQL-native memory for agent fleets.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", parents=[common], help="run the HTTP server (installs the schema, starts the embedded database if needed)")
    s.add_argument("--host", default=os.environ.get("RCLL_HOST", "127.0.0.1"))
    s.add_argument("--port", type=int, default=int(os.environ.get("RCLL_PORT", DEFAULT_PORT)))
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("db", parents=[common], help="the embedded PostgreSQL cluster")
    s.add_argument("action", choices=["start", "stop", "status", "url"])
    s.set_defaults(func=cmd_db)

    s = sub.add_parser("install", parents=[common], help="install or upgrade the rcll schema in a database")
    s.add_argument("--extension", action="store_true", help="use CREATE EXTENSION rcll (after `make install`)")
    s.set_defaults(func=cmd_install)

    s = sub.add_parser("bank", parents=[common], help="create or list banks")
    s.add_argument("action", choices=["create", "list"])
    s.add_argument("name", nargs="?")
    s.add_argument("--description")
    s.set_defaults(func=cmd_bank)

    s = sub.add_parser("retain", parents=[common], help="retain text (an argument, - for stdin) or a JSONL file (--jsonl)")
    s.add_argument("--bank", required=True)
    s.add_argument("--room")
    s.add_argument("--thread")
    s.add_argument("--source")
    s.add_argument("--tag", action="append")
    s.add_argument("--jsonl", metavar="FILE", help='one {"content": ...} object per line; - for stdin')
    s.add_argument("text", nargs="?")
    s.set_defaults(func=cmd_retain)

    s = sub.add_parser("recall", parents=[common], help="recall facts for a query")
    s.add_argument("--bank", required=True)
    s.add_argument("--room", action="append")
    s.add_argument("--hall", action="append")
    s.add_argument("--layer", action="append")
    s.add_argument("--author", action="append")
    s.add_argument("--tag", action="append")
    s.add_argument("--thread")
    s.add_argument("--mine", action="store_true")
    s.add_argument("--budget", type=int, default=4096)
    s.add_argument("--rerank-depth", type=int,
                   help="candidates the cross-encoder reads (default: rcll.recall.DEFAULT_RERANK_DEPTH; 0 = no rerank)")
    s.add_argument("--context-depth", type=int,
                   help="of those, how many it reads again with the chunk before them (default: DEFAULT_CONTEXT_DEPTH)")
    s.add_argument("query")
    s.set_defaults(func=cmd_recall)

    s = sub.add_parser("rooms", parents=[common], help="list a bank's rooms (topics) with counts and aliases")
    s.add_argument("--bank", required=True)
    s.add_argument("pattern", nargs="?", default="*", help="wildcards * and ?")
    s.set_defaults(func=cmd_rooms)

    s = sub.add_parser("tags", parents=[common], help="list tags with counts (author:* is the roster of writers)")
    s.add_argument("--bank", required=True)
    s.add_argument("pattern", nargs="?", default="*")
    s.set_defaults(func=cmd_tags)

    s = sub.add_parser("stats", parents=[common], help="a bank by room, hall, layer, author, link type, and the write-cost ledger")
    s.add_argument("--bank", required=True)
    s.set_defaults(func=cmd_stats)

    s = sub.add_parser("state", parents=[common], help="a room's keyed state: get ROOM KEY, put ROOM KEY JSON")
    s.add_argument("action", choices=["get", "put"])
    s.add_argument("room")
    s.add_argument("key")
    s.add_argument("value", nargs="?", help="put: the JSON value")
    s.add_argument("--bank", required=True)
    s.add_argument("--version", type=int, help="get: this version instead of the latest")
    s.add_argument("--expected-version", type=int, default=0, help="put: the version you read (0: none yet)")
    s.set_defaults(func=cmd_state)

    s = sub.add_parser("export", parents=[common], help="write a whole bank (PAM view + lossless sidecar) to a directory")
    s.add_argument("--bank", required=True)
    s.add_argument("--out", required=True, help="directory to create")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("import", parents=[common], help="load an export directory (one transaction)")
    s.add_argument("path")
    s.add_argument("--on-conflict", choices=["error", "skip", "replace"], default="error",
                   help="rows that already exist: error (default), skip, replace")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("validate-pam", parents=[common], help="check an export's PAM view against the PAM SDK")
    s.add_argument("path")
    s.set_defaults(func=cmd_validate_pam)

    # Listed for --help only: main() hands `rcll consolidate ...` to rcll.consolidate.main.
    sub.add_parser("consolidate", help="background job: compact related L2 observations into roomed observations")
    s = sub.add_parser("mcp", parents=[common], help="run the MCP server (stdio or streamable HTTP)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    s.add_argument("--host", default=os.environ.get("RCLL_HOST", "127.0.0.1"))
    s.add_argument("--port", type=int, default=int(os.environ.get("RCLL_MCP_PORT", 8766)))
    s.add_argument("--bank", default=None, help="default bank for tools called without one (default: $RCLL_BANK or default)")
    s.add_argument("--agent", default=None, help="stdio: the agent this process writes as (default: $RCLL_AGENT)")
    s.add_argument("--read-only", action="store_true", help="read tools only, over a SELECT-only role, no LLM key")
    s.add_argument("--write-tools", action="store_true", help="(refused with --read-only)")
    s.set_defaults(func=cmd_mcp)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["consolidate"]:
        # Background job with its own options (python -m rcll.consolidate --help).
        from rcll.consolidate import main as consolidate_main

        return consolidate_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "bank" and args.action == "create" and not args.name:
        print("rcll: bank create needs a NAME", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except RcllError as e:
        if args.json:
            print(json.dumps(e.as_dict()), file=sys.stderr)
        else:
            print(f"rcll: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
