"""Shared pieces of the tap benchmarks: a paced raw-asyncio SSE upstream, a raw streaming load
client, idle keep-alive connections, the baselines (nginx; the obvious Starlette+httpx proxy) and
CPU/RSS/fd readings from /proc."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

HERE = Path(__file__).resolve()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

CONTENT_EVENT = (
    b'data: {"id":"chatcmpl-b69275bd15214acc","object":"chat.completion.chunk",'
    b'"created":1795323868,"model":"bench","choices":[{"index":0,"delta":'
    b'{"content":"aiaiaiaiai"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}\n\n'
)
ROLE_EVENT = (
    b'data: {"id":"chatcmpl-b69275bd15214acc","object":"chat.completion.chunk",'
    b'"created":1795323868,"model":"bench","choices":[{"index":0,"delta":{"role":'
    b'"assistant","content":""},"logprobs":null,"finish_reason":null}],'
    b'"prompt_token_ids":null,"prompt_text":null}\n\n'
)
FINISH_EVENT = (
    b'data: {"id":"chatcmpl-b69275bd15214acc","object":"chat.completion.chunk",'
    b'"created":1795323868,"model":"bench","choices":[{"index":0,"delta":'
    b'{"content":" U"},"logprobs":null,"finish_reason":"length","stop_reason":null,'
    b'"token_ids":null}]}\n\n'
)
USAGE_EVENT = (
    b'data: {"id":"chatcmpl-b69275bd15214acc","object":"chat.completion.chunk",'
    b'"created":1795323868,"model":"bench","choices":[],"usage":{"prompt_tokens":10,'
    b'"total_tokens":106,"completion_tokens":96},"system_fingerprint":'
    b'"vllm-0.32.0-52476dec","metrics":{"speculative_decoding":{'
    b'"mean_acceptance_length":2.2093023255813953,"draft_acceptance_rate":'
    b'0.3023255813953488,"acceptance_histogram":[19,12,3,2,7],"num_spec_steps":43,'
    b'"num_accepted_draft_tokens":52,"num_draft_tokens":172,"num_spec_tokens":4}}}\n\n'
)
DONE_EVENT = b"data: [DONE]\n\n"
FINGERPRINT_MEMBER = b',"system_fingerprint":"vllm-0.32.0-52476dec"'
RESPONSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Sat, 22 Nov 2026 05:20:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
JSON_BODY = (
    b'{"id":"cmpl-1","object":"chat.completion","model":"bench","choices":[],'
    b'"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1},'
    b'"metrics":{"speculative_decoding":{"num_spec_steps":1,"num_draft_tokens":4,'
    b'"num_accepted_draft_tokens":2,"num_spec_tokens":4}}}'
)


def frame(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def install_uvloop() -> None:
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# ---------------------------------------------------------------- upstream (a fake vLLM)


class SseUpstream(asyncio.Protocol):
    """Answers every POST with a paced SSE stream shaped like vLLM's; JSON when not streaming."""

    def __init__(self, chunks: int, interval: float) -> None:
        self.chunks = chunks
        self.interval = interval
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.body = bytearray()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        body = bytes(self.body)
        if b'"stream":true' not in body and b'"stream": true' not in body:
            self._write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(JSON_BODY), JSON_BODY)
            )
            return
        with_usage = b'"include_usage":true' in body or b'"include_usage": true' in body
        self._write(RESPONSE_HEAD)
        events = [ROLE_EVENT, *[CONTENT_EVENT] * self.chunks]
        if with_usage:
            events += [FINISH_EVENT, USAGE_EVENT]
        else:
            events.append(FINISH_EVENT[:-3] + FINGERPRINT_MEMBER + b"}\n\n")
        events.append(DONE_EVENT)
        self._pace([frame(event) for event in events] + [b"0\r\n\r\n"], 0)

    def _pace(self, frames: list[bytes], index: int) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.interval <= 0:
            self._write(b"".join(frames))
            return
        # one chunk per step, like vLLM: the last three frames end the stream together
        if index >= len(frames) - 3:
            self._write(b"".join(frames[index:]))
            return
        self._write(frames[index])
        asyncio.get_running_loop().call_later(self.interval, self._pace, frames, index + 1)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


async def serve_upstream(port: int, chunks: int, interval: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SseUpstream(chunks, interval), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------- load client


@dataclass
class LoadResult:
    ttft_ms: list[float] = field(default_factory=list)
    events: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.ttft_ms) or [float("nan")]
        return {
            "requests": self.requests,
            "errors": self.errors,
            "events": self.events,
            "seconds": round(self.seconds, 3),
            "ttft_p50_ms": round(statistics.median(ordered), 3),
            "ttft_p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
            "ttft_max_ms": round(ordered[-1], 3),
        }


