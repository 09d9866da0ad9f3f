"""The `rcll` command: serve, db, install, bank, retain, recall."""

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
    from rcll.db import connect
    from rcll.recall import recall

    filters: dict[str, Any] = {k: v for k, v in {
        "rooms": args.room, "halls": args.hall, "layers": args.layer, "authors": args.author,
        "tags_any": args.tag, "thread": args.thread}.items() if v}
    if args.mine:
        filters["mine"] = True
    with connect(args.dsn) as conn:
        result = recall(conn, args.query, args.bank, budget=args.budget, **filters)
    data = result.as_dict()
    if args.json:
        print(json.dumps(data, default=str))
        return 0
    for i, f in enumerate(data["facts"], 1):
        where = "/".join(x for x in (f.get("room"), f.get("hall"), f.get("layer")) if x)
        print(f"{i:>3}. {f['text']}" + (f"  [{where}]" if where else ""))
    timings = ", ".join(f"{k} {v:.0f} ms" for k, v in data.get("timings_ms", {}).items())
    print(f"-- {len(data['facts'])} facts; {timings}", file=sys.stderr)
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
    s.add_argument("query")
    s.set_defaults(func=cmd_recall)
    return p


def main(argv: list[str] | None = None) -> int:
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
