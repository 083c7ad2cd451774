"""The package's rooms keep their rules: a pure core, a sidecar without the dev tools, no cycles.

Every import statement counts, including those under ``if TYPE_CHECKING:`` and inside functions.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "specdec_exporter"
NETWORK_AND_SERVERS = ("httpx", "fastapi", "starlette", "uvicorn", "httptools", "socket", "asyncio")
SHIPPED_ROOMS = ("core", "sidecar", "tap")
"""What the sidecar runs: none of it may import the dev tools or the commands."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def imported(path: Path, own_name: str) -> tuple[str, ...]:
    """Every module named by an import statement of the file, relative imports resolved."""
    return tuple(_imported(path, own_name))


def _imported(path: Path, own_name: str) -> Iterator[str]:
    package = own_name if path.name == "__init__.py" else own_name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


@functools.cache
def internal_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from pkg import mod`` names mod)."""
    known = modules()
    return {
        name: {target for target in imported(path, name) if target in known and target != name}
        for name, path in known.items()
    }


# Parsed once, at collection: CPython 3.11's ast.parse can fail with "AST constructor recursion
# depth mismatch" after another test in the process has hit a RecursionError.
internal_graph()


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_rooms_exist() -> None:
    rooms = {room_of(name) for name in modules()}
    assert {"core", "sidecar", "tap", "commands", "devtools"} <= rooms


@pytest.mark.parametrize("name", [n for n in modules() if room_of(n) == "core"])
def test_core_does_no_io(name: str) -> None:
    path = modules()[name]
    roots = {target.split(".")[0] for target in imported(path, name)}
    forbidden = roots & set(NETWORK_AND_SERVERS)
    assert not forbidden, f"{name} imports {forbidden}"
    outside = {t for t in internal_graph()[name] if room_of(t) not in ("core", "")}
    assert not outside, f"core module {name} imports {outside}"


@pytest.mark.parametrize("name", [n for n in modules() if room_of(n) in SHIPPED_ROOMS])
def test_sidecar_never_imports_dev_tools_or_commands(name: str) -> None:
    bad = {t for t in internal_graph()[name] if room_of(t) in ("devtools", "commands")}
    assert not bad, f"{name} imports {bad}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as a path that returns to its start; None when acyclic."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def package_graph() -> dict[str, set[str]]:
    """The import graph without edges to a package's own ``__init__`` (re-exports, not cycles)."""
    graph = internal_graph()
    return {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in graph.items()
    }


def test_no_import_cycles() -> None:
    assert find_cycle(package_graph()) is None, " -> ".join(find_cycle(package_graph()) or [])


def test_the_cycle_finder_finds_a_type_checking_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
