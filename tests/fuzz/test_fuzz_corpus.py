"""Every fuzz harness runs its committed seed corpus without a crash (the 60 s coverage-guided
runs are scripts/fuzz.sh, a stage of scripts/test.sh)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"
HARNESSES = sorted(FUZZ.glob("fuzz_*.py"))


def require_atheris() -> None:
    if importlib.util.find_spec("atheris") is None:
        if os.environ.get("CI") == "true" and sys.version_info[:2] == (3, 11):
            pytest.fail("atheris missing in CI (pip install -e '.[dev]')")
        pytest.skip("atheris has wheels for CPython 3.11 only")


def test_each_harness_has_a_seed_corpus() -> None:
    names = [path.stem for path in HARNESSES]
    assert names == ["fuzz_exposition", "fuzz_sse", "fuzz_tap_request", "fuzz_tap_response"]
    for harness in HARNESSES:
        seeds = list((FUZZ / "corpus" / harness.stem.removeprefix("fuzz_")).iterdir())
        assert seeds and all(seed.stat().st_size <= 16_384 for seed in seeds)


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda path: path.stem)
def test_the_seed_corpus_runs_clean(harness: Path, tmp_path: Path) -> None:
    require_atheris()
    corpus = FUZZ / "corpus" / harness.stem.removeprefix("fuzz_")
    result = subprocess.run(
        [sys.executable, str(harness), "-runs=0", f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DONE" in result.stderr, result.stderr[-3000:]  # every seed was executed
