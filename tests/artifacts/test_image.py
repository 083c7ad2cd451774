"""The image's contents: the lock satisfies pyproject.toml, and without the dev tools the image
leaves out, every sidecar command works and the others say so in one line."""

from __future__ import annotations

import json
import os
import queue
import re
import runpy
import shutil
import subprocess
import sys
import threading
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from specdec_exporter.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "specdec_exporter"


def left_out_by_the_dockerfile() -> list[Path]:
    """The package folders the Dockerfile's build stage removes before building the wheel."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text(encoding="utf-8"))
    (removal,) = re.findall(r"RUN rm -r ((?:src/specdec_exporter/\S+ )+)", text)
    return [ROOT / part for part in removal.split()]


@pytest.fixture(scope="module")
def image_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package with the same folders left out, first on PYTHONPATH."""
    root = tmp_path_factory.mktemp("image-site")
    shutil.copytree(PACKAGE, root / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in left_out_by_the_dockerfile():
        shutil.rmtree(root / folder.relative_to(PACKAGE.parent))
    return root


def specdec(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "specdec_exporter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_image_leaves_out_the_simulator_and_the_sweep_only() -> None:
    assert [p.relative_to(PACKAGE).as_posix() for p in left_out_by_the_dockerfile()] == [
        "devtools/sim",
        "devtools/sweep",
    ]


@pytest.mark.parametrize(
    "args", [("simulate", "--help"), ("sweep", "--help"), ("demo", "--duration", "1")], ids=" ".join
)
def test_a_command_that_needs_left_out_tools_says_so_in_one_line(
    image_package: Path, args: tuple[str, ...]
) -> None:
    result = specdec(image_package, *args)
    assert result.returncode == 69
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"specdec-exporter {args[0]}: specdec_exporter.devtools.")
    assert "left out of this installation" in result.stderr


@pytest.mark.parametrize("name", [n for n in COMMANDS if n not in ("simulate", "sweep")])
def test_every_other_command_works_without_them(image_package: Path, name: str) -> None:
    """`run`, `check`, the load generator (`calibrate` drives it) and `demo` against a vLLM."""
    result = specdec(image_package, name, "--help")
    assert result.returncode == 0, result.stderr


def test_the_lock_satisfies_pyproject(tmp_path: Path) -> None:
    """As the Dockerfile installs: the build stage's lock, the wheel without dependencies and
    the runtime lock with hashes, then `pip check` in a fresh venv (needs PyPI)."""
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")

    def pip(*args: str) -> str:
        result = subprocess.run(
            [python, "-m", "pip", *args, "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    pip("install", "-q", "--require-hashes", "-r", str(ROOT / "requirements-build.lock"))
    pip("install", "-q", "--require-hashes", "-r", str(ROOT / "requirements.lock"))
    pip("install", "-q", "--no-deps", "--no-build-isolation", str(ROOT))
    assert pip("check").strip() == "No broken requirements found."


def compiled_tap_modules() -> tuple[str, ...]:
    """setup.py's list (run as a plain module, it builds nothing)."""
    names: tuple[str, ...] = runpy.run_path(str(ROOT / "setup.py"))["COMPILED_TAP_MODULES"]
    return names


def test_the_image_compiles_every_module_of_the_tap() -> None:
    """A new tap module is compiled in the image (setup.py) unless left out here on purpose."""
    modules = {path.stem for path in (PACKAGE / "tap").glob("*.py")}
    assert set(compiled_tap_modules()) == modules - {"__init__"}
    assert "SPECDEC_COMPILE=1 python -m pip wheel" in (ROOT / "Dockerfile").read_text()


def pins(lock: Path) -> dict[str, str]:
    return dict(re.findall(r"^([\w.-]+)==(\S+) \\$", lock.read_text(encoding="utf-8"), re.M))


def test_the_tap_is_compiled_against_the_packages_it_runs_with() -> None:
    """The build stage's lock holds the runtime lock's pins exactly, plus the compiler."""
    runtime, build = pins(ROOT / "requirements.lock"), pins(ROOT / "requirements-build.lock")
    assert runtime and {name: build.get(name) for name in runtime} == runtime
    assert {"mypy", "setuptools", "wheel"} <= build.keys()


def image_command() -> list[str]:
    """The Dockerfile's ENTRYPOINT + CMD (exec form), without the `specdec-exporter` program."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (entrypoint,) = re.findall(r"^ENTRYPOINT (\[.*\])$", text, re.MULTILINE)
    (command,) = re.findall(r"^CMD (\[.*\])$", text, re.MULTILINE)
    program, *arguments = json.loads(entrypoint) + json.loads(command)
    assert program == "specdec-exporter"
    return arguments


def test_the_images_command_lets_specdec_listen_choose_the_address(image_package: Path) -> None:
    """`docker run -e SPECDEC_LISTEN=...`: the environment reaches the sidecar, no option in CMD
    overrides it (a flag wins over its variable)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(image_package),
        "SPECDEC_LISTEN": "127.0.0.1:0",
        "SPECDEC_VLLM_URL": "http://127.0.0.1:9",
    }
    with subprocess.Popen(
        [sys.executable, "-m", "specdec_exporter.cli", *image_command()],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            listening = first_record(process, lambda r: r.get("msg") == "listening")
        finally:
            process.terminate()
            process.wait(timeout=15)
    assert listening["component"] == "metrics"
    host, _, port = str(listening["address"]).rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0


def first_record(
    process: subprocess.Popen[str], matches: Callable[[dict[str, object]], bool]
) -> dict[str, object]:
    """The first JSON log line on stderr that `matches` (30 s at most, or the process's end)."""
    found: queue.Queue[dict[str, object] | None] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            record = json.loads(line)
            if matches(record):
                found.put(record)
                return
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    record = found.get(timeout=30)
    assert record is not None, f"no such log line; exit code {process.poll()}"
    return record
