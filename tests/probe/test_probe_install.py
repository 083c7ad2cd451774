"""What goes into vLLM's process: exactly the probe's import closure, pure Python, stdlib-only core,
Python 3.11 syntax, and a dist-info that importlib.metadata reads as vLLM's plugin loader does."""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdec_exporter.cli import main
from specdec_exporter.probe import install

PROBE_MODULES = {
    "specdec_exporter",
    "specdec_exporter.core",
    "specdec_exporter.core.buckets",
    "specdec_exporter.core.histogram_bounds",
    "specdec_exporter.core.probe_files",
    "specdec_exporter.core.probe_names",
    "specdec_exporter.core.speculative_config",
    "specdec_exporter.probe",
    "specdec_exporter.probe.counting",
    "specdec_exporter.probe.families",
    "specdec_exporter.probe.files",
    "specdec_exporter.probe.hooks",
    "specdec_exporter.probe.plugin",
}
"""The import set, pinned: a new import into the probe is a decision, made here."""
ALLOWED_OUTSIDE = {"prometheus_client", "vllm"}


def test_the_probe_imports_only_these_modules() -> None:
    assert set(install.closure()) == PROBE_MODULES


def roots_imported(module: str) -> set[str]:
    path = install.module_path(module)
    assert path is not None
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", sorted(PROBE_MODULES))
def test_each_module_imports_only_the_stdlib_prometheus_client_vllm_and_itself(
    module: str,
) -> None:
    outside = roots_imported(module) - set(sys.stdlib_module_names) - {"specdec_exporter"}
    assert outside <= ALLOWED_OUTSIDE, outside
    if module.startswith("specdec_exporter.core"):
        assert outside == set(), "core modules copied into vLLM import only the stdlib"
    if module != "specdec_exporter.probe.plugin":
        assert "vllm" not in outside, "only the plugin module imports vLLM"


@pytest.mark.parametrize("module", sorted(PROBE_MODULES))
def test_each_module_parses_as_python_3_11(module: str) -> None:
    """vLLM's image runs its own Python (3.11 in the CI stage, often 3.12)."""
    path = install.module_path(module)
    assert path is not None
    ast.parse(path.read_text(), str(path), feature_version=(3, 11))


def test_install_probe_writes_exactly_the_closure_and_a_minimal_dist_info(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "probe"
    (target / "unrelated.txt").parent.mkdir()
    (target / "unrelated.txt").write_text("kept")
    (target / "vllm_specdec_probe-0.0.1.dist-info").mkdir()  # an older copy: replaced
    assert main(["install-probe", str(target), "--quiet"]) == 0
    assert capsys.readouterr().out == ""

    written = {path.relative_to(target).as_posix() for path in target.rglob("*") if path.is_file()}
    info = install.dist_info_name()
    modules = {
        (
            f"{name.replace('.', '/')}/__init__.py"
            if install.module_path(name).name == "__init__.py"  # type: ignore[union-attr]
            else f"{name.replace('.', '/')}.py"
        )
        for name in PROBE_MODULES
    }
    assert written == {
        *modules,
        f"{info}/METADATA",
        f"{info}/entry_points.txt",
        f"{info}/RECORD",
        "unrelated.txt",
    }
    assert (target / info / "entry_points.txt").read_text() == (
        "[vllm.stat_logger_plugins]\n"
        "specdec_probe = specdec_exporter.probe.plugin:SpecdecProbeStatLogger\n"
    )
    metadata = (target / info / "METADATA").read_text()
    assert "Requires-Dist" not in metadata and "console_scripts" not in metadata
    for line in (target / info / "RECORD").read_text().splitlines():
        name, digest, size = line.split(",")
        if name == f"{info}/RECORD":
            continue
        data = (target / name).read_bytes()
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, size) == (f"sha256={expected}", str(len(data)))


def test_importlib_metadata_finds_the_entry_point_in_the_directory(tmp_path: Path) -> None:
    install.install(tmp_path)
    found = [
        entry
        for distribution in importlib.metadata.distributions(path=[str(tmp_path)])
        for entry in distribution.entry_points
        if entry.group == "vllm.stat_logger_plugins"
    ]
    assert [(entry.name, entry.value) for entry in found] == [
        ("specdec_probe", "specdec_exporter.probe.plugin:SpecdecProbeStatLogger")
    ]


def test_the_copy_runs_alone_from_pythonpath(tmp_path: Path) -> None:
    """Only the copy and prometheus_client on the path (no pydantic, no httpx, no sidecar): the
    hooks check and the families work, and the copy is what gets imported."""
    install.install(tmp_path)
    import prometheus_client  # noqa: PLC0415

    client_root = Path(prometheus_client.__file__).parents[1]
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}]
        sys.path.append({str(client_root)!r})
        from specdec_exporter.probe import hooks, families
        assert families.__file__.startswith({str(tmp_path)!r}), families.__file__
        print(sorted(hooks.check_imported()["temperature"])[0].split(":")[0])
        families.Families()
        for heavy in ("pydantic", "httpx", "fastapi", "specdec_exporter.sidecar"):
            assert heavy not in sys.modules, heavy
        """
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "vllm.v1.engine.output_processor"


def test_a_directory_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["install-probe", str(blocker / "probe")]) == 73
    err = capsys.readouterr().err
    assert err.startswith("specdec-exporter install-probe: cannot write the probe into ")
    assert err.count("\n") == 1


def test_a_missing_directory_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install-probe"]) == 64
    assert capsys.readouterr().err == "specdec-exporter install-probe: error: DIR is required\n"
