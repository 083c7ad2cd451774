"""How the tap reads its settings: default temperature sources, listen address, URL prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tapfakes import MODEL, json_reply, post_request, raw_exchange, running_tap

from specdec_exporter.options import ConfigError
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.tap_parts import tap_config
from specdec_exporter.tap.stats import RequestStats
from specdec_exporter.tap.upstream import Origin

pytestmark = pytest.mark.anyio
NO_TEMPERATURE = json.dumps({"model": MODEL, "messages": []}).encode()
REPLY = json_reply({"object": "chat.completion", "metrics": None})


def bucket_of_only_request(tap_stats: RequestStats) -> str:
    (row,) = [row for row in tap_stats.bucket_summary() if row.requests]
    return row.temperature_bucket


async def test_generation_config_sets_the_default(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_p": 0.9}')
    async with running_tap(lambda _: REPLY, generation_config=tmp_path) as tap:
        await raw_exchange(tap.address, post_request("/v1/chat/completions", NO_TEMPERATURE))
        assert bucket_of_only_request(tap.stats) == "0.5-0.7"


async def test_default_temperature_wins_over_generation_config(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6}')
    async with running_tap(
        lambda _: REPLY, generation_config=tmp_path, default_temperature=0.0
    ) as tap:
        await raw_exchange(tap.address, post_request("/v1/chat/completions", NO_TEMPERATURE))
        assert bucket_of_only_request(tap.stats) == "0"


async def test_without_any_default_vllm_samples_at_one() -> None:
    async with running_tap(lambda _: REPLY) as tap:
        await raw_exchange(tap.address, post_request("/v1/chat/completions", NO_TEMPERATURE))
        assert bucket_of_only_request(tap.stats) == "0.7-1.0"


def test_no_listen_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="proxy-listen"):
        tap_config(Settings())


async def test_path_prefix_of_the_vllm_url_is_kept() -> None:
    async with running_tap(lambda _: REPLY) as upstream_side:
        base = upstream_side.settings.vllm_url
        async with running_tap(upstream_url=f"{base}/serving") as tap:
            await raw_exchange(
                tap.address, b"GET /v1/models?x=1 HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
            )
        assert upstream_side.upstream.received[0].target == "/serving/v1/models?x=1"
    assert Origin.from_url("http://vllm:8000/serving/").path_prefix == b"/serving"
    assert Origin.from_url("https://vllm").port == 443
