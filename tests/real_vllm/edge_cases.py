"""Edge-case requests for a vLLM server, their recorded answers, and the parts of them that matter.

Each case is sent as raw bytes (so a missing Content-Type stays missing). `record` keeps the
status, headers and body (SSE events for a stream); `essentials` reduces a record to what a client
or a proxy depends on. Run as a script to (re)capture the fixtures from a live server:

    python tests/real_vllm/edge_cases.py http://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from real_vllm.shapes import Shape, json_shape, stream_shape
from specdec_exporter.devtools.load.sse import DONE, SseDecoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0-cpu" / "edge-cases"
MODEL = "tiny-llama"
MAX_MODEL_LEN = 1024
"""The real stage's --max-model-len (scripts/real_vllm/server.py)."""
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
JSON_HEADERS = {"content-type": "application/json"}
IGNORED_HEADERS = frozenset({"date", "server"})
TOKEN = 100
"""A token id of the tiny model's vocabulary: a prompt of N of them is exactly N tokens."""


@dataclass(frozen=True)
class Case:
    """One request: a JSON body (or raw bytes) with headers."""

    name: str
    path: str
    body: Any = None
    raw: bytes | None = None
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))

    def content(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        return None if self.body is None else json.dumps(self.body).encode()

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True


def chat(**fields: Any) -> dict[str, Any]:
    """Eight greedy tokens, never cut short by the model's end of text."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "class Foo:"}],
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": True,
        **fields,
    }


def completion(**fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": "class Foo:",
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": True,
        **fields,
    }


def without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in keys}


STREAMS: dict[str, dict[str, Any]] = {
    "absent": {},
    "false": {"stream": False},
    "true": {"stream": True},
}
STREAM_OPTIONS: dict[str, dict[str, Any]] = {
    "absent": {},
    "empty": {"stream_options": {}},
    "usage_true": {"stream_options": {"include_usage": True}},
    "usage_false": {"stream_options": {"include_usage": False}},
    "continuous": {"stream_options": {"continuous_usage_stats": True}},
    "usage_continuous": {"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    "null": {"stream_options": None},
}


def stream_matrix() -> list[Case]:
    """Every stream x stream_options combination, for chat and for completions."""
    cases = []
    for endpoint, path, build in (("chat", CHAT, chat), ("completions", COMPLETIONS, completion)):
        for stream_name, stream in STREAMS.items():
            for options_name, options in STREAM_OPTIONS.items():
                cases.append(
                    Case(
                        f"{endpoint}_stream_{stream_name}_options_{options_name}",
                        path,
                        build(**stream, **options),
                    )
                )
    return cases


def error_cases() -> list[Case]:
    ids = [TOKEN]
    return [
        Case("chat_top_p_0", CHAT, chat(top_p=0)),
        Case("chat_top_p_1.5", CHAT, chat(top_p=1.5)),
        Case("completions_top_p_0", COMPLETIONS, completion(top_p=0)),
        Case("chat_top_logprobs_without_logprobs", CHAT, chat(top_logprobs=2)),
        Case("chat_messages_empty", CHAT, chat(messages=[])),
        Case("chat_messages_missing", CHAT, without(chat(), "messages")),
        Case("chat_no_content_type", CHAT, chat(), headers={}),
        Case("chat_text_plain", CHAT, chat(), headers={"content-type": "text/plain"}),
        Case(
            "chat_json_charset",
            CHAT,
            chat(),
            headers={"content-type": "application/json; charset=utf-8"},
        ),
        Case("completions_no_content_type", COMPLETIONS, completion(), headers={}),
        Case("chat_invalid_json", CHAT, raw=b"{not json"),
        Case("chat_empty_body", CHAT, raw=b""),
        Case("chat_temperature_string", CHAT, chat(temperature="hot")),
        Case("chat_temperature_negative", CHAT, chat(temperature=-0.5)),
        Case("chat_temperature_2.5", CHAT, chat(temperature=2.5)),
        Case("chat_greedy_n2", CHAT, chat(n=2)),
        Case("chat_unknown_model", CHAT, chat(model="gpt-9")),
        Case("chat_max_tokens_0", CHAT, chat(max_tokens=0)),
        Case("chat_n_0", CHAT, chat(n=0)),
        Case("completions_n_0", COMPLETIONS, completion(n=0)),
        Case(
            "chat_stream_options_without_stream", CHAT, chat(stream_options={"include_usage": True})
        ),
        Case(
            "completions_stream_options_without_stream",
            COMPLETIONS,
            completion(stream_options={"include_usage": True}),
        ),
        Case("completions_prompt_missing", COMPLETIONS, without(completion(), "prompt")),
        Case("completions_prompt_empty", COMPLETIONS, completion(prompt="")),
        Case("completions_prompt_empty_list", COMPLETIONS, completion(prompt=[])),
        Case("chat_max_tokens_over_model_len", CHAT, chat(max_tokens=MAX_MODEL_LEN + 1)),
        Case(
            "completions_max_tokens_over_model_len",
            COMPLETIONS,
            completion(max_tokens=MAX_MODEL_LEN + 1),
        ),
        Case(
            "completions_prompt_over_model_len",
            COMPLETIONS,
            completion(prompt=ids * (MAX_MODEL_LEN + 10)),
        ),
        Case(
            "completions_prompt_at_model_len", COMPLETIONS, completion(prompt=ids * MAX_MODEL_LEN)
        ),
        Case(
            "completions_max_tokens_capped",
            COMPLETIONS,
            completion(prompt=ids * (MAX_MODEL_LEN - 6), max_tokens=MAX_MODEL_LEN),
        ),
        Case("completions_max_tokens_absent", COMPLETIONS, without(completion(), "max_tokens")),
        Case("completions_echo", COMPLETIONS, completion(echo=True)),
        Case("completions_echo_stream", COMPLETIONS, completion(echo=True, stream=True)),
        Case("completions_echo_max_tokens_0", COMPLETIONS, completion(echo=True, max_tokens=0)),
        Case("completions_echo_token_ids", COMPLETIONS, completion(echo=True, prompt=ids * 3)),
        Case(
            "completions_echo_two_prompts",
            COMPLETIONS,
            completion(echo=True, prompt=["class Foo:", "def f():"]),
        ),
        Case(
            "completions_two_prompts_n2",
            COMPLETIONS,
            completion(prompt=["class Foo:", "def f():"], n=2, temperature=0.8),
        ),
        Case(
            "completions_two_prompts_stream_usage",
            COMPLETIONS,
            completion(
                prompt=[ids * 3, ids * 5], stream=True, stream_options={"include_usage": True}
            ),
        ),
        Case(
            "completions_two_prompts_stream_usage_continuous",
            COMPLETIONS,
            completion(
                prompt=[ids * 3, ids * 5],
                stream=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True},
            ),
        ),
        Case(
            "chat_prompt_over_model_len",
            CHAT,
            chat(messages=[{"role": "user", "content": "x " * (4 * MAX_MODEL_LEN)}]),
        ),
        Case(
            "chat_max_completion_tokens_over_model_len",
            CHAT,
            chat(max_completion_tokens=MAX_MODEL_LEN + 1),
        ),
        Case("completions_max_tokens_null", COMPLETIONS, completion(max_tokens=None)),
        Case("completions_max_tokens_0", COMPLETIONS, completion(max_tokens=0)),
        Case(
            "completions_long_text_prompt",
            COMPLETIONS,
            completion(prompt="x " * (4 * MAX_MODEL_LEN)),
        ),
        Case("chat_messages_empty_bad_temperature", CHAT, chat(messages=[], temperature=-1)),
        Case(
            "chat_messages_empty_max_tokens_over",
            CHAT,
            chat(messages=[], max_tokens=MAX_MODEL_LEN + 1),
        ),
        Case(
            "chat_long_prompt_max_tokens_over",
            CHAT,
            chat(
                messages=[{"role": "user", "content": "x " * (4 * MAX_MODEL_LEN)}],
                max_tokens=MAX_MODEL_LEN + 1,
            ),
        ),
        Case("chat_top_p_0_bad_temperature", CHAT, chat(top_p=0, temperature=-1)),
        Case(
            "chat_stream_options_bad_type",
            CHAT,
            chat(stream_options={"include_usage": True}, temperature="hot"),
        ),
        Case(
            "chat_n2_stream_usage",
            CHAT,
            chat(n=2, temperature=0.8, stream=True, stream_options={"include_usage": True}),
        ),
        Case("get_chat", CHAT, method="GET", headers={}),
        Case("get_completions", COMPLETIONS, method="GET", headers={}),
        Case("post_models", "/v1/models", method="POST", headers={}),
        Case("get_health", "/health", method="GET", headers={}),
        Case("get_unknown", "/v1/nothing", method="GET", headers={}),
    ]


CASES: dict[str, Case] = {case.name: case for case in [*stream_matrix(), *error_cases()]}


def events(raw: bytes) -> list[Any]:
    """An SSE body's data payloads, JSON-decoded ("[DONE]" kept as the string)."""
    decoder = SseDecoder()
    return [
        DONE.decode() if data == DONE else json.loads(data)
        for data in (*decoder.feed(raw), *decoder.close())
    ]


def record(client: httpx.Client, case: Case) -> dict[str, Any]:
    """Send the case and keep the answer: status, headers, JSON/text body or SSE events."""
    response = client.request(case.method, case.path, content=case.content(), headers=case.headers)
    headers = {key: value for key, value in response.headers.items() if key not in IGNORED_HEADERS}
    answer: dict[str, Any] = {"status": response.status_code, "headers": headers}
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        answer["events"] = events(response.content)
    elif content_type.startswith("application/json"):
        answer["body"] = response.json()
    else:
        answer["text"] = response.text
    request: dict[str, Any] = {"method": case.method, "path": case.path, "headers": case.headers}
    if case.raw is not None:
        request["raw"] = case.raw.decode()
    else:
        request["body"] = case.body
    return {"request": request, **answer}


def case_of(recorded: dict[str, Any], name: str) -> Case:
    """The Case a fixture was recorded from."""
    request = recorded["request"]
    raw = request.get("raw")
    return Case(
        name,
        request["path"],
        request.get("body"),
        None if raw is None else raw.encode(),
        request["method"],
        request["headers"],
    )


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choices = chunk.get("choices")
    return choices if isinstance(choices, list) else []


def essentials(answer: dict[str, Any]) -> dict[str, Any]:
    """What must agree between two servers: status, error type/param, usage and metrics, choices.

    For a stream: the number of choices, each one's finish_reason, whether a usage-only chunk
    comes, whether every chunk carries a running usage, and where metrics.speculative_decoding
    rides.
    """
    found: dict[str, Any] = {
        "status": answer["status"],
        "content_type": answer["headers"].get("content-type"),
        "allow": answer["headers"].get("allow"),
    }
    body = answer.get("body")
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        found["error"] = {
            "type": error.get("type"),
            "param": error.get("param"),
            "code": error.get("code"),
        }
    elif isinstance(body, dict) and "choices" in body:
        found["choices"] = len(body["choices"])
        found["finish_reasons"] = sorted(str(c.get("finish_reason")) for c in body["choices"])
        found["completion_tokens"] = (body.get("usage") or {}).get("completion_tokens")
        metrics = body.get("metrics")
        found["spec_metrics"] = isinstance(metrics, dict) and bool(
            metrics.get("speculative_decoding")
        )
    elif isinstance(body, dict):
        found["keys"] = sorted(body)
    if "events" in answer:
        found.update(stream_essentials(answer["events"]))
    if "text" in answer:
        found["text"] = answer["text"]
    return found


def stream_essentials(payloads: list[Any]) -> dict[str, Any]:
    chunks = [p for p in payloads if isinstance(p, dict)]
    finishes = [
        (c["index"], c["finish_reason"])
        for chunk in chunks
        for c in _choices(chunk)
        if c.get("finish_reason") is not None
    ]
    usage_only = [chunk for chunk in chunks if not _choices(chunk) and "usage" in chunk]

    with_choices = [chunk for chunk in chunks if _choices(chunk)]
    return {
        "done": payloads[-1:] == ["[DONE]"],
        "choices": len({c["index"] for chunk in with_choices for c in _choices(chunk)}),
        "finish_reasons": sorted(str(reason) for _, reason in finishes),
        "usage_chunk": len(usage_only),
        "completion_tokens": [chunk["usage"].get("completion_tokens") for chunk in usage_only],
        "running_usage": bool(with_choices)
        and all(chunk.get("usage") is not None for chunk in with_choices),
        "spec_metrics_on": sorted(
            {
                "usage" if not _choices(chunk) else "choice"
                for chunk in chunks
                if (chunk.get("metrics") or {}).get("speculative_decoding")
            }
        ),
    }


def running_prompt_tokens(answer: dict[str, Any]) -> list[tuple[int, Any]]:
    """Each (choice index, ``usage.prompt_tokens``) on the chunks of a stream with
    ``continuous_usage_stats``: vLLM counts each choice's own prompt, not the request's total."""
    chunks = [p for p in answer.get("events", []) if isinstance(p, dict)]
    return sorted(
        {
            (c["index"], chunk["usage"].get("prompt_tokens"))
            for chunk in chunks
            for c in _choices(chunk)
            if isinstance(chunk.get("usage"), dict)
        }
    )


def stream_order(answer: dict[str, Any]) -> list[tuple[int, str]]:
    """(choice index, "content" or "finish") for each choice chunk of a stream, in order."""
    chunks = [p for p in answer.get("events", []) if isinstance(p, dict)]
    return [
        (c["index"], "finish" if c.get("finish_reason") is not None else "content")
        for chunk in chunks
        for c in _choices(chunk)
    ]


def interleaved(order: list[tuple[int, str]]) -> bool:
    """Every choice had sent content before the first one finished: the prompts of a list run
    side by side, as vLLM schedules them, not one after the other."""
    choices = {index for index, _ in order}
    first_finish = next((n for n, (_, kind) in enumerate(order) if kind == "finish"), len(order))
    started = {index for index, kind in order[:first_finish] if kind == "content"}
    return len(choices) > 1 and started == choices


def shape_of(answer: dict[str, Any]) -> Shape:
    """The JSON shape of a body, or the chunk shapes of a stream (real_vllm.shapes)."""
    if "events" in answer:
        raw = "".join(
            f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in answer["events"]
        )
        return stream_shape(raw.encode())
    return json_shape(answer.get("body", answer.get("text")))


def capture(url: str, folder: Path = FIXTURES) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        for name, case in CASES.items():
            answer = record(client, case)
            (folder / f"{name}.json").write_text(json.dumps(answer, indent=1) + "\n")
            print(name, answer["status"], file=sys.stderr)


if __name__ == "__main__":
    capture(sys.argv[1])
