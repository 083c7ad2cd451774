"""The split's exported counters over any sequence of polls (issue 26, section 4): whatever the
probe's info series, vLLM's restarts with or without the probe, the tap and failed polls do,
Prometheus' increase() of every exported split counter equals what the source in charge counted,
nothing lost, nothing counted twice."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from prometheus_client.core import CounterMetricFamily, Metric

from specdec_exporter.core.acceptance import Totals
from specdec_exporter.core.probe_parse import NO_PROBE, ProbeBucket, ProbeInfo, ProbeSnapshot
from specdec_exporter.sidecar.split import SWITCH_AFTER, SplitWindows

MODEL = "m"
BUCKET = "0"
KEYS = (
    ("specdec_request_drafts_total", ()),
    ("specdec_requests_total", (("attributed", "true"),)),
    ("specdec_requests_total", (("attributed", "false"),)),
)
INFO = ("on", "off", "no_info", "gone")
"""The probe at one poll: its info says the split is on or off, its counts without an info line,
or no probe at all (vLLM restarted without it; it comes back restarted from zero)."""


@dataclass
class Counts:
    """Cumulative counts of one source, per exported key."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(
        default_factory=lambda: dict.fromkeys(KEYS, 0.0)
    )

    def add(self, drafts: int, attributed: int, unattributed: int) -> dict[object, float]:
        step = dict(zip(KEYS, (float(drafts), float(attributed), float(unattributed)), strict=True))
        for key, value in step.items():
            self.values[key] += value
        return step  # type: ignore[return-value]


def primitive(values: dict[object, float]) -> tuple[float, float, float]:
    """What the sidecar reads of the probe: drafts, sequences (all) and attributed ones."""
    return (values[KEYS[0]], values[KEYS[1]] + values[KEYS[2]], values[KEYS[1]])


def tap_families(tap: Counts) -> list[Metric]:
    requests = CounterMetricFamily(
        "specdec_requests", "tap", labels=["model_name", "temperature_bucket", "attributed"]
    )
    requests.add_metric([MODEL, BUCKET, "true"], tap.values[KEYS[1]])
    requests.add_metric([MODEL, BUCKET, "false"], tap.values[KEYS[2]])
    drafts = CounterMetricFamily(
        "specdec_request_drafts", "tap", labels=["model_name", "temperature_bucket"]
    )
    drafts.add_metric([MODEL, BUCKET], tap.values[KEYS[0]])
    return [requests, drafts]


def probe_snapshot(info: str, probe: Counts) -> ProbeSnapshot:
    if info == "gone":
        return NO_PROBE
    drafts, spec = probe.values[KEYS[0]], probe.values[KEYS[1]]
    bucket = ProbeBucket(
        sequences=spec + probe.values[KEYS[2]],
        spec_sequences=spec,
        totals=Totals(drafts, 2 * drafts, drafts),
    )
    shown = None if info == "no_info" else ProbeInfo("v", "0.32.0", info == "on", True, "")
    return ProbeSnapshot(info=shown, temperature={(MODEL, BUCKET): bucket})


def exported(windows: SplitWindows) -> dict[object, float]:
    values: dict[object, float] = {}
    for family in windows.exported:
        for sample in family.samples:
            labels = dict(sample.labels)
            assert (labels.pop("model_name"), labels.pop("temperature_bucket")) == (MODEL, BUCKET)
            values[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return values


def prometheus_increase(samples: list[float]) -> float:
    """increase() without extrapolation: a drop is a counter reset, the new value counted whole."""
    total = 0.0
    for before, after in itertools.pairwise(samples):
        total += after - before if after >= before else after
    return total


POLL = st.tuples(
    st.sampled_from(INFO),
    st.booleans(),  # vLLM restarted (with the probe) before this poll
    st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3)),  # probe: drafts, n
    st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3)),  # tap: drafts, n
    st.booleans(),  # the poll failed (vLLM did not answer)
)


