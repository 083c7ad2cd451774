"""The package's rooms keep their rules: a pure core, a sidecar without the dev tools, a tap that
does not reach into the sidecar, a tap exchange whose parts never reach back into it, dev tools
that do not reach into the commands, a probe that runs inside vLLM on the standard library, and
no cycles.

Every import counts: statements under ``if TYPE_CHECKING:`` and inside functions, and
``importlib.import_module`` calls with a literal name (an f-string with a literal prefix,
``f"specdec_exporter.commands.{name}"``, names every module under that prefix). Each rule is a
function over a package tree, run on the real one and on a tree with a violation planted.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "specdec_exporter"
NETWORK_AND_SERVERS = ("httpx", "fastapi", "starlette", "uvicorn", "httptools", "socket", "asyncio")
FILES_PROCESSES_AND_OS = (
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "subprocess",
    "signal",
    "threading",
    "multiprocessing",
    "select",
    "selectors",
    "ssl",
    "http",
    "urllib",
)
CORE_FORBIDDEN = frozenset(NETWORK_AND_SERVERS + FILES_PROCESSES_AND_OS)
"""What no core module may import: the network, servers, files, processes, the OS."""
IO_BUILTINS = frozenset({"open", "print", "input"})
SHIPPED_ROOMS = ("core", "sidecar", "tap")
"""What the sidecar runs: none of it may import the dev tools or the commands."""
PROBE_MAY_IMPORT = frozenset({"prometheus_client", "vllm", "__future__"})
"""Besides the standard library and stdlib-only core modules: what runs inside vLLM's process."""
TAP_LAYERS = (
    ("proxy",),
    ("exchange",),
    ("request_side", "response_side", "downstream", "inspection"),
)
"""The tap's modules from the socket inwards: each imports only modules of its own layer or
below (every other tap module is below all three). The exchange's parts never import the
exchange, and the exchange never imports the proxy: they hand back bytes or verdicts instead of
calling back (docs/tap.md, "Per-request state")."""


# The import graph of a package tree


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@functools.cache
def imported(path: Path, own_name: str) -> tuple[str, ...]:
    """Every module named by an import of the file, relative imports resolved; a name ending in
    ``*`` stands for every module under that prefix."""
    return tuple(_imported(path, own_name))


def _imported(path: Path, own_name: str) -> Iterator[str]:
    package = own_name if path.name == "__init__.py" else own_name.rpartition(".")[0]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            name = _literal_module(node.args[0])
            if name is not None:
                yield name


def _is_import_module(func: ast.expr) -> bool:
    """``importlib.import_module(...)`` or a bare ``import_module(...)``."""
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id == "import_module"


def _literal_module(argument: ast.expr) -> str | None:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.JoinedStr) and argument.values:
        head = argument.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value:
            return head.value.rstrip(".") + ".*"
    return None


@functools.cache
def internal_graph(root: Path = PACKAGE) -> dict[str, frozenset[str]]:
    """Module -> the package's modules it imports (``from pkg import mod`` names mod)."""
    known = modules(root)
    return {
        name: frozenset(
            target
            for named in imported(path, name)
            for target in _expand(named, known)
            if target != name
        )
        for name, path in known.items()
    }


def _expand(named: str, known: dict[str, Path]) -> Iterator[str]:
    if named.endswith(".*"):
        prefix = named[:-1]
        yield from (module for module in known if module.startswith(prefix))
    elif named in known:
        yield named


# Parsed once, at collection: CPython 3.11's ast.parse can fail with "AST constructor recursion
# depth mismatch" after another test in the process has hit a RecursionError.
internal_graph()


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def external_roots(root: Path, name: str) -> set[str]:
    """The top-level names of everything outside the package that module ``name`` imports."""
    package = root.name
    return {
        target.split(".")[0]
        for target in imported(modules(root)[name], name)
        if target.split(".")[0] != package and not target.endswith(".*")
    }


# The rules: each returns its violations as readable lines, none when the tree keeps it


def core_io_violations(root: Path, name: str) -> list[str]:
    """A core module imports no I/O (network, servers, files, processes, the OS), calls no I/O
    builtin, and imports nothing of the package outside core/."""
    found = [f"{name} imports {r}" for r in sorted(external_roots(root, name) & CORE_FORBIDDEN)]
    for node in ast.walk(parsed(modules(root)[name])):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in IO_BUILTINS
        ):
            found.append(f"{name} calls {node.func.id}()")
    outside = sorted(t for t in internal_graph(root)[name] if room_of(t) not in ("core", ""))
    found += [f"core module {name} imports {target}" for target in outside]
    return found


