"""Build hook: with SPECDEC_COMPILE=1 the tap's modules are compiled to C extensions by mypyc.

Everything else about the package is in pyproject.toml. Unset, the build is the pure-Python
wheel. Set, it needs mypy (mypyc ships with it), a C compiler, Python's headers and the runtime
dependencies installed (mypyc type-checks the tap against them); the image's build stage has all
four (Dockerfile), and scripts/compile_tap.sh builds the same modules in place for tests and
benchmarks. Compiled or not, the tap is the same code and passes the same tests; compiled it
costs less CPU per request and per chunk (BENCHMARKS.md "Session 4").
"""

from __future__ import annotations

import os

from setuptools import setup

COMPILED_TAP_MODULES = (
    "config",
    "http1",
    "jsonscan",
    "routes",
    "request",
    "spec",
    "sse",
    "stats",
    "upstream",
    "context",
    "downstream",
    "inspection",
    "request_side",
    "response_side",
    "exchange",
    "proxy",
)
"""Every module of the tap but the package's __init__."""


def main() -> None:
    if os.environ.get("SPECDEC_COMPILE") != "1":
        setup()
        return
    from mypyc.build import mypycify  # noqa: PLC0415  (only a compiling build has mypy)

    paths = [f"src/specdec_exporter/tap/{name}.py" for name in COMPILED_TAP_MODULES]
    setup(ext_modules=mypycify(paths))


if __name__ == "__main__":  # setuptools runs this file as __main__; the checks import the list
    main()
