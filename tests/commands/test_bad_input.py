"""Every command x every class of bad input (issue 27): empty, malformed URL, not finite, out of
range, unreachable, trickling, not a sidecar. Each answer is one line on stderr, no traceback, and
the exit code the README's table gives the class for that command.

The commands and their flags come from the CLI's own definitions (``cli.COMMANDS``, each command's
parser and the settings models behind it), so a new command or flag is walked without an edit
here; a flag that takes a server's URL must be exercised below or exempted with its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import httpx
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from test_exit_codes import README, exit_code_table

from fakevllm import fake_vllm
from specdec_exporter.cli import COMMANDS, ArgumentParser, load_command, main
from specdec_exporter.commands.demo import (
    DemoSettings,
    Links,
    sidecar_command,
    sidecar_environment,
)
from specdec_exporter.commands.exits import EXIT_CANNOT_WRITE, EXIT_UNREACHABLE, EXIT_USAGE
from specdec_exporter.commands.flags import settings_models
from specdec_exporter.options import annotated_items, flag_of
from variants import capture

SPECDEC = [str(Path(sys.executable).with_name("specdec-exporter"))]
"""The console script, as an operator runs it (``python -m`` would import a ``specdec_exporter/``
of the current directory first)."""
TRACEBACK = re.compile(r"Traceback|\b[A-Z]\w*(Error|Exception)\b|\bline \d+, in ")


# The CLI's own definitions


def parser_of(command: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=f"specdec-exporter {command}")
    load_command(command).configure(parser)
    return parser


def value_flags(command: str) -> list[str]:
    """Every flag of ``command`` that takes a value (not a switch, not --help)."""
    return sorted(
        max(action.option_strings, key=len)
        for action in parser_of(command)._actions
        if action.option_strings and action.nargs != 0
    )


def fields_of(command: str) -> dict[str, tuple[type[BaseModel], FieldInfo]]:
    """flag -> (model, field) for every field of ``command``'s settings models."""
    found: dict[str, tuple[type[BaseModel], FieldInfo]] = {}
    for model in settings_models(parser_of(command)):
        for name, field in model.model_fields.items():
            found[flag_of(model, name)] = (model, field)
    return found


def _members(annotation: Any) -> Iterator[Any]:
    """The types an annotation is made of (``int | None``, ``tuple[Annotated[int, ...], ...]``)."""
    origin = get_origin(annotation)
    if origin is None:
        yield annotation
        return
    for member in get_args(annotation):
        if member is not Ellipsis:
            yield from _members(member)


def is_numeric(field: FieldInfo) -> bool:
    types_ = set(_members(field.annotation))
    return bool(types_ & {int, float}) and bool not in types_


def is_url(field: FieldInfo) -> bool:
    def named(item: object) -> bool:
        return getattr(getattr(item, "func", None), "__name__", "") in ("_check_url", "_check_link")

    if any(named(item) for item in annotated_items(field)):
        return True
    return any(
        named(item)
        for member in get_args(field.annotation)
        for inner in get_args(member) or (member,)
        for item in getattr(inner, "__metadata__", ())
    )


def flags_where(check: Callable[[FieldInfo], bool]) -> list[tuple[str, str]]:
    return sorted(
        (command, flag)
        for command in COMMANDS
        for flag, (_, field) in fields_of(command).items()
        if check(field)
    )


NUMERIC = flags_where(is_numeric)
URLS = flags_where(is_url)
VALUE_FLAGS = sorted((command, flag) for command in COMMANDS for flag in value_flags(command))


def test_the_walk_finds_every_command_and_the_flags_it_should() -> None:
    """The derivation itself: it sees every command, and the flags this issue was about."""
    assert {command for command, _ in VALUE_FLAGS} == set(COMMANDS) - {"install-probe"}
    assert {("run", "--interval"), ("run", "--model-expiry"), ("load", "--timeout")} <= set(NUMERIC)
    assert ("run", "--default-temperature") in NUMERIC
    assert {("check", "--sidecar-url"), ("calibrate", "--spec-url"), ("demo", "--vllm-url")} <= (
        set(URLS)
    )


# In-process classes: the value is refused before anything starts


class AcceptedError(Exception):
    """A bad value got past the settings: the command was about to run."""


