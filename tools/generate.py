"""Regenerate (or, with --check, verify) every generated alerting, dashboard and deploy file.

python tools/generate.py            rewrite the committed files from alerts/config.toml
python tools/generate.py --check    exit 1, naming each stale file, if any would change
python tools/generate.py --out-dir DIR --for 5s --rate-window 15s --group-timing 1s
                                    a test variant (short `for`, windows, Alertmanager
                                    timings) written under DIR, for end-to-end tests
python tools/generate.py --merge-into alertmanager.yml
                                    print that Alertmanager config with our routing merged in
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # the core's constants
sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from specdec_artifacts import alertmanager, checks, consistency, dashboard, kube, rules
from specdec_artifacts.outputs import all_outputs, write, yaml_text
from specdec_artifacts.settings import (
    CONFIG_PATH,
    REPO_ROOT,
    Settings,
    SettingsError,
    load,
    with_test_overrides,
)

EXIT_STALE = 1
EXIT_USAGE = 2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/generate.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare instead of writing; exit 1 if a committed file is stale",
    )
    parser.add_argument("--config", type=Path, default=CONFIG_PATH, help="alerting config (TOML)")
    test = parser.add_argument_group("test variant (needs --out-dir)")
    test.add_argument("--out-dir", type=Path, help="write the files under this directory")
    test.add_argument("--for", dest="for_", metavar="DURATION", help="`for` of every alert")
    test.add_argument("--rate-window", metavar="DURATION", help="window of every rate")
    test.add_argument(
        "--group-timing", metavar="DURATION", help="Alertmanager group_wait and group_interval"
    )
    parser.add_argument(
        "--merge-into",
        type=Path,
        metavar="ALERTMANAGER_YML",
        help="print this Alertmanager config with our routing merged in",
    )
    args = parser.parse_args(argv)
    overrides = (args.for_, args.rate_window, args.group_timing)
    if any(overrides) and args.out_dir is None:
        parser.error("--for, --rate-window and --group-timing need --out-dir")
    if args.check and args.out_dir is not None:
        parser.error("--check compares the committed files; it takes no --out-dir")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = load(args.config)
    except (SettingsError, OSError) as exc:
        print(f"tools/generate.py: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.merge_into is not None:
        return _merge(settings, args.merge_into)
    problems = _deploy_problems(settings)  # deploy/ against the committed config
    if args.out_dir is not None:
        settings = with_test_overrides(
            settings, for_=args.for_, rate_window=args.rate_window, group_timing=args.group_timing
        )
    outputs = all_outputs(settings)
    problems = _query_problems(settings) + problems
    if problems:
        print(
            "tools/generate.py: the generated files or deploy/ are inconsistent:\n  "
            + "\n  ".join(problems),
            file=sys.stderr,
        )
        return EXIT_STALE
    if args.check:
        return _report_stale(checks.stale_outputs(outputs, REPO_ROOT))
    write(outputs, args.out_dir or REPO_ROOT)
    for output in outputs:
        print(f"wrote {output.path}")
    return 0


def _query_problems(settings: Settings) -> list[str]:
    """Queries that leave the contract, lack guards, or are not scoped to cluster and
    namespace."""
    groups = rules.rule_groups(settings)
    scope = ("namespace", *settings.cluster)
    return checks.rule_problems(groups, settings.cluster) + checks.dashboard_problems(
        dashboard.dashboard(settings), rules.record_names(groups), scope
    )


def _deploy_problems(settings: Settings) -> list[str]:
    """deploy/ drifting from the config (speculative method, startup grace, jobs)."""
    manifests = [
        *consistency.example_manifests(),
        kube.speculative_config_map(settings.example_deployment),
    ]
    return consistency.deploy_problems(settings, manifests)


def _merge(settings: Settings, path: Path) -> int:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        merged = alertmanager.merge_into(config, alertmanager.subtree(settings))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"tools/generate.py: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(yaml_text(merged), end="")
    return 0


def _report_stale(stale: list[str]) -> int:
    if not stale:
        print("generated files are up to date")
        return 0
    print(
        "tools/generate.py --check: generated files differ from what alerts/config.toml and "
        "the generator produce.\nRun `python tools/generate.py` and commit the result.\n",
        file=sys.stderr,
    )
    print("\n".join(stale), file=sys.stderr)
    return EXIT_STALE


if __name__ == "__main__":
    raise SystemExit(main())
