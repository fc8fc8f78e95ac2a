"""The package's layout: no import circle, the runtime apart from its tools,
and docs/design.md's module table true to the files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

SRC = REPO / "src"
PACKAGES = ("vllm_bridge", "vllm_bridge_testmodel")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((SRC / package).rglob("*.py"))
    }


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``path`` imports, at any depth of its code, apart
    from imports for type checkers only."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def test_no_import_circle():
    graph = import_graph()
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circle = [*path[path.index(target) :], target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                walk(target)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)


def test_the_runtime_imports_no_tool_and_no_test_model():
    for module, targets in import_graph().items():
        if module.startswith(("vllm_bridge.tools", "vllm_bridge_testmodel")):
            continue
        bad = {
            t
            for t in targets
            if t.startswith(("vllm_bridge.tools", "vllm_bridge_testmodel"))
        }
        assert not bad, f"{module} (runtime) imports {sorted(bad)}"


def test_the_wheel_ships_the_runtime_only():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'packages = ["src/vllm_bridge"]' in pyproject


def test_design_doc_module_table_lists_every_module():
    text = (REPO / "docs" / "design.md").read_text()
    table = set(re.findall(r"^\| `(src/[\w/]+\.(?:py|cpp|pth))` \|", text, re.M))
    files = {
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in (SRC / package).rglob("*")
        if path.suffix in (".py", ".cpp") and path.stat().st_size > 0
    } | {"src/vllm_bridge_startup.pth"}
    assert sorted(files - table) == [], "modules missing from docs/design.md"
    assert sorted(table - files) == [], "docs/design.md lists modules that do not exist"