class StreamClient(asyncio.Protocol):
    """One keep-alive connection sending requests one after another."""

    def __init__(
        self,
        request: bytes | Callable[[], bytes],
        count: int,
        result: LoadResult,
        done: asyncio.Future[None],
        delay: float = 0.0,
    ) -> None:
        self.request = request if callable(request) else (lambda: request)
        self.remaining = count
        self.result = result
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sent_at = 0.0
        self.first = True
        self.delay = delay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().call_later(self.delay, self._send)

    def _send(self) -> None:
        if self.remaining == 0:
            assert self.transport is not None
            self.transport.close()
            return
        self.remaining -= 1
        self.first = True
        self.sent_at = time.perf_counter()
        assert self.transport is not None
        self.transport.write(self.request())

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.result.errors += 1
            assert self.transport is not None
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        if self.first:
            self.first = False
            self.result.ttft_ms.append((time.perf_counter() - self.sent_at) * 1000)
        self.result.events += body.count(b"data: ")

    def on_message_complete(self) -> None:
        self.result.requests += 1
        if self.parser.get_status_code() != 200:
            self.result.errors += 1
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.remaining:
            self.result.errors += self.remaining
        if not self.done.done():
            self.done.set_result(None)


def chat_request(
    stream: bool, include_usage: bool = False, temperature: float = 0.7, model: str = "bench"
) -> bytes:
    document: dict[str, object] = {
        "model": model,
        "temperature": temperature,
        "max_tokens": 96,
        "messages": [{"role": "user", "content": "def main():"}],
    }
    if stream:
        document["stream"] = True
    if include_usage:
        document["stream_options"] = {"include_usage": True}
    body = json.dumps(document, separators=(",", ":")).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\n"
        b"content-type: application/json\r\nauthorization: Bearer sk-bench\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )


async def run_load(
    port: int,
    concurrency: int,
    per_connection: int,
    request: bytes | Callable[[], bytes],
    stagger: float = 0.0,
) -> LoadResult:
    """``concurrency`` keep-alive connections, each sending ``per_connection`` requests in turn.

    Connection i starts ``i * stagger / concurrency`` seconds late, so streams are spread over
    time as real clients are, not all phase-aligned.
    """
    loop = asyncio.get_running_loop()
    result = LoadResult()
    started = time.perf_counter()
    waits = []
    for index in range(concurrency):
        done: asyncio.Future[None] = loop.create_future()
        delay = index * stagger / concurrency
        await loop.create_connection(
            lambda done=done, delay=delay: StreamClient(  # type: ignore[misc]
                request, per_connection, result, done, delay
            ),
            "127.0.0.1",
            port,
        )
        waits.append(done)
    await asyncio.gather(*waits)
    result.seconds = time.perf_counter() - started
    return result


class IdleClient(asyncio.Protocol):
    """Sends one request, reads its response, then keeps the connection open and idle."""

    def __init__(self, request: bytes, answered: asyncio.Future[bool]) -> None:
        self.request = request
        self.answered = answered
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._answer(False)

    def on_message_complete(self) -> None:
        self._answer(self.parser.get_status_code() == 200)

    def connection_lost(self, exc: Exception | None) -> None:
        self._answer(False)

    def _answer(self, ok: bool) -> None:
        if not self.answered.done():
            self.answered.set_result(ok)


async def open_idle(
    port: int, count: int, request: bytes, wave: int = 256
) -> list[asyncio.BaseTransport]:
    """``count`` keep-alive connections that each had one answered request and now sit idle."""
    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []
    for start in range(0, count, wave):
        answers = []
        for _ in range(min(wave, count - start)):
            answered: asyncio.Future[bool] = loop.create_future()
            transport, _ = await loop.create_connection(
                lambda answered=answered: IdleClient(request, answered),  # type: ignore[misc]
                "127.0.0.1",
                port,
            )
            transports.append(transport)
            answers.append(answered)
        if not all(await asyncio.gather(*answers)):
            raise RuntimeError(f"an idle connection's request failed (after {start})")
    return transports


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (inherited by the children); returns it."""
    import resource  # noqa: PLC0415

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ---------------------------------------------------------------- the obvious Python proxy

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


class _PipeUpstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _ParsingPipeUpstream(_PipeUpstream):
    """The pipe's upstream side, also running every read through httptools' response parser
    (callbacks that do nothing): the parsing floor under the tap's per-chunk path."""

    def __init__(self, client: asyncio.Transport) -> None:
        super().__init__(client)
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)
        self.client.write(data)

    def on_body(self, body: bytes) -> None:
        pass


class _PipeClient(asyncio.Protocol):
    """One client connection piped to its own upstream connection, both ways, bytes untouched."""

    def __init__(self, upstream_port: int, parse: bool = False) -> None:
        self.upstream_port = upstream_port
        self.upstream_side = _ParsingPipeUpstream if parse else _PipeUpstream
        self.upstream: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        upstream, _ = await loop.create_connection(
            lambda: self.upstream_side(self.transport), "127.0.0.1", self.upstream_port
        )
        self.upstream = upstream
        for data in self.early:
            upstream.write(data)

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


