"""Fixtures of the real-vLLM stage: one spec-decoding vLLM server per session, a spec-off on demand.

Collected only with `-m real_vllm`; fails loudly when vLLM cannot be set up or started, unless
SPECDEC_SKIP_REAL_VLLM=1. SPECDEC_REAL_VLLM_URL points the spec fixture at a server already running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from real_vllm.server_script import load_server_module

SKIP_VARIABLE = "SPECDEC_SKIP_REAL_VLLM"
URL_VARIABLE = "SPECDEC_REAL_VLLM_URL"
MARKER = "real_vllm"
HERE = Path(__file__).resolve().parent
SERVER = load_server_module()


def stage_selected(config: pytest.Config) -> bool:
    return MARKER in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without `-m real_vllm`, the tests of this folder are deselected (they need minutes)."""
    if stage_selected(config):
        return
    ours = [item for item in items if HERE in item.path.parents]
    if ours:
        config.hook.pytest_deselected(items=ours)
        items[:] = [item for item in items if HERE not in item.path.parents]


def announcer(config: pytest.Config) -> Callable[[str], None]:
    """Progress lines on the terminal even while pytest captures output (setup takes minutes)."""
    capture: Any = config.pluginmanager.getplugin("capturemanager")
    reporter: Any = config.pluginmanager.getplugin("terminalreporter")

    def say(text: str) -> None:
        if capture is None or reporter is None:
            print(text, file=sys.stderr)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"[real vLLM] {text}")

    return say


@pytest.fixture(scope="session")
def real_vllm_layout(request: pytest.FixtureRequest) -> Any:
    """The cache folder, set up (vLLM installed, models built) or reused; fails loudly if not."""
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{SKIP_VARIABLE}=1: the real vLLM stage is skipped on purpose")
    layout = SERVER.Layout.default()
    problem = None
    try:
        SERVER.setup(layout, announcer(request.config))
    except SERVER.RealVllmError as failure:
        problem = str(failure)
    if problem is not None:  # failed outside the except block: no chained traceback
        fail_loudly(problem)
    return layout


def fail_loudly(problem: str) -> NoReturn:
    pytest.fail(
        f"real vLLM unavailable (set {SKIP_VARIABLE}=1 to skip this stage on purpose):\n{problem}",
        pytrace=False,
    )


def serve(
    config: pytest.Config, layout: Any, *, spec: bool, what: str | None = None, **options: Any
) -> Iterator[Any]:
    """Start a server, yield it, stop it (its whole process group). ``what`` says which on the
    terminal; ``options`` go to the server script's ``start`` (name, env, extra_args)."""
    say = announcer(config)
    what = what or ("speculative decoding" if spec else "no speculative config")
    say(f"starting vLLM ({what})")
    problem = None
    try:
        server = SERVER.start(layout, spec=spec, **options)
    except SERVER.RealVllmError as failure:
        problem = str(failure)
    if problem is not None:
        fail_loudly(problem)
    say(f"vLLM ready at {server.url} (log {server.log})")
    try:
        yield server
    finally:
        server.stop()


class ExternalServer:
    """A server somebody else started (SPECDEC_REAL_VLLM_URL): used, never stopped."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.spec = True
        self.log = "(external server)"


@pytest.fixture(scope="session")
def real_vllm(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's vLLM server: draft-model speculative decoding (k=4), per-request metrics."""
    external = os.environ.get(URL_VARIABLE)
    if external and os.environ.get(SKIP_VARIABLE) != "1":
        yield ExternalServer(external)
        return
    yield from serve(request.config, request.getfixturevalue("real_vllm_layout"), spec=True)


@pytest.fixture(scope="session")
def real_vllm_nospec(request: pytest.FixtureRequest, real_vllm_layout: Any) -> Iterator[Any]:
    """A second server without --speculative-config, started only if a test asks for it."""
    yield from serve(request.config, real_vllm_layout, spec=False)


@pytest.fixture
def vllm(real_vllm: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=real_vllm.url, timeout=120, trust_env=False) as client:
        yield client
