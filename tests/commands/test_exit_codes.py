"""The README's exit-code table, row by row, for the commands it lists.

Rows tested here: 3 (every command that takes a server's URL), 64 (no command, a port in use, an
unknown method) and the table itself against commands/exits.py. Elsewhere: 0, 1 and 2 by
`check`'s verdicts (test_cli.py::test_check_exit_codes, test_check_json_healthy_window), `load`
and `sweep` (tests/devtools), `calibrate` (test_calibrate.py); 64 for an unknown flag of every
command (test_cli.py::test_every_command_exits_64_on_a_usage_error) and a port in use for `run`
(tests/sidecar/test_serve.py); 69 (tests/artifacts/test_image.py); 130 (test_demo.py,
test_bad_input.py::test_ctrl_c_gives_what_the_table_says, which also holds `run`'s 0 on Ctrl-C);
73 and every class of bad input (empty, malformed URL, not finite, out of range, unreachable,
trickling, not a sidecar) for every command and flag: test_bad_input.py.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specdec_exporter.cli import COMMANDS, main
from specdec_exporter.commands.exits import ALL_EXIT_CODES, EXIT_UNREACHABLE, EXIT_USAGE
from specdec_exporter.core.verdict import Verdict

README = Path(__file__).resolve().parents[2] / "README.md"
SPECDEC = [sys.executable, "-m", "specdec_exporter.cli"]


def exit_code_table() -> dict[int, str]:
    """code -> the commands cell, from the README's "Exit codes" table."""
    section = README.read_text(encoding="utf-8").partition("### Exit codes")[2]
    rows = re.findall(r"^\| (\d+) \| .* \| ([^|]+) \|$", section.partition("\n## ")[0], re.M)
    return {int(code): commands.strip() for code, commands in rows}


def test_the_readme_table_lists_every_exit_code_and_only_those() -> None:
    table = exit_code_table()
    assert sorted(table) == sorted(ALL_EXIT_CODES)
    assert {verdict.exit_code for verdict in Verdict} <= set(table)
    for cell in table.values():
        named = set(re.findall(r"`([a-z][a-z-]*)`", cell))
        assert cell.startswith("all") or named <= set(COMMANDS), cell


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


URL_COMMANDS = {
    "check": ["--vllm-url", "{url}/v1", "--window", "0.1"],
    "load": ["--url", "{url}", "--quiet"],
    "sweep": ["--url", "{url}", "--quiet"],
    "calibrate": ["--spec-url", "{url}", "--base-url", "{url}", "--warmup", "0"],
    "demo": ["--vllm-url", "{url}/v1/", "--duration", "5"],
}


def test_every_command_that_takes_a_url_is_in_the_row_of_3() -> None:
    listed = set(re.findall(r"`([a-z]+)`", exit_code_table()[EXIT_UNREACHABLE]))
    assert listed == set(URL_COMMANDS)


@pytest.mark.parametrize("command", sorted(URL_COMMANDS))
def test_an_unreachable_server_is_one_line_naming_it_and_exit_3(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    argv = [part.format(url=url) for part in URL_COMMANDS[command]]
    assert main([command, *argv]) == EXIT_UNREACHABLE == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"specdec-exporter {command}: ")
    assert f" at {url} did not answer: " in line
    assert line.endswith("takes its base URL, http://HOST:PORT, with or without /v1")
    assert "Error" not in line and "Traceback" not in line


def test_no_command_prints_the_usage_and_exits_64() -> None:
    result = subprocess.run(SPECDEC, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (EXIT_USAGE, "")
    assert result.stderr.startswith("usage: specdec-exporter [-h] [--version] COMMAND\n")
    assert result.stderr.endswith(
        "specdec-exporter: error: give a COMMAND; 'specdec-exporter --help' describes each\n"
    )


@contextmanager
def taken_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_the_simulators_port_in_use_is_one_line_and_exit_64() -> None:
    with taken_port() as port:
        result = subprocess.run(
            [*SPECDEC, "simulate", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (result.returncode, result.stdout) == (64, "")
    assert result.stderr == (
        f"specdec-exporter simulate: cannot listen on 127.0.0.1:{port} (--port): address "
        "already in use; stop what uses it, or give --port another address\n"
    )


METHOD_COMMANDS = {
    "run": ["--vllm-url", "http://a", "--listen", "127.0.0.1:0"],
    "check": ["--vllm-url", "http://a"],
    "calibrate": ["--spec-url", "http://a", "--base-url", "http://b"],
}


@pytest.mark.parametrize("command", sorted(METHOD_COMMANDS))
def test_an_unknown_speculative_method_is_refused_with_the_known_ones(command: str) -> None:
    """A subprocess with a timeout: `run` accepting the method would serve until stopped."""
    result = subprocess.run(
        [*SPECDEC, command, *METHOD_COMMANDS[command], "--speculative-method", "eagel3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_USAGE
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"specdec-exporter {command}: invalid setting: unknown --speculative-method (or "
        "SPECDEC_SPECULATIVE_METHOD) 'eagel3'; "
        "known: dflash, draft_model, dspark, eagle, eagle3,"
    )


PYTHON_IN_MESSAGE = re.compile(
    r"Errno|Traceback|could not convert|<class|\b[A-Z]\w*(Error|Exception)\b|\\[a-z]"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["load", "--prompts", "/nonexistent/prompts.txt"],
        ["sweep", "--prompts", "/nonexistent/prompts.txt"],
        ["run", "--generation-config", "/nonexistent/generation_config.json"],
        ["run", "--calibration", "/nonexistent/calibration.json"],
        ["simulate", "--generation-config", "/nonexistent"],
        ["run", "--temperature-buckets", "0.5,x"],
        ["run", "--threshold", "x"],
        ["load", "--temperatures", "0:x"],
        ["sweep", "--temperatures", "0,x"],
        ["calibrate", "--spec-url", "http://a", "--base-url", "http://b", "--concurrency", "x"],
        ["simulate", "--speculative-config", "{not json"],
        ["check", "--vllm-url", "127.0.0.1:8000"],
    ],
)
def test_a_bad_value_is_one_line_without_python(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    [line] = capsys.readouterr().err.splitlines()
    assert PYTHON_IN_MESSAGE.search(line) is None, line
