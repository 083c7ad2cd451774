"""Structured (JSON-lines) logging and a rate limiter for repeated error lines."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_RESERVED = frozenset(vars(logging.makeLogRecord({})))
_DROPPED = frozenset({"color_message"})
"""uvicorn's ANSI-coloured copy of its message: noise in a JSON line."""


def rfc3339(created: float) -> str:
    """``2026-11-22T20:15:00.123Z``: UTC, milliseconds."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, any `extra` fields, and the
    exception with its traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(
            {k: v for k, v in vars(record).items() if k not in _RESERVED and k not in _DROPPED}
        )
        if record.exc_info and record.exc_info[0] is not None:
            kind, error = record.exc_info[0], record.exc_info[1]
            payload["error"] = f"{kind.__name__}: {error}" if str(error) else kind.__name__
            payload["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        return json.dumps(payload, default=str)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RateLimiter:
    """Lets one event per key through every `interval` seconds; counts what it held back."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def allow(self, key: str) -> tuple[bool, int]:
        """(whether to emit now, how many were suppressed since the last emitted one)."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False, 0
        self._last[key] = now
        return True, self._suppressed.pop(key, 0)

    def reset(self, key: str) -> None:
        self._last.pop(key, None)
        self._suppressed.pop(key, None)
