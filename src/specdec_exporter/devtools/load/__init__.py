"""Load generator for OpenAI-compatible endpoints: ``run_load(config)`` and its result types."""

from specdec_exporter.devtools.load.config import LoadConfig
from specdec_exporter.devtools.load.mix import MixEntry, MixError, parse_mix
from specdec_exporter.devtools.load.results import LoadResult, RequestResult, SpecDecoding
from specdec_exporter.devtools.load.runner import ModelLookupError, Progress, run_load

__all__ = [
    "LoadConfig",
    "LoadResult",
    "MixEntry",
    "MixError",
    "ModelLookupError",
    "Progress",
    "RequestResult",
    "SpecDecoding",
    "parse_mix",
    "run_load",
]
