"""vLLM /metrics text -> typed Snapshot: filter the few lines needed, parse them, normalise.

Pure: no I/O. Takes every real variant (text 0.0.4/1.0.0 with ``_created`` gauges, the
multiprocess rendering, ``vllm_`` underscore spelling, OpenMetrics with ``# EOF``, any label
order, several data-parallel engines, the legacy V0 families). Values no count can be (NaN,
infinite, negative, more accepted than drafted) are left out and listed in ``Snapshot.invalid``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from specdec_exporter.core import vllm_names as names
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.values import ascii_count

# One regex pass picks the sample lines we need out of ~650 lines per engine; only those few go
# to prometheus_client's parser (about 15 µs a line), which is what makes a scrape cheap.
# The patterns start with a literal "\n" (the text is searched with a "\n" in front) rather than
# "^" in MULTILINE mode: a literal prefix lets `re` skip ahead, about 10x faster here. The names
# come from vllm_names, in either spelling (``vllm:`` or ``vllm_``).
_WANTED_LINE = re.compile(
    r"\n(vllm[:_](?:"
    + "|".join(sorted(re.escape(name[len(names.PREFIX) :]) for name in names.WANTED_SAMPLES))
    + r")[{ \t][^\n]*)"
)
_SPEC_TYPE_LINE = re.compile(rf"\n# TYPE vllm[:_]({names.SPEC_DECODE_STEM}\w+?)(?:_total)? ")
_ANY_VLLM_SAMPLE = re.compile(r"\nvllm[:_]\w+[{ ]")
_EXEMPLAR = " # {"


class ExpositionError(ValueError):
    """The body is not a usable vLLM exposition (garbage, HTML, truncated)."""


@dataclass(frozen=True, slots=True)
class LegacyV0:
    """The V0 engine's own gauges: ratios cumulative since start, as of its last flush."""

    acceptance_rate: float | None = None
    efficiency: float | None = None


SeriesKey = tuple[str, str]
"""(model_name, engine)."""

InvalidReason = Literal[
    "nan", "infinite", "negative", "accepted_over_drafted", "bad_label", "foreign_bucket"
]
INVALID_REASONS: tuple[InvalidReason, ...] = (
    "nan",
    "infinite",
    "negative",
    "accepted_over_drafted",
    "bad_label",
    "foreign_bucket",
)
"""``bad_label``: a probe series whose label the sidecar cannot read (an ``le``, ``position``,
``engine`` or bucket that is not ASCII of the probe's shape); ``foreign_bucket``: a probe
temperature bucket not among the sidecar's ``--temperature-buckets`` (not mirrored)."""


@dataclass(frozen=True, slots=True)
class InvalidSeries:
    """A sample that cannot be a count. Its (model, engine) record is left out of the Snapshot:
    an engine's spec counters with it, or its generation tokens, or the V0 gauge itself."""

    name: str
    key: SeriesKey
    reason: InvalidReason


@dataclass(frozen=True)
class Snapshot:
    """What one scrape of vLLM says about speculative decoding."""

    spec_decode_enabled: bool
    counters: dict[SeriesKey, Totals] = field(default_factory=dict)
    """Cumulative counts per (model, engine): the spec-decode counters and the generation tokens.
    What vLLM did not show, or showed invalid, counts 0 here and its key is not in the set below
    (``spec_series`` or ``generation_series``)."""
    spec_series: frozenset[SeriesKey] = frozenset()
    """The keys whose spec-decode counters vLLM showed (valid)."""
    generation_series: frozenset[SeriesKey] = frozenset()
    """The keys whose generation-token counter vLLM showed (valid)."""
    legacy_v0: dict[str, LegacyV0] = field(default_factory=dict)
    invalid: tuple[InvalidSeries, ...] = ()

    @property
    def models(self) -> frozenset[str]:
        return frozenset(model for model, _ in self.counters) | frozenset(self.legacy_v0)

    def num_speculative_tokens(self, model_name: str) -> int | None:
        """k, from the number of per-position series (None when vLLM does not say)."""
        return self._k_by_model.get(model_name) or None

    @cached_property
    def _k_by_model(self) -> dict[str, int]:
        """Per model at once: asking per model over every engine would be quadratic in models."""
        ks: dict[str, int] = {}
        for (model, _), counters in self.counters.items():
            ks[model] = max(ks.get(model, 0), len(counters.accepted_per_position))
        return ks


def parse(text: str) -> Snapshot:
    """Parse a /metrics body. Raises ExpositionError when it is not a usable vLLM exposition."""
    if not text.endswith("\n"):
        raise ExpositionError("body does not end with a newline (truncated?)")
    text = "\n" + text
    if _ANY_VLLM_SAMPLE.search(text) is None:
        raise ExpositionError("no vLLM sample in the body (not a vLLM /metrics page?)")
    spec_types = {names.canonical_name(names.PREFIX + m) for m in _SPEC_TYPE_LINE.findall(text)}
    lines = [_strip_exemplar(line) for line in _WANTED_LINE.findall(text)]
    samples = _parse_samples(lines)
    _check_complete(spec_types, samples)
    enabled = bool(spec_types) or any(names.SPEC_DECODE_STEM in name for name, _, _ in samples)
    return _build(samples, enabled)


Sample = tuple[str, dict[str, str], float]


def _strip_exemplar(line: str) -> str:
    cut = line.find(_EXEMPLAR)
    return line if cut < 0 else line[:cut]


