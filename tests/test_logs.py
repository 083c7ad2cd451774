"""The JSON log line: RFC 3339 time, tracebacks kept, uvicorn's coloured copy dropped."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from specdec_exporter.logs import JsonFormatter, rfc3339


def line_of(record: logging.LogRecord) -> dict[str, object]:
    text = JsonFormatter().format(record)
    assert "\n" not in text
    return dict(json.loads(text))


def test_time_is_rfc3339_utc_with_milliseconds() -> None:
    created = datetime(2026, 11, 22, 20, 15, 0, 123000, tzinfo=UTC).timestamp()
    assert rfc3339(created) == "2026-11-22T20:15:00.123Z"
    record = logging.makeLogRecord({"msg": "hello", "created": created})
    assert line_of(record)["ts"] == "2026-11-22T20:15:00.123Z"


def test_an_exception_keeps_its_message_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    try:
        {}["model"]
    except KeyError:
        logging.getLogger("test_logs").exception("poll failed")
    line = line_of(caplog.records[0])
    assert (line["msg"], line["error"]) == ("poll failed", "KeyError: 'model'")
    traceback = str(line["traceback"])
    assert traceback.startswith("Traceback (most recent call last):\n  File ")
    assert (
        "test_logs.py" in traceback
        and "in test_an_exception_keeps_its_message_and_traceback" in traceback
        and traceback.endswith("KeyError: 'model'")
    )


def test_uvicorn_color_message_is_dropped_and_other_extras_kept() -> None:
    record = logging.makeLogRecord(
        {
            "msg": "Started server process [%d]",
            "args": (7,),
            "color_message": "Started server process [\x1b[36m%d\x1b[0m]",
            "component": "metrics",
        }
    )
    line = line_of(record)
    assert line["msg"] == "Started server process [7]"
    assert line["component"] == "metrics" and "color_message" not in line
