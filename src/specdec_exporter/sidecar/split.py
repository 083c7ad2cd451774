"""Where the temperature split comes from (the engine probe, the request tap, or nothing), its
exported counters, and the window counts of the split and of the probe's running-batch buckets,
poll by poll.

The probe wins whenever vLLM shows it with its temperature split on: it counts every sequence
inside vLLM, the tap only what passes through it. Both keep counting; only one feeds the split.

- **Hysteresis.** The source changes once ``SWITCH_AFTER`` successful polls in a row want the other
  one, so an info series that flaps does not flip the split; but at once when the current source
  shows no counts any more (vLLM restarted without the probe).
- **Continuous counters.** The exported ``specdec_request*`` families are the sidecar's own
  counters: at each successful poll every sample grows by what the source in charge counted since
  the previous poll (a reset of that source counted as a restart from zero). A switch never moves
  a counter down or by what the other source counted before, so over any sequence of switches
  Prometheus' ``increase()`` of every exported counter equals what was counted. Nothing is reset:
  the requests that passed the tap between the last poll that saw the probe and the switch are
  counted by the tap (the probe's counts of them went with the restarted vLLM).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Literal

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.batch_report import BatchKey
from specdec_exporter.core.probe_parse import ProbeSnapshot
from specdec_exporter.core.report import BucketKey
from specdec_exporter.core.timeline import Timeline, Window
from specdec_exporter.sidecar.split_families import temperature_families

log = logging.getLogger("specdec_exporter.sidecar.split")

SplitSource = Literal["probe", "tap", "none"]
SPLIT_SOURCES: tuple[SplitSource, ...] = ("probe", "tap", "none")

SWITCH_AFTER = 3
"""Successful polls in a row that must want another source before the split moves to it (while
the current source still shows counts)."""

TapCounts = Callable[[], Mapping[BucketKey, Totals]]
"""The request tap's cumulative attributed counts (drafts, draft and accepted tokens) per bucket."""
TapFamilies = Callable[[], Iterable[Metric]]
"""The request tap's own split families (``RequestStats.collect``), cumulative since start."""

REQUESTS = "specdec_requests"
ATTRIBUTED = "attributed"
_ALL = "*"
"""``attributed`` of the requests counted whatever their attribution (true + false): kept as a
counter of its own, so ``false`` = all - true never goes down while the source's true and false
are caught between two increments."""

SampleKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(model, sample name, labels): one sample of a family. The labels in the order the source gives
them: both sources label ``model_name``, ``temperature_bucket``, then ``attributed`` or ``le``
(``split_families.SPLIT_LABELS``, ``tap.stats.BUCKET_LABELS``; prometheus_client adds ``le``
last), so a sample has one key whichever source counted it (``tests/sidecar/test_split.py``)."""
Samples = dict[str, dict[SampleKey, float]]
"""Per family name, its samples' cumulative values."""


def _samples(
    families: Iterable[Metric], only: Collection[str] | None = None
) -> tuple[Samples, dict[str, Metric]]:
    """A source's split families as flat cumulative samples (``_created`` left out), with
    ``specdec_requests``' true/false turned into true/all; and each family (for its help/type).
    ``only``: just these models' samples."""
    samples: Samples = {}
    kinds: dict[str, Metric] = {}
    for family in families:
        if family.type not in ("counter", "histogram"):
            continue
        kinds[family.name] = family
        own = samples.setdefault(family.name, {})
        requests = family.name == REQUESTS
        for name, labels, value, *_ in family.samples:
            if name.endswith("_created"):
                continue
            model = labels.get("model_name", "")
            if only is not None and model not in only:
                continue
            if requests:
                attributed = labels.get(ATTRIBUTED, "")
                rest = {**labels, ATTRIBUTED: "true"}
                if attributed == "true":
                    own[(model, name, tuple(rest.items()))] = value
                rest[ATTRIBUTED] = _ALL
                every = (model, name, tuple(rest.items()))
                own[every] = own.get(every, 0.0) + value
            else:
                own[(model, name, tuple(labels.items()))] = value
    return samples, kinds