def serve_pipe(port: int, upstream_port: int, parse: bool = False) -> None:
    """The floor of any proxy in Python on uvloop: a TCP pipe that parses nothing (each client
    connection gets its own upstream connection, the keep-alive reuse the tap's pool gives);
    with ``parse``, it also runs each response read through httptools."""
    install_uvloop()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _PipeClient(upstream_port, parse), "127.0.0.1", port
        )
        await server.serve_forever()

    asyncio.run(serve())


def serve_starlette(port: int, upstream_port: int) -> None:
    """The obvious stack: Starlette ``StreamingResponse`` over httpx ``aiter_raw`` under
    uvicorn (uvloop, httptools). Pure pass-through: it inspects nothing, the tap does."""
    import httpx  # noqa: PLC0415
    import uvicorn  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.background import BackgroundTask  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import StreamingResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    client = httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{upstream_port}",
        timeout=None,
        trust_env=False,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
    )

    async def proxy(request: Request) -> StreamingResponse:
        headers = [
            (name, value)
            for name, value in request.headers.raw
            if name.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        upstream = client.build_request(
            request.method,
            request.url.path,
            params=request.url.query,
            headers=headers,
            content=await request.body(),
        )
        response = await client.send(upstream, stream=True)
        passed = {
            name: value
            for name, value in response.headers.items()
            if name.lower() not in HOP_BY_HOP
        }
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=passed,
            background=BackgroundTask(response.aclose),
        )

    app = Starlette(routes=[Route("/{path:path}", proxy, methods=["GET", "POST"])])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,
    )


# ---------------------------------------------------------------- processes and /proc


def cpu_times(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of the given processes, from /proc/<pid>/stat."""
    user = system = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11])  # utime (field 14)
        system += int(fields[12])  # stime (field 15)
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the given processes."""
    return sum(cpu_times(pids))


def open_fds(pids: list[int]) -> int:
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def spawn(
    *args: str, cpus: set[int] | None = None, src: Path | None = None
) -> subprocess.Popen[bytes]:
    """A Python child process; ``src``: import specdec_exporter from that tree instead (another
    checkout's src/, e.g. from ``git archive``, or a compiled copy)."""
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    process = subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL, env=env)
    if cpus:
        os.sched_setaffinity(process.pid, cpus)
    return process


def cpu_split() -> tuple[set[int] | None, set[int] | None]:
    """(proxy CPUs, load CPUs): the proxy alone on the last core, upstream and client on the
    others, so the proxy never waits for the benchmark's own processes. None on one core."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return None, None
    return {available[-1]}, set(available[:-1])


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_all(processes: list[subprocess.Popen[bytes]], nginx: Nginx | None) -> None:
    """A benchmark's teardown: nginx when it was started, then every child process."""
    if nginx is not None:
        nginx.stop()
    for process in processes:
        stop(process)


NGINX_CONF = """
worker_processes 1;
daemon off;
master_process on;
{user}
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
worker_rlimit_nofile 32768;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream vllm {{ server 127.0.0.1:{upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://vllm;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


class Nginx:
    """nginx 1 worker, proxy_buffering off, upstream keepalive: the pass-through reference."""

    def __init__(self, upstream_port: int, cpus: set[int] | None = None) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise RuntimeError("nginx not installed (apt-get install -y nginx)")
        self.port = free_port()
        self.prefix = tempfile.mkdtemp(prefix="tap-bench-nginx-")
        user = "user root;" if os.geteuid() == 0 else ""
        conf = Path(self.prefix) / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(prefix=self.prefix, upstream=upstream_port, port=self.port, user=user)
        )
        self.process = subprocess.Popen(
            [binary, "-c", str(conf), "-p", self.prefix], stdin=subprocess.DEVNULL
        )
        wait_for_port(self.port)
        if cpus:
            for pid in self.pids():
                os.sched_setaffinity(pid, cpus)

    def pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [self.process.pid, *map(int, children.read_text().split())]

    def stop(self) -> None:
        stop(self.process)
        shutil.rmtree(self.prefix, ignore_errors=True)


def tap_settings(vllm_url: str, proxy_listen: str) -> Any:
    """What ``run_tap`` and ``Tap`` take for these addresses, built the sidecar's way: a
    ``TapConfig`` from the sidecar's Settings. A tree from before ``tap/config.py`` (the A side of
    tap_ab.py against an older checkout) takes the Settings themselves."""
    from specdec_exporter.sidecar.config import Settings  # noqa: PLC0415

    settings = Settings(vllm_url=vllm_url, proxy_listen=proxy_listen)
    try:
        from specdec_exporter.sidecar.tap_parts import tap_config  # noqa: PLC0415
    except ImportError:
        return settings
    return tap_config(settings)