@pytest.fixture
def refuse_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that accepted a bad value raises AcceptedError instead of serving, loading or
    configuring this process' logging (which would outlive the test)."""

    def accepted(*_: object, **__: object) -> Any:
        raise AcceptedError

    for command in COMMANDS:
        module = load_command(command)
        for name in ("run_event_loop", "serve", "install", "configure_logging"):
            if isinstance(getattr(module, name, None), types.FunctionType):
                monkeypatch.setattr(module, name, accepted)


REQUIRED: dict[str, list[str]] = {
    "calibrate": ["--spec-url", "http://a", "--base-url", "http://b"],
}
"""What a command needs besides the flag under test to get as far as that flag's check."""


def refused(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv`` in process; assert exit 64, one line naming ``flag``, no traceback."""
    command = argv[0]
    rest = [part for pair in _pairs(REQUIRED.get(command, []), flag) for part in pair]
    try:
        code = main([*argv, *rest])
    except AcceptedError:
        pytest.fail(f"{argv} was accepted")
    captured = capsys.readouterr()
    assert (code, captured.out) == (EXIT_USAGE, ""), captured.err
    [line] = captured.err.splitlines()
    assert line.startswith(f"specdec-exporter {command}: "), line
    assert flag in line, line
    assert TRACEBACK.search(line) is None, line
    return line


def _pairs(argv: list[str], skip: str) -> Iterator[tuple[str, str]]:
    for index in range(0, len(argv), 2):
        if argv[index] != skip:
            yield argv[index], argv[index + 1]


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize(("command", "flag"), VALUE_FLAGS)
def test_empty(command: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--flag "$UNSET"``: never the default, never the current directory."""
    line = refused([command, f"{flag}="], flag, capsys)
    assert "empty value" in line


def test_empty_directory_of_install_probe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install-probe", ""]) == EXIT_USAGE
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("specdec-exporter install-probe: error: DIR is empty")


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize("url", ["http://127.0.0.1:1:2", "http://[::1", "http://", "http://h:0"])
@pytest.mark.parametrize(("command", "flag"), URLS)
def test_malformed_url(
    command: str, flag: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    refused([command, f"{flag}={url}"], flag, capsys)


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize(("command", "flag"), NUMERIC)
def test_not_finite(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    refused([command, f"{flag}={value}"], flag, capsys)


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize("value", ["1e300", "-1e300", "10" + "0" * 30])
@pytest.mark.parametrize(("command", "flag"), NUMERIC)
def test_out_of_range(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every number has a range a person would choose, both ends."""
    refused([command, f"{flag}={value}"], flag, capsys)


NUMBERS_IN_TEXT = [
    ("load", "--temperatures", "inf"),
    ("load", "--temperatures", "3"),
    ("load", "--temperatures", "0:1e308,1:1e308"),
    ("sweep", "--temperatures", "1e300"),
    ("calibrate", "--temperatures", "nan"),
    ("simulate", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 100000}'),
    ("simulate", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1e300}'),
]
"""Numbers inside a flag's text (a list, a mix, JSON): finite and in range too."""


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize(("command", "flag", "value"), NUMBERS_IN_TEXT)
def test_numbers_inside_text(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    refused([command, f"{flag}={value}"], flag, capsys)


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("SPECDEC_INTERVAL", "1e-300", "--interval (or SPECDEC_INTERVAL)"),
        ("SPECDEC_MODEL_EXPIRY", "inf", "--model-expiry (or SPECDEC_MODEL_EXPIRY)"),
        ("SPECDEC_DEFAULT_TEMPERATURE", "inf", "--default-temperature (or SPECDEC_DEFAULT_"),
        ("SPECDEC_HEALTHY_ABOVE", "0.1", "--healthy-above (or SPECDEC_HEALTHY_ABOVE)"),
        ("SPECDEC_GENERATION_CONFIG", "/nonexistent", "--generation-config (or SPECDEC_GENERA"),
        ("SPECDEC_VLLM_URL", "http://[::1", "--vllm-url (or SPECDEC_VLLM_URL)"),
        ("SPECDEC_SPECULATIVE_METHOD", "eagel3", "--speculative-method (or SPECDEC_SPECULATIV"),
    ],
)
def test_a_bad_variable_names_its_flag_and_itself(
    variable: str,
    value: str,
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    line = refused(["run"], "", capsys)
    assert named in line and variable in line


# Servers that do not answer as they should: subprocesses, as an operator runs them


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def trickling_server() -> Iterator[str]:
    """Answers every request with headers, then one body byte every 0.5 s, for ever."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def trickle(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n"
            )
            while not stop.wait(0.5):
                connection.sendall(b"x")

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


SERVER_FLAGS: dict[tuple[str, str], list[str]] = {
    ("check", "--vllm-url"): ["--window", "0.1", "--scrape-timeout", "2"],
    ("load", "--url"): ["--quiet", "--timeout", "3"],
    ("sweep", "--url"): ["--quiet"],
    ("calibrate", "--spec-url"): ["--base-url", "{url}", "--warmup", "0"],
    ("demo", "--vllm-url"): ["--duration", "5"],
}
"""Each flag that names a server, with what its command needs besides it; {url} is the server
under test too."""
NOT_SERVERS = {
    ("run", "--vllm-url"): "run keeps polling (specdec_up 0) instead of exiting",
    ("run", "--runbook-url"): "a link on the live page, never fetched",
    ("run", "--grafana-dashboard-url"): "a link on the live page, never fetched",
    ("calibrate", "--base-url"): "reached after --spec-url, which stands for both",
    ("sweep", "--metrics-url"): "read after --url's models, which stands for both",
    ("check", "--sidecar-url"): "read after vLLM: tested below with a vLLM that answers",
}


def test_every_url_flag_is_walked_or_exempt_with_a_reason() -> None:
    assert set(URLS) == set(SERVER_FLAGS) | set(NOT_SERVERS)
    listed = set(re.findall(r"`([a-z-]+)`", exit_code_table()[EXIT_UNREACHABLE]))
    assert listed == {command for command, _ in SERVER_FLAGS}


def run_all(argvs: dict[str, list[str]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Start every command at once (each waits on its own deadline), then collect them."""
    started = {
        key: subprocess.Popen(
            [*SPECDEC, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for key, argv in argvs.items()
    }
    results = {}
    for key, process in started.items():
        try:
            out, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"{argvs[key]} still running after 90 s: {err[-500:]}")
        results[key] = subprocess.CompletedProcess(argvs[key], process.returncode, out, err)
    return results


def assert_one_line_exit_3(result: subprocess.CompletedProcess[str], url: str) -> str:
    assert result.returncode == EXIT_UNREACHABLE, result.stderr[-2000:]
    [line] = result.stderr.splitlines()
    assert f" at {url} did not answer: " in line, line
    assert TRACEBACK.search(line) is None, line
    return line


def server_argvs(url: str) -> dict[str, list[str]]:
    return {
        f"{command} {flag}": [
            command,
            flag,
            url,
            *(part.format(url=url) for part in extra),
        ]
        for (command, flag), extra in SERVER_FLAGS.items()
    }


def test_unreachable_every_server_flag() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    for result in run_all(server_argvs(url)).values():
        assert_one_line_exit_3(result, url)


def test_trickling_every_server_flag() -> None:
    """A server that sends a byte every 0.5 s never holds a command past its deadline."""
    with trickling_server() as url:
        for result in run_all(server_argvs(url)).values():
            line = assert_one_line_exit_3(result, url)
            assert "in time" in line or "within" in line, line


def test_a_trickling_completion_is_bounded_by_load_timeout() -> None:
    """``--timeout`` is the whole request's: the model given, every request trickles, each ends
    at its deadline as a timeout and the run fails (1) instead of hanging."""
    with trickling_server() as url:
        [result] = run_all(
            {
                "load": [
                    "load",
                    "--url",
                    url,
                    "--model",
                    "m",
                    "--timeout",
                    "1",
                    "--requests",
                    "2",
                    "--json",
                ]
            }
        ).values()
    assert result.returncode == 1, result.stderr[-2000:]
    assert '"timeout"' in result.stdout


NOT_A_SIDECAR = {
    "html": "<!doctype html><html><body>hello</body></html>\n",
    "unlabelled": "# TYPE specdec_requests_total counter\nspecdec_requests_total 3\n"
    'specdec_build_info{version="0"} 1\n',
    "vllm": capture("t1"),
    "huge": 'specdec_build_info{version="0"} 1\n' + "# padding\n" * (2 << 20),
}
"""Pages that are not a sidecar's /metrics: HTML, a tap family without its labels, vLLM's own
page, and one past the body cap (DEFAULT_MAX_BODY_BYTES)."""


def test_not_a_sidecar() -> None:
    with (
        fake_vllm(capture("t1")) as vllm,
        contextlib.ExitStack() as stack,
    ):
        urls = {
            name: stack.enter_context(fake_vllm(body)).url for name, body in NOT_A_SIDECAR.items()
        }
        results = run_all(
            {
                name: ["check", "--vllm-url", vllm.url, "--window", "0.1", "--sidecar-url", url]
                for name, url in urls.items()
            }
        )
        with trickling_server() as trickling:
            [slow] = run_all(
                {
                    "slow": [
                        "check",
                        "--vllm-url",
                        vllm.url,
                        "--window",
                        "0.1",
                        "--sidecar-url",
                        trickling,
                    ]
                }
            ).values()
    for name, result in results.items():
        line = assert_one_line_exit_3(result, urls[name])
        assert "not a specdec-exporter sidecar" in line, line
    assert "no answer in time" in assert_one_line_exit_3(slow, trickling)


# install-probe (item 1): nothing it did not write is ever deleted


def install_probe(directory: str, cwd: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPECDEC, "install-probe", directory, "--quiet"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tree(root: Any) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_install_probe_with_an_empty_dir_touches_nothing(tmp_path: Any) -> None:
    (tmp_path / "specdec_exporter").mkdir()
    (tmp_path / "specdec_exporter" / "mine.py").write_text("precious = True\n")
    before = tree(tmp_path)
    result = install_probe("", tmp_path)
    assert (result.returncode, result.stdout) == (EXIT_USAGE, "")
    [line] = result.stderr.splitlines()
    assert TRACEBACK.search(line) is None
    assert tree(tmp_path) == before


def test_install_probe_refuses_a_package_it_did_not_write(tmp_path: Any) -> None:
    """Run from a checkout's src/ (``install-probe .``): the sources stay as they were."""
    package = tmp_path / "specdec_exporter"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "buckets.py").write_text("# the real sources\n")
    before = tree(tmp_path)
    result = install_probe(".", tmp_path)
    assert (result.returncode, result.stdout) == (EXIT_CANNOT_WRITE, "")
    [line] = result.stderr.splitlines()
    assert "which no earlier install-probe wrote" in line and "nothing was changed" in line
    assert TRACEBACK.search(line) is None
    assert tree(tmp_path) == before


def test_install_probe_replaces_its_own_copy_and_keeps_the_rest(tmp_path: Any) -> None:
    """A second run replaces what the first wrote (bytecode Python compiled beside it too);
    a file of the person's own beside the probe stays."""
    assert install_probe(str(tmp_path), tmp_path).returncode == 0
    written = tree(tmp_path)
    cache = tmp_path / "specdec_exporter" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "notes.txt").write_text("mine")
    assert install_probe(str(tmp_path), tmp_path).returncode == 0
    assert tree(tmp_path) == {**written, "notes.txt": b"mine"}
    (tmp_path / "specdec_exporter" / "extra.py").write_text("mine too\n")
    before = tree(tmp_path)
    result = install_probe(str(tmp_path), tmp_path)
    assert result.returncode == EXIT_CANNOT_WRITE
    assert "specdec_exporter/extra.py" in result.stderr
    assert tree(tmp_path) == before


def test_install_probe_ignores_a_record_that_points_outside(tmp_path: Any) -> None:
    """A RECORD is read as data: an entry outside the probe's folders is never removed."""
    assert install_probe(str(tmp_path), tmp_path).returncode == 0
    outside = tmp_path / "keep.txt"
    outside.write_text("keep")
    [record] = tmp_path.glob("vllm_specdec_probe-*.dist-info/RECORD")
    record.write_text(record.read_text() + "keep.txt,,\n../keep.txt,,\n/etc/hostname,,\n")
    assert install_probe(str(tmp_path), tmp_path).returncode == 0
    assert outside.read_text() == "keep"


# URL credentials (item 2): never printed


@pytest.mark.usefixtures("refuse_to_run")
@pytest.mark.parametrize("flag", ["--runbook-url", "--grafana-dashboard-url"])
def test_a_link_with_credentials_is_refused_without_printing_them(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live page shows these links to every visitor: a user or password in one is refused
    (one line, 64), and the line shows neither."""
    line = refused(["run", f"{flag}=https://alice:s3cret@grafana.example.com/d/x"], flag, capsys)
    assert "s3cret" not in line and "holds no user or password" in line


def test_a_link_is_kept_as_given() -> None:
    """A link is never fetched: its path stays whole (a base URL loses a trailing /v1)."""
    from specdec_exporter.sidecar.config import Settings  # noqa: PLC0415

    settings = Settings(
        runbook_url="https://wiki.example.com/runbooks/v1",
        grafana_dashboard_url="https://grafana.example.com/d/vllm-specdec/",
    )
    assert settings.runbook_url == "https://wiki.example.com/runbooks/v1"
    assert settings.grafana_dashboard_url == "https://grafana.example.com/d/vllm-specdec/"


def test_url_credentials_are_never_printed() -> None:
    port = closed_port()
    secret_url = f"http://admin:s3cret@127.0.0.1:{port}"
    results = run_all(
        {
            "unreachable": ["check", "--vllm-url", secret_url, "--window", "0.1"],
            "malformed": ["load", "--url", f"http://admin:s3cret@127.0.0.1:{port}:2"],
            "json": ["check", "--vllm-url", secret_url, "--window", "0.1", "--json"],
        }
    )
    for result in results.values():
        assert "s3cret" not in result.stdout + result.stderr
        assert "admin" not in result.stdout + result.stderr
    assert f"http://***@127.0.0.1:{port}" in results["unreachable"].stderr
    assert results["malformed"].returncode == EXIT_USAGE


def test_the_demo_shows_no_url_credentials_and_hands_them_on_unseen() -> None:
    """The demo's header frame redacts the URL; its sidecar gets it in the environment, not in
    arguments any user can list."""
    secret_url = "http://admin:s3cret@vllm:8000"
    header = Links(secret_url, "http://127.0.0.1:1", None, simulated=False).text()
    assert "s3cret" not in header and "http://***@vllm:8000" in header
    assert secret_url not in " ".join(sidecar_command(DemoSettings(), tap=True))
    assert sidecar_environment(secret_url)["SPECDEC_VLLM_URL"] == secret_url


def test_run_logs_and_shows_no_url_credentials() -> None:
    """`run`'s start-up log and its live page show the vLLM URL without its password."""
    secret_url = f"http://admin:s3cret@127.0.0.1:{closed_port()}"
    process = subprocess.Popen(
        [*SPECDEC, "run", "--vllm-url", secret_url, "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    log = []
    for line in process.stderr:
        log.append(line)
        if '"listening"' in line:
            break
    address = json.loads(log[-1])["address"]
    page = httpx.get(f"http://{address}/", timeout=30, trust_env=False).text
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=60)[1]
    shown = "".join(log) + rest + page
    assert "s3cret" not in shown and "admin" not in shown
    assert "http://***@127.0.0.1:" in "".join(log) and "http://***@127.0.0.1:" in page


# Ctrl-C (issue 29 item 16): the table says what each command gives


def readme_row(code: int) -> str:
    section = README.read_text(encoding="utf-8").partition("### Exit codes")[2]
    return next(line for line in section.splitlines() if line.startswith(f"| {code} |"))


def interrupted(argv: list[str], ready: str) -> subprocess.CompletedProcess[str]:
    """Start ``argv``, wait for ``ready`` on its stderr, press Ctrl-C (SIGINT to its group)."""
    process = subprocess.Popen(
        [*SPECDEC, *argv], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if ready in line:
            break
    os.killpg(process.pid, signal.SIGINT)
    try:
        rest = process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        rest = process.communicate()[1]
    return subprocess.CompletedProcess(argv, process.returncode, "", "".join(lines) + rest)


def test_ctrl_c_gives_what_the_table_says() -> None:
    """`run` drains on Ctrl-C and exits 0 (the sidecar's normal stop, as after SIGTERM); the
    other commands exit 130 (demo: tests/commands/test_demo.py)."""
    assert exit_code_table()[130] == "all but `run` (0 above: Ctrl-C drains it like SIGTERM)"
    assert "`run`: stopped by SIGTERM or Ctrl-C after draining" in readme_row(0)
    url = f"http://127.0.0.1:{closed_port()}"
    run = interrupted(["run", "--vllm-url", url, "--listen", "127.0.0.1:0"], '"listening"')
    assert run.returncode == 0, run.stderr[-2000:]
    simulate = interrupted(["simulate", "--port", "0"], "simulated vLLM")
    assert simulate.returncode == 130, simulate.stderr[-2000:]
    [announced] = simulate.stderr.splitlines()  # announced once serving: no warning after Ctrl-C
    assert announced.startswith("simulated vLLM")
    assert "Traceback" not in run.stderr + simulate.stderr
