"""The temperature mix and list parsers, the proportional split and the seeded request planner."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from specdec_exporter.devtools.load.mix import MixError, allocate, parse_mix, parse_temperatures
from specdec_exporter.devtools.load.plan import Planner, build_deck


def test_weighted_mix_keeps_order_and_weights() -> None:
    mix = parse_mix("0:0.3,0.7:0.5,1.0:0.2")
    assert [entry.temperature for entry in mix] == [0.0, 0.7, 1.0]
    assert [entry.weight for entry in mix] == pytest.approx([0.3, 0.5, 0.2])
    assert [entry.label for entry in mix] == ["0.0", "0.7", "1.0"]


def test_plain_temperature_takes_everything() -> None:
    (entry,) = parse_mix("0.7")
    assert (entry.temperature, entry.weight) == (0.7, 1.0)


def test_default_means_no_temperature() -> None:
    mix = parse_mix("default:1, 0:3")
    assert [(entry.temperature, entry.label) for entry in mix] == [(None, "default"), (0.0, "0.0")]
    assert [entry.weight for entry in mix] == [0.25, 0.75]


def test_weights_left_out_split_evenly() -> None:
    assert [entry.weight for entry in parse_mix("0,0.7,1")] == pytest.approx([1 / 3] * 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty entry"),
        ("0:0.5,", "empty entry"),
        ("abc", "temperature is not a number: 'abc'"),
        ("-0.1", "temperature must be 0 to 2"),
        ("nan", "must be finite"),
        ("0.7:x", "weight in '0.7:x' is not a number"),
        ("0.7:-1", "weight must be 0 to "),
        ("0:0.5,0.7", "give a weight to every temperature or to none"),
        ("0.7,0.70", "temperature 0.7 given twice"),
        ("default,DEFAULT", "temperature default given twice"),
        ("0:0,1:0", "add up to 0"),
    ],
)
def test_bad_mix_says_why(text: str, message: str) -> None:
    with pytest.raises(MixError, match=message.replace("(", r"\(")):
        parse_mix(text)


def test_temperature_lists_keep_the_order_given() -> None:
    assert parse_temperatures("0,0.4,0.8,1.0") == (0.0, 0.4, 0.8, 1.0)
    assert parse_temperatures(" 1.0 , 0 ") == (1.0, 0.0)
    assert parse_temperatures("0,default") == (0.0, None)
    assert parse_temperatures("DEFAULT") == (None,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty entry in temperature mix ''"),
        ("0,,1", "empty entry in temperature mix '0,,1'"),
        ("0,0.0", "temperature 0.0 given twice in '0,0.0'"),
        ("default,default", "temperature default given twice in 'default,default'"),
        ("-0.1", "temperature must be 0 to 2, got '-0.1'"),
        ("nan", "temperature must be finite, got 'nan'"),
        ("inf", "temperature must be finite, got 'inf'"),
        ("0.7:2", "a list of temperatures, without weights: '0.7:2'"),
        ("hot", "temperature is not a number: 'hot'"),
    ],
)
def test_bad_temperature_lists_say_why(text: str, message: str) -> None:
    with pytest.raises(MixError) as refused:
        parse_temperatures(text)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("weights", "total", "expected"),
    [
        ([0.3, 0.5, 0.2], 100, [30, 50, 20]),
        ([1, 1, 1], 10, [4, 3, 3]),
        ([0.5, 0.5], 1, [1, 0]),
        ([0.5, 0.5], 3, [2, 1]),
        ([0.1, 0.9], 7, [1, 6]),
        ([0.3, 0.5, 0.2], 0, [0, 0, 0]),
    ],
)
def test_allocate_splits_exactly(weights: list[float], total: int, expected: list[int]) -> None:
    assert allocate(weights, total) == expected


def test_deck_holds_exact_counts_of_each_temperature_and_stream() -> None:
    deck = build_deck(parse_mix("0:0.3,0.7:0.5,1.0:0.2"), 0.5, 100, random.Random(1))
    assert Counter(deck) == {
        (0.0, True): 15,
        (0.0, False): 15,
        (0.7, True): 25,
        (0.7, False): 25,
        (1.0, True): 10,
        (1.0, False): 10,
    }


def _plans(seed: int | None, count: int, deck_size: int) -> list[tuple[float | None, bool, str]]:
    planner = Planner(
        parse_mix("0:0.3,0.7:0.5,default:0.2"),
        0.25,
        ["a", "b", "c"],
        deck_size=deck_size,
        seed=seed,
    )
    plans = [planner.next_plan() for _ in range(count)]
    assert [plan.index for plan in plans] == list(range(count))
    return [(plan.temperature, plan.stream, plan.prompt) for plan in plans]


def test_same_seed_same_plans_other_seed_other_order() -> None:
    assert _plans(3, 50, 50)[:6] == [
        (0.7, False, "a"),
        (None, False, "a"),
        (0.0, False, "b"),
        (0.7, True, "a"),
        (0.0, True, "b"),
        (0.7, False, "c"),
    ]
    assert _plans(3, 50, 50) == _plans(3, 50, 50)
    assert _plans(3, 50, 50) != _plans(4, 50, 50)
    assert Counter(t for t, _, _ in _plans(3, 50, 50)) == Counter(
        t for t, _, _ in _plans(4, 50, 50)
    )


def test_planner_deals_a_fresh_exact_deck_every_deck_size_plans() -> None:
    plans = _plans(5, 250, 100)
    for start in (0, 100):
        block = Counter(t for t, _, _ in plans[start : start + 100])
        assert block == {0.0: 30, 0.7: 50, None: 20}
    assert {prompt for _, _, prompt in plans} == {"a", "b", "c"}
