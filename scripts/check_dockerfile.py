"""Run every command of the Dockerfile in fresh virtual environments (no Docker engine here).

Checks the Dockerfile's shape (multi-stage, numeric non-root USER, exec-form ENTRYPOINT, EXPOSE,
OCI labels, dependencies installed from the lock with hashes before the code is copied), then
replays each stage: COPY into a scratch root, each RUN with `python` bound to a fresh venv of that
stage and absolute paths moved under the scratch root. A RUN of apt-get is not replayed as written
(it would empty this machine's package lists): the packages it installs must be installed here,
and are installed when missing and this runs as root. Then, in the final stage's venv, the tap's
modules are the compiled ones, the engine probe's copy (/opt/specdec-probe) is pure Python, matches
its RECORD and loads through its entry point with PYTHONPATH set, every command answers --help or,
where the image leaves its dev tools out, says so in one line; and the ENTRYPOINT + CMD, given
SPECDEC_LISTEN, serves /healthz there.
Run: python scripts/check_dockerfile.py
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", text)
    result = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def check_shape(steps: list[tuple[str, str]]) -> None:
    froms = [rest for keyword, rest in steps if keyword == "FROM"]
    assert len(froms) >= 2, "not multi-stage"
    user = [rest for keyword, rest in steps if keyword == "USER"]
    assert user and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[-1]), "USER must be numeric non-root"
    entrypoint = [rest for keyword, rest in steps if keyword == "ENTRYPOINT"][-1]
    assert isinstance(json.loads(entrypoint), list), "ENTRYPOINT must be exec form"
    assert any(keyword == "EXPOSE" for keyword, _ in steps), "no EXPOSE"
    labels = " ".join(rest for keyword, rest in steps if keyword == "LABEL")
    for key in ("title", "description", "version", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels, f"missing OCI label {key}"
    final = steps[len(steps) - 1 - [k for k, _ in reversed(steps)].index("FROM") :]
    runs = [rest for keyword, rest in final if keyword == "RUN"]
    assert "--require-hashes -r /deps/requirements.lock" in runs[0], "deps not from the lock"
    assert all("--no-deps" in run for run in runs[1:] if "pip install" in run)
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert copies[0].startswith("requirements.lock"), "code copied before the dependency layer"


def apt_packages(command: str) -> list[str] | None:
    """The packages an `apt-get install` RUN installs, or None for any other RUN."""
    match = re.search(r"\bapt-get install ((?:[\w.+-]+ ?)+)", command)
    if match is None:
        return None
    return [word for word in match.group(1).split() if not word.startswith("-")]


def ensure_installed(packages: list[str]) -> None:
    def missing() -> list[str]:
        return [
            name
            for name in packages
            if subprocess.run(
                ["dpkg-query", "--show", "--showformat=${Status}", name],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            != "install ok installed"
        ]

    absent = missing()
    if absent:
        print(f"+ apt-get install {' '.join(absent)}", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "--yes", "-qq", *absent], check=True)
        assert not missing(), f"apt-get did not install {missing()}"
    print(f"apt packages installed: {' '.join(packages)}", flush=True)


def run(command: str, venv: Path, scratch: Path, cwd: Path) -> None:
    moved = re.sub(
        r"(?<![\w.])/(wheels|src|deps|opt)\b", lambda m: str(scratch / m.group(1)), command
    )
    moved = re.sub(r"\bpython\b", str(venv / "bin" / "python"), moved)
    moved = re.sub(r"(?<![\w/.-])specdec-exporter\b", str(venv / "bin" / "specdec-exporter"), moved)
    print(f"+ {moved}", flush=True)
    subprocess.run(moved, shell=True, check=True, cwd=cwd)


def replay(steps: list[tuple[str, str]], scratch: Path) -> Path:
    venv = None
    workdir = scratch
    for keyword, rest in steps:
        if keyword == "FROM":
            venv = scratch / f"venv{len(list(scratch.glob('venv*')))}"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            workdir = scratch
        elif keyword == "WORKDIR":
            workdir = scratch / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY" and not rest.startswith("--from"):
            *sources, target = rest.split()
            destination = workdir / target if not target.startswith("/") else scratch / target[1:]
            destination.mkdir(parents=True, exist_ok=True)
            for source in sources:
                path = ROOT / source
                if path.is_dir():  # Docker copies a directory's contents, not the directory
                    shutil.copytree(path, destination, dirs_exist_ok=True)
                else:
                    shutil.copy2(path, destination / path.name)
        elif keyword == "RUN" and (packages := apt_packages(rest)) is not None:
            ensure_installed(packages)
        elif keyword == "RUN":
            assert venv is not None
            run(rest, venv, scratch, workdir)
    assert venv is not None
    return venv


def check_compiled(venv: Path) -> None:
    """The image's tap is the one mypyc compiled (setup.py's list), not the Python source."""
    modules = runpy.run_path(str(ROOT / "setup.py"))["COMPILED_TAP_MODULES"]  # builds nothing
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    path = importlib.import_module(f'specdec_exporter.tap.{name}').__file__\n"
        "    assert path.endswith('.so'), path\n"
    )
    subprocess.run([str(venv / "bin" / "python"), "-c", probe, *modules], check=True, cwd="/")
    print(f"compiled tap modules: {len(modules)}")


PROBE_COPY = "/opt/specdec-probe"
"""Where the image holds the engine probe (the probe component's init container copies it)."""

_PROBE_LOAD_CHECK = """
import sys
from importlib.metadata import distributions, entry_points
copy = sys.argv[1]
(ep,) = entry_points(group="vllm.stat_logger_plugins", name="specdec_probe")
(dist,) = [d for d in distributions(path=[copy])]
assert ep.dist is not None and ep.dist.name == dist.name, (ep.dist, dist)
plugin = ep.load()
loaded = {n: m.__file__ for n, m in sys.modules.items() if n.split(".")[0] == "specdec_exporter"}
outside = {n: f for n, f in loaded.items() if not (f or "").startswith(copy + "/")}
assert not outside, f"loaded from outside the copy: {outside}"
assert all(f.endswith(".py") for f in loaded.values()), loaded
print(f"{ep.value} loads from the copy ({len(loaded)} modules)")
"""


def check_probe_copy(venv: Path, scratch: Path, fake_vllm: Path) -> None:
    """The image's probe copy is pure Python, exactly what its RECORD lists, and loadable.

    Loaded by the final stage's interpreter with PYTHONPATH=copy (as vLLM loads it) and a stub
    `vllm.v1.metrics.loggers.StatLoggerBase` (no vLLM here): the entry point must resolve through
    importlib.metadata, and every specdec_exporter module must come from the copy as a .py file
    (the installed package next to it is the compiled one)."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415

    copy = scratch / PROBE_COPY.lstrip("/")
    found = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()}
    (record,) = [name for name in found if name.endswith(".dist-info/RECORD")]
    listed = {}
    for line in (copy / record).read_text(encoding="utf-8").splitlines():
        name, digest, _ = line.rsplit(",", 2)
        listed[name] = digest
    assert found == set(listed), f"files not in RECORD: {found ^ set(listed)}"
    for name, digest in listed.items():
        if digest:
            data = (copy / name).read_bytes()
            ours = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={ours}", f"{name}: content differs from RECORD"
    code = [name for name in found if ".dist-info/" not in name]
    assert code and all(name.endswith(".py") for name in code), f"not pure Python: {code}"
    stub = fake_vllm / "vllm" / "v1" / "metrics"
    stub.mkdir(parents=True)
    for package in (stub.parents[1], stub.parent, stub):
        (package / "__init__.py").write_text("")
    (stub / "loggers.py").write_text("class StatLoggerBase:\n    pass\n")
    subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROBE_LOAD_CHECK, str(copy)],
        check=True,
        cwd="/",
        env={"PYTHONPATH": f"{copy}:{fake_vllm}", "PATH": "/usr/bin:/bin"},
    )
    print(f"probe copy: {len(code)} Python files + dist-info, pure Python, loadable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_entrypoint(steps: list[tuple[str, str]], venv: Path) -> None:
    entrypoint = json.loads([rest for keyword, rest in steps if keyword == "ENTRYPOINT"][-1])
    command = json.loads([rest for keyword, rest in steps if keyword == "CMD"][-1])
    serves_healthz([*entrypoint, *command], venv, "the ENTRYPOINT")


def start_component_command(venv: Path) -> None:
    """The sidecar component's command (the keeper running `run`, docs/deploy.md) in the image."""
    import yaml  # noqa: PLC0415  (the checkout's dev environment, as for the command list)

    patch = yaml.safe_load((ROOT / "deploy/components/sidecar/sidecar.yaml").read_text())
    (container,) = patch["spec"]["template"]["spec"]["initContainers"]
    serves_healthz([*container["command"], *container["args"]], venv, "the component's command")


def serves_healthz(argv: list[str], venv: Path, what: str) -> None:
    """``argv``, run as the image would (its programs first on PATH), serves /healthz."""
    port = free_port()
    # Settings by environment, as `docker run -e` gives them: an option in CMD would override them.
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPECDEC_LISTEN": f"127.0.0.1:{port}",
        "SPECDEC_VLLM_URL": "http://127.0.0.1:9",
    }
    argv = [str(venv / "bin" / argv[0]), *argv[1:]]
    print(f"+ SPECDEC_LISTEN=127.0.0.1:{port} " + " ".join(argv), flush=True)
    process = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    print(f"{what} serves /healthz")
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"{what} never served /healthz")
    finally:
        process.terminate()
        process.wait(timeout=15)