def _parse_samples(lines: list[str]) -> list[Sample]:
    if not lines:
        return []
    try:
        families = list(text_string_to_metric_families("\n".join(lines) + "\n"))
    except (ValueError, IndexError, KeyError) as exc:
        raise ExpositionError(f"unparsable sample line: {exc}") from None
    return [
        (names.canonical_name(sample.name), sample.labels, float(sample.value))
        for family in families
        for sample in family.samples
    ]


def _check_complete(spec_types: set[str], samples: Iterable[Sample]) -> None:
    """vLLM creates every spec series at start-up: a TYPE line with no sample means truncation."""
    seen = {name.removesuffix("_total") for name, _, _ in samples}
    wanted = {name.removesuffix("_total") for name in names.WANTED_SAMPLES}
    missing = sorted(family for family in spec_types & wanted if family not in seen)
    if missing:
        raise ExpositionError(f"family without samples (truncated?): {', '.join(missing)}")


def _build(samples: list[Sample], enabled: bool) -> Snapshot:
    legacy_models = {
        labels.get(names.LABEL_MODEL, "")
        for name, labels, _ in samples
        if name in names.V0_GAUGES or name == names.V0_EMITTED_TOKENS
    }
    fields: dict[SeriesKey, dict[str, float]] = {}
    positions: dict[SeriesKey, dict[int, float]] = {}
    generation: dict[SeriesKey, float] = {}
    legacy: dict[str, dict[str, float]] = {model: {} for model in legacy_models}
    invalid: list[InvalidSeries] = []
    for name, labels, value in samples:
        model = labels.get(names.LABEL_MODEL, "")
        key = (model, labels.get(names.LABEL_ENGINE, names.DEFAULT_ENGINE))
        problem = _value_problem(value)
        if problem is not None:
            invalid.append(InvalidSeries(name, key, problem))
        elif name == names.GENERATION_TOKENS:
            generation[key] = generation.get(key, 0.0) + value
        elif model in legacy_models:
            legacy[model][name] = value  # V0 counters are inflated: never read as counts
        elif name == names.ACCEPTED_PER_POSITION:
            position = position_of(labels)
            positions.setdefault(key, {})[position] = value
        elif name in _FIELD_OF:
            fields.setdefault(key, {})[_FIELD_OF[name]] = value
    spec = {
        key: Totals(accepted_per_position=dense(positions.get(key, {})), **fields.get(key, {}))
        for key in fields.keys() | positions.keys()
    }
    bad_generation = {item.key for item in invalid if item.name == names.GENERATION_TOKENS}
    bad_spec = {item.key for item in invalid if item.name != names.GENERATION_TOKENS}
    for key, engine in spec.items():
        over = None if key in bad_spec else _over_drafted(engine)
        if over is not None:
            invalid.append(InvalidSeries(over, key, "accepted_over_drafted"))
            bad_spec.add(key)
    spec_series = frozenset(spec.keys() - bad_spec)
    generation_series = frozenset(generation.keys() - bad_generation)
    counters = {
        key: replace(
            spec[key] if key in spec_series else Totals(),
            generation_tokens=generation[key] if key in generation_series else 0.0,
        )
        for key in spec_series | generation_series
    }
    v0 = {
        model: LegacyV0(values.get(names.V0_ACCEPTANCE_RATE), values.get(names.V0_EFFICIENCY))
        for model, values in legacy.items()
    }
    return Snapshot(enabled, counters, spec_series, generation_series, v0, tuple(invalid))


def _value_problem(value: float) -> InvalidReason | None:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "infinite"
    return "negative" if value < 0 else None


def _over_drafted(engine: Totals) -> str | None:
    """The accepted series that exceeds what was drafted, in cumulative values (a window's
    reset-corrected deltas can legitimately show it after a restart; totals since start cannot)."""
    if engine.accepted_tokens > engine.draft_tokens:
        return names.ACCEPTED_TOKENS
    if any(accepted > engine.drafts for accepted in engine.accepted_per_position):
        return names.ACCEPTED_PER_POSITION
    return None


_FIELD_OF = {
    names.DRAFTS: "drafts",
    names.DRAFT_TOKENS: "draft_tokens",
    names.ACCEPTED_TOKENS: "accepted_tokens",
}


def position_of(labels: dict[str, str], where: str = "") -> int:
    """A series' ``position`` label (vLLM's and the probe's share the name) as 0..64."""
    text = labels.get(names.LABEL_POSITION, "")
    position = ascii_count(text)  # "²" and 10,000 digits are no position (int() raises)
    if position is None or position > 64:
        raise ExpositionError(f"bad position label {text[:20]!r}{where}")
    return position


def dense(by_position: dict[int, float]) -> tuple[float, ...]:
    """Per-position values as a tuple from position 0, a gap counting 0."""
    if not by_position:
        return ()
    return tuple(by_position.get(index, 0.0) for index in range(max(by_position) + 1))


_RUNNING_LINE = re.compile(
    r"\n(vllm[:_]"
    + re.escape(names.NUM_REQUESTS_RUNNING.removeprefix(names.PREFIX))
    + r"[{ \t][^\n]*)"
)


def requests_running(text: str) -> dict[str, float]:
    """vLLM's num_requests_running gauge per model, summed over engines; {} when absent."""
    lines = [_strip_exemplar(line) for line in _RUNNING_LINE.findall("\n" + text)]
    running: dict[str, float] = {}
    for _, labels, value in _parse_samples(lines):
        model = labels.get(names.LABEL_MODEL, "")
        running[model] = running.get(model, 0.0) + value
    return running
