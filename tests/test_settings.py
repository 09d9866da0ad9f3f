"""Settings (rcll.settings): one frozen value read from the environment at the edges and passed in.
Its table is docs/settings.md; every knob the package names is in it; below the edges nothing reads
the environment; and two Memory objects with different settings work side by side."""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, fields
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rcll.auth import TokenMap
from rcll.errors import RcllError
from rcll.http import create_app
from rcll.memory import Memory
from rcll.settings import DEFAULTS, KNOBS, Settings, markdown

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "rcll"
NAME = re.compile(r"\b(?:RCLL_[A-Z][A-Z_]*[A-Z]|LLM_PROVIDER|ANTHROPIC_[A-Z_]*[A-Z]|TOKENIZERS_PARALLELISM)\b")
# Named in README.md but read by other programs: the TypeScript client's example and the benchmarks.
NOT_SETTINGS = {"RCLL_TOKEN", "RCLL_LOCOMO", "RCLL_LONGMEMEVAL"}
# The only modules that may touch os.environ: the settings themselves and the CLI, which reads them.
EDGES = {"settings.py", "cli.py"}


def test_the_table_of_settings_is_current() -> None:
    assert (ROOT / "docs" / "settings.md").read_text() == markdown(), "run: python -m rcll.settings > docs/settings.md"


def test_every_variable_the_package_or_readme_names_is_a_setting() -> None:
    known = {k.env for k in KNOBS.values()} | {k.former for k in KNOBS.values() if k.former}
    for path in [*PACKAGE.rglob("*.py"), ROOT / "README.md"]:
        unknown = set(NAME.findall(path.read_text())) - known - NOT_SETTINGS
        assert not unknown, (path, sorted(unknown))
    assert len({k.env for k in KNOBS.values()}) == len(KNOBS), "two fields read one variable"


def test_a_renamed_variable_is_still_read_under_its_former_name() -> None:
    assert Settings.from_env({"RCLL_AUTO_GRAPHS": "off"}).auto_dense_indexes is False
    assert Settings.from_env({"RCLL_GRAPH_MIN_UNITS": "5000"}).dense_index_min_units == 5000
    assert Settings.from_env({"RCLL_GRAPH_MIN_UNITS": "5000", "RCLL_DENSE_INDEX_MIN_UNITS": "7000"}).dense_index_min_units == 7000


def test_nothing_below_the_edges_reads_or_writes_the_environment() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if path.name not in EDGES:
            assert "os.environ" not in text and "getenv" not in text, path


def test_unset_or_blank_is_the_default_and_each_value_is_read_into_its_type() -> None:
    assert Settings.from_env({}) == DEFAULTS == Settings()
    assert Settings.from_env({k.env: "  " for k in KNOBS.values()}) == DEFAULTS
    read = Settings.from_env({"LLM_PROVIDER": " Offline ", "RCLL_MAX_DOCUMENT_BYTES": "100", "RCLL_AUTO_DENSE_INDEXES": "off",
                              "RCLL_UPKEEP_SECONDS": "0", "RCLL_MODEL_DIR": "/models", "RCLL_WRITE_SHARE": "0.5",
                              "RCLL_CORS_ORIGINS": "https://a.example, https://b.example/"})
    assert (read.llm_provider, read.max_document_bytes, read.auto_dense_indexes, read.upkeep_seconds) == ("offline", 100, False, 0)
    assert read.model_dir == Path("/models") and read.write_share == 0.5
    assert read.cors_origins == ("https://a.example", "https://b.example")
    with pytest.raises(FrozenInstanceError):
        read.llm_provider = "none"  # type: ignore[misc]
    assert read.replace(llm_provider="none").llm_provider == "none" and read.llm_provider == "offline"


@pytest.mark.parametrize(("name", "bad"), [
    ("LLM_PROVIDER", "openai"), ("RCLL_EXTRACTION_FAILURE", "ignore"), ("RCLL_MAX_DOCUMENT_BYTES", "1MB"),
    ("RCLL_MAX_METADATA_BYTES", "0"), ("RCLL_DEADLINE_MS", "-1"), ("RCLL_UPKEEP_SECONDS", "1e9"),
    ("RCLL_AUTO_DENSE_INDEXES", "sometimes"), ("RCLL_DENSE_INDEX_MIN_UNITS", "lots"), ("RCLL_PORT", "http"),
    ("RCLL_WRITE_SHARE", "half"), ("RCLL_EXTRACTION_BACKOFF", "nan"), ("RCLL_CORS_ORIGINS", "app.example.com"),
    ("RCLL_MAX_EXPORTS", "two")])
def test_a_value_that_cannot_be_read_names_its_variable(name: str, bad: str) -> None:
    with pytest.raises(RcllError) as e:
        Settings.from_env({name: bad})
    assert e.value.field == name and e.value.hint


def test_secrets_stay_out_of_the_settings_repr() -> None:
    shown = repr(Settings(anthropic_api_key="sk-secret", tokens="tok-secret-secret-x alice", models_password="pw-secret"))
    assert "secret" not in shown
    assert {f.name for f in fields(Settings) if not f.repr} == {"anthropic_api_key", "tokens", "models_password"}


def test_two_memories_with_different_settings_work_side_by_side(dsn: str) -> None:
    offline = Settings(llm_provider="offline", max_document_bytes=200, deadline_ms=1234)
    chunks = Settings(max_document_bytes=10_000)
    long = "We deploy every service with Argo CD since March. " * 6      # ~300 bytes
    with Memory(dsn, settings=offline) as a, Memory(dsn, settings=chunks) as b:
        assert a.retain("We deploy every service with Helm charts since March.").mode == "offline"
        assert b.retain("We keep the staging cluster in Frankfurt for every release.").mode == "chunks"
        with pytest.raises(RcllError) as e:
            a.retain(long)
        assert e.value.field == "content" and "200" in e.value.message
        assert b.retain(long).created
        # A view shares its Memory's settings.
        assert a.as_agent("someone").settings is offline
        # The servers' default deadline is each one's own.
        answers: list[Any] = []
        for memory in (a, b):
            with TestClient(create_app(service=memory, tokens=TokenMap()), base_url="http://127.0.0.1") as client:
                answers.append(client.post("/recall", json={"bank": "default", "query": "how do we deploy?"}).json())
        assert [r.get("deadline_ms") for r in answers] == [1234, 1000], answers


def test_memory_without_settings_reads_the_environment_once_when_made(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCLL_DSN", dsn)
    monkeypatch.setenv("LLM_PROVIDER", "offline")
    with Memory() as m:
        assert m.dsn == dsn and m.settings.llm_provider == "offline"
        monkeypatch.setenv("LLM_PROVIDER", "anthropic")          # too late: read once, at construction
        assert m.retain("We deploy every service with Argo CD since March.").mode == "offline"
    monkeypatch.setenv("LLM_PROVIDER", "bogus")
    with pytest.raises(RcllError) as e:
        Memory(dsn)
    assert e.value.field == "LLM_PROVIDER"
