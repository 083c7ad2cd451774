"""Unit tests of tests/real_vllm/shapes.py, the comparison helper of the real-vLLM stage."""

from __future__ import annotations

import json
from pathlib import Path

from real_vllm.shapes import (
    Family,
    family_table,
    json_shape,
    readable_diff,
    render_family_table,
    sse_events,
    stream_shape,
)

CAPTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"

EXPOSITION = """\
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{implementation="CPython",major="3"} 1.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 3.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 0.0
# HELP vllm:odd Label values with \\"escapes\\", commas and braces.
# TYPE vllm:odd gauge
vllm:odd{a="x,y=\\"}",b="2"} 1.0
"""


def test_family_table_keeps_vllm_families_with_type_help_and_label_names() -> None:
    table = family_table(EXPOSITION)
    assert table == {
        "vllm:spec_decode_num_drafts_total": Family(
            "counter", "Number of spec decoding drafts.", ("engine", "model_name")
        ),
        "vllm:e2e_request_latency_seconds": Family(
            "histogram",
            "Histogram of e2e request latency in seconds.",
            ("engine", "le", "model_name"),
        ),
        "vllm:odd": Family(
            "gauge", 'Label values with \\"escapes\\", commas and braces.', ("a", "b")
        ),
    }


def test_family_table_accepts_the_underscore_spelling_of_vllm_names() -> None:
    text = '# TYPE vllm:x_total counter\nvllm_x_total{engine="0"} 1\n'
    assert family_table(text)["vllm_x_total"] == Family("untyped", "", ("engine",))


def test_family_table_of_the_real_capture_has_the_four_spec_decode_counters() -> None:
    table = family_table((CAPTURES / "metrics" / "00_initial.prom").read_text())
    spec = {name: family for name, family in table.items() if "spec_decode" in name}
    counters = {name for name, family in spec.items() if family.type == "counter"}
    assert counters == {
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    }
    assert spec["vllm:spec_decode_num_accepted_tokens_per_pos_total"].labels == (
        "engine",
        "model_name",
        "position",
    )
    assert not any(name.startswith("python_") for name in table)


def test_json_shape_replaces_leaves_by_types_and_keeps_discriminators() -> None:
    response = {
        "object": "chat.completion",
        "created": 17,
        "usage": {"total_tokens": 3},
        "choices": [{"message": {"role": "assistant", "content": "hi"}}],
        "metrics": None,
        "rate": 0.5,
        "ok": True,
        "histogram": [1, 2, 0],
    }
    assert json_shape(response) == {
        "object": "=chat.completion",
        "created": "int",
        "usage": {"total_tokens": "int"},
        "choices": [{"message": {"role": "=assistant", "content": "str"}}],
        "metrics": "null",
        "rate": "float",
        "ok": "bool",
        "histogram": "list[int]",
    }


def test_json_shape_tells_int_from_float_and_one_choice_from_two() -> None:
    assert json_shape({"created": 1}) != json_shape({"created": 1.0})
    one = json_shape({"choices": [{"index": 0}]})
    two = json_shape({"choices": [{"index": 0}, {"index": 1}]})
    assert one != two


def chunk(choices: str, extra: str = "") -> bytes:
    return f'data: {{"object":"chat.completion.chunk","choices":[{choices}]{extra}}}\n\n'.encode()


SSE = (
    chunk('{"index":0,"delta":{"role":"assistant"}}')
    + chunk('{"index":0,"delta":{"content":"a"}}')
    + b": keep-alive comment\n\n"
    + chunk('{"index":0,"delta":{"content":"bc"}}')
    + chunk("", ',"usage":{"total_tokens":2}')
    + b"data: [DONE]\n\n"
)


def test_sse_events_returns_data_payloads_in_order() -> None:
    events = sse_events(SSE.replace(b"\n", b"\r\n"))
    assert len(events) == 5
    assert events[-1] == "[DONE]"
    assert json.loads(events[1])["choices"][0]["delta"] == {"content": "a"}


def test_stream_shape_collapses_runs_of_content_chunks() -> None:
    assert stream_shape(SSE) == [
        'choice 0: {"choices":[{"delta":{"role":"=assistant"},"index":"int"}],'
        '"object":"=chat.completion.chunk"}',
        'choice 0: {"choices":[{"delta":{"content":"str"},"index":"int"}],'
        '"object":"=chat.completion.chunk"}',
        '{"choices":[],"object":"=chat.completion.chunk","usage":{"total_tokens":"int"}}',
        "[DONE]",
    ]


def test_stream_shape_ignores_how_the_chunks_of_two_choices_interleave() -> None:
    content = [chunk(f'{{"index":{i},"delta":{{"content":"x"}}}}') for i in (0, 1)]
    finish = [chunk(f'{{"index":{i},"delta":{{}},"finish_reason":"stop"}}') for i in (0, 1)]
    done = b"data: [DONE]\n\n"
    one_after_other = content[0] + finish[0] + content[1] + finish[1] + done
    side_by_side = content[0] + content[1] + content[0] + content[1] + finish[1] + finish[0] + done
    assert stream_shape(one_after_other) == stream_shape(side_by_side)
    assert len(stream_shape(side_by_side)) == 5


def test_stream_shape_flags_a_choice_chunk_after_the_usage_chunk() -> None:
    late = chunk("", ',"usage":{"total_tokens":2}') + chunk('{"index":0,"delta":{"content":"a"}}')
    assert stream_shape(late)[-1].startswith("choice 0 chunk after the closing events: ")


def test_stream_shapes_of_the_captures_show_where_metrics_and_fingerprint_ride() -> None:
    streams = CAPTURES / "streams"
    with_usage = stream_shape((streams / "chat_T0p8_stream_0.sse").read_bytes())
    without = stream_shape((streams / "chat_T0p8_stream_no_include_usage_0.sse").read_bytes())
    assert with_usage[-1] == without[-1] == "[DONE]"
    assert '"metrics"' in with_usage[-2] and '"system_fingerprint"' in with_usage[-2]
    assert '"system_fingerprint"' not in with_usage[-3]
    assert '"system_fingerprint"' in without[-2]
    assert not any('"metrics"' in line for line in without)
    assert with_usage[:-3] == without[:-2]


def test_readable_diff_is_empty_for_equal_shapes_and_names_the_difference() -> None:
    real = json_shape({"metrics": {"speculative_decoding": {"num_spec_steps": 3}}})
    sim = json_shape({"metrics": {"speculative_decoding": {"num_spec_steps": 3.0}}})
    assert readable_diff(real, real) == ""
    diff = readable_diff(real, sim, "real vLLM", "simulator")
    assert "--- real vLLM" in diff and "+++ simulator" in diff
    assert '-      "num_spec_steps": "int"' in diff
    assert '+      "num_spec_steps": "float"' in diff


def test_readable_diff_of_family_tables_lists_missing_families() -> None:
    real = render_family_table(family_table(EXPOSITION))
    sim = render_family_table(family_table(EXPOSITION.replace("vllm:odd", "other:odd")))
    diff = readable_diff(real, sim, "real", "sim")
    changed = [line for line in diff.splitlines()[2:] if line.startswith(("-", "+"))]
    assert changed == [f"-{real[1]}"]
    assert real[1].startswith("vllm:odd  gauge  [a,b]")
