"""The `rcll` command: serve, models, mcp, db, install, bank, retain, recall, rooms, tags, stats, state, export, import,
dense-indexes, and the destructive verbs forget, drop-bank, correct (with history) and retention."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import psycopg
from tqdm import tqdm

from rcll import cluster, model_service, models, upkeep
from rcll.auth import TokenMap, allow_anonymous_network, check_listen, is_loopback
from rcll.db import embedded_dsn, redacted, resolve_dsn
from rcll.document import Document
from rcll.errors import Code, RcllError, from_database
from rcll.export import read_manifest, validate_pam
from rcll.install import InstallError
from rcll.memory import DEFAULT_BANK, Memory, bounded_model_work
from rcll.request import FORGET_PARAMETERS, PARAMETERS, ForgetRequest, RecallRequest
from rcll.results import Forgotten
from rcll.settings import DEFAULTS, Settings, tokenize_in_one_call
from rcll.validate import decode_text, duration_arg, duration_text

DEFAULT_PORT = DEFAULTS.port
# `rcll serve --citus-workers N`: the local cluster's coordinator port (Citus's documentation's), the workers' after it.
CITUS_PORT = 9700


def _out(args: argparse.Namespace, human: str, data: Any) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, default=str))
    else:
        print(human)


def _memory(args: argparse.Namespace, **options: Any) -> Memory:
    """The Memory every verb goes through: installs or upgrades the schema when it is missing or
    behind, and acts as the identity the database resolves for this login (Memory.as_login):
    the role's agent in rcll.identities; for a role trusted to name agents (the embedded
    database's postgres) $RCLL_AGENT, else the role's name. No verb takes an author."""
    memory = Memory(settings=args.settings, pool_size=1, **options)
    try:
        return memory.as_login(args.settings.agent)
    except BaseException:
        memory.close()
        raise


def _note_no_author(args: argparse.Namespace, memory: Memory) -> None:
    if memory.agent is None and not args.json:
        print("rcll: note: the database has no identity for this login, so these writes carry no author "
              "(map the role in rcll.identities, or connect as a member of rcll_identity_server)", file=sys.stderr)


# -- db, install, bank ----------------------------------------------------------------------------

def cmd_db(args: argparse.Namespace) -> int:
    c = cluster.embedded(config=args.settings)
    if args.action == "start":
        url = embedded_dsn(start=True, settings=args.settings)
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
        print(embedded_dsn(start=False, settings=args.settings))
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    with _memory(args, install=True, extension=args.extension, citus=args.citus) as memory:
        print(memory.installed)
    return 0


def cmd_bank(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        if args.action == "create":
            memory.create_bank(args.name, args.description)
            _out(args, f"bank {args.name} ready", {"bank": args.name})
        else:
            banks = memory.banks()
            _out(args, "\n".join(f"{b.name}\t{b.unit_count} units\t{b.document_count} documents" for b in banks)
                 or "(no banks)", [{"name": b.name, "units": b.unit_count, "documents": b.document_count}
                                   for b in banks])
    return 0


# -- retain -------------------------------------------------------------------------------------

def _read_jsonl(stream: IO[bytes], defaults: dict[str, Any], settings: Settings) -> Iterator[Document]:
    for lineno, raw in enumerate(stream, 1):
        line = decode_text(raw, f"line {lineno}")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise RcllError(f"line {lineno}", f"not valid JSON: {e.msg}", 'each line is {"content": "..."}') from e
        if not isinstance(obj, dict) or "content" not in obj:
            raise RcllError(f"line {lineno}", "expected a JSON object with a content field")
        if "author" in obj:
            raise RcllError(f"line {lineno}.author", "the author is not the caller's to give",
                            "the database resolves it: $RCLL_AGENT, else the login role (rcll.login_agent)")
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
            doc.check(settings)
        except RcllError as e:
            raise RcllError(f"line {lineno}.{e.field}", e.message, e.hint, code=e.code) from e
        yield doc


def cmd_retain(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {k: v for k, v in {"room": args.room, "thread": args.thread, "source": args.source,
                                                "tags": args.tag or None}.items() if v is not None}
    expiry = {k: v for k, v in {"expires_at": args.expires_at, "ttl": duration_arg(args.ttl, "ttl")}.items()
              if v is not None}
    with _memory(args) as memory:
        _note_no_author(args, memory)
        if args.jsonl:
            if expiry:
                raise RcllError("ttl" if "ttl" in expiry else "expires_at", "applies to one document, not to --jsonl",
                                "retain the documents that expire one by one")
            stream = sys.stdin.buffer if args.jsonl == "-" else open(args.jsonl, "rb")  # noqa: SIM115
            with stream, tqdm(unit="doc", disable=args.json or not sys.stderr.isatty()) as bar:
                results = memory.retain_many(_read_jsonl(stream, fields, memory.settings), bank=args.bank, via="cli",
                                             on_progress=bar.update)
            created = sum(r.created for r in results)
            _out(args, f"retained {len(results)} documents ({created} new, {len(results) - created} already there)",
                 {"documents": len(results), "created": created})
            return 0
        text = decode_text(sys.stdin.buffer.read()) if args.text is None or args.text == "-" else args.text
        result = memory.retain(text, bank=args.bank, via="cli", **fields, **expiry)
    _out(args, f"document {result.document_id}: {len(result.unit_ids)} unit(s)"
               f"{'' if result.created else ' (already retained)'}",
         {"document_id": result.document_id, "unit_ids": result.unit_ids, "created": result.created})
    return 0


# -- recall -------------------------------------------------------------------------------------

# The flags `rcll recall` had before it offered every field, kept as aliases.
_RECALL_ALIASES = {"rooms": ["--room"], "authors": ["--author"], "halls": ["--hall"], "layers": ["--layer"],
                   "tags_any": ["--tag"]}


def _weight(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        return name.strip(), float(value) if sep else float("nan")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not CHANNEL=WEIGHT (e.g. context=0.5)") from e


def _recall_flags(s: argparse.ArgumentParser) -> None:
    """One flag per RecallRequest field (rcll.request.PARAMETERS, so none is left out)."""
    for p in PARAMETERS:
        if p.name == "query":
            continue
        flags = [f"--{p.name.replace('_', '-')}", *_RECALL_ALIASES.get(p.name, [])]
        shown = "" if p.default in (None, False) or p.kind == "weights" else f" (default {p.default})"
        if p.name == "bank":
            s.add_argument(*flags, dest=p.name, required=True, help=p.help)
        elif p.kind == "names":
            s.add_argument(*flags, dest=p.name, action="append", metavar=p.name.split("_")[0].rstrip("s").upper(),
                           help=p.help + " (repeat the flag for several)")
        elif p.kind == "flag":
            s.add_argument(*flags, dest=p.name, action="store_true", default=None, help=p.help)
        elif p.kind == "int":
            s.add_argument(*flags, dest=p.name, type=int, help=p.help + shown)
        elif p.kind == "weights":
            s.add_argument("--weight", dest=p.name, action="append", type=_weight, metavar="CHANNEL=WEIGHT",
                           help=p.help + " (repeat the flag for several)")
        else:
            s.add_argument(*flags, dest=p.name, help=p.help)
    s.add_argument("query", help=PARAMETERS[0].help)


def recall_request(args: argparse.Namespace) -> RecallRequest:
    """The one place the CLI builds a recall: the flags given (the others at their defaults)."""
    given = {p.name: getattr(args, p.name) for p in PARAMETERS if getattr(args, p.name, None) is not None}
    if "weights" in given:
        given["weights"] = dict(given["weights"])
    return RecallRequest(**given)


def cmd_recall(args: argparse.Namespace) -> int:
    request = recall_request(args)
    with _memory(args) as memory:
        result = memory.recall(request)
    if args.json:
        print(result.to_json())
        return 0
    for i, f in enumerate(result.facts, 1):
        where = "/".join(x for x in (f.room, f.hall, f.layer) if x)
        print(f"{i:>3}. {f.text}" + (f"  [{where}]" if where else ""))
    t = result.timings
    timings = ", ".join(f"{k} {v:.0f} ms" for k, v in (("embed", t.embed), ("sql", t.sql), ("rerank", t.rerank),
                                                        ("cut", t.cut)))
    cut = " (cut by the deadline)" if result.deadline_cut else ""
    print(f"-- {len(result.facts)} facts; {timings}; reranked {result.rerank_depth_reached}, "
          f"context {result.context_depth_reached}{cut}", file=sys.stderr)
    return 0


# -- rooms, tags, stats, state --------------------------------------------------------------------

def cmd_rooms(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        rooms = memory.rooms(args.pattern, bank=args.bank)
    human = "\n".join(f"{r.name:<24} {r.fact_count:>8}  {r.status}"
                      + (f" -> {r.merged_into}" if r.merged_into else "")
                      + (f"  aliases: {', '.join(r.aliases)}" if r.aliases else "") for r in rooms)
    _out(args, human or "(no rooms)", [r.as_dict() for r in rooms])
    return 0


def cmd_tags(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        tags = memory.tags(args.pattern, bank=args.bank)
    _out(args, "\n".join(f"{t.tag:<40} {t.unit_count:>8}" for t in tags) or "(no tags)", [t.as_dict() for t in tags])
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        stats = memory.stats(bank=args.bank)
    data = stats.as_dict()
    lines = [f"bank {stats.bank}"]
    for section in ("totals", "kind", "room", "hall", "layer", "author", "link_type", "extraction"):
        if data.get(section):
            lines.append(f"{section}: " + ", ".join(f"{k} {v}" for k, v in data[section].items()))
    for purpose, t in stats.tokens.items():
        lines.append(f"tokens {purpose}: {t.calls} calls, read {t.read_tokens}, "
                     f"write {t.write_input_tokens} in / {t.write_output_tokens} out")
    _out(args, "\n".join(lines), data)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    if args.key is None and not (args.action == "forget" and args.all_keys):
        raise RcllError("key", "is required", f"rcll state {args.action} ROOM KEY"
                        + (" (or --all-keys: every key of the room)" if args.action == "forget" else ""))
    if args.action == "forget" and args.key is not None and args.all_keys:
        raise RcllError("all_keys", "give a KEY or --all-keys, not both", "drop one of them")
    with _memory(args) as memory:
        if args.action == "forget":
            done = memory.forget_state(args.room, args.key, all_keys=args.all_keys, bank=args.bank,
                                       dry_run=not args.yes, reason=args.reason)
            return _forgotten(args, done, f"forgetting {args.room}/{args.key or '*'}")
        if args.action == "get":
            st = memory.get_state(args.room, args.key, bank=args.bank, version=args.version)
            if st is None:
                _out(args, f"no state for {args.room}/{args.key}", None)
                return 3
            _out(args, f"v{st.version}: {json.dumps(st.value)}", st.as_dict())
        elif args.action == "history":
            versions = memory.state_history(args.room, args.key, bank=args.bank)
            _out(args, "\n".join(f"v{v.version}: {json.dumps(v.value)}  ({v.provenance.get('who') or 'no author'}, "
                                 f"{v.created_at:%Y-%m-%d %H:%M})" for v in versions)
                 or f"no state for {args.room}/{args.key}", [v.as_dict() for v in versions])
        else:
            if args.value is None:
                raise RcllError("value", "a JSON value is required", "rcll state put ROOM KEY '<json>'")
            try:
                value = json.loads(args.value)
            except json.JSONDecodeError as e:
                raise RcllError("value", f"not valid JSON: {e.msg}") from e
            _note_no_author(args, memory)
            res = memory.put_state(args.room, args.key, value, expected_version=args.expected_version,
                                   bank=args.bank, via="cli")
            _out(args, f"{args.room}/{args.key} is now version {res.version}", res.as_dict())
    return 0


# -- forget, drop-bank, correct, history, retention ----------------------------------------------

def _counts(done: Forgotten) -> str:
    rows = [(kind.replace("_", " "), n) for kind, n in done.counts.items() if n]
    return "".join(f"\n  {kind:<24} {n:>10}" for kind, n in rows) or " nothing"


def _forgotten(args: argparse.Namespace, done: Forgotten, what: str) -> int:
    if done.dry_run:
        _out(args, f"dry run: {what} would remove{_counts(done)}\nnothing changed; add --yes to do it",
             done.as_dict())
    else:
        purged = f"\nvacuumed: {', '.join(done.purged)}" if done.purged else ""
        _out(args, f"forgotten:{_counts(done)}{purged}", done.as_dict())
    return 0


def _forget_flags(s: argparse.ArgumentParser) -> None:
    """`rcll forget`'s flags: one per ForgetRequest field (rcll.request.FORGET_PARAMETERS, so none is
    left out); dry_run is --yes, its opposite (a dry run unless it is given)."""
    for p in FORGET_PARAMETERS:
        flag = f"--{p.flag}"
        if p.name == "dry_run":
            s.add_argument("--yes", action="store_true", help="forget (without it: a dry run, nothing changes)")
        elif p.kind == "flag":
            s.add_argument(flag, dest=p.name, action="store_true", help=p.help)
        elif p.kind == "ids":
            s.add_argument(flag, dest=p.name, type=int, action="append", metavar="ID",
                           help=f"{p.help} (repeat for several)")
        elif p.kind == "int":
            s.add_argument(flag, dest=p.name, type=int, metavar="N", help=p.help)
        else:
            s.add_argument(flag, dest=p.name, required=p.name == "bank", help=p.help,
                           metavar="TIME" if p.kind == "time" else None)


def forget_request(args: argparse.Namespace) -> ForgetRequest:
    """The one place the CLI builds a forget: the flags given (the others at their defaults)."""
    given = {p.name: getattr(args, p.name) for p in FORGET_PARAMETERS
             if p.name != "dry_run" and getattr(args, p.name, None) is not None}
    return ForgetRequest(**given, dry_run=not args.yes)


def cmd_forget(args: argparse.Namespace) -> int:
    request = forget_request(args)
    with _memory(args) as memory:
        done = memory.forget(request, progress=lambda so_far: _progress(args, so_far))
    return _forgotten(args, done, "this forget")


def _progress(args: argparse.Namespace, so_far: dict[str, int]) -> None:
    # One line per batch on stderr, so stdout keeps the one answer (and --json stays one document).
    print(f"forgotten so far: {so_far.get('units', 0)} units, {so_far.get('remaining', 0)} to go",
          file=sys.stderr, flush=True)


def cmd_drop_bank(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        done = memory.drop_bank(args.name, confirm=args.confirm, dry_run=not args.yes, reason=args.reason,
                                purge=args.purge)
    return _forgotten(args, done, f"dropping bank {args.name}")


def _versions(args: argparse.Namespace, unit_id: int, versions: list[Any]) -> int:
    if not versions:
        raise RcllError("unit_id", f"no unit {unit_id} in bank {args.bank!r}",
                        "unit ids come from retain and recall (--json); a forgotten unit has no history",
                        code=Code.NOT_FOUND)
    lines = []
    for v in versions:
        lines.append(f"v{v.version}{' (current)' if v.current else ''}: {v.text}")
        if not v.current:
            lines.append(f"    replaced {v.replaced_at:%Y-%m-%d %H:%M} by {v.replaced_by or 'no author'}: {v.reason}")
    _out(args, "\n".join(lines), {"unit_id": unit_id, "versions": [v.as_dict() for v in versions]})
    return 0


def cmd_correct(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        _note_no_author(args, memory)
        versions = memory.correct(args.unit_id, args.text, reason=args.reason, bank=args.bank)
    return _versions(args, args.unit_id, versions)


def cmd_history(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        versions = memory.history(args.unit_id, bank=args.bank)
    return _versions(args, args.unit_id, versions)


def _policy_name(p: dict[str, Any]) -> str:
    where = ", ".join(f"{k} {p[k]}" for k in ("room", "hall", "layer") if p.get(k))
    return where or "every unit"


def cmd_retention(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        if args.action == "list":
            policies = memory.retention(bank=args.bank)
            lines = [f"{_policy_name(p)}: keep {duration_text(p['keep'])} ({p['units']} units, "
                     f"{p['expired']} expired)" for p in policies]
            _out(args, "\n".join(lines) or f"no retention policy in bank {args.bank}",
                 [{**p, "keep_seconds": p["keep"].total_seconds(), "keep": duration_text(p["keep"])} for p in policies])
            return 0
        scope = {"room": args.room, "hall": args.hall, "layer": args.layer}
        if args.action == "set":
            if args.keep is None:
                raise RcllError("keep", "is required", "e.g. --keep P90D (ISO 8601) or --keep 3600 (seconds)")
            keep = duration_arg(args.keep, "keep")
        else:
            keep = None
        changed = memory.set_retention(keep, bank=args.bank, **scope)
    where = _policy_name(scope)
    _out(args, (f"{where}: keep {duration_text(keep)}" if keep else f"{where}: policy removed")
         + f" (expiry changed for {changed} unit(s))",
         {"bank": args.bank, **scope, "keep": duration_text(keep) if keep else None,
          "keep_seconds": keep.total_seconds() if keep else None, "changed": changed})
    return 0


# -- export / import ------------------------------------------------------------------------------

def _bar(args: argparse.Namespace, total: int | None, unit: str) -> Any:
    return tqdm(total=total, unit=unit, disable=args.json or not sys.stderr.isatty(), file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    with _memory(args) as memory, _bar(args, None, "row") as bar:
        def progress(table: str, n: int) -> None:
            bar.set_description(table)
            bar.update(n)
        summary = memory.export(args.out, bank=args.bank, progress=progress)
    _out(args, f"exported bank {args.bank} to {args.out}: {summary.tables.get('memory_units', 0)} units, "
               f"{summary.tables.get('links', 0)} links, "
               f"{sum(summary.tables.values())} rows in {len(summary.tables)} tables; "
               f"PAM view {summary.memories} memories", summary.as_dict())
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.path)
    total = sum(int(t["rows"]) for t in manifest["tables"])
    with _memory(args) as memory, _bar(args, total, "row") as bar:
        def progress(table: str, n: int) -> None:
            bar.set_description(table)
            bar.update(n)
        res = memory.import_(args.path, on_conflict=args.on_conflict, progress=progress, restore=args.restore)
    _out(args, f"imported bank {res.bank} ({'new' if res.fresh else 'merged, ' + args.on_conflict}): "
               f"{sum(res.rows.values())} rows", res.as_dict())
    return 0


def cmd_validate_pam(args: argparse.Namespace) -> int:
    problems = validate_pam(args.path)
    _out(args, "\n".join(problems) or "PAM view valid", {"valid": not problems, "problems": problems})
    return 0 if not problems else 1


def cmd_consolidate(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        obs = memory.consolidate(bank=args.bank, time_window=timedelta(days=args.window_days),
                                 min_size=args.min_size, max_groups=args.max_groups)
    _out(args, f"{len(obs)} observation(s) written from {sum(len(o.sources) for o in obs)} unit(s)",
         [{"unit_id": o.unit_id, "sources": o.sources, "method": o.method} for o in obs])
    return 0


def cmd_upkeep(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        done = memory.upkeep()
    indexes = ("" if done.index_steps is None else
              f"; indexes: {len(done.index_steps)} step(s) of the plan run ({'; '.join(done.index_steps)})"
              if done.index_steps else "; the indexes already match")
    _out(args, f"statistics of {done.banks} bank(s) recounted, {done.room_deltas} room-count delta(s) folded "
         f"in {done.seconds * 1000:.0f} ms{indexes}", done.as_dict())
    return 0


def cmd_dense_indexes(args: argparse.Namespace) -> int:
    if args.min_units is None:
        args.min_units = args.settings.dense_index_min_units     # what the periodic jobs use
    with _memory(args) as memory:
        if args.apply:
            def progress(s: Any, seconds: float) -> None:
                if not args.json:
                    print(f"{s.step}. {s.why}: {seconds:.1f} s", flush=True)
            steps = memory.apply_dense_index_plan(min_units=args.min_units, max_share=args.max_share, m=args.m,
                                                  ef_construction=args.ef_construction,
                                                  maintenance_work_mem=args.maintenance_work_mem, progress=progress)
            _out(args, f"{len(steps)} statement(s) run" if steps else "the indexes already match",
                 [s.as_dict() for s in steps])
            return 0
        steps = memory.dense_index_plan(min_units=args.min_units, max_share=args.max_share, m=args.m,
                                        ef_construction=args.ef_construction)
        have = memory.dense_indexes()
        building = memory.dense_index_builds()
    lines = [f"{g.index_name}: " + (f"bank {g.bank} ({g.bank_id})" if g.kind == "bank" else
                                    "not rcll's (kept as it is)" if g.kind == "other" else
                                    "global" + (f", without banks {', '.join(map(str, g.excluded_banks or []))}"
                                                if g.excluded_banks else ""))
             + f", {g.bytes / 2**20:.0f} MiB, " + (" ".join(g.build_options) or "pgvector's default build")
             + ("" if g.valid else ", INVALID (an unfinished build)") for g in have]
    lines += [f"building now: {b.index_name or 'an index'} (pid {b.pid}), {b.phase}"
              + (f", {b.blocks_done:,} of {b.blocks_total:,} blocks read" if b.blocks_total else "")
              + (f", {b.tuples_done:,} tuples in" if b.tuples_done else "") for b in building]
    lines.append("")
    lines += ([f"{s.step}. {s.statement};  -- {s.why}" for s in steps]
              or ["nothing to do: every bank big enough has its own index, and only those"])
    if steps:
        lines.append("(rcll dense-indexes --apply runs these; in psql, \\gexec the statement column of rcll.dense_index_plan())")
    lines.append("the periodic jobs (rcll serve, rcll upkeep) apply the plan themselves"
                 if args.settings.auto_dense_indexes else f"the periodic jobs leave the indexes alone ({upkeep.INDEXES_ENV}=off)")
    _out(args, "\n".join(lines), {"dense_indexes": [g.as_dict() for g in have], "plan": [s.as_dict() for s in steps],
                                  "building": [b.as_dict() for b in building], "auto": args.settings.auto_dense_indexes})
    return 0


# -- mcp, serve -----------------------------------------------------------------------------------

def _listen_check(args: argparse.Namespace, command: str) -> None:
    """Before anything connects or binds: refuse anonymous beyond loopback (rcll.auth.check_listen);
    with the anonymous flag, say out loud what it means."""
    tokens = TokenMap.from_settings(args.settings)
    anonymous = allow_anonymous_network(args.allow_anonymous_network, args.settings)
    check_listen(args.host, tokens, allow_anonymous=anonymous)
    if not tokens.enabled and not is_loopback(args.host):
        print(f"rcll {command}: warning: anonymous on {args.host}: anyone who can reach port {args.port} "
              "reads, writes, exports and imports every bank", file=sys.stderr, flush=True)


def _terminate_unwinds() -> None:
    """SIGTERM ends a server as Ctrl-C does, through its finally blocks (the model service's socket
    directory, the pool), not at once: uvicorn raises the signal again after its own shutdown, and
    the default action would end the process before them."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _server_tokenizers(args: argparse.Namespace) -> Settings:
    """Servers run many request threads: tokenise lists in one call each (rcll.models._encode_all),
    sequentially - no rayon threads beside the model slots (rcll.settings.tokenize_in_one_call)."""
    settings = tokenize_in_one_call(args.settings)
    args.settings = settings
    return settings


