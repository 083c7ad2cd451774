"""A loopback GET proxy in front of vLLM that counts `/metrics` scrapes, so a test knows when a
client's measurement window opened without sleeping.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScrapeSpy:
    """Forwards GETs to `upstream`; `wait_for_scrapes(n)` returns once n `/metrics` were served."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.scrapes = 0
        self._changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def wait_for_scrapes(self, count: int, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.scrapes >= count, timeout_s)

    def _served_scrape(self) -> None:
        with self._changed:
            self.scrapes += 1
            self._changed.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        spy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    with urllib.request.urlopen(spy.upstream + self.path, timeout=30) as answer:
                        status, body = answer.status, answer.read()
                        content_type = answer.headers.get("Content-Type", "text/plain")
                except urllib.error.HTTPError as failure:
                    status, body, content_type = failure.code, failure.read(), "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if self.path.split("?")[0] == "/metrics":
                    spy._served_scrape()

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep the test output clean

        return Handler

    @contextmanager
    def running(self) -> Iterator[ScrapeSpy]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()
