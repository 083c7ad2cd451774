"""/metrics format parity with real vLLM captures, family by family, in every variant."""

from __future__ import annotations

import json

import pytest
from sim_support import NGRAM_K4, V033, V073, families, parse_sample, structure

from specdec_exporter.devtools.sim.families import one_two_five_buckets
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config
from specdec_exporter.devtools.sim.telemetry import CONTENT_TYPE, Finished, Telemetry

CAPTURE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MULTIPROCESS_TYPE_ORDER = ["histogram", "gauge", "counter", "summary"]


def render(**overrides: object) -> str:
    options: dict[str, object] = {"speculative": parse_speculative_config(NGRAM_K4)}
    options.update(overrides)
    return Telemetry(SimConfig(**options), 1.79e9).render().decode()  # type: ignore[arg-type]


def with_traffic(telemetry: Telemetry) -> str:
    """One finished request through every update path, and one HTTP request."""
    for engine in telemetry.engines:
        engine.record_prefill(12)
        engine.ttft.observe(0.05)
        engine.record_step(1, 4, [1, 1, 0, 0], 3, 17)
        engine.itl.observe(0.02)
        engine.set_load(1, 0, 0.001)
        engine.record_finish(
            Finished(
                reason="length",
                prompt_tokens=12,
                generation_tokens=4,
                max_tokens=4,
                n=1,
                queue=0.01,
                prefill=0.05,
                decode=0.1,
                inference=0.15,
                e2e=0.16,
            )
        )
    telemetry.http.record(
        "/v1/completions", "POST", status=200, request_bytes=2, response_bytes=28, seconds=0.2
    )
    return telemetry.render().decode()


def test_a_fresh_simulator_has_the_exact_structure_of_a_fresh_vllm() -> None:
    capture = (V033 / "spec_ngram_k4.t0.prom").read_text()
    assert structure(render()) == structure(capture)


def test_every_family_after_traffic_matches_the_capture() -> None:
    capture = families((V033 / "spec_ngram_k4.t3.prom").read_text())
    ours = families(
        with_traffic(Telemetry(SimConfig(speculative=parse_speculative_config(NGRAM_K4)), 1.79e9))
    )
    assert list(ours) == list(capture)
    for name, expected in capture.items():
        got = ours[name]
        assert (got.type, got.help) == (expected.type, expected.help), name
        assert got.samples == expected.samples, name
        assert got.edges == expected.edges, name


def test_every_vllm_family_of_the_capture_is_reproduced() -> None:
    capture = families((V033 / "spec_ngram_k4.t3.prom").read_text())
    vllm_own = [name for name in capture if name.startswith("vllm:")]
    assert len(vllm_own) == 80
    assert set(vllm_own) <= set(families(render()))


def test_without_speculative_config_there_is_no_spec_family_at_all() -> None:
    capture = (V033 / "nospec.t1.prom").read_text()
    text = with_traffic(Telemetry(SimConfig(), 1.79e9))
    assert "spec_decode" not in text
    assert list(families(text)) == list(families(capture))


def test_data_parallel_engines_each_get_every_series() -> None:
    text = render(data_parallel_size=2, api_server_count=1)
    engines: dict[str, set[str]] = {"0": set(), "1": set()}
    for line in text.splitlines():
        if line.startswith("vllm:"):
            name, labels, _ = parse_sample(line)
            found = dict(labels)
            if "engine" in found:
                rest = ",".join(f"{k}={v}" for k, v in labels if k != "engine")
                engines[found["engine"]].add(f"{name}{{{rest}}}")
            else:
                assert name.startswith("vllm:admission_rejections")
    assert engines["0"] == engines["1"]
    assert 'vllm:num_requests_running{engine="1",model_name="' in text