def cmd_mcp(args: argparse.Namespace) -> int:
    _terminate_unwinds()
    settings = _server_tokenizers(args)
    if args.transport == "http":
        _listen_check(args, "mcp")   # before the database or the port
    from rcll import mcp_server  # deferred: the MCP SDK takes seconds to import, every other verb skips it

    if args.read_only and args.write_tools:
        raise RcllError("write_tools", "read-only mode serves only read tools", "drop --write-tools or --read-only",
                        code=Code.NOT_PERMITTED)
    if args.read_only:
        # a read-only server holds no key and calls no model
        settings = settings.replace(llm_provider="none", anthropic_api_key=None)
    with Memory(settings=settings, read_only=args.read_only) as memory:
        mcp_server.run(memory, transport=args.transport, host=args.host, port=args.port,
                       agent=args.agent or settings.agent, default_bank=args.bank or settings.bank)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    _terminate_unwinds()
    settings = _server_tokenizers(args)
    _listen_check(args, "serve")   # before the database, the models or the port
    every = settings.upkeep_seconds
    from rcll import http  # deferred: FastAPI loads only for the server

    # The server's database: a throwaway local Citus cluster's coordinator, or Memory's default (None).
    with _local_citus(args) if args.citus_workers else nullcontext(None) as dsn:
        _serve(args, settings, every, dsn, http)
    return 0


