"""The console: the SQL it browses with, and the page itself driven in headless Chromium.

The browser tests run on one leg (the page has no leg-specific behaviour; the SQL tests above them
run on both). Chromium and chromedriver are Debian's (scripts/install-browser.sh); nothing is
downloaded at run time. Screenshots of the main views are written to a temporary directory, or to
the one RCLL_CONSOLE_SHOTS names (`RCLL_CONSOLE_SHOTS=docs` refreshes docs/console-*.png): a test
run changes no committed file.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from conftest import Leg, _leg, chromium, require_browser
from rcll.auth import Caller, TokenMap
from rcll.defaults import CHANNELS
from rcll.request import FORGET_PARAMETERS, PARAMETERS
from sqlcall import call, call_one, refused

Db = psycopg.Connection[Any]


def retain(db: Db, text: str, bank: str = "b", **kw: Any) -> int:
    """One document of one chunk (no embedding), self-declared author when given; its unit id."""
    row = call_one(db, "rcll.retain_chunks", bank=bank, content=text, chunks=[text], embeddings=None, **kw)
    return int(row["unit_ids"][0])


@pytest.fixture
def bank(db: Db) -> str:
    db.execute("SELECT rcll.create_bank('b')")
    return "b"


# -- the SQL the console reads ---------------------------------------------------------------------

def test_floor_plan_counts_each_room_by_hall_layer_and_author(db: Db, bank: str) -> None:
    retain(db, "we ship on fridays", room="deployment", hall="decision", layer="L1", author="ada")
    retain(db, "canary first, then all", room="deployment", hall="rule", layer="L0", author="bob")
    retain(db, "rollback took four minutes", room="Deployments", author="ada")
    retain(db, "a note filed nowhere")
    plan = {r["name"]: r for r in call(db, "rcll.floor_plan", bank=bank)}
    dep = plan["deployment"]
    assert dep["fact_count"] == 3 and "Deployments" in dep["aliases"]
    assert dep["authors"] == {"ada": 2, "bob": 1}
    assert dep["halls"] == {"decision": 1, "rule": 1, "(untyped)": 1}
    assert sum(dep["layers"].values()) == 3 and dep["layers"]["L0"] == 1
    assert plan[None]["status"] == "none" and plan[None]["fact_count"] == 1
    assert plan["security"]["fact_count"] == 0          # the classifier's vocabulary, empty on day one
    rooms = {r["name"]: r["fact_count"] for r in call(db, "rcll.rooms", bank=bank)}
    assert all(plan[n]["fact_count"] == c for n, c in rooms.items())


def test_units_filter_by_every_axis_and_page_newest_first(db: Db, bank: str) -> None:
    a = retain(db, "first", room="deployment", hall="decision", author="ada", thread="t1", tags=["x"],
               occurred_at="2024-01-01T00:00:00Z")
    b = retain(db, "second", room="deploys", hall="rule", layer="L2", author="bob", thread="t2", tags=["x", "y"],
               occurred_at="2024-02-01T00:00:00Z")
    c = retain(db, "third", room="testing", layer="L0", author="ada", occurred_at="2024-03-01T00:00:00Z")

    def ids(**f: Any) -> list[int]:
        return [r["unit_id"] for r in call(db, "rcll.units", bank=bank, **f)]

    assert ids() == [c, b, a]
    assert ids(rooms=["deployment"]) == [b, a]           # an alias reads its room
    assert ids(halls=["rule"]) == [b] and ids(layers=["L0"]) == [c]
    assert ids(authors=["ada"]) == [c, a] and ids(threads=["t1"]) == [a]
    assert ids(tags_any=["y"]) == [b] and ids(tags_all=["x", "y"]) == [b]
    assert ids(time_from="2024-01-15T00:00:00Z", time_to="2024-03-01T00:00:00Z") == [b]
    page = call(db, "rcll.units", bank=bank, limit=1, offset=1)
    assert [r["unit_id"] for r in page] == [b] and page[0]["total"] == 3


def test_merge_proposals_list_what_a_person_decides(db: Db, bank: str) -> None:
    retain(db, "the agent", room="agent")
    retain(db, "the orchestrator", room="orchestrator")
    retain(db, "another orchestrator note", room="orchestrator")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'same subject')")
    (p,) = call(db, "rcll.merge_proposals", bank=bank)
    assert (p["from_room"], p["into_room"], p["reason"], p["status"]) == ("agent", "orchestrator", "same subject", "pending")
    assert (p["from_units"], p["into_units"]) == (1, 2)
    db.execute("SELECT rcll.reject_room_merge('b', 'agent', 'not the same')")
    assert call(db, "rcll.merge_proposals", bank=bank) == []
    (d,) = call(db, "rcll.merge_proposals", bank=bank, include_decided=True)
    assert d["status"] == "rejected" and d["decided_by"]


def test_state_keys_show_each_key_at_its_current_version(db: Db, bank: str) -> None:
    for version, value in enumerate(["v1", "v2"]):
        db.execute("SELECT rcll.put_state('b', 'deployment', 'spread', %s::jsonb, %s)", (f'"{value}"', version))
    db.execute("SELECT rcll.put_state('b', 'testing', 'flaky', '[]', 0)")
    keys = call(db, "rcll.state_keys", bank=bank)
    assert [(k["room"], k["key"], k["version"], k["value"]) for k in keys] == [
        ("deployment", "spread", 2, "v2"), ("testing", "flaky", 1, [])]
    assert [k["key"] for k in call(db, "rcll.state_keys", bank=bank, rooms=["testing"])] == ["flaky"]


@pytest.mark.parametrize("function", ["rcll.floor_plan", "rcll.units", "rcll.merge_proposals", "rcll.state_keys"])
def test_an_unknown_bank_is_an_error_even_in_an_empty_database(db: Db, function: str) -> None:
    with refused("RC002", "bank", 'unknown bank "nope"'):
        call(db, function, bank="nope")


def test_a_person_decides_a_merge_and_the_audit_names_them(db: Db, bank: str) -> None:
    retain(db, "the agent", room="agent")
    retain(db, "the orchestrator", room="orchestrator")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'same subject')")
    with refused("RC006", "agent", "cannot approve"), db.transaction():
        db.execute("SELECT set_config('rcll.agent', 'bot', true)")
        db.execute("SELECT rcll.decide_room_merge('b', 'agent', true, person => 'alice')")
    moved = call_one(db, "rcll.decide_room_merge", bank=bank, from_room="agent", approve=True, person="alice")
    assert moved == {"decide_room_merge": 1}
    actions = db.execute("SELECT actor, action FROM rcll.audit_log WHERE action LIKE 'room_merge_%' "
                         "ORDER BY audit_id").fetchall()
    assert [a for _, a in actions] == ["room_merge_propose", "room_merge_approve", "room_merge_decision"]
    assert actions[-1][0] == "person:alice"
    (d,) = call(db, "rcll.merge_proposals", bank=bank, include_decided=True)
    assert (d["status"], d["decided_by"]) == ("approved", "person:alice")


def test_only_the_server_names_the_person_deciding(db: Db, bank: str) -> None:
    retain(db, "x", room="agent")
    retain(db, "y", room="orchestrator")
    db.execute("SELECT rcll.propose_room_merge('b', 'agent', 'orchestrator', 'same subject')")
    db.execute("DROP ROLE IF EXISTS console_t_plain; CREATE ROLE console_t_plain")
    db.execute("GRANT USAGE ON SCHEMA rcll TO console_t_plain; GRANT ALL ON ALL TABLES IN SCHEMA rcll TO console_t_plain")
    try:
        with refused("RC006", "person", "person"), db.transaction():
            db.execute("SET LOCAL SESSION AUTHORIZATION console_t_plain")
            db.execute("SELECT rcll.decide_room_merge('b', 'agent', true, person => 'mallory')")
    finally:
        db.execute("DROP OWNED BY console_t_plain; DROP ROLE console_t_plain")


def test_the_page_loads_only_files_from_the_package() -> None:
    console = resources.files("rcll") / "console"
    html = (console / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"#]+)"', html)
    assert sorted(refs) == ["/console/app.css", "/console/app.js", "data:,"]
    for name in ("index.html", "app.js", "app.css"):
        text = (console / name).read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name


# -- the page, in headless Chromium ----------------------------------------------------------------

# Where the screenshots go: RCLL_CONSOLE_SHOTS, else console-shots in the temporary directory.
SHOTS = Path(os.environ.get("RCLL_CONSOLE_SHOTS") or Path(tempfile.gettempdir()) / "console-shots")
ALICE = "alice-token-" + "a" * 24
BOB = "bob-token-" + "b" * 24
DANA = "dana-token-" + "d" * 24          # a person: the one who decides merges
ERIN = "erin-token-" + "e" * 24          # a person who may read and write, not forget
TOKENS: dict[str, str | Caller] = {ALICE: "alice", BOB: "bob", DANA: "person:dana",
                                   ERIN: Caller("person:erin", ("*",), frozenset({"read", "write"}))}
NOTES = [
    (ALICE, "deployment", "decision", "We deploy with Argo CD since March; Helm charts stay for local dev only."),
    (ALICE, "deployment", "rule", "Every deploy goes to the canary first and waits ten minutes before the fleet."),
    (BOB, "Deployments", "event", "The Friday deploy was rolled back after the canary showed 5xx errors."),
    (BOB, "deployment", "event", "Rollback of the payments service took four minutes on 2024-05-03."),
    (ALICE, "testing", "warning", "The integration tests are flaky when two suites share one database."),
    (BOB, "testing", "decision", "Pytest runs with -x in CI so a failing fixture stops the build early."),
    (BOB, "agent", "fact", "The planning agent hands each subtask to a worker agent with its own budget."),
    (ALICE, "orchestrator", "fact", "The orchestrator retries a worker twice before it escalates to a person."),
    (ALICE, "database", "decision", "Postgres 18 with pgvector is the only database we run in production."),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(dsn: str, **kw: Any) -> Iterator[str]:
    """create_app on loopback in a thread of this process (the models load once for every test)."""
    import uvicorn

    from rcll.http import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(dsn, **kw), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the console server did not start")
            time.sleep(0.05)
        yield base
    finally:
        server.should_exit = True
        thread.join(30)


@dataclass
class Site:
    base: str
    dsn: str
    reader_base: str

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()


@pytest.fixture(scope="module")
def site(legs: dict[str, Leg], test_root: Path) -> Iterator[Site]:
    """One bank written through the HTTP API by two agents, a merge proposed by one of them, state
    with two versions; served read-write with tokens, and read-only as a reader role."""
    require_browser()
    leg = _leg("pg18", legs, test_root)          # the page has no leg-specific behaviour
    name = leg.new_database()
    dsn = leg.url(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT rcll.create_bank('fleet')")
        conn.execute("DROP ROLE IF EXISTS console_reader")
        conn.execute("CREATE ROLE console_reader LOGIN IN ROLE rcll_reader")
    reader_dsn = dsn.replace("postgres@", "console_reader@", 1)
    try:
        with served(dsn, tokens=TokenMap.from_pairs(TOKENS)) as base, \
                served(reader_dsn, tokens=TokenMap(), read_only=True) as reader_base:
            for i, (token, room, hall, text) in enumerate(NOTES):
                r = httpx.post(f"{base}/retain", headers=bearer(token), timeout=60, json={
                    "bank": "fleet", "content": text, "room": room, "hall": hall, "thread": "ops" if i < 4 else None,
                    "occurred_at": f"2024-05-{i + 1:02d}T09:00:00Z"})
                assert r.status_code == 200, r.text
            for version in (0, 1):
                r = httpx.put(f"{base}/state", headers=bearer(ALICE), timeout=30, json={
                    "bank": "fleet", "room": "deployment", "key": "freeze",
                    "value": {"frozen": version == 0, "until": "2024-06-01"}, "expected_version": version})
                assert r.status_code == 200, r.text
            with psycopg.connect(dsn) as conn:      # an agent proposes; only a person may approve
                conn.execute("SELECT set_config('rcll.agent', 'bob', true)")
                conn.execute("SELECT rcll.propose_room_merge('fleet', 'agent', 'orchestrator', "
                             "'both rooms are about how work is handed to workers')")
                conn.commit()
            yield Site(base, dsn, reader_base)
    finally:
        leg.drop_database(name)
        with leg.admin() as conn:
            conn.execute("DROP ROLE IF EXISTS console_reader")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory, "--window-size=1280,800", "--force-device-scale-factor=1", "--lang=en-US",
                  log=True) as d:
        # The viewport itself is 1280x800 (a window of that size has less room inside).
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                          {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        yield d


@pytest.fixture
def page(driver: Any, site: Site) -> Iterator[Any]:
    """The browser, its log emptied first; the test fails on any console error or warning it left."""
    driver.get_log("browser")
    yield driver
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == [], problems


def wait(d: Any, what: Any, timeout: float = 60) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, timeout).until(what)


def ready(d: Any, view: str, timeout: float = 60) -> None:
    wait(d, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == view, timeout)


def open_console(d: Any, base: str, token: str | None, view: str = "plan", bank: str = "fleet") -> None:
    """Load the page fresh, answer the token prompt from the keyboard, wait for `view`."""
    # A new document (not a hash change) that forgets the last test's token before its script runs,
    # so that no request goes out with that token, or without it half-way (a 401 in the browser's log).
    d.get("about:blank")
    fresh = d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "sessionStorage.clear();"})
    try:
        d.get(f"{base}/?bank={bank}#{view}")
    finally:
        d.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": fresh["identifier"]})
    if token is not None:
        field = wait(d, lambda x: x.find_element(By.ID, "token") if x.find_element(By.ID, "token").is_displayed()
                     else False)
        field.send_keys(token + Keys.ENTER)
    ready(d, view)


def shot(d: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    d.save_screenshot(str(SHOTS / f"console-{name}.png"))


def test_floor_plan_shows_rooms_sized_by_units_with_aliases_halls_layers_and_writers(page: Any, site: Site) -> None:
    open_console(page, site.base, DANA)
    tiles = {t.get_attribute("data-room"): t for t in page.find_elements(By.CSS_SELECTOR, "#plan-tiles .tile")}
    dep = tiles["deployment"]
    assert "4 units" in dep.text and "aka Deployments" in dep.text
    assert "by alice 2, bob 2" in dep.text and "event 2" in dep.text and "L2" in dep.text
    assert "merge proposed into orchestrator" in tiles["agent"].text

    def size(room: str) -> int:
        return int(tiles[room].get_attribute("class").split("size-")[1].split()[0])

    assert size("deployment") > size("database") > size("security")      # security: vocabulary, empty
    assert "person:dana" in page.find_element(By.ID, "who").text
    # the big banks' graphs: what /health says of the periodic jobs (this site runs none)
    assert page.find_element(By.ID, "plan-indexes").text.startswith("Dense indexes: this server runs no periodic jobs")
    shot(page, "floor-plan")


def test_units_are_browsed_by_room_from_the_plan_and_filtered_by_author(page: Any, site: Site) -> None:
    open_console(page, site.base, DANA)
    tile = page.find_element(By.CSS_SELECTOR, '#plan-tiles .tile[data-room="deployment"]')
    tile.send_keys(Keys.ENTER)                                       # a real button: the keyboard opens it
    ready(page, "units")
    rows = lambda: page.find_elements(By.CSS_SELECTOR, "#units-table tbody tr[data-unit-id]")  # noqa: E731
    wait(page, lambda _: len(rows()) == 4)
    assert "1–4 of 4 units" in page.find_element(By.ID, "units-summary").text
    shot(page, "units")
    Select(page.find_element(By.CSS_SELECTOR, "#units-form [name=author]")).select_by_value("bob")
    page.find_element(By.CSS_SELECTOR, "#units-form [name=thread]").send_keys("ops" + Keys.ENTER)
    wait(page, lambda _: len(rows()) == 2)
    assert all("bob" in r.text for r in rows())
    page.find_element(By.CSS_SELECTOR, "#units-form [name=room]").clear()
    page.find_element(By.CSS_SELECTOR, "#units-form button[type=submit]").click()
    wait(page, lambda _: len(rows()) == 2)                            # bob wrote two notes in thread ops


def test_recall_shows_each_units_rank_in_every_channel_and_the_phase_timings(page: Any, site: Site) -> None:
    open_console(page, site.base, DANA, view="recall")
    # A deadline no busy machine misses, so the page and the API read to the same depth.
    # The form offers every field of the recall request (read from the server's schema).
    for p in PARAMETERS:
        if p.name == "weights":
            for c in CHANNELS:
                assert page.find_elements(By.CSS_SELECTOR, f'#recall-form [name="weights.{c}"]'), c
        elif p.name != "bank":                                  # the bank is the page's
            assert page.find_elements(By.CSS_SELECTOR, f"#recall-form [name={p.name}]"), p.name
    page.find_element(By.CSS_SELECTOR, "#recall-form [name=deadline_ms]").send_keys("120000")
    page.find_element(By.CSS_SELECTOR, "#recall-form [name=query]").send_keys("how do we deploy" + Keys.ENTER)
    ready(page, "recall-done", timeout=180)
    api = httpx.post(f"{site.base}/recall", headers=bearer(DANA), timeout=180, json={
        "bank": "fleet", "query": "how do we deploy", "explain": True, "deadline_ms": 120000}).json()
    assert "The cross-encoder read 9 (9 again" in page.find_element(By.ID, "recall-summary").text
    facts = {f["unit_id"]: f for f in api["facts"]}
    rows = page.find_elements(By.CSS_SELECTOR, "#recall-table tbody tr[data-unit-id]")
    assert sorted(int(r.get_attribute("data-unit-id")) for r in rows) == sorted(facts)
    channels = CHANNELS
    scores = []
    for row in rows:
        fact = facts[int(row.get_attribute("data-unit-id"))]
        shown = {c: row.find_element(By.CSS_SELECTOR, f'td[data-channel="{c}"]').text for c in channels}
        assert shown == {c: str(fact[f"rank_{c}"]) if fact[f"rank_{c}"] is not None else "—" for c in channels}
        # INT8 cross-encoder logits move slightly between runs (docs: +-0.5); the SQL ranks do not.
        scores.append(float(row.find_element(By.CSS_SELECTOR, 'td[data-score="rerank"]').text))
        assert abs(scores[-1] - fact["rerank_score"]) <= 0.5
    assert scores == sorted(scores, reverse=True)            # the final order is the cross-encoder's
    assert any(r.find_element(By.CSS_SELECTOR, 'td[data-channel="dense"]').text == "1" for r in rows)
    assert any(r.find_element(By.CSS_SELECTOR, 'td[data-channel="lexical"]').text != "—" for r in rows)
    for phase in ("embed", "sql", "rerank", "cut", "total"):
        assert page.find_element(By.CSS_SELECTOR, f'#recall-timings dd[data-phase="{phase}"]').text.endswith("ms")
    shot(page, "recall")
    # A budget too small for everything: what it cut is listed.
    budget = page.find_element(By.CSS_SELECTOR, "#recall-form [name=budget]")
    budget.clear()
    budget.send_keys("40" + Keys.ENTER)
    wait(page, lambda x: len(x.find_elements(By.CSS_SELECTOR, "#cut-table tbody tr[data-unit-id]")) > 0)
    assert "did not fit the budget" in page.find_element(By.ID, "cut-summary").text


def test_a_person_approves_a_merge_in_the_page_and_sql_sees_it(page: Any, site: Site) -> None:
    open_console(page, site.base, DANA, view="merges")
    row = page.find_element(By.CSS_SELECTOR, '#merges-table tr[data-from-room="agent"]')
    assert "orchestrator" in row.text and "bob" in row.text
    shot(page, "merges")
    row.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait(page, lambda x: "Approved" in x.find_element(By.ID, "status").text)
    assert site.sql("SELECT status, merged_into FROM rcll.rooms r JOIN rcll.banks b USING (bank_id) "
                    "WHERE b.name = 'fleet' AND r.name = 'agent'") == [("merged", "orchestrator")]
    assert site.sql("SELECT count(*) FROM rcll.memory_units WHERE room = 'agent'") == [(0,)]
    assert site.sql("SELECT actor FROM rcll.audit_log WHERE action = 'room_merge_decision'") == [("person:dana",)]
    # "Approved" shows before the page reloads the decided list: wait for the row itself.
    decided = wait(page, lambda x: x.find_elements(By.CSS_SELECTOR, '#decided-table tr[data-from-room="agent"]'))[0].text
    assert "approved" in decided and "person:dana" in decided


def test_state_shows_each_key_with_its_version_history_and_export_downloads(page: Any, site: Site) -> None:
    open_console(page, site.base, DANA, view="state")
    row = page.find_element(By.CSS_SELECTOR, "#state-table tbody tr")
    assert "freeze" in row.text and "alice" in row.text
    row.find_element(By.TAG_NAME, "button").send_keys(Keys.ENTER)
    wait(page, lambda x: x.find_element(By.ID, "history").is_displayed())
    versions = [r.find_element(By.TAG_NAME, "td").text for r in page.find_elements(By.CSS_SELECTOR, "#history-table tbody tr")]
    assert versions == ["2", "1"]
    shot(page, "state")
    page.find_element(By.CSS_SELECTOR, 'a[data-view="export"]').click()
    ready(page, "export")
    page.find_element(By.ID, "export-button").click()
    wait(page, lambda x: "Downloaded fleet.rcll.ndjson" in x.find_element(By.ID, "export-status").text)


def test_no_decision_controls_for_an_agent_or_on_a_read_only_server(page: Any, site: Site) -> None:
    site.sql("SELECT rcll.propose_room_merge('fleet', 'database', 'deployment', 'one ops room')")
    try:
        open_console(page, site.base, ALICE, view="merges")
        assert page.find_elements(By.CSS_SELECTOR, '#merges-table tr[data-from-room="database"]')
        assert page.find_elements(By.CSS_SELECTOR, "#merges-table button") == []
        assert "only a person decides" in page.find_element(By.ID, "merges-readonly").text
        open_console(page, site.reader_base, None, view="merges")       # no tokens: no prompt
        assert "read-only" in page.find_element(By.ID, "who").text
        assert page.find_elements(By.CSS_SELECTOR, '#merges-table tr[data-from-room="database"]')
        assert page.find_elements(By.CSS_SELECTOR, "#merges-table button, #merges-table form") == []
        assert "read-only" in page.find_element(By.ID, "merges-readonly").text
    finally:
        site.sql("SELECT rcll.reject_room_merge('fleet', 'database')")


SCRATCH = [("leak", "The staging password is qxsecretq-4711."), ("leak", "Rotate the staging password every month."),
           ("daily", "Standup is at nine in the small room."), ("daily", "The canary waits ten minutes."),
           (None, "The on-call phone is in the second drawer.")]


def test_a_unit_or_a_thread_is_forgotten_after_a_dry_run_count_and_a_confirmation(page: Any, site: Site) -> None:
    site.sql("SELECT rcll.create_bank('scratch')")
    ids = {}
    for thread, text in SCRATCH:
        r = httpx.post(f"{site.base}/retain", headers=bearer(DANA), timeout=60,
                       json={"bank": "scratch", "content": text, "thread": thread})
        assert r.status_code == 200, r.text
        ids[text] = r.json()["unit_ids"][0]
    secret = ids[SCRATCH[0][1]]
    count = lambda: site.sql("SELECT count(*) FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id) "  # noqa: E731
                             "WHERE b.name = 'scratch'")[0][0]
    open_console(page, site.base, DANA, view="units", bank="scratch")
    rows = lambda: page.find_elements(By.CSS_SELECTOR, "#units-table tbody tr[data-unit-id]")  # noqa: E731
    wait(page, lambda _: len(rows()) == 5)
    row = page.find_element(By.CSS_SELECTOR, f'#units-table tr[data-unit-id="{secret}"]')
    row.find_element(By.CSS_SELECTOR, "button.row-forget").click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "counted-unit")
    dialog = page.find_element(By.ID, "forget-dialog")
    assert dialog.is_displayed() and "qxsecretq" in dialog.find_element(By.ID, "forget-text").text
    counts = {r.get_attribute("data-kind"): r.find_element(By.CSS_SELECTOR, "td.num").text
              for r in dialog.find_elements(By.CSS_SELECTOR, "#forget-counts tbody tr")}
    assert counts["units"] == "1" and counts["documents"] == "1", counts
    assert count() == 5, "the dry run changed nothing"
    # The thread instead: counted again before anything can go; then cancelled.
    dialog.find_element(By.CSS_SELECTOR, "input[value=thread]").click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "counted-thread")
    assert page.find_element(By.ID, "forget-confirm").text == "Forget 2 units"
    shot(page, "forget")
    page.find_element(By.ID, "forget-cancel").click()
    wait(page, lambda x: "Nothing was forgotten" in x.find_element(By.ID, "status").text)
    assert count() == 5 and not dialog.is_displayed()
    # Now for real: the unit, with a reason.
    page.find_element(By.CSS_SELECTOR, f'#units-table tr[data-unit-id="{secret}"] button.row-forget').click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "counted-unit")
    page.find_element(By.ID, "forget-reason").send_keys("a password pasted by mistake")
    page.find_element(By.ID, "forget-confirm").click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "forgotten-unit")
    assert "Forgotten: " in page.find_element(By.ID, "status").text and len(rows()) == 4
    assert count() == 4 and site.sql("SELECT count(*) FROM rcll.memory_units WHERE unit_id = %s", (secret,)) == [(0,)]
    assert site.sql("SELECT reason FROM rcll.forget_log WHERE bank_name = 'scratch'") == [("a password pasted by mistake",)]
    # And a whole thread.
    daily = ids[SCRATCH[2][1]]
    page.find_element(By.CSS_SELECTOR, f'#units-table tr[data-unit-id="{daily}"] button.row-forget').click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "counted-unit")
    page.find_element(By.CSS_SELECTOR, "#forget-dialog input[value=thread]").click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "counted-thread")
    page.find_element(By.ID, "forget-confirm").click()
    wait(page, lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget") == "forgotten-thread")
    assert len(rows()) == 2 and count() == 2


SELECTED = [("ship", ["leak"], "The deploy key is zzkeyzz-99; it was pasted here by mistake."),
            ("ship", ["leak", "ops"], "Rotate the deploy key zzkeyzz-99 on Friday."),
            ("ship", ["ops"], "The deploy window opens at ten."), (None, [], "Lunch is at noon.")]
FORGET_FROM_PAGE = {"bank", "dry_run"}      # the page's bank; dry_run is the dialog's two steps


def test_a_selector_is_counted_then_forgotten_from_a_dialog_built_from_the_request(page: Any, site: Site) -> None:
    site.sql("SELECT rcll.create_bank('selected')")
    ids = []
    for thread, tags, text in SELECTED:
        r = httpx.post(f"{site.base}/retain", headers=bearer(DANA), timeout=60,
                       json={"bank": "selected", "content": text, "thread": thread, "tags": tags})
        assert r.status_code == 200, r.text
        ids.append(r.json()["unit_ids"][0])
    left = lambda: sorted(u for (u,) in site.sql(  # noqa: E731
        "SELECT unit_id FROM rcll.memory_units u JOIN rcll.banks b USING (bank_id) WHERE b.name = 'selected'"))
    flag = lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-forget")  # noqa: E731
    open_console(page, site.base, DANA, view="units", bank="selected")
    opener = page.find_element(By.ID, "forget-by-open")
    assert opener.is_displayed() and opener.text == "Forget by selector…"
    opener.send_keys(Keys.ENTER)                                     # a real button: the keyboard opens it
    dialog = wait(page, lambda x: x.find_element(By.ID, "forget-by-dialog") if
                  x.find_element(By.ID, "forget-by-dialog").is_displayed() else False)
    # One input for every field of the request but the page's own, read from the server's schema.
    form = page.find_element(By.ID, "forget-by-form")
    named = {e.get_attribute("name") for e in form.find_elements(By.CSS_SELECTOR, "input[name]")}
    assert named == {p.name for p in FORGET_PARAMETERS} - FORGET_FROM_PAGE, named
    assert page.switch_to.active_element == form.find_element(By.CSS_SELECTOR, "[name=unit_ids]")
    everything = form.find_element(By.CSS_SELECTOR, "[name=everything]")
    assert everything.get_attribute("value") == "" and not everything.is_displayed()   # folded away, never filled
    assert "selected" in form.find_element(By.ID, "forget-by-all").get_attribute("textContent")
    confirm = page.find_element(By.ID, "forget-by-confirm")
    assert not confirm.is_enabled()
    # No selector: the server refuses (RC007), and the dialog says so with its hint.
    page.find_element(By.ID, "forget-by-count").click()
    wait(page, lambda x: flag(x) == "refused-selector")
    error = page.find_element(By.ID, "forget-by-error").text
    assert error.startswith("RC007 · selector: no selector given") and " — " in error, error
    assert not confirm.is_enabled()
    # The browser logs the refusal's 422: this test asked for it (the fixture fails on any other).
    logged = [e["message"] for e in page.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert len(logged) == 1 and "/forget" in logged[0] and "422" in logged[0], logged
    # Ids are numbers: the page says which one is not before it asks the server.
    ids_input = form.find_element(By.CSS_SELECTOR, "[name=unit_ids]")
    ids_input.send_keys(f"{ids[0]}, x1" + Keys.ENTER)
    wait(page, lambda x: x.find_element(By.ID, "forget-by-error").text == 'unit_ids: "x1" is not an id — '
                                                                          "give whole numbers, separated by commas")
    ids_input.clear()
    # A tag and a thread (both must match), a reason; Enter counts - it never forgets.
    form.find_element(By.CSS_SELECTOR, "[name=tag]").send_keys("leak")
    form.find_element(By.CSS_SELECTOR, "[name=thread]").send_keys("ship")
    reason = form.find_element(By.CSS_SELECTOR, "[name=reason]")
    reason.send_keys("a deploy key pasted by mistake" + Keys.ENTER)
    wait(page, lambda x: flag(x) == "counted-selector")
    counts = {r.get_attribute("data-kind"): r.find_element(By.CSS_SELECTOR, "td.num").text
              for r in dialog.find_elements(By.CSS_SELECTOR, "#forget-by-counts tbody tr")}
    assert counts["units"] == "2" and counts["documents"] == "2", counts
    assert confirm.is_enabled() and confirm.text == "Forget 2 units" and page.find_element(By.ID, "forget-by-error").text == ""
    assert left() == sorted(ids), "the dry run changed nothing"
    shot(page, "forget-by-selector")
    # A change after the count asks for a new count before anything can go.
    reason.send_keys("!")
    assert not confirm.is_enabled() and "count again" in page.find_element(By.ID, "forget-by-summary").text
    reason.send_keys(Keys.BACKSPACE + Keys.ENTER)
    wait(page, lambda x: flag(x) == "counted-selector")
    confirm.click()
    wait(page, lambda x: flag(x) == "forgotten-selector")
    assert not dialog.is_displayed() and page.find_element(By.ID, "status").text.startswith("Forgotten: ")
    assert left() == sorted(ids[2:])
    rows = page.find_elements(By.CSS_SELECTOR, "#units-table tbody tr[data-unit-id]")
    assert sorted(int(r.get_attribute("data-unit-id")) for r in rows) == sorted(ids[2:])
    assert site.sql("SELECT actor, selector->>'tag', selector->>'thread', counts->>'units', reason "
                    "FROM rcll.forget_log WHERE bank_name = 'selected'") == [
        ("person:dana", "leak", "ship", "2", "a deploy key pasted by mistake")]


def test_the_retention_policies_are_listed_and_forget_needs_the_verb_and_a_writable_server(page: Any,
                                                                                           site: Site) -> None:
    for body in ({"keep": "P90D", "layer": "L2"}, {"keep": 3600, "room": "testing"}):
        r = httpx.put(f"{site.base}/retention", headers=bearer(DANA), timeout=30, json={"bank": "fleet", **body})
        assert r.status_code == 200, r.text
    try:
        open_console(page, site.base, DANA, view="retention")
        rows = page.find_elements(By.CSS_SELECTOR, "#retention-table tbody tr")
        shown = sorted(tuple(td.text for td in r.find_elements(By.TAG_NAME, "td"))[:4] for r in rows)
        assert shown == [("any", "any", "L2", "90 days P90D"), ("testing", "any", "any", "1 hour PT1H")], shown
        shot(page, "retention")
        open_console(page, site.base, ERIN, view="units")             # no forget verb: no forget control
        assert page.find_elements(By.CSS_SELECTOR, "#units-table tbody tr[data-unit-id]")
        assert page.find_elements(By.CSS_SELECTOR, "button.row-forget") == []
        assert not page.find_element(By.ID, "forget-by-open").is_displayed()
        open_console(page, site.reader_base, None, view="units")      # read-only: no forget control at all
        assert page.find_elements(By.CSS_SELECTOR, "#units-table tbody tr[data-unit-id]")
        assert page.find_elements(By.CSS_SELECTOR, "button.row-forget") == []
        assert not page.find_element(By.ID, "forget-by-open").is_displayed()
    finally:
        for body in ({"keep": None, "layer": "L2"}, {"keep": None, "room": "testing"}):
            httpx.put(f"{site.base}/retention", headers=bearer(DANA), timeout=30, json={"bank": "fleet", **body})
