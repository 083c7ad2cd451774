"""calibrate against simulators: the fitted c is the c of the simulator's step-time model.

The simulators count time in modelled step time (their per-request ``mean_itl_ms``), so what is
compared are server-side step times, never this host's wall clock (that run is a benchmark:
benchmarks/calibrate_sim.py).
"""

from __future__ import annotations

import asyncio

import pytest
from calibrate_support import SERVER_TIMED, calibrate_json, spec_config

from specdec_exporter.devtools.load import LoadConfig, run_load
from specdec_exporter.devtools.sim.server import running_simulator
from specdec_exporter.devtools.sim.settings import SimConfig
from specdec_exporter.devtools.sim.steptime import StepTimeModel

K = 4


@pytest.mark.parametrize("stream_share", [0.0, 1.0])
def test_the_modelled_clock_times_requests_in_step_time(stream_share: float) -> None:
    # plain decoding at batch 1: every step is 1.5 + 0.06 = 1.56 ms of modelled time, whatever
    # --speed (x8 here) and the host's load make of it in wall time
    with running_simulator(SimConfig(speed=8.0, **SERVER_TIMED)) as sim:
        load = asyncio.run(
            run_load(
                LoadConfig(
                    url=sim.url, concurrency=1, requests=3, max_tokens=20, stream_share=stream_share
                )
            )
        )
        truth = sim.ground_truth()["total"]
    assert [result.output_tokens for result in load.results] == [20, 20, 20]
    assert [result.server_tpot for result in load.results] == [pytest.approx(0.00156)] * 3
    assert truth["decode_steps"] == 3 * 19
    assert truth["decode_step_ms"] == truth["decode_step_plain_ms"] == pytest.approx(57 * 1.56)


def effective_cost_ratio(before: dict[str, float], after: dict[str, float], k: int) -> float:
    """c of the steps the server ran: (time with drafts / time without - 1) / k."""
    with_drafts = after["decode_step_ms"] - before["decode_step_ms"]
    plain = after["decode_step_plain_ms"] - before["decode_step_plain_ms"]
    return (with_drafts / plain - 1.0) / k


@pytest.mark.parametrize(("concurrency", "model_c"), [(1, 0.2820513), (8, 0.4520202)])
def test_fitted_c_matches_the_step_time_model(
    capsys: pytest.CaptureFixture[str], concurrency: int, model_c: float
) -> None:
    # draft_model's step times (ms): 1.5 + 0.06 per verified token + k x (0.375 + 0.005 per
    # request); at batch 1: 3.32 against 1.56 plain, c = (3.32 / 1.56 - 1) / 4 = 0.2820513;
    # at batch 8: 5.56 against 1.98, c = 0.4520202
    with (
        running_simulator(spec_config(K, **SERVER_TIMED)) as spec,
        running_simulator(SimConfig(**SERVER_TIMED)) as base,
    ):
        before = spec.ground_truth()["total"]
        document = calibrate_json(
            capsys,
            "--spec-url",
            spec.url,
            "--base-url",
            base.url,
            "--concurrency",
            str(concurrency),
            "--temperatures",
            "0,1.0",
            "--requests",
            str(4 * concurrency),
            "--max-tokens",
            "128",
            "--warmup",
            "0",
            "--tpot-source",
            "server",
            "--sample-interval",
            "0.02",
        )
        after = spec.ground_truth()["total"]
    server_c = effective_cost_ratio(before, after, K)
    if concurrency == 1:  # every decode step ran at batch 1: exactly the model's c
        assert server_c == pytest.approx(model_c, abs=1e-6)
    else:  # batches shrink as a phase drains: between the c of batch 1 and of batch 8
        assert 0.2820513 < server_c <= model_c
    fitted = document["draft_cost_ratio"]
    # what remains between them is mostly the last step of each request, cut at max_tokens
    assert fitted == pytest.approx(server_c, rel=0.08)
    assert [point["draft_cost_ratio"] for point in document["points"]] == [
        pytest.approx(server_c, rel=0.1)
    ] * 2
    # the acceptance changed with temperature; c did not (it is a cost, not a quality)
    rates = [point["acceptance_rate"] for point in document["points"]]
    assert rates[0] > rates[1] + 0.3


def test_schedule_from_one_server_per_k(capsys: pytest.CaptureFixture[str]) -> None:
    # a drafter whose cost grows with the batch (0.15 ms per drafted request per pass):
    # modelled speedup at batch 1: k=4 1.85, k=2 1.63; at batch 16 both below 0.7
    costly = StepTimeModel(draft_pass_ms=0.2, draft_token_ms=0.15)
    with (
        running_simulator(spec_config(2, step_time=costly, **SERVER_TIMED)) as k2,
        running_simulator(spec_config(4, step_time=costly, **SERVER_TIMED)) as k4,
        running_simulator(SimConfig(**SERVER_TIMED)) as base,
    ):
        document = calibrate_json(
            capsys,
            "--spec-url",
            k2.url,
            "--spec-url",
            k4.url,
            "--base-url",
            base.url,
            "--concurrency",
            "1,16",
            "--temperatures",
            "0",
            "--requests",
            "16",
            "--max-tokens",
            "64",
            "--warmup",
            "0",
            "--tpot-source",
            "server",
            "--sample-interval",
            "0.02",
        )
    assert document["schedule"] == {
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 16, 0]],
    }
    assert document["num_speculative_tokens"] == [2, 4]
    assert [(p["num_speculative_tokens"], p["concurrency"]) for p in document["points"]] == [
        (2, 1),
        (4, 1),
        (2, 16),
        (4, 16),
    ]
    by_point = {(p["num_speculative_tokens"], p["concurrency"]): p for p in document["points"]}
    assert by_point[(4, 1)]["tpot_spec_ms"] < by_point[(2, 1)]["tpot_spec_ms"]
    assert by_point[(2, 16)]["measured_speedup"] < 1 and by_point[(4, 16)]["measured_speedup"] < 1