@contextmanager
def _local_citus(args: argparse.Namespace) -> Iterator[str]:
    """`rcll serve --citus-workers N`: a throwaway Citus cluster on loopback (rcll.citus_cluster),
    the coordinator's URL while the server runs; stopped and removed when it stops."""
    from rcll import citus_cluster

    if args.dsn or args.settings.dsn:
        raise RcllError("citus_workers", "--citus-workers starts a cluster of its own: it takes no --dsn or RCLL_DSN",
                        "drop one of them (on your own Citus cluster: rcll serve --dsn <the coordinator>)")
    if args.citus_workers < 1:
        raise RcllError("citus_workers", f"a Citus cluster needs at least one worker, not {args.citus_workers}",
                        "pass --citus-workers 2 (0 or none: one node, the embedded database)")
    first, last = args.citus_port, args.citus_port + args.citus_workers
    print(f"starting a throwaway Citus cluster: a coordinator on 127.0.0.1:{first} and {args.citus_workers} "
          f"worker(s) on :{first + 1}-{last} (removed, with its data, when the server stops)", file=sys.stderr,
          flush=True)
    try:
        with citus_cluster.throwaway(args.citus_workers, first, args.settings) as citus:
            print(f"  Citus cluster up; psql: {citus.url()}", file=sys.stderr, flush=True)
            yield citus.url()
    except cluster.ClusterError as e:
        raise RcllError("citus_workers", f"the local Citus cluster cannot run: {e}",
                        f"build Citus into the embedded PostgreSQL (`make citus`), free ports {first}-{last} "
                        "(--citus-port moves them), or run without --citus-workers",
                        code=Code.UNAVAILABLE) from e
    finally:
        print("Citus cluster stopped and removed", file=sys.stderr, flush=True)


