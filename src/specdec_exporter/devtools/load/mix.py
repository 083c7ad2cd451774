"""The temperature mix: parse ``0:0.3,0.7:0.5,default:0.2`` and split a request count by weight;
and the temperature list of `sweep` and `calibrate` (``0,0.7,default``: a phase each)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec_exporter.options import MAX_TEMPERATURE

MAX_WEIGHT = 1e6
"""Weights are relative (0.3 or 30 alike); past this one a sum could overflow to inf."""

DEFAULT_TOKEN = "default"
"""Mix token meaning: send no ``temperature`` key, so the server's default applies."""


class MixError(ValueError):
    """The temperature mix text is invalid; the message says which part and why."""


@dataclass(frozen=True)
class MixEntry:
    """One temperature of the mix; ``temperature`` None means "omit the key"."""

    temperature: float | None
    weight: float

    @property
    def label(self) -> str:
        return temperature_label(self.temperature)


def temperature_label(temperature: float | None) -> str:
    """The bucket name of a requested temperature: ``0.7``, ``1.0`` or ``default``."""
    return DEFAULT_TOKEN if temperature is None else repr(float(temperature))


def parse_mix(text: str) -> tuple[MixEntry, ...]:
    """Parse ``T:W,T:W,...`` (or a single ``T``) into entries whose weights sum to 1.

    ``T`` is a temperature >= 0 or ``default``. Weights are relative (``0:3,1:1`` is 75/25).
    Weights may be left out only all together: ``0,0.7,1`` splits evenly.
    """
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise MixError(f"empty entry in temperature mix {text!r}")
    pairs = [_split_entry(part) for part in parts]
    weighted = [weight is not None for _, weight in pairs]
    if any(weighted) and not all(weighted):
        raise MixError(f"give a weight to every temperature or to none in {text!r}")
    temperatures = [temperature for temperature, _ in pairs]
    labels = [temperature_label(temperature) for temperature in temperatures]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise MixError(f"temperature {duplicates[0]} given twice in {text!r}")
    weights = [1.0 if weight is None else weight for _, weight in pairs]
    total = sum(weights)
    if total <= 0:
        raise MixError(f"the weights in {text!r} add up to 0")
    return tuple(
        MixEntry(temperature, weight / total)
        for temperature, weight in zip(temperatures, weights, strict=True)
    )


def parse_temperatures(text: str) -> tuple[float | None, ...]:
    """``0,0.4,0.8,1.0`` -> (0.0, 0.4, 0.8, 1.0), in the order given: a mix without weights.

    Each entry is a number >= 0 or ``default`` (None: the ``temperature`` key is omitted, so
    the server's default applies). Duplicates and weights (``0.7:2``) are rejected: every
    temperature is a phase of its own.
    """
    if ":" in text:
        raise MixError(f"a list of temperatures, without weights: {text!r}")
    return tuple(entry.temperature for entry in parse_mix(text))


def _split_entry(part: str) -> tuple[float | None, float | None]:
    temperature_text, sep, weight_text = part.partition(":")
    temperature = _parse_temperature(temperature_text.strip())
    weight = _parse_weight(weight_text.strip(), part) if sep else None
    return temperature, weight


def _parse_temperature(text: str) -> float | None:
    if text.lower() == DEFAULT_TOKEN:
        return None
    value = _parse_number(text, "temperature")
    if not 0 <= value <= MAX_TEMPERATURE:
        raise MixError(f"temperature must be 0 to {MAX_TEMPERATURE:g}, got {text!r}")
    return value


def _parse_weight(text: str, part: str) -> float:
    value = _parse_number(text, f"weight in {part!r}")
    if not 0 <= value <= MAX_WEIGHT:
        raise MixError(f"weight must be 0 to {MAX_WEIGHT:g}, got {text!r} in {part!r}")
    return value


def _parse_number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MixError(f"{what} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise MixError(f"{what} must be finite, got {text!r}")
    return value


def allocate(weights: list[float], total: int) -> list[int]:
    """Split ``total`` into integer counts proportional to ``weights`` (largest remainder).

    Ties in the remainders go to the earlier entry, so the result is deterministic.
    """
    weight_sum = sum(weights)
    if total <= 0 or weight_sum <= 0:
        return [0] * len(weights)
    shares = [total * weight / weight_sum for weight in weights]
    counts = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - shares[i], i))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts
