"""Properties of the exposition parser (Hypothesis): every spelling of a real exposition gives the
same counters, and no input makes it raise anything but ExpositionError.

Valid expositions are the real captures (tests/fixtures) respelled by the rules of
tests/variants.py, in any combination: data-parallel engines, the multiprocess rendering,
OpenMetrics, `vllm_` names, any label order, sample order and family order, HELP/TYPE placed
either way or left out, `_created` families kept or dropped.
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_exporter.core.model import DraftCost
from specdec_exporter.core.parse import ExpositionError, Snapshot, parse
from specdec_exporter.core.report import build_report
from specdec_exporter.core.timeline import Timeline
from variants import FIXTURES, multiprocess, openmetrics, underscore, with_engines

CAPTURES = sorted(FIXTURES.glob("**/*.prom"))
TEXTS = {path: path.read_text() for path in CAPTURES}
V1 = [path for path in CAPTURES if 'engine="0"' in TEXTS[path]]
PAIR = re.compile(r'\w+="(?:[^"\\]|\\.)*"')
CREATED = re.compile(r"# (HELP|TYPE) \S+_created ")
SAMPLE = re.compile(r"^(?P<name>[^{\s#]+)(?:\{(?P<labels>.*)\})?(?P<rest>\s.*)$")
EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def families(text: str) -> list[list[str]]:
    """Lines grouped by family: each group starts at its first comment line."""
    groups: list[list[str]] = []
    previous_comment = False
    for line in text.splitlines():
        comment = line.startswith("#")
        if not groups or (comment and not previous_comment):
            groups.append([])
        groups[-1].append(line)
        previous_comment = comment
    return groups


def shuffled_labels(line: str, rng: random.Random) -> str:
    match = SAMPLE.match(line)
    if line.startswith("#") or match is None or not match["labels"]:
        return line
    pairs = PAIR.findall(match["labels"])
    rng.shuffle(pairs)
    return f"{match['name']}{{{','.join(pairs)}}}{match['rest']}"


def underscored_line(line: str, rng: random.Random) -> str:
    return "vllm_" + line[5:] if line.startswith("vllm:") and rng.random() < 0.5 else line


def placed_comments(group: list[str], placement: str) -> list[str]:
    comments = [line for line in group if line.startswith("#")]
    samples = [line for line in group if not line.startswith("#")]
    if placement == "none":
        return samples
    if placement == "type-first":
        comments.sort(key=lambda line: not line.startswith("# TYPE"))
    elif placement == "type-only":
        comments = [line for line in comments if line.startswith("# TYPE")]
    return comments + samples


@st.composite
def respellings(draw: st.DrawFn) -> tuple[str, str]:
    """(a real exposition, the same exposition spelled another valid way)."""
    path = draw(st.sampled_from(CAPTURES))
    text = TEXTS[path]
    if path in V1:
        text = with_engines(text, draw(st.integers(1, 3)))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))  # cheaper than st.randoms() per call
    rendering = draw(st.sampled_from(["text", "multiprocess", "openmetrics"]))
    spelled = {"text": lambda t: t, "multiprocess": multiprocess, "openmetrics": openmetrics}[
        rendering
    ](text)
    eof = spelled.endswith("# EOF\n")
    spelled = spelled.removesuffix("# EOF\n")
    if rendering == "text" and draw(st.booleans()):  # without the `_created` families
        spelled = (
            "\n".join(
                line for group in families(spelled) if not CREATED.match(group[0]) for line in group
            )
            + "\n"
        )
    names = draw(st.sampled_from(["colon", "underscore", "mixed"]))
    if names == "underscore":
        spelled = underscore(spelled)
    placement = draw(st.sampled_from(["as-is", "type-first", "type-only", "none"]))
    groups = []
    for group in families(spelled):
        lines = [shuffled_labels(line, rng) for line in group]
        if names == "mixed":
            lines = [underscored_line(line, rng) for line in lines]
        comments = [line for line in lines if line.startswith("#")]
        samples = [line for line in lines if not line.startswith("#")]
        if draw(st.booleans()):
            rng.shuffle(samples)
        groups.append(placed_comments(comments + samples, placement))
    if draw(st.booleans()):
        rng.shuffle(groups)
    body = "\n".join(line for group in groups for line in group) + "\n"
    return text, body + ("# EOF\n" if eof else "")


@EXAMPLES
@given(respellings())
def test_every_spelling_gives_the_same_counters(pair: tuple[str, str]) -> None:
    original, respelled = pair
    assert parse(respelled) == parse(original)


def report_of(snapshot: Snapshot) -> None:
    """Everything the poller derives from a snapshot (a hostile label must not break it)."""
    timeline: Timeline[tuple[str, str]] = Timeline(60)
    timeline.observe(0, snapshot.counters)
    timeline.observe(5, snapshot.counters)
    build_report(snapshot, timeline.window(), DraftCost(0.1, "default"))


def parse_or_refuse(text: str) -> None:
    try:
        snapshot = parse(text)
    except ExpositionError:
        return
    report_of(snapshot)


@EXAMPLES
@given(st.text())
def test_arbitrary_text_parses_or_is_refused(text: str) -> None:
    parse_or_refuse(text)
    parse_or_refuse(text + "\n")


@st.composite
def mutated_captures(draw: st.DrawFn) -> str:
    """A real capture with random bytes inserted, deleted or replaced, mostly in the spec lines."""
    data = bytearray(TEXTS[draw(st.sampled_from(CAPTURES))].encode())
    spec = max(data.find(b"\nvllm:spec_decode"), 0)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(
            st.one_of(st.integers(spec, min(spec + 4000, len(data))), st.integers(0, len(data)))
        )
        edit = draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = draw(
            st.binary(min_size=1, max_size=8)
            | st.sampled_from(
                [
                    b"\n",
                    b"{",
                    b"}",
                    b'"',
                    b"\\",
                    b",",
                    b" ",
                    b"NaN",
                    b"-Inf",
                    b"#",
                    b"\xb2",
                    b'engine="\xc2\xb2"',
                    b'position="99"',
                    b"_total",
                    b"vllm_",
                    b"# EOF\n",
                ]
            )
        )
        if edit == "insert":
            data[at:at] = chunk
        elif edit == "delete":
            del data[at : at + len(chunk)]
        else:
            data[at : at + len(chunk)] = chunk
    return data.decode("utf-8", errors="replace")


@EXAMPLES
@given(mutated_captures())
def test_mutated_captures_parse_or_are_refused(text: str) -> None:
    parse_or_refuse(text)


@pytest.mark.parametrize("label", ['engine="\u00b2"', 'engine=""', 'engine="-1"'])
def test_odd_engine_labels_keep_the_report_working(label: str) -> None:
    snapshot = parse(f'vllm:spec_decode_num_drafts_total{{{label},model_name="m"}} 5\n')
    report_of(snapshot)


def test_the_generator_reaches_every_rendering() -> None:
    """The respelling strategy is not vacuous: it yields OpenMetrics, underscores, no comments."""
    seen: set[str] = set()

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(respellings())
    def collect(pair: tuple[str, str]) -> None:
        _, body = pair
        seen.update(
            kind
            for kind, found in [
                ("eof", body.endswith("# EOF\n")),
                ("underscore", "\nvllm_spec_decode" in body),
                ("no-help", "# HELP" not in body),
                ("several-engines", 'engine="2"' in body),
            ]
            if found
        )

    collect()
    assert seen == {"eof", "underscore", "no-help", "several-engines"}
