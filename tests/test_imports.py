"""The package's modules import one another without a circle: each module-level `import rcll.x` /
`from rcll import x` / `from rcll.x import y` is an edge, and the graph sorts topologically
(a function-local import, which carries a comment saying why, is not an edge: it runs later)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "rcll"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The rcll modules `path` imports at module level (outside functions and TYPE_CHECKING)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            body += node.orelse
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [n for block in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, block, [])]
        elif isinstance(node, ast.ExceptHandler):
            body += node.body
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in modules:
                found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
    return found - {_module(path)}


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module(p) for p in paths}
    return {_module(p): _imports(p, modules) for p in paths}


def test_the_graph_sees_the_imports() -> None:
    graph = _graph()
    assert {"rcll.request", "rcll.defaults", "rcll.validate"} <= graph["rcll.recall"] | graph["rcll.request"]
    assert "rcll.recall" in graph["rcll.memory"]


def test_no_module_of_the_package_imports_itself_in_a_circle() -> None:
    try:
        graphlib.TopologicalSorter(_graph()).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"an import circle: {' -> '.join(e.args[1])}") from e
