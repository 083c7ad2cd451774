"""The pure core: vLLM names, /metrics parsing, acceptance maths, the timeline, buckets, reports.

No I/O: no httpx, FastAPI or uvicorn imports (tests/test_layout.py keeps it so).
"""
