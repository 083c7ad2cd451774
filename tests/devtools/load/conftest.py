"""Fixtures of the load tests: one fake vLLM server per module, reset before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from load_fake_vllm import FakeVllm, serve_in_thread


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[tuple[FakeVllm, str]]:
    app = FakeVllm()
    with serve_in_thread(app) as url:
        yield app, url


@pytest.fixture
def fake(fake_server: tuple[FakeVllm, str]) -> FakeVllm:
    app, _ = fake_server
    app.reset()
    return app


@pytest.fixture
def url(fake_server: tuple[FakeVllm, str], fake: FakeVllm) -> str:
    return fake_server[1]
