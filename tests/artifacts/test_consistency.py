"""deploy/ against alerts/config.toml: vLLM's speculative method and the sidecar's come from one
ConfigMap, the never-up page waits out vLLM's startupProbe, the PodMonitor sets the selected
jobs; each drift is reported."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from specdec_artifacts.consistency import deploy_problems, example_manifests
from specdec_artifacts.kube import speculative_config_map
from specdec_artifacts.settings import Settings, load

Manifest = dict[str, Any]


@pytest.fixture
def settings() -> Settings:
    return load()


@pytest.fixture
def manifests(settings: Settings) -> list[Manifest]:
    return [
        *copy.deepcopy(example_manifests()),
        speculative_config_map(settings.example_deployment),
    ]


def container(manifests: list[Manifest], name: str) -> dict[str, Any]:
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    found: dict[str, Any] = next(
        c for c in [*pod["initContainers"], *pod["containers"]] if c["name"] == name
    )
    return found


def test_the_committed_deployment_agrees_with_the_config(
    settings: Settings, manifests: list[Manifest]
) -> None:
    assert deploy_problems(settings, manifests) == []


def test_both_methods_come_from_the_generated_config_map(
    settings: Settings, manifests: list[Manifest]
) -> None:
    config_map = manifests[-1]
    assert config_map["data"]["method"] == settings.example_deployment.method == "ngram"
    assert json.loads(config_map["data"]["speculative-config"]) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
    }
    vllm, sidecar = container(manifests, "vllm"), container(manifests, "specdec-exporter")
    assert "$(SPECULATIVE_CONFIG)" in vllm["args"]
    refs = {
        e["name"]: e["valueFrom"]["configMapKeyRef"]
        for c in (vllm, sidecar)
        for e in c["env"]
        if "valueFrom" in e
    }
    assert refs == {
        "SPECULATIVE_CONFIG": {"name": "vllm-speculative", "key": "speculative-config"},
        "SPECDEC_SPECULATIVE_METHOD": {"name": "vllm-speculative", "key": "method"},
    }


def test_a_sidecar_flag_naming_another_method_is_drift(
    settings: Settings, manifests: list[Manifest]
) -> None:
    container(manifests, "specdec-exporter")["args"] += ["--speculative-method", "eagle3"]
    assert deploy_problems(settings, manifests) == [
        "Deployment/vllm: the sidecar's --speculative-method 'eagle3' is not vLLM's method "
        "'ngram': it would model the wrong draft cost"
    ]


def test_a_literal_vllm_config_with_another_method_is_drift(
    settings: Settings, manifests: list[Manifest]
) -> None:
    vllm = container(manifests, "vllm")
    index = vllm["args"].index("$(SPECULATIVE_CONFIG)")
    vllm["args"][index] = '{"method": "eagle3", "num_speculative_tokens": 4}'
    problems = deploy_problems(settings, manifests)
    assert len(problems) == 2
    assert "is not alerts/config.toml's" in problems[0]
    assert (
        "the sidecar's --speculative-method 'ngram' is not vLLM's method 'eagle3'" in (problems[1])
    )


def test_a_sidecar_without_the_method_is_drift(
    settings: Settings, manifests: list[Manifest]
) -> None:
    container(manifests, "specdec-exporter")["env"] = []
    assert deploy_problems(settings, manifests) == [
        "Deployment/vllm: the sidecar's --speculative-method None is not vLLM's method "
        "'ngram': it would model the wrong draft cost"
    ]


def test_a_startup_probe_longer_than_the_grace_is_drift(
    settings: Settings, manifests: list[Manifest]
) -> None:
    container(manifests, "vllm")["startupProbe"]["failureThreshold"] = 150
    assert deploy_problems(settings, manifests) == [
        "Deployment/vllm: vLLM's startupProbe allows 1500 s, but SpecDecodeVLLMNeverUp pages "
        "after 1200 s: a slow start would page; raise its `for`"
    ]


def test_a_podmonitor_job_the_selectors_do_not_select_is_drift(
    settings: Settings, manifests: list[Manifest]
) -> None:
    monitor = next(
        m for m in manifests if m["kind"] == "PodMonitor" and m["metadata"]["name"] == "vllm"
    )
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["replacement"] = "vllm-server"
    assert deploy_problems(settings, manifests) == [
        "[selectors] vllm_job selects job 'vllm', but the PodMonitor sets the jobs "
        "['specdec-exporter', 'vllm-server']"
    ]