def _serve(args: argparse.Namespace, settings: Settings, every: float, dsn: str | None, http: Any) -> None:
    with Memory(dsn, settings=settings, install=True, recall_from_standby=args.recall_from_standby,
                citus=True if dsn else None) as memory, bounded_model_work(settings):
        print(memory.installed, file=sys.stderr)
        # Load the models before listening, so the first request does not pay for it.
        models.get_embedder(settings).embed(["warm up"])
        models.get_reranker(settings).score("warm up", ["warm up"])
        # The model service beside HTTP, on the same models and work queue: psql's rcll.recall
        # reaches it through dblink (rcll.model_service), so SQL recall is complete.
        service, note = _model_service(args, memory.dsn)
        try:         # from here on: a SIGTERM while it prints closes the service too
            base = f"http://{args.host}:{args.port}"
            print(f"RCLL listening on {base}  (database: {redacted(memory.dsn)})")
            print(f"  model service for SQL: {service.address.host}:{service.address.port} - {note}")
            print(f"  console: {base}/")
            print("  periodic jobs (BM25 statistics, room counts"
                  + (", big banks' own HNSW indexes" if settings.auto_dense_indexes else "") + "): "
                  + (f"every {every:g} s" if every > 0 else "off (run `rcll upkeep` from cron)")
                  + f" ({upkeep.ENV}, {upkeep.INDEXES_ENV})")
            print(f"  try: curl -s {base}/retain -H 'content-type: application/json' "
                  f"-d '{{\"bank\": \"{DEFAULT_BANK}\", \"content\": \"We deploy with Argo CD since March.\"}}'")
            print(f"       curl -s {base}/recall -H 'content-type: application/json' "
                  f"-d '{{\"bank\": \"{DEFAULT_BANK}\", \"query\": \"how do we deploy?\"}}'", flush=True)
            http.serve(memory, host=args.host, port=args.port, upkeep_seconds=every)
        finally:
            service.close()


