"""A stand-in for vLLM's /metrics on 127.0.0.1 whose answer a test sets: body, status, delay."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    body: bytes = b""
    status: int = 200
    delay: float = 0.0
    content_type: str = "text/plain; version=1.0.0; charset=utf-8"


class FakeVllm:
    def __init__(self, server: ThreadingHTTPServer, answer: Answer) -> None:
        self._server = server
        self.answer = answer
        self.requests = 0
        self._queue: list[Answer] = []
        self._lock = threading.Lock()

    def next_answer(self) -> Answer:
        with self._lock:
            self.requests += 1
            if self._queue:
                self.answer = self._queue.pop(0)
            return self.answer

    def serve_in_turn(self, *bodies: str) -> None:
        """Answer each GET with the next body; the last one then stays."""
        with self._lock:
            self._queue = [Answer(body.encode()) for body in bodies]

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def serve(self, body: str, status: int = 200, delay: float = 0.0) -> None:
        self.answer = Answer(body.encode(), status, delay)


@contextmanager
def fake_vllm(body: str = "") -> Iterator[FakeVllm]:
    fake: FakeVllm

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer = fake.next_answer()
            if answer.delay:
                time.sleep(answer.delay)
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake = FakeVllm(server, Answer(body.encode()))
    with serving(server):
        yield fake


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[int]:
    """Serve ``server`` from a thread of its own; yields its port, shuts it down on exit."""
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