@settings(max_examples=400, deadline=None)
@given(polls=st.lists(POLL, min_size=1, max_size=40), with_tap=st.booleans())
def test_increase_of_every_exported_counter_is_what_the_source_in_charge_counted(
    polls: list[tuple[str, bool, tuple[int, int, int], tuple[int, int, int], bool]],
    with_tap: bool,
) -> None:
    probe, tap = Counts(), Counts()
    windows = SplitWindows(
        3600,
        (lambda: {(MODEL, BUCKET): Totals(tap.values[KEYS[0]])}) if with_tap else None,
        (lambda: tap_families(tap)) if with_tap else None,
    )
    pending = {"probe": dict.fromkeys(KEYS, 0.0), "tap": dict.fromkeys(KEYS, 0.0)}
    probe_was_gone = False
    series: dict[object, list[float]] = {key: [] for key in KEYS}
    counted = dict.fromkeys(KEYS, 0.0)
    switches_wanted = 0
    restarted = False
    last_seen: dict[object, float] | None = None
    for at, (info, restart, probe_step, tap_step, failed) in enumerate(polls):
        if info == "gone" or restart or probe_was_gone:
            probe = Counts()  # vLLM (re)started: the probe's counters from zero, or no probe
            pending["probe"] = dict.fromkeys(KEYS, 0.0)
            restarted = True
        probe_was_gone = info == "gone"
        if info != "gone":
            for key, value in probe.add(*probe_step).items():
                pending["probe"][key] += value
        if with_tap:  # the tap counts drafts only with the attributed request they came with
            drafts, attributed, unattributed = tap_step
            step = (drafts if attributed else 0, attributed, unattributed)
            for key, value in tap.add(*step).items():
                pending["tap"][key] += value
        if failed:
            continue
        if restarted and last_seen is not None and info != "gone":
            # a restart is a drop to a lower value, for the sidecar as for Prometheus: one whose
            # counts already reach what the previous poll saw cannot be told from no restart
            shown = primitive(probe.values)
            seen = primitive(last_seen)
            assume(any(shown[i] < seen[i] for i in range(3)) or not any(seen))
        restarted = False
        last_seen = None if info == "gone" else dict(probe.values)
        before = windows.source
        windows.observe(float(at), probe_snapshot(info, probe))
        source = windows.source
        wanted = windows.choose(probe_snapshot(info, probe))
        switches_wanted = switches_wanted + 1 if wanted != before else 0
        if source != before and before == "probe" and info != "gone":
            assert switches_wanted >= SWITCH_AFTER or source == "none"  # hysteresis
        values = exported(windows)
        if source != "none":
            for key in KEYS:
                if series[key]:  # increase() counts from the first exported sample on
                    counted[key] += pending[source][key]
                series[key].append(values[key])
        else:
            assert values == {}
        pending = {name: dict.fromkeys(KEYS, 0.0) for name in pending}
    for key in KEYS:
        samples = series[key]
        assert samples == sorted(samples), (key, samples)  # never down: no phantom reset
        assert prometheus_increase(samples) == counted[key], (key, samples)


def flap(body_on: bool) -> ProbeSnapshot:
    """The issue's attack: the info series flaps, the counts stand still at 10."""
    probe = Counts()
    probe.add(20, 10, 0)
    return probe_snapshot("on" if body_on else "off", probe)


def test_a_flapping_info_series_counts_nothing_that_did_not_happen() -> None:
    """10, 10, 0, 0, 10, 10, ...: increase() used to count 40 sequences that never happened."""
    tap = Counts()
    windows = SplitWindows(3600, lambda: {(MODEL, BUCKET): Totals()}, lambda: tap_families(tap))
    seen = []
    for at, on in enumerate([True, True, False, False] * 5):
        windows.observe(float(at), flap(on))
        seen.append(exported(windows)[KEYS[1]])
    assert seen == [10.0] * 20
    assert windows.source == "probe"  # two polls off in a row do not move the split


def test_the_tap_is_read_model_by_model_and_a_forgotten_model_counts_from_zero() -> None:
    from specdec_exporter.core.buckets import TemperatureBuckets  # noqa: PLC0415
    from specdec_exporter.core.request_metrics import SpecDecodeSummary  # noqa: PLC0415
    from specdec_exporter.tap.stats import RequestRecord, RequestStats  # noqa: PLC0415

    stats = RequestStats(TemperatureBuckets(), lambda model: 4)
    for model in ("a", "b"):
        stats.add_model(model)
    windows = SplitWindows(3600, lambda: {}, stats.collect)

    def drafts(model: str) -> float | None:
        values = {
            dict(sample.labels)["model_name"]: sample.value
            for family in windows.exported
            if family.name == "specdec_request_drafts"
            for sample in family.samples
            if dict(sample.labels)["temperature_bucket"] == "0"
        }
        return values.get(model)

    def request(model: str) -> None:
        stats.record(RequestRecord(model, "0", SpecDecodeSummary(2, 8, 4, 4)))

    for at, action in enumerate(["a", "b", "a", "", "drop b", "b", "b"]):
        if action == "drop b":
            stats.retain_models({"a"})
        elif action:
            request(action)
        windows.observe(float(at), NO_PROBE)
        if action == "drop b":
            stats.add_model("b")
    assert (drafts("a"), drafts("b")) == (4.0, 4.0)  # b forgotten, then 2 requests of 2 drafts
