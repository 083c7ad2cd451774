"""The `specdec-exporter` command line: dispatches to one module per subcommand.

Each command module exposes ``configure(parser)`` and ``main(args) -> int``; only the chosen
command's module is imported, so ``run`` does not pay for the simulator's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn, Protocol, cast

from specdec_exporter import __version__
from specdec_exporter.commands.exits import (
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    UnreachableError,
)
from specdec_exporter.options import ConfigError, redact_url

COMMANDS: dict[str, str] = {
    "run": "run the sidecar: poll vLLM, serve /metrics (and the tap)",
    "check": "one-shot verdict on a vLLM server's speculative decoding",
    "simulate": "serve a simulated vLLM with speculative decoding",
    "load": "load generator for an OpenAI-compatible endpoint",
    "demo": "simulator + sidecar + load, with a live table",
    "sweep": "acceptance per temperature: the sweep experiment",
    "calibrate": "measure the real speedup against a plain server and fit the draft cost ratio",
    "install-probe": "write the engine probe (a vLLM plugin) into a directory for PYTHONPATH",
}
"""Each command is the module ``specdec_exporter.commands.<name>`` (``-`` spelled ``_``)."""

DEVTOOLS = "specdec_exporter.devtools"
"""The sidecar image leaves some of these out; a command that needs them says so in one line."""


class CommandModule(Protocol):
    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def main(self, args: argparse.Namespace) -> int: ...


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that a usage error exits 64 instead of 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _top_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="specdec-exporter",
        description="Prometheus exporter and alerting sidecar for speculative decoding in vLLM.",
        epilog="Run 'specdec-exporter COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "command",
        choices=sorted(COMMANDS),
        metavar="COMMAND",
        help="; ".join(f"{name}: {text}" for name, text in COMMANDS.items()),
    )
    return parser


def load_command(name: str) -> CommandModule:
    module = importlib.import_module(f"specdec_exporter.commands.{name.replace('-', '_')}")
    return cast(CommandModule, module)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        _top_parser().error("give a COMMAND; 'specdec-exporter --help' describes each")
    if argv[0].startswith("-"):
        _top_parser().parse_args(argv)
        return EXIT_USAGE
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _top_parser().parse_args([name])  # prints the usage error and exits 64
    try:
        return _run(name, rest)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(DEVTOOLS):
            raise
        print(
            f"specdec-exporter {name}: {exc.name} is left out of this installation (the sidecar "
            "image ships without the simulator and the sweep); pip install "
            "vllm-specdec-exporter to use it",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE


def _run(name: str, rest: list[str]) -> int:
    module = load_command(name)
    parser = ArgumentParser(prog=f"specdec-exporter {name}", description=COMMANDS[name])
    module.configure(parser)
    args = parser.parse_args(rest)
    try:
        return module.main(args)
    except ConfigError as exc:
        print(f"specdec-exporter {name}: {redact_url(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except UnreachableError as exc:
        print(f"specdec-exporter {name}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
