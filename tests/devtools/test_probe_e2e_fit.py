"""benchmarks/probe_e2e.py's within-process A/B: the arms' fit recovers known shares from
synthetic windows, and a wrong --arms is refused before any server starts."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_PATH = list(sys.path)
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts" / "real_vllm"))

import probe_e2e  # noqa: E402

sys.path[:] = _PATH  # the benchmarks' folder shadows no other test's import

ARMS = ["on", "off", "no-temperature", "no-batch", "absent"]
SHARES = {"on": 0.02, "off": 0.0, "no-temperature": 0.008, "no-batch": 0.014, "absent": -0.01}


def synthetic_run(cycles: int = 600) -> dict[str, Any]:
    """Windows whose CPU is their work plus each arm's known share of an off window's, with
    drift between windows and noise inside them."""
    draws = random.Random(7)
    windows = []
    drift = 1.0
    for index in range(1000, 1000 + cycles * len(ARMS)):
        order = list(range(len(ARMS)))
        random.Random(index // len(ARMS)).shuffle(order)
        arm = order[index % len(ARMS)]
        drift *= 1 + draws.gauss(0, 0.005)
        finished = draws.randint(15, 30)
        steps = 3 * finished + draws.randint(-5, 5)
        renders = 1 if draws.random() < 0.4 else 0
        work = (finished * 3e6 + steps * 0.5e6 + renders * 8e6) * drift
        cpu = work * (1 + SHARES[ARMS[arm]]) + draws.gauss(0, 0.5e6)
        windows.append([index * 2.0, arm, cpu, finished, steps, finished, 4 * steps, renders])
    return {
        "tokens": 24,
        "concurrency": 4,
        "api_servers": 1,
        "variant": "probe-files",
        "toggle": {"seconds": 2.0, "arms": ARMS, "windows": windows},
    }


def test_the_fit_recovers_each_arms_share_and_the_contrasts() -> None:
    fits = probe_e2e.toggle_adjusted([synthetic_run()], resamples=40)
    for arm in ("on", "no-temperature", "no-batch", "absent"):
        assert fits[arm]["share"] == pytest.approx(SHARES[arm], abs=0.003), arm
        assert 0 < fits[arm]["se"] < 0.003
    assert fits["on less absent"]["share"] == pytest.approx(0.03, abs=0.003)
    assert fits["off less absent"]["share"] == pytest.approx(0.01, abs=0.003)
    assert fits["on less no-batch"]["share"] == pytest.approx(0.006, abs=0.003)


def test_two_arm_runs_of_before_session_24_still_read() -> None:
    """Windows without the renders column (sessions 17-23): fitted with it as zeros."""
    run = synthetic_run(300)
    keep = {0: "on", 1: "off"}
    run["toggle"]["arms"] = ["on", "off"]
    run["toggle"]["windows"] = [w[:7] for w in run["toggle"]["windows"] if w[1] in keep]
    fits = probe_e2e.toggle_adjusted([run], resamples=20)
    assert fits["on"]["share"] == pytest.approx(SHARES["on"], abs=0.004)


@pytest.mark.parametrize(
    "arms", ["on", "on,on,off", "on,no-temperature", "on,off,sideways", "on,off,off"]
)
def test_a_wrong_arms_list_is_refused_with_one_line(arms: str) -> None:
    with pytest.raises(SystemExit, match=r"^--arms: "):
        probe_e2e.toggle_arms(argparse.Namespace(arms=arms))


def test_the_arms_the_docs_name_are_taken() -> None:
    args = argparse.Namespace(arms="on,off,no-temperature,no-batch,absent,off-b")
    assert probe_e2e.toggle_arms(args) == [*ARMS, "off-b"]