class SplitCounters:
    """The split's exported counters, continuous across sources (see the module's docstring).

    Only the source in charge is read sample by sample; another source's families are kept as
    they were at the last poll and read only if it takes over at the next one (the interval
    between is then its). Rendering is redone only when a value moved."""

    def __init__(self) -> None:
        self._raw: dict[SplitSource, list[Metric]] = {}
        self._flat: tuple[SplitSource, Samples] = ("none", {})
        self._exported: Samples = {}
        self._false_floor: dict[SampleKey, float] = {}
        self._kinds: dict[str, Metric] = {}
        self._rendered: list[Metric] | None = None

    def observe(self, source: SplitSource, views: Mapping[SplitSource, Iterable[Metric]]) -> None:
        """One successful poll: every source's cumulative families; ``source`` is in charge."""
        raw = {name: list(families) for name, families in views.items()}
        for name, families in raw.items():
            if name == source or not self._kinds:
                self._kinds.update((family.name, family) for family in families)
        last_source, last_flat = self._flat
        if source != last_source:
            self._rendered = None  # the help texts are the source's
        if source == "tap" and last_source == source:
            # Only the models whose requests moved: every request the tap records moves that
            # family, every other sample moves only with one, and a model's series go and come
            # back only with its requests' (the tap never restarts otherwise; the probe, one
            # model, is always read whole).
            changed = _changed_models(raw.get(source, []), self._raw.get(source, []))
            if changed:
                counted, _ = _samples(raw.get(source, []), changed)
                self._count(counted, last_flat)
                for family, samples in counted.items():
                    last_flat.setdefault(family, {}).update(samples)
                present = {_model_of(sample) for sample in _first(raw.get(source, []))}
                for samples in last_flat.values():
                    for key in [key for key in samples if key[0] not in present]:
                        del samples[key]
        elif source in raw:
            counted, _ = _samples(raw[source])
            before = last_flat if last_source == source else _samples(self._raw.get(source, []))[0]
            self._count(counted, before)
            self._flat = (source, counted)
        else:
            self._flat = (source, {})
        self._raw = raw
        models = {_model_of(sample) for families in raw.values() for sample in _first(families)}
        if models:  # series of models no source shows any more leave (bounded labels)
            for exported in self._exported.values():
                for key in [key for key in exported if key[0] not in models]:
                    del exported[key]
                    self._false_floor.pop(key, None)
                    self._rendered = None

    def _count(self, counted: Samples, before: Samples) -> None:
        # A restart zeroes every counter of a model together (vLLM's, or the tap's series of
        # a model it forgot): one that went down says so for all of them. Not a histogram's
        # float sum, which may wobble by a rounding when vLLM sums its processes' files.
        restarted = {
            key[0]
            for family, samples in counted.items()
            for key, value in samples.items()
            if value < before.get(family, {}).get(key, value) and not key[1].endswith("_sum")
        }
        for family, samples in counted.items():
            previous = before.get(family, {})
            exported = self._exported.setdefault(family, {})
            for key, value in samples.items():
                last = previous.get(key)
                whole = last is None or key[0] in restarted
                step = value if whole else max(0.0, value - last)  # type: ignore[operator]
                if step or key not in exported:
                    exported[key] = exported.get(key, 0.0) + step
                    self._rendered = None

    def families(self) -> list[Metric]:
        """The exported families (help and type from the source in charge), each label set's
        samples together in the order its source gave them."""
        if self._rendered is not None:
            return self._rendered
        out: list[Metric] = []
        for family_name, samples in self._exported.items():
            kind = self._kinds.get(family_name)
            if kind is None or not samples:
                continue
            family = Metric(family_name, kind.documentation, kind.type)
            requests = family_name == REQUESTS
            for key, counted in samples.items():
                model, sample_name, labels = key
                named, value = dict(labels), counted
                if requests and named.get(ATTRIBUTED) == _ALL:
                    true_key = (model, sample_name, tuple({**named, ATTRIBUTED: "true"}.items()))
                    unattributed = max(
                        self._false_floor.get(key, 0.0), value - samples.get(true_key, 0.0)
                    )
                    self._false_floor[key] = unattributed
                    named[ATTRIBUTED], value = "false", unattributed
                family.add_sample(sample_name, named, value)
            out.append(family)
        self._rendered = out
        return out


def _changed_models(now: list[Metric], then: list[Metric]) -> set[str]:
    """The models whose samples in the first (requests) family differ from the previous poll's."""

    def by_model(families: list[Metric]) -> dict[str, list[tuple[object, float]]]:
        rows: dict[str, list[tuple[object, float]]] = {}
        for sample in _first(families):
            rows.setdefault(_model_of(sample), []).append((sample.labels, sample.value))
        return rows

    current, previous = by_model(now), by_model(then)
    if not now or now[0].name != REQUESTS:
        return set(current) | set(previous)
    return {
        model
        for model in current.keys() | previous.keys()
        if current.get(model) != previous.get(model)
    }


