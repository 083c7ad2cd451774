"""Generators of the alerting, dashboard and deploy artifacts (see tools/generate.py)."""