def room_violations(root: Path, rooms: tuple[str, ...], barred: tuple[str, ...]) -> list[str]:
    """Modules of ``rooms`` that import a module of a ``barred`` room."""
    return [
        f"{name} imports {target}"
        for name, targets in sorted(internal_graph(root).items())
        if room_of(name) in rooms
        for target in sorted(targets)
        if room_of(target) in barred
    ]


def tap_layer_violations(root: Path) -> list[str]:
    """Tap modules that import a module of a layer above their own (``TAP_LAYERS``)."""
    tap = f"{root.name}.tap."
    depth = {tap + stem: index for index, layer in enumerate(TAP_LAYERS) for stem in layer}

    def layer(name: str) -> int:
        return depth.get(name, len(TAP_LAYERS))

    return [
        f"{name} imports {target}, a layer above it"
        for name, targets in sorted(internal_graph(root).items())
        if name.startswith(tap)
        for target in sorted(targets)
        if target.startswith(tap) and layer(target) < layer(name)
    ]


def find_cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
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


def package_graph(root: Path = PACKAGE) -> dict[str, frozenset[str]]:
    """The import graph without edges to a package's own ``__init__`` (re-exports, not cycles)."""
    return {
        name: frozenset(t for t in targets if not name.startswith(t + "."))
        for name, targets in internal_graph(root).items()
    }


def cycle_violations(root: Path) -> list[str]:
    cycle = find_cycle(package_graph(root))
    return [] if cycle is None else [" -> ".join(cycle)]


