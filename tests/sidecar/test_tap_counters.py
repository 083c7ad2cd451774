"""`check --sidecar-url`: the tap's per-bucket counters over a window, literal and end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx

from scrape_spy import ScrapeSpy
from sidecar_process import address_of, sidecar, wait_for
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import Snapshot
from specdec_exporter.core.report import BucketKey
from specdec_exporter.core.verdict import DEFAULT_CRITERIA, Criteria
from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import parse_mix
from specdec_exporter.devtools.load.runner import run_load
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig, SpeculativeConfig
from specdec_exporter.sidecar.tap_counters import (
    BucketCounts,
    BucketRow,
    bucket_rows,
    bucket_table,
    parse_bucket_counters,
)
from specdec_exporter.term import run_event_loop

EXPOSITION = """\
specdec_requests_total{attributed="true",model_name="m",temperature_bucket="0"} 10.0
specdec_requests_total{attributed="false",model_name="m",temperature_bucket="0"} 2.0
specdec_request_drafts_total{model_name="m",temperature_bucket="0"} 40.0
specdec_request_draft_tokens_total{model_name="m",temperature_bucket="0"} 160.0
specdec_request_accepted_tokens_total{model_name="m",temperature_bucket="0"} 120.0
specdec_up 1.0
"""


MODEL_K4 = Snapshot(
    True,
    {("m", "0"): Totals(accepted_per_position=(0.0,) * 4)},
    spec_series=frozenset({("m", "0")}),
)
"""What vLLM shows for model m at the second scrape: spec decoding on, k = 4."""
COST = DraftCost(0.1, "default")


def rows_of(
    before: dict[BucketKey, BucketCounts],
    after: dict[BucketKey, BucketCounts],
    snapshot: Snapshot = MODEL_K4,
    criteria: Criteria = DEFAULT_CRITERIA,
) -> list[BucketRow]:
    return bucket_rows(before, after, snapshot=snapshot, seconds=10.0, cost=COST, criteria=criteria)


def test_parse_and_window_deltas() -> None:
    before = parse_bucket_counters(EXPOSITION)
    assert before == {("m", "0"): BucketCounts(Totals(40.0, 160.0, 120.0), 12.0, 10.0)}
    after = parse_bucket_counters(
        EXPOSITION.replace("160.0", "360.0")
        .replace("120.0", "220.0")
        .replace("40.0", "90.0")
        .replace("10.0", "15.0")
    )
    [row] = rows_of(before, after)
    assert (row.requests, row.attributed) == (5.0, 5.0)
    counts = row.entry
    assert (counts.drafts, counts.draft_tokens, counts.accepted_tokens) == (50.0, 200.0, 100.0)
    assert counts.acceptance_rate == 0.5 and counts.mean_acceptance_length == 3.0
    assert counts.estimated_speedup == 3.0 / 1.4 and counts.drafts_per_second == 5.0
    assert counts.verdict == "borderline"
    assert (
        "m      0                          5           5       0.500     3.000     2.143  "
        "borderline"
    ) in bucket_table([row])
    assert row.as_json() == {
        "model_name": "m",
        "temperature_bucket": "0",
        "requests": 5.0,
        "attributed": 5.0,
        "acceptance_rate": 0.5,
        "mean_acceptance_length": 3.0,
        "drafts": 50.0,
        "draft_tokens": 200.0,
        "accepted_tokens": 100.0,
        "drafts_per_second": 5.0,
        "estimated_speedup": 3.0 / 1.4,
        "break_even_acceptance_rate": 0.1,
        "threshold": 0.5,
        "draft_cost_ratio": 0.1,
        "draft_cost_ratio_source": "default",
        "verdict": "borderline",
    }


def test_the_bucket_verdict_takes_check_s_threshold_and_the_speedup() -> None:
    """The bucket rows are model rows (``core.report.entry``): --threshold and a net loss
    apply to them too."""
    before = parse_bucket_counters(EXPOSITION)
    after = parse_bucket_counters(
        EXPOSITION.replace("160.0", "360.0").replace("120.0", "220.0").replace("40.0", "90.0")
    )
    strict = Criteria(threshold=0.6, healthy_above=0.65)
    assert rows_of(before, after, criteria=strict)[0].entry.verdict == "below threshold"
    costly = bucket_rows(
        before,
        after,
        snapshot=MODEL_K4,
        seconds=10.0,
        cost=DraftCost(0.6, "flag"),
        criteria=DEFAULT_CRITERIA,
    )
    assert costly[0].entry.estimated_speedup == 3.0 / 3.4
    assert costly[0].entry.verdict == "disable"


def test_a_bucket_without_drafts_is_not_drafting_or_not_enabled() -> None:
    idle = {("m", "0"): BucketCounts(requests=3.0)}
    assert rows_of({}, idle)[0].entry.verdict == "not drafting"
    assert rows_of({}, idle, snapshot=Snapshot(False))[0].entry.verdict == "not enabled"


def test_a_sidecar_restart_counts_as_a_reset() -> None:
    before = parse_bucket_counters(EXPOSITION)
    after = parse_bucket_counters(EXPOSITION.replace("160.0", "8.0").replace("120.0", "2.0"))
    assert rows_of(before, after)[0].entry.draft_tokens == 8.0


def test_check_with_the_tap_reports_each_bucket_of_the_window_exactly() -> None:
    config = SimConfig(
        seed=4,
        per_request_spec_decode_metrics="summary",
        speed=5.0,
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4),
    )
    with (
        running_simulator(config) as simulator,
        sidecar(simulator.url, "--proxy-listen", "127.0.0.1:0") as (sidecar_url, records),
        ScrapeSpy(sidecar_url).running() as spy,
    ):
        check = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specdec_exporter.cli",
                "check",
                "--vllm-url",
                simulator.url,
                "--sidecar-url",
                spy.url,
                "--window",
                "4",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert spy.wait_for_scrapes(1, timeout_s=60), "check never read the sidecar"
        load = LoadConfig(
            url="http://" + address_of(records, "tap"),
            requests=30,
            concurrency=6,
            mix=parse_mix("0:0.5,0.8:0.5"),
            stream_share=0.5,
            max_tokens=32,
            seed=3,
        )
        run_event_loop(run_load(load))
        stdout, stderr = check.communicate(timeout=60)
        truth = httpx.get(simulator.url + "/sim/ground-truth").json()
    report = json.loads(stdout)
    assert spy.scrapes == 2, stderr
    rows = {row["temperature_bucket"]: row for row in report["buckets"] if row["requests"]}
    assert set(rows) == {"0", "0.7-1.0"}
    assert sum(row["requests"] for row in rows.values()) == 30
    assert sum(row["draft_tokens"] for row in rows.values()) == truth["total"]["draft_tokens"]
    assert (
        sum(row["accepted_tokens"] for row in rows.values()) == (truth["total"]["accepted_tokens"])
    )


def test_served_models_bucket_series_exist_before_any_request() -> None:
    config = SimConfig(
        seed=4,
        per_request_spec_decode_metrics="summary",
        speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=3),
    )
    with (
        running_simulator(config) as simulator,
        sidecar(simulator.url, "--proxy-listen", "127.0.0.1:0") as (sidecar_url, _),
    ):
        expected = (
            'specdec_requests_total{attributed="true",model_name="'
            f'{config.served_model_name}",temperature_bucket="1.0+"}} 0.0'
        )
        wait_for(sidecar_url + "/metrics", expected)


def coverage_of(metrics: str, model: str) -> float | None:
    prefix = f'specdec_request_coverage_ratio{{model_name="{model}"}} '
    line = next((line for line in metrics.splitlines() if line.startswith(prefix)), None)
    return None if line is None else float(line.split()[-1])


def test_coverage_equals_the_share_of_draft_tokens_sent_through_the_tap() -> None:
    config = SimConfig(
        seed=6,
        per_request_spec_decode_metrics="summary",
        speed=5.0,
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4),
    )
    with (
        running_simulator(config) as simulator,
        sidecar(simulator.url, "--proxy-listen", "127.0.0.1:0", "--window", "600") as (
            sidecar_url,
            records,
        ),
    ):
        wait_for(sidecar_url + "/metrics", "specdec_up 1.0")  # the window's first poll is done
        tap = "http://" + address_of(records, "tap")

        def settled_coverage(expected: float) -> float | None:
            text = ""
            for _ in range(200):  # the next polls fold the traffic in
                text = httpx.get(sidecar_url + "/metrics").text
                if coverage_of(text, config.served_model_name) == expected:
                    break
                time.sleep(0.1)
            return coverage_of(text, config.served_model_name)

        def send(url: str, requests: int) -> int:
            result = run_event_loop(
                run_load(
                    LoadConfig(
                        url=url,
                        requests=requests,
                        concurrency=5,
                        max_tokens=32,
                        stream_share=0.5,
                        seed=9,
                    )
                )
            )
            return sum(r.spec.num_draft_tokens for r in result.results if r.spec)

        through_tap = send(tap, 30)
        assert settled_coverage(1.0) == 1.0  # all traffic through the tap
        send(simulator.url, 10)  # a quarter of the requests go around the tap
        truth = httpx.get(simulator.url + "/sim/ground-truth").json()
        share = through_tap / truth["total"]["draft_tokens"]
        measured = settled_coverage(share)
    assert 0.5 < share < 0.95
    assert measured == share
