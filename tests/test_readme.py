"""The README's first screen (issue 29 item 14): the two commands, then a Kubernetes quick start;
the detail it moved lives in docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = 50
"""Lines a person sees without scrolling much: the commands and the whole quick start."""


def test_the_readme_opens_with_the_demo_and_the_test_command() -> None:
    lines = README.splitlines()
    assert lines[2:6] == [
        "```bash",
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/specdec-exporter demo "
        "--duration 90",
        "scripts/test.sh                     # every check CI runs; --skip-real-vllm to skip the "
        "real-vLLM stage",
        "```",
    ]
    assert (ROOT / "scripts" / "test.sh").exists()


def test_the_first_section_is_the_kubernetes_quick_start_and_fits_the_first_screen() -> None:
    sections = README.split("\n## ")
    assert sections[1].startswith("Running in Kubernetes\n")
    quick_start = sections[1]
    end = README.index(quick_start) + len(quick_start)
    assert README[:end].count("\n") <= FIRST_SCREEN
    for needed in (
        'specdec-exporter.io/inject: "true"',  # the label
        "//deploy/components/sidecar?ref=<commit>",  # the components
        "//deploy/components/probe?ref=<commit>",  # the probe
        "--per-request-spec-decode-metrics=summary",
        "not published by this project",  # the image
        "by digest",
        "//deploy/monitoring?ref=<commit>",  # where rules and dashboards come from
        "alerts/config.toml",
        "specdec-exporter check --vllm-url",  # the verify step
    ):
        assert needed in quick_start, needed


def test_the_moved_detail_is_in_docs() -> None:
    check = (ROOT / "docs" / "check.md").read_text(encoding="utf-8")
    assert "| verdict | when | exit code |" in check and "`below threshold`" in check
    page = (ROOT / "docs" / "live-page.md").read_text(encoding="utf-8")
    for needed in ("/healthz", "/readyz", "`scrape`", "configured_window_seconds", "no steps"):
        assert needed in page, needed
    assert "[docs/check.md](docs/check.md)" in README
    assert "[docs/live-page.md](docs/live-page.md)" in README
