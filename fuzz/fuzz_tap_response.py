"""Coverage-guided fuzzing of the tap's response side: an upstream response (the input, after
its first byte), cut into reads at random points, answering a request the first byte picks (a
verbatim relay, a HEAD, a stream the tap rewrites); fake transports, no sockets.

What must hold for every input (``tests/tap/responsewire.check``):
- nothing raises;
- a response that parses cleanly as a whole (final status after any 1xx, trailers or not, 204,
  304, a length or chunked) reaches the client as one well-formed response with vLLM's status
  and body (a rewritten stream: some body), the same however its bytes were cut into reads;
- a transfer coding but chunked is a 502 however it is cut.

The cuts come from a seed derived from the input. Run like fuzz_sse.py (see fuzz/README.md).
"""

from __future__ import annotations

import logging
import random
import sys
import zlib
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tap"))
with atheris.instrument_imports(include=["specdec_exporter", "responsewire"]):
    from responsewire import KINDS, check

logging.getLogger("specdec_exporter").setLevel(logging.CRITICAL)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    kind, response = KINDS[data[0] % len(KINDS)], data[1:]
    rng = random.Random(zlib.crc32(data))
    cuts = [rng.randrange(1, len(response) + 1) for _ in range(rng.randint(0, 8))]
    check(kind, response, cuts)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
