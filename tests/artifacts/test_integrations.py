"""deploy/integrations/: what can be checked offline of each snippet docs/integrations.md shows.
No KServe, llm-d, production-stack or Helm runs here: the YAML parses, the Helm post-renderer
renders, each embedded pod validates as a core/v1 Pod, and ports and settings agree."""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from required_tools import require
from specdec_artifacts import deploycheck
from specdec_artifacts.deploycheck import (
    COMPONENTS,
    DEPLOY,
    NATIVE_SIDECAR_VERSIONS,
    Manifest,
    find,
    pod_spec,
)

from specdec_exporter.commands import run
from specdec_exporter.commands.flags import settings_from_args
from specdec_exporter.sidecar.config import Settings, parse_host_port

INTEGRATIONS = DEPLOY / "integrations"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deploy"
SIDECAR = "specdec-exporter"


def documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def tap_port() -> int:
    patches = yaml.safe_load((COMPONENTS / "tap" / "kustomization.yaml").read_text())["patches"]
    port: int = yaml.safe_load(patches[1]["patch"])[0]["value"]
    return port


def component_container() -> Manifest:
    patch = yaml.safe_load((COMPONENTS / "sidecar" / "sidecar.yaml").read_text())
    container: Manifest = patch["spec"]["template"]["spec"]["initContainers"][0]
    return container


def as_pod(name: str, labels: dict[str, str], spec: Manifest) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# --- Helm post-renderer + production-stack ------------------------------------------------------


@pytest.fixture(scope="module")
def post_rendered() -> list[Manifest]:
    require("kubectl")
    chart_output = (FIXTURES / "production-stack" / "rendered.yaml").read_text(encoding="utf-8")
    result = subprocess.run(
        [str(INTEGRATIONS / "helm" / "post-renderer.sh"), "tap"],
        input=chart_output,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return deploycheck.load_manifests(result.stdout)


def test_the_post_renderer_injects_into_the_labelled_engine_only(
    post_rendered: list[Manifest],
) -> None:
    chart = {
        (m["kind"], m["metadata"]["name"]): m
        for m in documents(FIXTURES / "production-stack" / "rendered.yaml")
    }
    engine = find(post_rendered, "Deployment", "vllm-llama-deployment-vllm")
    pod = pod_spec(engine)
    assert pod is not None
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR]
    assert (
        find(post_rendered, "Deployment", "vllm-deployment-router")
        == chart[("Deployment", "vllm-deployment-router")]
    )
    # The engine Service is not labelled: the tap component leaves it alone.
    assert (
        find(post_rendered, "Service", "vllm-llama-engine-service")
        == chart[("Service", "vllm-llama-engine-service")]
    )


@pytest.mark.parametrize("version", NATIVE_SIDECAR_VERSIONS)
def test_the_post_rendered_chart_passes_the_strict_schema(
    post_rendered: list[Manifest], version: str
) -> None:
    assert deploycheck.builtin_schema_problems(post_rendered, version) == []


def test_the_production_stack_values_label_the_engine_and_route_through_the_tap() -> None:
    (values,) = documents(INTEGRATIONS / "production-stack" / "values.yaml")
    (model,) = values["servingEngineSpec"]["modelSpec"]
    assert model["labels"] == {"specdec-exporter.io/inject": "true"}
    extra = model["vllmConfig"]["extraArgs"]
    assert json.loads(flag(extra, "--speculative-config"))["method"] == "ngram"
    assert flag(extra, "--per-request-spec-decode-metrics") == "summary"
    assert "--enable-force-include-usage" not in extra  # the tap must not be combined with it
    assert int(flag(values["routerSpec"]["extraArgs"], "--k8s-port")) == tap_port()


def test_the_chart_fixture_follows_the_values(post_rendered: list[Manifest]) -> None:
    """The hand-rendered chart output carries what the values ask for."""
    (values,) = documents(INTEGRATIONS / "production-stack" / "values.yaml")
    (model,) = values["servingEngineSpec"]["modelSpec"]
    engine = find(post_rendered, "Deployment", "vllm-llama-deployment-vllm")
    assert model["labels"].items() <= engine["metadata"]["labels"].items()
    pod = pod_spec(engine)
    assert pod is not None
    command = pod["containers"][0]["command"]
    assert command[-len(model["vllmConfig"]["extraArgs"]) :] == model["vllmConfig"]["extraArgs"]
    router = pod_spec(find(post_rendered, "Deployment", "vllm-deployment-router"))
    assert router is not None
    assert values["routerSpec"]["extraArgs"] == router["containers"][0]["args"][-2:]


# --- KServe -------------------------------------------------------------------------------------


def serving_runtime() -> Manifest:
    runtime, _ = documents(INTEGRATIONS / "kserve" / "servingruntime.yaml")
    assert runtime["kind"] == "ServingRuntime"
    spec: Manifest = runtime["spec"]
    return spec