def stdlib_only(root: Path, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Module ``name`` imports only the standard library and package modules that do too (its
    parent packages' ``__init__`` files included: importing it runs them)."""
    if name in seen:
        return True
    seen = seen | {name}
    parents = [name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)]
    internal = internal_graph(root)[name] | {p for p in parents if p in modules(root)}
    return all(
        root_name in sys.stdlib_module_names or root_name == "__future__"
        for root_name in external_roots(root, name)
    ) and all(stdlib_only(root, target, seen) for target in internal)


def probe_violations(root: Path) -> list[str]:
    """The engine probe (``probe/``, run inside vLLM) imports only the standard library,
    prometheus_client, vllm, its own modules and core modules that import only the standard
    library."""
    found = []
    for name in sorted(modules(root)):
        if room_of(name) != "probe":
            continue
        for outside in sorted(external_roots(root, name)):
            if outside not in sys.stdlib_module_names and outside not in PROBE_MAY_IMPORT:
                found.append(f"{name} imports {outside}")
        for target in sorted(internal_graph(root)[name]):
            if room_of(target) == "probe":
                continue
            if room_of(target) not in ("core", "") or not stdlib_only(root, target):
                found.append(f"{name} imports {target}, which is not a stdlib-only core module")
    return found


# The rules hold for the package


def test_the_rooms_exist() -> None:
    rooms = {room_of(name) for name in modules()}
    assert {"core", "sidecar", "tap", "commands", "devtools"} <= rooms


@pytest.mark.parametrize("name", [n for n in modules() if room_of(n) == "core"])
def test_core_does_no_io(name: str) -> None:
    assert core_io_violations(PACKAGE, name) == []


def test_sidecar_never_imports_dev_tools_or_commands() -> None:
    assert room_violations(PACKAGE, SHIPPED_ROOMS, ("devtools", "commands")) == []


def test_the_tap_imports_nothing_from_the_sidecar() -> None:
    assert room_violations(PACKAGE, ("tap",), ("sidecar",)) == []


def test_the_tap_exchange_parts_never_import_the_exchange_or_the_proxy() -> None:
    assert tap_layer_violations(PACKAGE) == []


def test_the_dev_tools_import_nothing_from_the_commands() -> None:
    assert room_violations(PACKAGE, ("devtools",), ("commands",)) == []


def test_no_import_cycles() -> None:
    assert cycle_violations(PACKAGE) == []


def test_the_probe_imports_only_what_vllm_has() -> None:
    if not (PACKAGE / "probe").is_dir():
        pytest.skip("no specdec_exporter/probe/ yet")
    assert probe_violations(PACKAGE) == []


def test_import_module_calls_are_edges() -> None:
    """The dispatcher imports every command through importlib, by an f-string."""
    assert "specdec_exporter.commands.demo" in internal_graph()["specdec_exporter.cli"]


# Each rule fails on a tree with a violation planted


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``tmp_path`` with ``files`` (path inside it -> source)."""
    root = tmp_path / "pkg"
    for relative, source in {"__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(source)
    return root


PLANTED: dict[str, tuple[dict[str, str], Callable[[Path], list[str]]]] = {
    "core imports the network": (
        {"core/a.py": "def f():\n    import socket\n"},
        lambda root: core_io_violations(root, "pkg.core.a"),
    ),
    "core reads a file": (
        {"core/a.py": "from pathlib import Path\n"},
        lambda root: core_io_violations(root, "pkg.core.a"),
    ),
    "core calls open": (
        {"core/a.py": "def f(p):\n    return open(p).read()\n"},
        lambda root: core_io_violations(root, "pkg.core.a"),
    ),
    "core imports the sidecar": (
        {"core/a.py": "from pkg.sidecar import b\n", "sidecar/b.py": ""},
        lambda root: core_io_violations(root, "pkg.core.a"),
    ),
    "the sidecar imports a dev tool": (
        {"sidecar/a.py": "from pkg.devtools.sim import app\n", "devtools/sim/app.py": ""},
        lambda root: room_violations(root, SHIPPED_ROOMS, ("devtools", "commands")),
    ),
    "the tap imports the sidecar for types only": (
        {
            "tap/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.sidecar.config import Settings\n",
            "sidecar/config.py": "",
        },
        lambda root: room_violations(root, ("tap",), ("sidecar",)),
    ),
    "the response side imports the exchange for types only": (
        {
            "tap/response_side.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.tap.exchange import Exchange\n",
            "tap/exchange.py": "",
        },
        tap_layer_violations,
    ),
    "a module under the tap's layers imports the proxy": (
        {"tap/http1.py": "from pkg.tap import proxy\n", "tap/proxy.py": ""},
        tap_layer_violations,
    ),
    "a dev tool imports a command through importlib": (
        {
            "devtools/a.py": "import importlib\nimportlib.import_module('pkg.commands.flags')\n",
            "commands/flags.py": "",
        },
        lambda root: room_violations(root, ("devtools",), ("commands",)),
    ),
    "a cycle through an f-string import_module": (
        {
            "cli.py": "from importlib import import_module\n"
            "def load(name):\n    return import_module(f'pkg.commands.{name}')\n",
            "commands/demo.py": "from pkg.cli import load\n",
        },
        cycle_violations,
    ),
    "the probe imports httpx": (
        {"probe/a.py": "import httpx\n"},
        probe_violations,
    ),
    "the probe imports a core module that imports pydantic": (
        {"probe/a.py": "from pkg.core import b\n", "core/b.py": "import pydantic\n"},
        probe_violations,
    ),
    "the probe imports a core module whose neighbour imports pydantic": (
        {
            "probe/a.py": "from pkg.core.b import X\n",
            "core/b.py": "from pkg.core.c import X\n",
            "core/c.py": "import pydantic\nX = 1\n",
        },
        probe_violations,
    ),
    "the probe imports the sidecar": (
        {"probe/a.py": "import pkg.sidecar.b\n", "sidecar/b.py": ""},
        probe_violations,
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_rule_fails_on_a_planted_violation(tmp_path: Path, case: str) -> None:
    files, rule = PLANTED[case]
    assert rule(plant(tmp_path, files)) != []


def test_the_rules_pass_a_clean_planted_tree(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "core/a.py": "import math\nimport json\n",
            "core/b.py": "from pkg.core import a\n",
            "probe/p.py": "import vllm\nimport prometheus_client\nfrom pkg.core.b import a\n",
            "tap/t.py": "from pkg.core import a\n",
            "tap/proxy.py": "from pkg.tap import exchange\n",
            "tap/exchange.py": "from pkg.tap import response_side, request_side\n",
            "tap/response_side.py": "from pkg.tap import request_side, downstream, t\n",
            "tap/request_side.py": "from pkg.tap import t\n",
            "tap/downstream.py": "",
            "devtools/d.py": "from pkg.sidecar import s\n",
            "sidecar/s.py": "from pkg.tap import t\n",
        },
    )
    assert core_io_violations(root, "pkg.core.a") == []
    assert room_violations(root, ("tap",), ("sidecar",)) == []
    assert tap_layer_violations(root) == []
    assert room_violations(root, ("devtools",), ("commands",)) == []
    assert probe_violations(root) == []
    assert cycle_violations(root) == []


def test_the_cycle_finder_finds_a_type_checking_cycle() -> None:
    graph = {"a": frozenset("b"), "b": frozenset("c"), "c": frozenset("a"), "d": frozenset()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": frozenset("b"), "b": frozenset()}) is None
