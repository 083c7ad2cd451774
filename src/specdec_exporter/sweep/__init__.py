"""``specdec-exporter sweep``: acceptance per temperature, one load phase per temperature."""

from specdec_exporter.sweep.cli import configure, main

__all__ = ["configure", "main"]