def multiprocess_violations(text: str) -> list[str]:
    """The rules prometheus_client's MultiProcessCollector rendering follows."""
    problems = []
    seen: list[str] = []
    table = families(text)
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            if name not in seen:
                seen.append(name)
                previous = [table[n].type for n in seen[:-1]]
                if any(
                    MULTIPROCESS_TYPE_ORDER.index(p) > MULTIPROCESS_TYPE_ORDER.index(kind)
                    for p in previous
                ):
                    problems.append(f"{name}: {kind} after a later type")
        elif line and not line.startswith("#"):
            name, labels, _ = parse_sample(line)
            keys = [key for key, _ in labels]
            if keys != sorted(keys):
                problems.append(f"unsorted labels: {line}")
            if name.endswith("_created") or name.startswith(("process_", "python_")):
                problems.append(f"single-process sample: {name}")
    for name, info in table.items():
        if info.type != "histogram":
            continue
        names = [sample for sample, _ in info.samples]
        if not names:
            continue
        series = len([n for n in names if n.endswith("_count")])
        per_series = len(names) // max(series, 1)
        for start in range(0, len(names), per_series):
            group = names[start : start + per_series]
            if group[0] != f"{name}_sum" or group[-1] != f"{name}_count":
                problems.append(f"{name}: series not _sum, _bucket..., _count")
    return problems


def test_multiprocess_rules_hold_in_the_legacy_capture_and_fail_single_process() -> None:
    assert multiprocess_violations((V073 / "v0_spec_ngram_k4.t3.prom").read_text()) == []
    assert multiprocess_violations((V033 / "spec_ngram_k4.t3.prom").read_text()) != []


def test_several_api_servers_render_multiprocess_style() -> None:
    telemetry = Telemetry(
        SimConfig(speculative=parse_speculative_config(NGRAM_K4), data_parallel_size=2), 1.79e9
    )
    text = with_traffic(telemetry)
    assert multiprocess_violations(text) == []
    single = families(
        with_traffic(
            Telemetry(
                SimConfig(
                    speculative=parse_speculative_config(NGRAM_K4),
                    data_parallel_size=2,
                    api_server_count=1,
                ),
                1.79e9,
            )
        )
    )
    multi = families(text)
    assert sorted(multi) == sorted(
        n
        for n in single
        if not n.endswith("_created") and not n.startswith(("process_", "python_"))
    )
    for name, info in multi.items():
        assert (info.type, info.help, info.edges) == (
            single[name].type,
            single[name].help,
            single[name].edges,
        ), name


def test_api_server_count_alone_switches_to_multiprocess() -> None:
    assert multiprocess_violations(render(api_server_count=2)) == []
    assert "_created" in render()


def test_underscore_spelling_renames_every_vllm_name() -> None:
    text = render(metric_names="underscore")
    assert "\nvllm:" not in text
    assert "# TYPE vllm_spec_decode_num_drafts_total counter" in text
    assert 'vllm_spec_decode_num_drafts_total{engine="0"' in text


def test_mixed_spelling_renames_samples_only() -> None:
    text = render(metric_names="mixed")
    assert "# TYPE vllm:spec_decode_num_drafts_total counter" in text
    assert 'vllm_spec_decode_num_drafts_total{engine="0"' in text
    assert "\nvllm:" not in text


def test_per_position_series_follow_k() -> None:
    text = render(
        speculative=parse_speculative_config('{"method": "eagle3", "num_speculative_tokens": 2}')
    )
    positions = [
        dict(parse_sample(line)[1])["position"]
        for line in text.splitlines()
        if line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    ]
    assert positions == ["0", "1"]


def test_token_histograms_use_vllm_1_2_5_buckets_up_to_max_model_len() -> None:
    assert one_two_five_buckets(8192)[-3:] == (1000.0, 2000.0, 5000.0)
    assert one_two_five_buckets(100_000)[-1] == 100000.0
    edges = families(render(max_model_len=60000))["vllm:request_prompt_tokens"].edges
    assert edges[-2:] == ["50000.0", "+Inf"]


@pytest.mark.parametrize(
    "name", ["vllm:spec_decode_num_drafts_total", "vllm:generation_tokens_total"]
)
def test_counters_start_at_zero_with_a_created_timestamp(name: str) -> None:
    text = render()
    created = name.replace("_total", "_created")
    assert f'{name}{{engine="0",model_name="{CAPTURE_MODEL}"}} 0.0' in text
    assert f'{created}{{engine="0",model_name="{CAPTURE_MODEL}"}} ' in text


def test_content_type_is_the_one_vllm_033_sends() -> None:
    truth = json.loads((V033 / "spec_ngram_k4.ground-truth.json").read_text())
    assert truth["snapshots"][0]["content_type"] == CONTENT_TYPE
