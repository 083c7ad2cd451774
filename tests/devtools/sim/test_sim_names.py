"""The simulator keeps its own copy of vLLM's names (it is the test oracle); they equal core's."""

from __future__ import annotations

from sim_support import NGRAM_K4, parse_sample

from specdec_exporter.core import vllm_names
from specdec_exporter.devtools.sim import families, responses
from specdec_exporter.devtools.sim.engine import RequestSpecCounts
from specdec_exporter.devtools.sim.settings import SimConfig, parse_speculative_config
from specdec_exporter.devtools.sim.telemetry import Telemetry


def exposition(metric_names: str = "colon") -> list[tuple[str, dict[str, str]]]:
    """Sample names and labels of a fresh speculative simulator's /metrics."""
    config = SimConfig(speculative=parse_speculative_config(NGRAM_K4), metric_names=metric_names)  # type: ignore[arg-type]
    samples = []
    for line in Telemetry(config, 1.79e9).render().decode().splitlines():
        if line and not line.startswith("#"):
            name, labels, _ = parse_sample(line)
            samples.append((name, dict(labels)))
    return samples


def test_spec_decode_counters_are_named_as_in_vllm_names() -> None:
    ours = tuple(
        f"{name}_total"
        for name in (
            families.SPEC_DRAFTS,
            families.SPEC_DRAFT_TOKENS,
            families.SPEC_ACCEPTED,
            families.SPEC_ACCEPTED_PER_POS,
        )
    )
    assert ours == vllm_names.V1_COUNTERS


def test_every_spec_decode_family_the_simulator_exports_is_one_vllm_names_knows() -> None:
    spec = {
        f"{family.name}_total"
        for family in families.FAMILIES
        if vllm_names.SPEC_DECODE_STEM in family.name
    }
    assert spec == set(vllm_names.V1_COUNTERS)
    assert all(
        family.spec for family in families.FAMILIES if vllm_names.SPEC_DECODE_STEM in family.name
    )


def test_every_v1_name_vllm_names_reads_is_in_the_simulators_exposition() -> None:
    names = {name for name, _ in exposition()}
    v1_names = {*vllm_names.V1_COUNTERS, vllm_names.GENERATION_TOKENS}
    assert v1_names <= names
    assert all(name.startswith(vllm_names.PREFIX) for name in v1_names)


def test_label_names_are_those_of_vllm_names() -> None:
    labels = {name: set(found) for name, found in exposition() if name in vllm_names.V1_COUNTERS}
    plain = {vllm_names.LABEL_MODEL, vllm_names.LABEL_ENGINE}
    assert labels[vllm_names.DRAFTS] == plain
    assert labels[vllm_names.ACCEPTED_PER_POSITION] == {*plain, vllm_names.LABEL_POSITION}
    engines = {
        found[vllm_names.LABEL_ENGINE] for name, found in exposition() if name == vllm_names.DRAFTS
    }
    assert engines == {vllm_names.DEFAULT_ENGINE}


def test_the_underscore_spelling_maps_back_with_canonical_name() -> None:
    underscored = {name for name, _ in exposition("underscore")}
    spec = {
        vllm_names.canonical_name(name)
        for name in underscored
        if name.startswith(vllm_names.UNDERSCORE_PREFIX)
    }
    assert {*vllm_names.V1_COUNTERS, vllm_names.GENERATION_TOKENS} <= spec
    assert not any(name.startswith(vllm_names.PREFIX) for name in underscored)


def test_per_request_keys_are_those_vllm_names_reads() -> None:
    counts = RequestSpecCounts(k_max=4, detailed=False)
    keys = set(responses.spec_decoding(counts))
    read = {
        vllm_names.REQUEST_SPEC_STEPS,
        vllm_names.REQUEST_DRAFT_TOKENS,
        vllm_names.REQUEST_ACCEPTED_TOKENS,
        vllm_names.REQUEST_SPEC_TOKENS,
        vllm_names.REQUEST_MEAN_ACCEPTANCE_LENGTH,
        vllm_names.REQUEST_ACCEPTANCE_RATE,
        vllm_names.REQUEST_ACCEPTANCE_HISTOGRAM,
    }
    assert read <= keys
