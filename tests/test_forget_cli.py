"""`rcll forget`, `drop-bank`, `state forget`, `correct`, `history`, `retention` and `retain --ttl`: a dry run
that prints the counts per kind unless --yes, an unscoped forget refused, errors on one line."""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest

import clicall
from conftest import LEGS

# The CLI is the same on every leg: one leg is enough.
pytestmark = pytest.mark.parametrize("leg", LEGS[:1], indirect=True)

SECRET = "The vault password is qxsecretq-4711."


def rcll(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RCLL_DSN", "RCLL_AGENT")} | {"LLM_PROVIDER": "none"}
    return clicall.rcll(*args, "--dsn", dsn, env=env)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout


def refused(p: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    return dict(json.loads(p.stderr.strip().splitlines()[-1]))


def counted(out: str) -> dict[str, int]:
    """The counts per kind a forget printed, one "  kind  n" line each."""
    return {" ".join(line.split()[:-1]): int(line.split()[-1]) for line in out.splitlines() if line.startswith("  ")}


def units(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM rcll.memory_units").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def bank(dsn: str) -> str:
    ok(rcll(dsn, "bank", "create", "b"))
    return dsn


def retained(dsn: str, text: str, *flags: str) -> dict[str, int]:
    return dict(json.loads(ok(rcll(dsn, "retain", "--bank", "b", "--json", *flags, text))))


def test_forget_is_a_dry_run_printing_counts_per_kind_until_yes(bank: str) -> None:
    secret = retained(bank, SECRET, "--thread", "oops")
    retained(bank, "Alice keeps the kitchen tidy.", "--thread", "fine")
    before = units(bank)
    out = ok(rcll(bank, "forget", "--bank", "b", "--thread", "oops"))
    assert out.startswith("dry run: this forget would remove\n") and "add --yes" in out, out
    assert counted(out)["units"] == 1 and counted(out)["documents"] == 1 and units(bank) == before
    dry = json.loads(ok(rcll(bank, "forget", "--bank", "b", "--document", str(secret["document_id"]), "--json")))
    assert dry["dry_run"] is True and dry["counts"]["units"] == 1
    out = ok(rcll(bank, "forget", "--bank", "b", "--thread", "oops", "--yes", "--reason", "stored by mistake"))
    assert out.startswith("forgotten:\n") and counted(out)["units"] == 1, out
    assert units(bank) == before - 1
    recalled = ok(rcll(bank, "recall", "--bank", "b", "vault password"))
    assert "qxsecretq" not in recalled and "kitchen" in recalled


def test_an_unscoped_or_empty_forget_is_refused_on_one_line(bank: str) -> None:
    retained(bank, "Alice keeps the kitchen tidy.", "--thread", "t")
    retained(bank, "Bob waters the plants.", "--thread", "t")
    before = units(bank)
    for args, code, field in ((("--yes",), "RC007", None),
                              (("--thread", "t", "--yes"), "RC007", "thread"),
                              (("--thread", "nope", "--yes"), "RC007", "thread"),
                              (("--everything", "other", "--yes"), "RC001", "everything"),
                              (("--unit", "999999", "--yes"), "RC003", "unit_ids")):
        error = refused(rcll(bank, "forget", "--bank", "b", "--json", *args))
        assert error["code"] == code and (field is None or error["field"] == field) and error["hint"], (args, error)
    assert units(bank) == before
    p = rcll(bank, "forget", "--bank", "b", "--unit", "twelve")
    assert p.returncode == 2 and "invalid int value" in p.stderr
    everything = ok(rcll(bank, "forget", "--bank", "b", "--everything", "b"))
    assert counted(everything)["units"] == 2 and units(bank) == before


def test_drop_bank_needs_its_name_twice_and_yes(bank: str) -> None:
    retained(bank, "Alice keeps the kitchen tidy.")
    assert refused(rcll(bank, "drop-bank", "b", "--confirm", "c", "--yes", "--json"))["field"] == "confirm"
    p = rcll(bank, "drop-bank", "b")
    assert p.returncode == 2 and "--confirm" in p.stderr
    out = ok(rcll(bank, "drop-bank", "b", "--confirm", "b"))
    assert out.startswith("dry run: dropping bank b would remove\n") and counted(out)["banks"] == 1, out
    assert "b\t1 units" in ok(rcll(bank, "bank", "list"))
    out = ok(rcll(bank, "drop-bank", "b", "--confirm", "b", "--yes", "--reason", "project over"))
    assert out.startswith("forgotten:\n") and counted(out)["units"] == 1
    assert "b\t" not in ok(rcll(bank, "bank", "list"))


def test_state_forget_counts_the_versions_and_needs_a_key_or_all_keys(bank: str) -> None:
    ok(rcll(bank, "state", "put", "r", "k", "1", "--bank", "b"))
    ok(rcll(bank, "state", "put", "r", "k", "2", "--bank", "b", "--expected-version", "1"))
    assert counted(ok(rcll(bank, "state", "forget", "r", "k", "--bank", "b"))) == {"state versions": 2}
    assert refused(rcll(bank, "state", "forget", "r", "--bank", "b", "--json"))["field"] == "key"
    assert "v2" in ok(rcll(bank, "state", "get", "r", "k", "--bank", "b"))
    out = ok(rcll(bank, "state", "forget", "r", "--all-keys", "--yes", "--bank", "b"))
    assert out.startswith("forgotten:") and counted(out) == {"state versions": 2}, out
    assert rcll(bank, "state", "get", "r", "k", "--bank", "b").returncode == 3


def test_correct_then_history_lists_both_versions_with_the_reason(bank: str) -> None:
    unit = retained(bank, "Alice lives in Porto.")["unit_ids"][0]
    retained(bank, "Bob lives in Oslo.")
    out = ok(rcll(bank, "correct", str(unit), "--bank", "b", "--text", "Alice lives in Lisbon.", "--reason", "she moved"))
    lines = out.splitlines()
    assert lines[0] == "v2 (current): Alice lives in Lisbon." and lines[1] == "v1: Alice lives in Porto.", out
    assert lines[2].strip().endswith("by postgres: she moved"), out
    assert ok(rcll(bank, "history", str(unit), "--bank", "b")) == out
    assert "Alice lives in Lisbon." in ok(rcll(bank, "recall", "--bank", "b", "where does Alice live"))
    assert refused(rcll(bank, "history", "999999", "--bank", "b", "--json"))["code"] == "RC003"
    assert refused(rcll(bank, "correct", str(unit), "--bank", "b", "--text", "x", "--reason", " ",
                        "--json"))["field"] == "reason"


def test_retention_is_set_listed_and_removed_and_a_retain_takes_a_ttl(bank: str) -> None:
    retained(bank, "Raw note from the standup.", "--room", "standup")
    assert "no retention policy" in ok(rcll(bank, "retention", "--bank", "b"))
    out = ok(rcll(bank, "retention", "set", "--bank", "b", "--keep", "P90D", "--room", "standup"))
    assert out == "room standup: keep P90D (expiry changed for 1 unit(s))\n", out
    ok(rcll(bank, "retention", "set", "--bank", "b", "--keep", "3600", "--layer", "L0"))
    listed = ok(rcll(bank, "retention", "list", "--bank", "b")).splitlines()
    assert sorted(listed) == ["layer L0: keep PT1H (0 units, 0 expired)",
                              "room standup: keep P90D (1 units, 0 expired)"], listed
    for keep in ("P0D", "soon", "-5"):
        assert refused(rcll(bank, "retention", "set", "--bank", "b", "--keep", keep, "--json"))["field"] == "keep"
    assert refused(rcll(bank, "retention", "set", "--bank", "b", "--json"))["field"] == "keep"
    assert "policy removed" in ok(rcll(bank, "retention", "remove", "--bank", "b", "--layer", "L0"))
    assert len(ok(rcll(bank, "retention", "--bank", "b")).splitlines()) == 1
    gone = retained(bank, "The lab door code is 4711.", "--expires-at", "2020-01-01T00:00:00+00:00")
    kept = retained(bank, "The lab door opens with a badge.", "--ttl", "P30D")
    assert gone["unit_ids"] and kept["unit_ids"]
    assert "4711" not in ok(rcll(bank, "recall", "--bank", "b", "lab door code"))
    assert refused(rcll(bank, "retain", "--bank", "b", "--ttl", "soon", "--json", "x"))["field"] == "ttl"


def test_a_forget_in_batches_prints_a_progress_line_per_batch_and_ends_where_one_forget_would(bank: str) -> None:
    for i in range(3):
        retained(bank, f"Note {i}: the deploy window moved to Thursday.", "--thread", "old")
    retained(bank, "Alice keeps the kitchen tidy.", "--thread", "fine")
    p = rcll(bank, "forget", "--bank", "b", "--thread", "old", "--yes", "--batch", "1")
    out = ok(p)
    lines = [line for line in p.stderr.splitlines() if line.startswith("forgotten so far:")]
    assert lines == ["forgotten so far: 1 units, 2 to go", "forgotten so far: 2 units, 1 to go",
                     "forgotten so far: 3 units, 0 to go"], p.stderr
    assert counted(out)["units"] == 3 and units(bank) == 1
    assert refused(rcll(bank, "forget", "--bank", "b", "--unit", "1", "--yes", "--batch", "1", "--json"))["field"] == "batch"