@pytest.mark.parametrize("version", NATIVE_SIDECAR_VERSIONS)
def test_the_kserve_runtime_pod_passes_the_strict_schema(version: str) -> None:
    spec = serving_runtime()
    pod = as_pod("vllm-specdec", spec["labels"], {"containers": spec["containers"]})
    assert deploycheck.builtin_schema_problems([pod], version) == []


def test_the_kserve_sidecar_is_the_components_container_as_a_plain_container() -> None:
    spec = serving_runtime()
    vllm, sidecar = spec["containers"]
    expected = copy.deepcopy(component_container())
    del expected["restartPolicy"]
    # env and volumeMounts: the component's plus the probe's (test_integrations_probe.py)
    assert {k: v for k, v in sidecar.items() if k not in ("env", "volumeMounts")} == {
        k: v for k, v in expected.items() if k != "env"
    }
    assert "volumeMounts" not in expected
    env = {e["name"]: e["value"] for e in sidecar["env"] if "value" in e}
    assert parse_host_port(env["SPECDEC_VLLM_URL"].removeprefix("http://"))[1] == int(
        flag(vllm["args"], "--port")
    )
    assert (
        env["SPECDEC_SPECULATIVE_METHOD"]
        == json.loads(flag(vllm["args"], "--speculative-config"))["method"]
    )
    assert (
        spec["labels"]
        == yaml.safe_load((DEPLOY / "monitoring" / "podmonitor.yaml").read_text())["spec"][
            "selector"
        ]["matchLabels"]
    )
    pod = {
        "kind": "Deployment",
        "metadata": {"name": "kserve"},
        "spec": {"template": {"spec": {"containers": [sidecar]}}},
    }
    assert deploycheck.restricted_problems([pod]) == []


def test_the_inference_service_uses_the_runtime_in_raw_deployment_mode() -> None:
    runtime, service = documents(INTEGRATIONS / "kserve" / "servingruntime.yaml")
    assert service["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]
    assert (
        service["spec"]["predictor"]["model"]["modelFormat"]["name"]
        == runtime["spec"]["supportedModelFormats"][0]["name"]
    )
    assert service["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == (
        "RawDeployment"
    )


# --- Gateway API inference extension ------------------------------------------------------------


def test_the_inference_pool_targets_the_tap_of_the_examples_pods() -> None:
    (pool,) = documents(INTEGRATIONS / "gateway-api-inference-extension" / "inferencepool.yaml")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["targetPorts"] == [{"number": tap_port()}]
    assert "appProtocol" not in pool["spec"]  # HTTP/1.1, what the tap speaks
    example = yaml.safe_load((DEPLOY / "examples" / "llama-ngram" / "deployment.yaml").read_text())
    pod_labels = example["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


# --- docker run ---------------------------------------------------------------------------------


def docker_runs() -> dict[str, tuple[list[str], list[str]]]:
    """{container name: (docker options, arguments after the image)} of docker/run.sh."""
    text = (INTEGRATIONS / "docker" / "run.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    runs = {}
    for line in text.splitlines():
        if line.startswith("docker run"):
            words = shlex.split(line)[2:]
            image = next(
                i
                for i, w in enumerate(words)
                if "/" in w
                and not w.startswith("-")
                and words[i - 1] not in ("--name", "--network", "-p")
            )
            options, args = words[:image], words[image + 1 :]
            runs[flag(options, "--name")] = (options, args)
    return runs


def test_docker_the_sidecar_shares_vllms_network_and_points_at_its_port() -> None:
    runs = docker_runs()
    vllm_options, vllm_args = runs["vllm"]
    sidecar_options, sidecar_args = runs[SIDECAR]
    assert flag(sidecar_options, "--network") == "container:vllm"
    parser = argparse.ArgumentParser()
    run.configure(parser)
    assert sidecar_args[0] == "run"
    args = parser.parse_args(sidecar_args[1:])
    settings = settings_from_args(Settings, args)
    assert settings.vllm_url == f"http://127.0.0.1:{flag(vllm_args, '--port')}"
    assert (
        settings.speculative_method == json.loads(flag(vllm_args, "--speculative-config"))["method"]
    )
    published = {
        int(vllm_options[i + 1].split(":")[1])
        for i, word in enumerate(vllm_options)
        if word == "-p"
    }
    assert settings.proxy_address is not None
    assert published == {
        settings.listen_address[1],
        settings.proxy_address[1],
        int(flag(vllm_args, "--port")),
    }
    assert flag(vllm_args, "--per-request-spec-decode-metrics") == "summary"


def test_docs_show_the_tested_docker_commands() -> None:
    """docs/integrations.md quotes docker/run.sh: the same two commands, word for word."""
    docs = (DEPLOY.parent / "docs" / "integrations.md").read_text(encoding="utf-8")
    block = "docker run" + docs.split("```sh\ndocker run", 1)[1].split("```", 1)[0]

    def commands(text: str) -> list[list[str]]:
        joined = text.replace("\\\n", " ")
        return [shlex.split(line) for line in joined.splitlines() if line.startswith("docker run")]

    script = (INTEGRATIONS / "docker" / "run.sh").read_text(encoding="utf-8")
    assert len(commands(script)) == 2
    assert commands(block) == commands(script)
