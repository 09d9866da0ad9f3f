"""The TypeScript client (clients/typescript) against a live `rcll serve`: its own tests under
Node's test runner, its generated types equal to what the live schema generates, and the tarball
`npm pack` makes installs into a fresh project, imports, type-checks and runs the README snippets.

`make test` installs the client's locked dev dependencies first (make typescript-client: npm ci).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import secrets
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import psycopg
import pytest

import rcll
from conftest import LEGS, Leg, _leg
from rcll.errors import CODES
from serving import Serving
from test_serve import free_port

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "typescript"
WRITER = "ts-writer-" + secrets.token_hex(12)
READER = "ts-reader-" + secrets.token_hex(12)
BANK, OTHER, BEYOND = "ts-main", "ts-other", "elsewhere"     # BEYOND exists, outside both tokens' scope
FORGET, DROP = "ts-forget", "ts-drop"                         # the forget tests' own banks


class Live(NamedTuple):
    leg: Leg
    url: str
    env: dict[str, str]     # what the client's Node tests read: RCLL_URL, the tokens, the banks


def _npm() -> str:
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "Node.js and npm are required (Debian: apt-get install nodejs npm)"
    assert (CLIENT / "node_modules" / ".bin" / "tsc").exists(), \
        "run `make typescript-client` (npm ci in clients/typescript)"
    return npm


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    out = subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def built() -> Path:
    """The client compiled once for this file: dist/ (the package) and .test-build/ (its tests),
    from empty directories, so that nothing an earlier build left behind is tested or packed."""
    npm = _npm()
    for out in ("dist", ".test-build"):
        shutil.rmtree(CLIENT / out, ignore_errors=True)
    _run([npm, "run", "--silent", "build"], CLIENT)
    _run([npm, "run", "--silent", "build:test"], CLIENT)
    return CLIENT


@pytest.fixture(scope="module", params=LEGS)
def live(request: pytest.FixtureRequest, legs: dict[str, Leg], test_root: Path) -> Iterator[Live]:
    """`rcll serve` on a fresh database of the leg, with a writer and a read-only token scoped to ts-*."""
    leg = _leg(str(request.param), legs, test_root)
    name = leg.new_database()
    with psycopg.connect(leg.url(name), autocommit=True) as conn:
        for bank in (BANK, OTHER, BEYOND, FORGET, DROP):
            conn.execute("SELECT rcll.create_bank(%s)", (bank,))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCLL_TOKENS")}
    env |= {"PYTHONPATH": str(Path(rcll.__file__).resolve().parents[1]), "LLM_PROVIDER": "none",
            "RCLL_TOKENS": f"{WRITER} ts-writer banks=ts-*\n{READER} ts-reader banks=ts-* can=read"}
    server = Serving(["--port", str(port), "--dsn", leg.url(name)], env)
    url = f"http://127.0.0.1:{port}"
    try:
        server.wait_healthy(url, 180)
        yield Live(leg, url, {"RCLL_URL": url, "RCLL_TOKEN": WRITER, "RCLL_READER_TOKEN": READER,
                              "RCLL_BANK": BANK, "RCLL_OTHER_BANK": OTHER, "RCLL_BEYOND_BANK": BEYOND,
                              "RCLL_FORGET_BANK": FORGET, "RCLL_DROP_BANK": DROP})
    finally:
        server.stop(60)
        leg.drop_database(name)


def test_the_clients_error_kinds_are_the_servers_table() -> None:
    # RcllError.kind comes from ErrorCodes in src/errors.ts: the one table is rcll.errors.CODES.
    kinds = dict(re.findall(r'^\s*(RC\d{3}): "(\w+)",$', (CLIENT / "src" / "errors.ts").read_text(), re.M))
    assert kinds == {c.value: c.kind for c in CODES}


@pytest.mark.slow
def test_the_typescript_client_passes_its_node_tests_against_a_live_server(built: Path, live: Live) -> None:
    out = subprocess.run(["node", "--test", "--test-reporter=tap", ".test-build/test/"], cwd=built,
                         env={**os.environ, **live.env}, capture_output=True, text=True, timeout=600)
    summary = dict(re.findall(r"^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$", out.stdout, re.M))
    failed = re.findall(r"^ *not ok .*?^ *\.\.\.$", out.stdout, re.M | re.S)
    assert out.returncode == 0 and summary.get("fail") == "0", "\n".join(failed)[-12000:] + out.stderr[-4000:]
    assert int(summary["pass"]) >= 20 and summary.get("cancelled") == "0" and summary.get("skipped") == "0", summary


def _one_leg(live: Live) -> None:
    if live.leg.name != LEGS[0]:
        pytest.skip("the schema and the package do not depend on the leg: checked on the first one")


def test_the_committed_types_are_what_the_live_schema_generates(built: Path, live: Live, tmp_path: Path) -> None:
    # The package's own generate script, pointed at the live server and at a scratch file.
    _one_leg(live)
    fresh = tmp_path / "schema.ts"
    _run([_npm(), "run", "--silent", "generate"], built, {"RCLL_SCHEMA": f"{live.url}/openapi.json", "SCHEMA_OUT": str(fresh)})
    committed = (built / "src" / "schema.ts").read_text()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.read_text().splitlines(True),
                                        "src/schema.ts (committed)", "from the live /openapi.json", n=1))
    assert not diff, "the HTTP API changed: `make typescript-types` regenerates clients/typescript/src/schema.ts\n" + diff


def test_the_package_version_is_the_servers(built: Path, live: Live) -> None:
    _one_leg(live)
    package = json.loads((built / "package.json").read_text())
    assert package["version"] == httpx.get(f"{live.url}/openapi.json", timeout=30).json()["info"]["version"]
    assert package["type"] == "module" and not package.get("dependencies"), "ESM, no runtime dependency"


def _snippets(markdown: str, heading: str) -> list[str]:
    """The ```ts blocks of the section under `heading` (up to the next heading of its level or above)."""
    level = heading.split(" ", 1)[0]
    start = markdown.index(heading + "\n")
    rest = markdown[start + len(heading) + 1:]
    end = re.search(rf"^#{{1,{len(level)}}} ", rest, re.M)
    section = rest[: end.start()] if end else rest
    return re.findall(r"^```ts\n(.*?)^```$", section, re.M | re.S)


def test_npm_pack_makes_a_tarball_that_installs_imports_and_runs_the_readme_snippets(
        built: Path, live: Live, tmp_path: Path) -> None:
    _one_leg(live)
    npm = _npm()
    # `npm pack` runs the prepack script, the package's build, before it packs; `built` has just run
    # that same script, so the pack skips it rather than compile the package a second time, and the
    # tarball is proven below to carry exactly what that build wrote.
    assert json.loads((built / "package.json").read_text())["scripts"]["prepack"] == "npm run build"
    packed = json.loads(_run([npm, "pack", "--json", "--ignore-scripts", "--pack-destination", str(tmp_path)], built))
    tarball = tmp_path / packed[0]["filename"]
    shipped = {f["path"] for f in packed[0]["files"]}
    assert {"package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/schema.d.ts"} <= shipped, shipped
    assert not any(p.startswith(("src/", "test/", ".test-build/", "node_modules/")) for p in shipped), shipped
    built_files = {f"dist/{p.relative_to(built / 'dist').as_posix()}" for p in (built / "dist").rglob("*") if p.is_file()}
    assert {p for p in shipped if p.startswith("dist/")} == built_files, "the tarball's dist/ is the build's"
    with tarfile.open(tarball) as tar:
        for name in built_files:
            member = tar.extractfile(f"package/{name}")
            assert member is not None and member.read() == (built / name).read_bytes(), name
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "private": True, "type": "module"}))
    _run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", str(tarball)], app)
    # Imports by name, through the package's "exports".
    out = _run(["node", "--input-type=module", "-e",
                "import Rcll, { Rcll as Named, RcllError, ErrorCodes } from '@rcll/client';"
                "console.log(JSON.stringify([Rcll === Named, typeof RcllError, ErrorCodes.RC005]))"], app)
    assert json.loads(out) == [True, "function", "version_conflict"]
    # The README snippets, type-checked against the installed .d.ts and run against the live server.
    # A section's blocks are one program, in their order (a later block uses what an earlier one made).
    snippets = ["\n".join(_snippets((ROOT / "README.md").read_text(), "### From TypeScript")),
                "\n".join(_snippets((CLIENT / "README.md").read_text(), "## Use"))]
    assert all(snippets), "README.md and clients/typescript/README.md each show a ```ts snippet"
    (app / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True,
        "types": ["node"], "typeRoots": [str(CLIENT / "node_modules" / "@types")], "skipLibCheck": False}}))
    for i, snippet in enumerate(snippets):
        code = snippet.replace("http://127.0.0.1:8765", live.url).replace('"default"', json.dumps(BANK))
        (app / f"snippet{i}.ts").write_text(code)
    _run(["node", str(CLIENT / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "."], app)
    for i in range(len(snippets)):
        _run(["node", f"snippet{i}.js"], app, {"RCLL_TOKEN": WRITER}, timeout=120)