SIDECAR_COMMANDS = ("run", "check", "calibrate")
"""Commands the image must keep (calibrate where the CLI has it): nothing of theirs is left out."""


def check_commands(venv: Path) -> None:
    """Each command answers --help, or exits 69 with one line saying its dev tools are left out."""
    from specdec_exporter.cli import COMMANDS  # noqa: PLC0415  (the checkout's own command list)

    for name in COMMANDS:
        result = subprocess.run(
            [str(venv / "bin" / "specdec-exporter"), name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode == 0:
            continue
        assert name not in SIDECAR_COMMANDS, f"{name} fails in the image: {result.stderr}"
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 69 and len(lines) == 1 and "left out" in lines[0], (
            f"{name}: exit {result.returncode}, stderr {result.stderr!r}"
        )
        print(f"{name}: {lines[0]}")


def main() -> None:
    steps = instructions((ROOT / "Dockerfile").read_text())
    check_shape(steps)
    with tempfile.TemporaryDirectory(prefix="dockerfile-") as scratch:
        venv = replay(steps, Path(scratch))
        check_compiled(venv)
        check_probe_copy(venv, Path(scratch), Path(scratch) / "fake-vllm")
        check_commands(venv)
        start_entrypoint(steps, venv)
        start_component_command(venv)
    print("Dockerfile commands OK")


if __name__ == "__main__":
    main()