def _model_service(args: argparse.Namespace, dsn: str) -> tuple[model_service.ModelService, str]:
    return model_service.serve_beside(
        dsn, socket_dir=Path(args.models_socket_dir) if args.models_socket_dir else None, port=args.models_port,
        tcp_port=args.models_tcp_port, registering=not args.no_register, settings=args.settings)


def cmd_models(args: argparse.Namespace) -> int:
    """The model service alone, for a database with no RCLL server beside it."""
    _terminate_unwinds()
    settings = _server_tokenizers(args)
    dsn = resolve_dsn(settings.dsn, settings)
    models.get_embedder(settings).embed(["warm up"])
    models.get_reranker(settings).score("warm up", ["warm up"])
    with bounded_model_work(settings):
        service, note = _model_service(args, dsn)
        try:
            print(f"RCLL model service on {service.address.host}:{service.address.port} "
                  f"(socket {model_service.socket_path(Path(service.address.host), service.address.port)})"
                  if service.socket_dir is not None else
                  f"RCLL model service on {service.address.host}:{service.address.port}")
            print(f"  {note}", flush=True)
            threading.Event().wait()
        finally:
            service.close()
    return 0


def _model_service_options(s: argparse.ArgumentParser, settings: Settings) -> None:
    s.add_argument("--models-socket-dir", default=None,
                   help="the model service's socket directory (mode 0700, owned by the database server's OS user; "
                        f"default: ${model_service.SOCKET_DIR_ENV}, else one in the temporary directory)")
    s.add_argument("--models-port", type=int, default=settings.models_port,
                   help="the model service's port: its socket is <dir>/.s.PGSQL.<port> (default 8767)")
    s.add_argument("--models-tcp-port", type=int, default=None,
                   help="also listen on 127.0.0.1 at this port (password required, as on the socket)")
    s.add_argument("--no-register", action="store_true",
                   help="do not run rcll.use_model_service in the database (a DBA does it; password from "
                        f"${model_service.PASSWORD_ENV})")


