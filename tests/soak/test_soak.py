"""The soak in CI: 20,000 requests through a real tap against the simulator (benchmarks/soak.py),
and the judgement of "flat" and "exact" on literal samples."""

from __future__ import annotations

import collections
import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
_spec = importlib.util.spec_from_file_location("soak", SCRIPT)
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
sys.modules["soak"] = soak
_spec.loader.exec_module(soak)

MIB = 1024 * 1024
CI_REQUESTS = 20_000
CI_SECONDS = 100.0
"""The CI soak stops sending after this long (a safety net; it normally takes about a minute)."""
MIN_JUDGED_REQUESTS = 10_000


@pytest.mark.soak
def test_soak_through_the_tap(tmp_path: Path) -> None:
    result = soak.run_soak(
        CI_REQUESTS, concurrency=32, fault_every=2_000, max_seconds=CI_SECONDS, out=tmp_path
    )
    print(result.verdict(), f"(samples and summary in {tmp_path})")
    assert result.requests >= MIN_JUDGED_REQUESTS, (
        f"only {result.requests} requests before the time bound: too few samples to judge"
    )
    for check in result.checks:
        assert check.ok, f"{check.name}: {check.detail}"
    # the mix really exercised the paths the soak is for
    outcomes = result.ledger.outcomes
    assert outcomes["chat-abort 200 aborted"] > 0
    assert outcomes["unknown-model 404 complete"] > 0
    assert result.faults == CI_REQUESTS // 2_000 or result.requests < CI_REQUESTS
    assert any(" 502 " in key for key in outcomes), "vLLM's refusal gave no 502"
    assert any(" 500 " in key or key.endswith(" ended early") for key in outcomes), (
        "vLLM's restart ended no request early"
    )


def samples(rss_mib: list[float], fds: list[int], series: list[int]) -> list[object]:
    return [
        soak.Sample(
            requests=1_000 * (i + 1),
            seconds=float(i),
            rss_bytes=int(rss * MIB),
            fds=fd,
            series=count,
            up=1,
            tap_requests=0,
            load1=0.0,
        )
        for i, (rss, fd, count) in enumerate(zip(rss_mib, fds, series, strict=True))
    ]


FLAT = dict(
    rss_mib=[40.0, 50.0, 50.5, 59.9, 51.0, 52.0, 50.0, 50.0, 50.0, 50.0],
    fds=[16 + 68] * 10,
    series=[1000, 1000, 1000, 990, 1000, 1000, 1000, 1000, 1000, 1000],
)


def verdicts(
    rss_mib: list[float],
    fds: list[int],
    series: list[int],
    *,
    end_fds: int = 17,
    end_series: int = 1000,
) -> dict[str, bool]:
    checks = soak.judge(
        samples(rss_mib, fds, series),
        baseline_fds=16,
        end_fds=end_fds,
        end_series=end_series,
        concurrency=32,
    )
    return {check.name: check.ok for check in checks}


def test_a_flat_run_passes_every_check() -> None:
    # the first sample (10 % of 10) is the warm-up: its 40 MiB does not count
    assert verdicts(**FLAT) == {"rss": True, "fds": True, "fds at the end": True, "series": True}


def test_rss_spread_over_10_mib_after_the_warm_up_fails() -> None:
    rss = [*FLAT["rss_mib"][:-1], 60.1]  # 50.0 .. 60.1: 10.1 MiB
    assert verdicts(rss, FLAT["fds"], FLAT["series"])["rss"] is False


def test_fds_above_one_client_and_one_upstream_per_stream_fail() -> None:
    fds = [*FLAT["fds"][:-1], 16 + 2 * 32 + 5]
    assert verdicts(FLAT["rss_mib"], fds, FLAT["series"])["fds"] is False


def test_fds_not_back_to_the_pre_traffic_count_fail() -> None:
    assert verdicts(**FLAT, end_fds=18)["fds at the end"] is False


def test_a_series_born_after_the_warm_up_fails() -> None:
    series = [*FLAT["series"][:-1], 1001]
    assert verdicts(FLAT["rss_mib"], FLAT["fds"], series, end_series=1001)["series"] is False


def test_series_must_return_to_the_warm_up_count_at_the_end() -> None:
    assert verdicts(**FLAT, end_series=990)["series"] is False


def test_one_sample_is_not_enough_to_judge() -> None:
    checks = soak.judge(
        samples([50.0], [20], [1000]), baseline_fds=16, end_fds=16, end_series=1000, concurrency=32
    )
    assert [(check.name, check.ok) for check in checks] == [("samples", False)]


def test_counts_must_match_per_label_set_exactly() -> None:
    ledger = soak.Ledger(
        inspected=5,
        expected=collections.Counter(
            {("soak-model", "0", "true"): 3, ("other", "0.5-0.7", "false"): 2}
        ),
    )
    exact = {
        ("soak-model", "0", "true"): 3,
        ("other", "0.5-0.7", "false"): 2,
        ("soak-model", "1.0+", "false"): 0,
    }
    assert soak.count_check(ledger, exact).ok
    moved = {
        ("soak-model", "0", "true"): 2,
        ("soak-model", "0", "false"): 1,
        ("other", "0.5-0.7", "false"): 2,
    }
    check = soak.count_check(ledger, moved)
    assert not check.ok
    assert "soak-model/0/true': (3, 2)" in check.detail
    assert "soak-model/0/false': (0, 1)" in check.detail


def test_every_deck_of_100_requests_holds_every_kind_in_its_share() -> None:
    shares = {builder: share for share, builder in soak.MIX.values()}
    plans = list(itertools.islice(soak.traffic(seed=3), 300))
    for deck in (plans[:100], plans[100:200], plans[200:]):
        kinds = collections.Counter(plan.kind for plan in deck)
        assert sorted(kinds.values()) == sorted(shares.values())
        assert len(kinds) == len(soak.MIX)


def test_expected_labels_of_the_mix() -> None:
    rng = soak.random.Random(1)
    build = {name: builder for name, (_, builder) in soak.MIX.items()}
    defaults = build["chat stream, no model, no temperature"](rng)
    assert (defaults.model_label, defaults.bucket, defaults.attributable) == (
        "soak-model",
        "0.7-1.0",
        True,
    )  # vLLM's default temperature, 1.0
    unknown = build["unknown model (404)"](rng)
    assert (unknown.model_label, unknown.bucket, unknown.attributable) == (
        "other",
        "0.5-0.7",
        False,
    )
    assert build["temperature a string (400, bucket invalid)"](rng).bucket == "invalid"
    assert build["body over the inspection cap"](rng).bucket == "unknown"
    assert len(build["body over the inspection cap"](rng).raw) > soak.INSPECT_CAP
    assert build["GET /v1/models (not inspected)"](rng).model_label is None
    usage = build["chat stream, include_usage"](rng)
    assert (usage.stream, usage.client_usage) == (True, True)
