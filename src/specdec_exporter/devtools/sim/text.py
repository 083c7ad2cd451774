"""Deterministic plausible output text (one word per token) and prompt token estimates."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

WORDS = (
    "the",
    "model",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "that",
    "for",
    "it",
    "with",
    "as",
    "on",
    "was",
    "this",
    "be",
    "by",
    "are",
    "at",
    "from",
    "or",
    "an",
    "which",
    "have",
    "not",
    "has",
    "but",
    "can",
    "all",
    "one",
    "will",
    "were",
    "more",
    "their",
    "its",
    "also",
    "into",
    "when",
    "token",
    "tokens",
    "draft",
    "drafts",
    "target",
    "accepted",
    "rejected",
    "speculative",
    "decoding",
    "step",
    "batch",
    "request",
    "latency",
    "throughput",
    "engine",
    "scheduler",
    "cache",
    "memory",
    "kernel",
    "layer",
    "attention",
    "head",
    "weights",
    "logits",
    "sample",
    "sampling",
    "temperature",
    "greedy",
    "probability",
    "rate",
    "window",
    "server",
    "client",
    "stream",
    "chunk",
    "queue",
    "prompt",
    "output",
    "input",
    "sequence",
    "length",
    "position",
    "we",
    "you",
    "they",
    "it",
    "system",
    "data",
    "value",
    "result",
    "error",
    "time",
    "first",
    "last",
    "next",
    "each",
    "other",
    "new",
    "small",
    "large",
    "fast",
    "slow",
    "good",
    "better",
    "simple",
    "general",
    "example",
    "because",
    "however",
    "then",
    "there",
    "these",
    "those",
    "would",
    "could",
    "should",
    "may",
    "might",
    "must",
    "between",
    "through",
    "over",
    "under",
    "after",
    "before",
    "during",
    "while",
    "where",
    "how",
    "what",
    "why",
    "who",
    "number",
    "part",
    "case",
    "point",
)
PUNCTUATION = (".", ",")
PUNCTUATION_RATE = 0.08


def next_token(rng: random.Random, first: bool) -> str:
    """One token of text: a word with a leading space, sometimes punctuation."""
    if not first and rng.random() < PUNCTUATION_RATE:
        return PUNCTUATION[int(rng.random() * len(PUNCTUATION))]
    word = WORDS[int(rng.random() * len(WORDS))]
    return word.capitalize() if first else " " + word


def generate(rng: random.Random, count: int, first: bool) -> str:
    """``count`` tokens of text; ``first`` means the response's very first token is among them."""
    parts = [next_token(rng, first and index == 0) for index in range(count)]
    return "".join(parts)


def estimate_tokens(text: str) -> int:
    """About four characters a token, as for English with a BPE tokenizer."""
    return math.ceil(len(text) / 4)


def chat_prompt_tokens(contents: Iterable[str]) -> int:
    """Prompt tokens of a chat: each message's text plus 4 template tokens, plus 3 for the reply."""
    return sum(estimate_tokens(text) + 4 for text in contents) + 3


PLACEHOLDER_VOCABULARY = 32000


def placeholder_ids(prompt: str) -> tuple[int, ...]:
    """Token ids for an echoed text prompt: the simulator has no tokenizer, so they are made up
    (deterministic, one per estimated token, BOS included)."""
    rng = random.Random(prompt)
    return tuple(rng.randrange(PLACEHOLDER_VOCABULARY) for _ in range(estimate_tokens(prompt) + 1))
