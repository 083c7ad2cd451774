"""A PagerDuty Events API v2 stub: a real HTTP server on 127.0.0.1 that records what is posted.

Alertmanager's PagerDuty receiver is pointed at `url` (path /v2/enqueue); any other path (the
chat receiver's webhook, say) is recorded too, under its own path. Tests wait on conditions
over the recorded posts instead of sleeping.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENQUEUE_PATH = "/v2/enqueue"


@dataclass(frozen=True)
class Post:
    path: str
    body: dict[str, Any]


class PagerDutyStub:
    def __init__(self) -> None:
        self._posts: list[Post] = []
        self._changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def url(self) -> str:
        """The Events API v2 endpoint to configure as the PagerDuty receiver's `url`."""
        return self.base_url + ENQUEUE_PATH

    def start(self) -> PagerDutyStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def posts(self, path: str | None = None) -> list[Post]:
        with self._changed:
            return [p for p in self._posts if path is None or p.path == path]

    def events(self) -> list[dict[str, Any]]:
        """The Events API v2 bodies posted so far, oldest first."""
        return [post.body for post in self.posts(ENQUEUE_PATH)]

    def wait_for_event(
        self, matches: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """The first event `matches` accepts; AssertionError listing every event on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [e for e in self._events_locked() if matches(e)]
                if found:
                    return found[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"no matching PagerDuty event within {timeout}s; got "
                        f"{json.dumps(self._events_locked(), indent=1)}"
                    )
                self._changed.wait(remaining)

    def _events_locked(self) -> list[dict[str, Any]]:
        return [p.body for p in self._posts if p.path == ENQUEUE_PATH]

    def _record(self, path: str, body: dict[str, Any]) -> None:
        with self._changed:
            self._posts.append(Post(path, body))
            self._changed.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub._record(self.path, body)
                reply = {
                    "status": "success",
                    "message": "Event processed",
                    "dedup_key": body.get("dedup_key", ""),
                }
                payload = json.dumps(reply).encode()
                self.send_response(202 if self.path == ENQUEUE_PATH else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Silent: event bodies may quote alert text, and tests read them directly."""

        return Handler
