"""One request's ``metrics.speculative_decoding`` -> a summary, or the reason there is none.

The one parser of per-request metrics: the tap, ``load`` and ``sweep`` all read responses with it.
Pure, and it never raises (the tap must not).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from specdec_exporter.core import vllm_names as names
from specdec_exporter.core.acceptance import acceptance_rate, mean_acceptance_length

MissingReason = Literal["absent", "not_an_object", "missing_count", "accepted_over_drafted"]
"""Why a response carries no usable summary."""


class SpecDecodeSummary(NamedTuple):
    """One request's speculative-decoding totals, as vLLM reports them (summary mode).

    A NamedTuple, not a frozen dataclass: the tap builds one per request, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``.
    """

    spec_steps: int
    draft_tokens: int
    accepted_tokens: int
    spec_tokens: int | None = None

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens: vLLM's acceptance rate, as the counters give it."""
        return acceptance_rate(self.accepted_tokens, self.draft_tokens)

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / steps: vLLM's mean acceptance length (bonus token included)."""
        return mean_acceptance_length(self.accepted_tokens, self.spec_steps)


def count(value: object) -> int | None:
    """A JSON count: a non-negative int that is not a bool; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def parse_spec_decoding(value: object) -> SpecDecodeSummary | MissingReason:
    """The summary of a ``speculative_decoding`` object, or why it is unusable."""
    if value is None:
        return "absent"
    if not isinstance(value, dict):
        return "not_an_object"
    steps = count(value.get(names.REQUEST_SPEC_STEPS))
    drafted = count(value.get(names.REQUEST_DRAFT_TOKENS))
    accepted = count(value.get(names.REQUEST_ACCEPTED_TOKENS))
    if steps is None or drafted is None or accepted is None:
        return "missing_count"
    if accepted > drafted:
        return "accepted_over_drafted"
    spec_tokens = count(value.get(names.REQUEST_SPEC_TOKENS))
    return SpecDecodeSummary(steps, drafted, accepted, spec_tokens or None)


def spec_decoding_of(document: object) -> object:
    """The raw ``metrics.speculative_decoding`` value of a response or chunk (None if absent)."""
    if not isinstance(document, dict):
        return None
    metrics = document.get(names.RESPONSE_METRICS)
    return metrics.get(names.RESPONSE_SPEC_DECODING) if isinstance(metrics, dict) else None


def summary_of(document: object) -> SpecDecodeSummary | MissingReason:
    """The summary of a parsed response body or final usage chunk (``metrics`` may be null)."""
    return parse_spec_decoding(spec_decoding_of(document))


def completion_tokens_of(document: object) -> int | None:
    """``usage.completion_tokens`` of a response or chunk."""
    if not isinstance(document, dict):
        return None
    usage = document.get(names.RESPONSE_USAGE)
    return count(usage.get(names.RESPONSE_COMPLETION_TOKENS)) if isinstance(usage, dict) else None