def _first(families: list[Metric]) -> list[Sample]:
    """The samples of a source's first family: one per model at least (every family of a source
    carries every model's series)."""
    return families[0].samples if families else []


def _model_of(sample: Sample) -> str:
    return str(sample.labels.get("model_name", ""))


class SplitWindows:
    """The split's source, its exported counters and its window counts."""

    def __init__(
        self,
        window: float,
        tap_counts: TapCounts | None = None,
        tap_families: TapFamilies | None = None,
    ) -> None:
        self._window = window
        self._tap_counts = tap_counts
        self._tap_families = tap_families
        self.source: SplitSource = "none"
        """Decided at each successful poll; kept while vLLM is unreachable."""
        self._wanting = 0
        """Successful polls in a row that wanted another source than ``source``."""
        self._split: Timeline[BucketKey] = Timeline(window, counts_from_zero=True)
        self._batch: Timeline[BatchKey] = Timeline(window, counts_from_zero=True)
        self._previous: dict[SplitSource, tuple[float, Mapping[BucketKey, Totals]]] = {}
        self._counters = SplitCounters()
        self.exported: list[Metric] = []
        """The split's families as exported after the latest successful poll."""
        self._foreign_logged = False
        self._probe_had_counts = False

    def choose(self, probe: ProbeSnapshot) -> SplitSource:
        """The source this poll alone would pick."""
        if probe.temperature_split:
            return "probe"
        return "tap" if self._tap_counts is not None else "none"

    def _decide(self, probe: ProbeSnapshot) -> SplitSource:
        """Hysteresis against a flapping info series: while both the current source and the
        wanted one showed counts at the previous poll, switch after ``SWITCH_AFTER`` polls in a
        row; at once when the current source shows none (vLLM restarted without the probe) or
        the wanted one just appeared (vLLM restarted with it)."""
        wanted = self.choose(probe)
        if wanted == self.source:
            self._wanting = 0
            return wanted
        had_counts = {"probe": self._probe_had_counts, "tap": True, "none": False}
        shows_counts = {"probe": bool(probe.temperature), "tap": True, "none": False}
        self._wanting += 1
        if self._wanting >= SWITCH_AFTER or not shows_counts[self.source] or not had_counts[wanted]:
            self._wanting = 0
            return wanted
        return self.source

    def observe(self, now: float, probe: ProbeSnapshot) -> Window[BucketKey]:
        """Fold in one successful poll; the split's window counts per (model, bucket)."""
        self._log_foreign(probe)
        source = self._decide(probe)
        self._probe_had_counts = bool(probe.temperature)
        counts: dict[SplitSource, Mapping[BucketKey, Totals]] = {
            "probe": {key: bucket.totals for key, bucket in probe.temperature.items()}
        }
        if self._tap_counts is not None:
            counts["tap"] = dict(self._tap_counts())
        if source != self.source:
            # the new source's window starts at its previous poll: the interval between is its
            self._split = Timeline(self._window, counts_from_zero=True)
            if source in self._previous:
                self._split.observe(*self._previous[source])
            self.source = source
        self._previous = {name: (now, value) for name, value in counts.items()}
        self._batch.observe(now, probe.batch)
        views: dict[SplitSource, Iterable[Metric]] = {"probe": temperature_families(probe)}
        if self._tap_families is not None:
            views["tap"] = self._tap_families()
        self._counters.observe(source, views)
        self.exported = self._counters.families() if source != "none" else []
        if source == "none":
            return Window(0.0, {})
        self._split.observe(now, counts[source])
        return self._split.window()

    def batch_window(self) -> Window[BatchKey]:
        return self._batch.window()

    def _log_foreign(self, probe: ProbeSnapshot) -> None:
        """Once: the probe shows temperature buckets that are not the sidecar's."""
        foreign = sorted({item.key[1] for item in probe.invalid if item.reason == "foreign_bucket"})
        if foreign and not self._foreign_logged:
            self._foreign_logged = True
            log.warning(
                "the engine probe's temperature buckets are not among --temperature-buckets: "
                'not mirrored, counted in specdec_invalid_series_total{reason="foreign_bucket"}; '
                "give vLLM's container the sidecar's SPECDEC_TEMPERATURE_BUCKETS (logged once)",
                extra={"buckets": foreign[:10], "foreign_buckets": len(foreign)},
            )
