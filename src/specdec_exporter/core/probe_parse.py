"""The engine probe's families on vLLM's /metrics text -> a typed ProbeSnapshot. Pure: no I/O.

Same approach as ``parse``: one regex pass picks the probe's sample lines (names from
``probe_names`` only), prometheus_client's parser reads them, values no count can be are left out
and listed. Takes the single-process and the multiprocess rendering (any label order, ``_sum``
before ``_bucket``, extra labels such as ``pid``), text and OpenMetrics; ``_created`` never matches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specdec_exporter.core import probe_names as names
from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.parse import (
    ExpositionError,
    InvalidReason,
    InvalidSeries,
    dense,
    position_of,
)
from specdec_exporter.core.speculative_config import EngineSpeculativeConfig

BucketKey = tuple[str, str]
"""(model_name, temperature_bucket)."""
BatchKey = tuple[str, str, str]
"""(model_name, engine, batch_bucket)."""

_COUNTERS = {
    names.SEQUENCES: "sequences",
    names.SPEC_SEQUENCES: "spec_sequences",
    names.DRAFTS: "drafts",
    names.DRAFT_TOKENS: "draft_tokens",
    names.ACCEPTED_TOKENS: "accepted_tokens",
}
_BATCH_COUNTERS = {
    names.BATCH_STEPS: "steps",
    names.BATCH_DRAFTS: "drafts",
    names.BATCH_DRAFT_TOKENS: "draft_tokens",
    names.BATCH_ACCEPTED_TOKENS: "accepted_tokens",
}
_HISTOGRAMS = {
    names.ACCEPTANCE_RATE: "acceptance_rate",
    names.TTFT: "ttft",
    names.TPOT: "tpot",
}
_SAMPLE_NAMES = (
    [f"{name}_total" for name in (*_COUNTERS, names.ACCEPTED_PER_POSITION, *_BATCH_COUNTERS)]
    + [f"{name}{suffix}" for name in _HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")]
    + [names.INFO, f"{names.ERRORS}_total", names.SPECULATIVE_CONFIG_INFO]
)
_WANTED_LINE = re.compile(
    r"\n((?:" + "|".join(sorted(map(re.escape, _SAMPLE_NAMES))) + r")[{ \t][^\n]*)"
)
_EXEMPLAR = " # {"


@dataclass(frozen=True, slots=True)
class HistogramCounts:
    """One histogram series: cumulative counts per upper bound (the probe's ``le`` text kept,
    ``+Inf`` last) and the sum of the observations."""

    buckets: tuple[tuple[str, float], ...] = ()
    sum: float = 0.0

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0


@dataclass(frozen=True, slots=True)
class ProbeBucket:
    """One (model, temperature bucket): finished sequences and their speculative counts."""

    sequences: float = 0.0
    spec_sequences: float = 0.0
    """Finished sequences that carried speculative figures (vLLM's per-request spec metrics)."""
    totals: Totals = field(default_factory=Totals)
    """Drafts, draft and accepted tokens, accepted per position of those sequences."""
    acceptance_rate: HistogramCounts | None = None
    ttft: HistogramCounts | None = None
    tpot: HistogramCounts | None = None


@dataclass(frozen=True, slots=True)
class ProbeInfo:
    """The probe's own health line: which splits are on, and why one is off."""

    version: str
    vllm_version: str
    temperature_split: bool
    batch_split: bool
    reason: str

    def label_values(self) -> tuple[str, str, str, str, str]:
        """The info series' label values, in the order of ``probe_names.INFO_LABELS``."""
        return (
            self.version,
            self.vllm_version,
            names.ON if self.temperature_split else names.OFF,
            names.ON if self.batch_split else names.OFF,
            self.reason,
        )

    def as_json(self) -> dict[str, str]:
        """The info series' labels by name (`check --json`'s ``engine_probe``)."""
        return dict(zip(names.INFO_LABELS, self.label_values(), strict=True))


@dataclass(frozen=True)
class ProbeSnapshot:
    """What one scrape of vLLM says through the engine probe; ``info`` None: no probe there."""

    info: ProbeInfo | None = None
    temperature: dict[BucketKey, ProbeBucket] = field(default_factory=dict)
    batch: dict[BatchKey, Totals] = field(default_factory=dict)
    """Per (model, engine, batch bucket): steps, drafts, draft and accepted tokens."""
    invalid: tuple[InvalidSeries, ...] = ()
    errors: dict[str, float] = field(default_factory=dict)
    """Errors the probe caught, per hook (summed over vLLM's API servers)."""
    speculative_config: EngineSpeculativeConfig | None = None
    """vLLM's speculative configuration as the probe read it (None: no such series there)."""

    @property
    def temperature_split(self) -> bool:
        """The probe is there and says its temperature split works."""
        return self.info is not None and self.info.temperature_split

    @property
    def batch_split(self) -> bool:
        return self.info is not None and self.info.batch_split


NO_PROBE = ProbeSnapshot()

Sample = tuple[str, dict[str, str], float]


def parse_probe(text: str, temperature_labels: Collection[str] | None = None) -> ProbeSnapshot:
    """The probe's families in a /metrics body (``NO_PROBE`` when it shows none).

    A series that no count can be (a value NaN, infinite or negative; a label that is not ASCII of
    the probe's shape: ``le``, ``position``, ``engine``, a bucket) is left out with its (model,
    bucket) and listed in ``invalid``; so is a temperature bucket not in ``temperature_labels``
    (the sidecar's own buckets; None: any well-formed bucket). Raises ExpositionError when a probe
    line does not parse at all (a cut or mangled body); nothing else escapes."""
    lines = [_strip_exemplar(line) for line in _WANTED_LINE.findall("\n" + text)]
    if not lines:
        return NO_PROBE
    samples = _parse(lines)
    problems: dict[tuple[tuple[str, str], InvalidReason], InvalidSeries] = {}
    valid: list[Sample] = []
    for name, labels, value in samples:
        problem = _value_problem(value) or _label_problem(name, labels, temperature_labels)
        if problem is None:
            valid.append((name, labels, value))
        else:
            key = _series_key(labels)
            problems.setdefault((key, problem), InvalidSeries(name, key, problem))
    invalid = list(problems.values())
    bad = {item.key for item in invalid}
    temperature, over = _temperature(valid, bad)
    batch, batch_over = _batch(valid, bad)
    return ProbeSnapshot(
        _info(valid),
        temperature,
        batch,
        (*invalid, *over, *batch_over),
        _errors(valid),
        speculative_config=_speculative_config(valid),
    )


_DECIMAL = r"[0-9]+(?:\.[0-9]+)?"
_TEMPERATURE_BUCKET = re.compile(rf"0|{_DECIMAL}-{_DECIMAL}|{_DECIMAL}\+", re.ASCII)
"""The probe's temperature bucket labels (``core.buckets.bucket_labels``): ``0``, ``0-0.5``,
``1.0+``."""
_BATCH_BUCKET = re.compile(r"[0-9]+(?:-[0-9]+|\+)?", re.ASCII)
"""The probe's running-batch bucket labels (``core.buckets.BatchBuckets``): ``1``, ``2-4``,
``65+``."""
_ENGINE = re.compile(r"[0-9]{1,6}", re.ASCII)
_LE = re.compile(r"\+Inf|[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_LABEL_CHARS = 64
"""Longest bucket or ``le`` label the sidecar reads (the probe's are at most 41 characters)."""


def _label_problem(
    name: str, labels: dict[str, str], temperature_labels: Collection[str] | None
) -> InvalidReason | None:
    """Explicit ASCII rules for every label the sidecar reads as more than text."""
    if name.removesuffix("_total") in _BATCH_COUNTERS and names.BATCH_BUCKET not in labels:
        return "bad_label"
    bucket = labels.get(names.TEMPERATURE_BUCKET)
    if bucket is not None:
        if not _fits(_TEMPERATURE_BUCKET, bucket):
            return "bad_label"
        if temperature_labels is not None and bucket not in temperature_labels:
            return "foreign_bucket"
    batch = labels.get(names.BATCH_BUCKET)
    if batch is not None and not (
        _fits(_BATCH_BUCKET, batch) and _fits(_ENGINE, labels.get(names.ENGINE, "0"))
    ):
        return "bad_label"
    le = labels.get("le")
    if le is not None and not _fits(_LE, le):
        return "bad_label"
    if names.POSITION in labels:
        try:
            position_of(labels)
        except ExpositionError:
            return "bad_label"
    return None


def _fits(pattern: re.Pattern[str], text: str) -> bool:
    return len(text) <= _LABEL_CHARS and pattern.fullmatch(text) is not None


def _strip_exemplar(line: str) -> str:
    """The sample without its OpenMetrics exemplar (`` # {...}`` after the value); a label value
    that holds `` # {`` is text, not an exemplar."""
    cut = line.find(_EXEMPLAR)
    if cut < 0:
        return line
    after = _labels_end(line)
    if after > cut:
        cut = line.find(_EXEMPLAR, after)
    return line if cut < 0 else line[:cut]


def _labels_end(line: str) -> int:
    """Index after the label set's closing brace (quoted values skipped); 0 without labels."""
    start = line.find("{")
    if start < 0 or " " in line[:start] or "\t" in line[:start]:
        return 0  # no label set: a brace after the name's end is an exemplar's
    quoted = escaped = False
    for index in range(start + 1, len(line)):
        char = line[index]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = quoted
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return index + 1
    return len(line)


def _parse(lines: list[str]) -> list[Sample]:
    try:
        families = list(text_string_to_metric_families("\n".join(lines) + "\n"))
    except Exception as exc:  # the parser's own: ValueError, IndexError, KeyError, ...
        raise ExpositionError(f"unparsable probe line: {str(exc)[:200]}") from None
    return [
        (sample.name, sample.labels, float(sample.value))
        for family in families
        for sample in family.samples
    ]


def _series_key(labels: dict[str, str]) -> tuple[str, str]:
    """(model, temperature bucket) or (model, engine/batch bucket): what a bad value drops."""
    model = labels.get(names.MODEL, "")
    if names.TEMPERATURE_BUCKET in labels:
        return (model, labels[names.TEMPERATURE_BUCKET])
    return (model, f"{labels.get(names.ENGINE, '0')}/{labels.get(names.BATCH_BUCKET, '')}")


def _value_problem(value: float) -> InvalidReason | None:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "infinite"
    return "negative" if value < 0 else None


def _info(samples: Iterable[Sample]) -> ProbeInfo | None:
    """Every info sample must say a split is on for it to count as on (one per API server)."""
    infos = [labels for name, labels, value in samples if name == names.INFO and value > 0]
    if not infos:
        return None
    first = infos[0]
    limit = names.REASON_LIMIT  # labels the sidecar mirrors: bounded, whatever vLLM shows
    return ProbeInfo(
        version=first.get(names.VERSION, "")[:limit],
        vllm_version=first.get(names.VLLM_VERSION, "")[:limit],
        temperature_split=all(i.get(names.TEMPERATURE_SPLIT) == names.ON for i in infos),
        batch_split=all(i.get(names.BATCH_SPLIT) == names.ON for i in infos),
        reason=next((i[names.REASON] for i in infos if i.get(names.REASON)), "")[:limit],
    )


def _speculative_config(samples: Iterable[Sample]) -> EngineSpeculativeConfig | None:
    """The first speculative-config series shown (every API server reads the same config)."""
    return next(
        (
            EngineSpeculativeConfig.from_labels(labels)
            for name, labels, value in samples
            if name == names.SPECULATIVE_CONFIG_INFO and value > 0
        ),
        None,
    )


def _errors(samples: Iterable[Sample]) -> dict[str, float]:
    """Per hook the probe has, summed over the samples (one per API server when vLLM shows them
    apart); another hook label is not the probe's and is left out (a bounded label set)."""
    errors: dict[str, float] = {}
    for name, labels, value in samples:
        hook = labels.get(names.HOOK, "")
        if name == f"{names.ERRORS}_total" and hook in names.HOOKS:
            errors[hook] = errors.get(hook, 0.0) + value
    return errors


def _temperature(
    samples: Iterable[Sample], bad: set[tuple[str, str]]
) -> tuple[dict[BucketKey, ProbeBucket], list[InvalidSeries]]:
    values: dict[BucketKey, dict[str, float]] = {}
    positions: dict[BucketKey, dict[int, float]] = {}
    histograms: dict[tuple[BucketKey, str], dict[str, float]] = {}
    sums: dict[tuple[BucketKey, str], float] = {}
    for name, labels, value in samples:
        if names.TEMPERATURE_BUCKET not in labels:
            continue
        key = (labels.get(names.MODEL, ""), labels[names.TEMPERATURE_BUCKET])
        base = name.removesuffix("_total")
        if base in _COUNTERS:
            values.setdefault(key, {})[_COUNTERS[base]] = value
        elif base == names.ACCEPTED_PER_POSITION:
            positions.setdefault(key, {})[position_of(labels, " on a probe series")] = value
        elif name.endswith("_bucket") and name.removesuffix("_bucket") in _HISTOGRAMS:
            kind = _HISTOGRAMS[name.removesuffix("_bucket")]
            histograms.setdefault((key, kind), {})[labels.get("le", "+Inf")] = value
        elif name.endswith("_sum") and name.removesuffix("_sum") in _HISTOGRAMS:
            sums[(key, _HISTOGRAMS[name.removesuffix("_sum")])] = value
    buckets: dict[BucketKey, ProbeBucket] = {}
    over: list[InvalidSeries] = []
    for key in (values.keys() | positions.keys()) - bad:
        own = values.get(key, {})
        totals = Totals(
            own.get("drafts", 0.0),
            own.get("draft_tokens", 0.0),
            own.get("accepted_tokens", 0.0),
            dense(positions.get(key, {})),
        )
        if totals.accepted_tokens > totals.draft_tokens or any(
            accepted > totals.drafts for accepted in totals.accepted_per_position
        ):
            over.append(InvalidSeries(names.ACCEPTED_TOKENS, key, "accepted_over_drafted"))
            continue

        def histogram(kind: str, key: BucketKey = key) -> HistogramCounts | None:
            rows = histograms.get((key, kind))
            if not rows:
                return None
            ordered = sorted(rows.items(), key=lambda row: float(row[0]))
            return HistogramCounts(tuple(ordered), sums.get((key, kind), 0.0))

        buckets[key] = ProbeBucket(
            own.get("sequences", 0.0),
            own.get("spec_sequences", 0.0),
            totals,
            histogram("acceptance_rate"),
            histogram("ttft"),
            histogram("tpot"),
        )
    return buckets, over


def _batch(
    samples: Iterable[Sample], bad: set[tuple[str, str]]
) -> tuple[dict[BatchKey, Totals], list[InvalidSeries]]:
    values: dict[BatchKey, dict[str, float]] = {}
    for name, labels, value in samples:
        field_name = _BATCH_COUNTERS.get(name.removesuffix("_total"))
        if field_name is None:
            continue
        key = (
            labels.get(names.MODEL, ""),
            labels.get(names.ENGINE, "0"),
            labels.get(names.BATCH_BUCKET, ""),
        )
        values.setdefault(key, {})[field_name] = value
    batch: dict[BatchKey, Totals] = {}
    over: list[InvalidSeries] = []
    for key, own in values.items():
        series_key = (key[0], f"{key[1]}/{key[2]}")
        if series_key in bad:
            continue
        totals = Totals(
            drafts=own.get("drafts", 0.0),
            draft_tokens=own.get("draft_tokens", 0.0),
            accepted_tokens=own.get("accepted_tokens", 0.0),
            steps=own.get("steps", 0.0),
        )
        if totals.accepted_tokens > totals.draft_tokens:
            over.append(
                InvalidSeries(names.BATCH_ACCEPTED_TOKENS, series_key, "accepted_over_drafted")
            )
        else:
            batch[key] = totals
    return batch, over
