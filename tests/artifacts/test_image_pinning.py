"""Issue 29 item 13: the shipped examples run every image by digest, never by a tag that can move,
and docs/deploy.md says the sidecar's image is not published (build, push, pin)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from required_tools import require
from specdec_artifacts import deploycheck
from specdec_artifacts.deploycheck import Manifest, containers, pod_spec
from specdec_artifacts.settings import REPO_ROOT

EXAMPLES = sorted(p for p in (REPO_ROOT / "deploy" / "examples").iterdir() if p.is_dir())
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"


def unpinned_images(manifests: list[Manifest]) -> list[str]:
    """Each container image of a workload that runs without a digest."""
    return [
        f"{manifest['metadata']['name']}/{container['name']}: {container['image']}"
        for manifest in manifests
        if (pod := pod_spec(manifest)) is not None
        for container in containers(pod)
        if not DIGEST.search(container["image"])
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_no_shipped_example_runs_a_tag_without_a_digest(example: Path) -> None:
    require("kubectl")
    manifests = list(deploycheck.render(example))
    images = [
        container["image"]
        for manifest in manifests
        if (pod := pod_spec(manifest)) is not None
        for container in containers(pod)
    ]
    assert len(images) >= 2, "the example's vLLM and its sidecar"
    assert unpinned_images(manifests) == []


def test_the_check_catches_a_tag() -> None:
    workload: dict[str, Any] = {
        "kind": "Deployment",
        "metadata": {"name": "vllm"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {
                            "name": "specdec-exporter",
                            "image": "ghcr.io/x/y:0.1.0@sha256:" + "a" * 64,
                        }
                    ],
                    "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}],
                }
            }
        },
    }
    assert unpinned_images([workload]) == ["vllm/vllm: vllm/vllm-openai:v0.33.0"]


def test_the_deploy_doc_says_the_image_is_not_published_and_shows_build_push_and_pin() -> None:
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    section = text[text.index("## The image") :]
    assert "not published by this project" in section
    assert "docker buildx build" in section and "--push" in section
    assert "digest:" in section and "images:" in section