def build_parser(settings: Settings = DEFAULTS) -> argparse.ArgumentParser:
    """The verbs and their flags; a flag's default comes from `settings` where one is a setting."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=None,
                        help="PostgreSQL connection string (default: $RCLL_DSN, else the embedded database)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    p = argparse.ArgumentParser(prog="rcll", description="RCLL: PostgreSQL-native memory for agent fleets.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", parents=[common], help="run the HTTP server (installs the schema, starts the embedded database if needed)")
    s.add_argument("--host", default=settings.host)
    s.add_argument("--port", type=int, default=settings.port)
    s.add_argument("--recall-from-standby", action="store_true", default=settings.recall_from_standby,
                   help="recall may read a hot standby of a multi-host --dsn (target_session_attrs=prefer-standby): "
                        "it may miss writes of the last moment ($RCLL_RECALL_FROM_STANDBY=1)")
    s.add_argument("--allow-anonymous-network", action="store_true",
                   help="listen beyond loopback without tokens: anyone who can reach the port reads, writes, "
                        "exports and imports every bank (default: refused; $RCLL_ALLOW_ANONYMOUS_NETWORK=1)")
    s.add_argument("--citus-workers", type=int, default=0, metavar="N",
                   help="start a throwaway Citus cluster on loopback (a coordinator and N workers of the embedded "
                        "PostgreSQL, Citus built in by `make citus`) and serve from its coordinator; it is stopped "
                        "and removed, data included, when the server stops (`make run WORKERS=N`)")
    s.add_argument("--citus-port", type=int, default=CITUS_PORT, metavar="PORT",
                   help=f"with --citus-workers: the coordinator's port, the workers' the next ones (default {CITUS_PORT})")
    _model_service_options(s, settings)
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("models", parents=[common],
                       help="run the model service alone: SQL's rcll.recall reaches the embedder and the cross-encoder "
                            "through dblink (registers it in the database)")
    _model_service_options(s, settings)
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("db", parents=[common], help="the embedded PostgreSQL cluster")
    s.add_argument("action", choices=["start", "stop", "status", "url"])
    s.set_defaults(func=cmd_db)

    s = sub.add_parser("install", parents=[common], help="install or upgrade the rcll schema in a database")
    s.add_argument("--extension", action="store_true", help="use CREATE EXTENSION rcll (after `make install`)")
    s.add_argument("--citus", action="store_true", default=None,
                   help="distribute the tables by bank on this Citus coordinator (done without asking when "
                        "the database is a coordinator with workers)")
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
    s.add_argument("--expires-at", metavar="TIME", help="ISO 8601: recall stops returning it then, and it is forgotten")
    s.add_argument("--ttl", metavar="SPAN", help="time to live instead: an ISO 8601 duration (P30D, PT12H) or seconds")
    s.add_argument("text", nargs="?")
    s.set_defaults(func=cmd_retain)

    s = sub.add_parser("forget", parents=[common],
                       help="forget memories by selector and everything derived (a dry run that prints the counts "
                            "per kind unless --yes)")
    _forget_flags(s)
    s.set_defaults(func=cmd_forget)

    s = sub.add_parser("drop-bank", parents=[common],
                       help="drop a whole bank and every row of it (a dry run unless --yes; --confirm repeats the name)")
    s.add_argument("name")
    s.add_argument("--confirm", required=True, metavar="NAME", help="the bank's name again")
    s.add_argument("--reason")
    s.add_argument("--yes", action="store_true", help="drop it (without it: a dry run, nothing changes)")
    s.add_argument("--purge", action="store_true", help="then VACUUM the tables touched (needs their owner)")
    s.set_defaults(func=cmd_drop_bank)

    s = sub.add_parser("correct", parents=[common],
                       help="replace a unit's text with a reason (the old text stays in its history)")
    s.add_argument("unit_id", type=int)
    s.add_argument("--bank", required=True)
    s.add_argument("--text", required=True, help="the new text")
    s.add_argument("--reason", required=True, help="why it is corrected")
    s.set_defaults(func=cmd_correct)

    s = sub.add_parser("history", parents=[common], help="every version of a unit's text, the current one first")
    s.add_argument("unit_id", type=int)
    s.add_argument("--bank", required=True)
    s.set_defaults(func=cmd_history)

    s = sub.add_parser("retention", parents=[common],
                       help="a bank's retention policies: list; set --keep SPAN; remove (per room, hall and/or layer)")
    s.add_argument("action", choices=["list", "set", "remove"], nargs="?", default="list")
    s.add_argument("--bank", required=True)
    s.add_argument("--keep", metavar="SPAN", help="set: an ISO 8601 duration (P90D) or seconds")
    s.add_argument("--room")
    s.add_argument("--hall")
    s.add_argument("--layer", choices=["L0", "L1", "L2"])
    s.set_defaults(func=cmd_retention)

    s = sub.add_parser("recall", parents=[common], help="recall facts for a query")
    _recall_flags(s)
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

    s = sub.add_parser("state", parents=[common],
                       help="a room's keyed state: get ROOM KEY, put ROOM KEY JSON, history ROOM KEY, "
                            "forget ROOM KEY|--all-keys (a dry run unless --yes)")
    s.add_argument("action", choices=["get", "put", "history", "forget"])
    s.add_argument("room")
    s.add_argument("key", nargs="?")
    s.add_argument("value", nargs="?", help="put: the JSON value")
    s.add_argument("--bank", required=True)
    s.add_argument("--version", type=int, help="get: this version instead of the latest")
    s.add_argument("--expected-version", type=int, default=0, help="put: the version you read (0: none yet)")
    s.add_argument("--all-keys", action="store_true", help="forget: every key of the room")
    s.add_argument("--reason", help="forget: kept in the forget log")
    s.add_argument("--yes", action="store_true", help="forget: do it (without it: a dry run)")
    s.set_defaults(func=cmd_state)

    s = sub.add_parser("export", parents=[common], help="write a whole bank (PAM view + lossless sidecar) to a directory")
    s.add_argument("--bank", required=True)
    s.add_argument("--out", required=True, help="directory to create")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("import", parents=[common], help="load an export directory (one transaction)")
    s.add_argument("path")
    s.add_argument("--on-conflict", choices=["error", "skip", "replace"], default="error",
                   help="rows that already exist: error (default), skip, replace")
    s.add_argument("--restore", action="store_true",
                   help="the exact restore (ids, authors, grants as exported; write triggers off, every bank's "
                        "writes wait): the tables' owner only. Without it an export from elsewhere is untrusted: "
                        "one bank, new ids, authors as provenance")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("validate-pam", parents=[common], help="check an export's PAM view against the PAM SDK")
    s.add_argument("path")
    s.set_defaults(func=cmd_validate_pam)

    s = sub.add_parser("consolidate", parents=[common],
                       help="background job: compact related L2 observations into roomed observations")
    s.add_argument("--bank", required=True)
    s.add_argument("--window-days", type=float, default=7.0)
    s.add_argument("--min-size", type=int, default=2)
    s.add_argument("--max-groups", type=int, default=100)
    s.set_defaults(func=cmd_consolidate)

    s = sub.add_parser("upkeep", parents=[common],
                       help="run the store's periodic jobs once: recount every bank's BM25 statistics "
                            "(rcll.refresh_bank_stats), fold the room counts, and give banks that crossed "
                            "RCLL_DENSE_INDEX_MIN_UNITS (default 20000) their own HNSW index unless RCLL_AUTO_DENSE_INDEXES=off; "
                            "`rcll serve` runs them every RCLL_UPKEEP_SECONDS (default 300) - this is for cron when it does not")
    s.set_defaults(func=cmd_upkeep)
    s = sub.add_parser("dense-indexes", aliases=["graphs"], parents=[common],
                       help="DBA: list the dense channel's HNSW indexes; give big banks their own (prints the plan, --apply runs it; `rcll graphs`, its former name, still works)")
    s.add_argument("--min-units", type=int, default=None,
                   help="a bank of at least this many units gets its own index (default: rcll.dense_index_plan's)")
    s.add_argument("--max-share", type=float, default=None,
                   help="...and at most this fraction of the store's units (default: rcll.dense_index_plan's)")
    s.add_argument("--m", type=int, default=None,
                   help="neighbours per unit in an own index (default: rcll.dense_index_plan's, 32)")
    s.add_argument("--ef-construction", type=int, default=None,
                   help="an own index's build candidate list (default: rcll.dense_index_plan's, 128)")
    s.add_argument("--apply", action="store_true", help="run the plan (index builds CONCURRENTLY: minutes on a big store)")
    s.add_argument("--maintenance-work-mem", default=None,
                   help="--apply: for the builds, e.g. 3GB (an HNSW index takes ~2 kB a unit; default: the server's)")
    s.set_defaults(func=cmd_dense_indexes)
    s = sub.add_parser("mcp", parents=[common], help="run the MCP server (stdio or streamable HTTP)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    s.add_argument("--host", default=settings.host)
    s.add_argument("--port", type=int, default=settings.mcp_port)
    s.add_argument("--allow-anonymous-network", action="store_true",
                   help="http: listen beyond loopback without tokens (default: refused; "
                        "$RCLL_ALLOW_ANONYMOUS_NETWORK=1)")
    s.add_argument("--bank", default=None, help="default bank for tools called without one (default: $RCLL_BANK or default)")
    s.add_argument("--agent", default=None, help="stdio: the agent this process writes as (default: $RCLL_AGENT)")
    s.add_argument("--read-only", action="store_true", help="read tools only, over a SELECT-only role, no LLM key")
    s.add_argument("--write-tools", action="store_true", help="(refused with --read-only)")
    s.set_defaults(func=cmd_mcp)
    return p


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run one verb; a user error is one line on stderr (JSON with --json) and exit status 2. The
    settings are read here, once, from `env` (default: this process's environment), and the
    flags overlay them (--dsn); every verb takes them from args.settings."""
    words = sys.argv[1:] if argv is None else argv
    try:
        settings = Settings.from_env(os.environ if env is None else env)
    except RcllError as e:
        print(json.dumps(e.as_dict()) if "--json" in words else f"rcll: {e}", file=sys.stderr)
        return 2
    args = build_parser(settings).parse_args(words)
    args.settings = settings.replace(dsn=args.dsn or settings.dsn)
    if args.command == "bank" and args.action == "create" and not args.name:
        print("rcll: bank create needs a NAME", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except (RcllError, psycopg.Error, cluster.ClusterError, InstallError) as e:
        error = e if isinstance(e, RcllError) else from_database(e)
        if error is None and not isinstance(e, psycopg.Error):     # the embedded cluster failed
            error = RcllError("dsn", str(e), code=Code.UNAVAILABLE)
        if error is None:                        # not the user's to fix: still one line, with its SQLSTATE
            error = RcllError("database", f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                              "this is a bug or an outage; the server log has the details", code=Code.UNAVAILABLE)
        if args.json:
            print(json.dumps(error.as_dict()), file=sys.stderr)
        else:
            print(f"rcll: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
