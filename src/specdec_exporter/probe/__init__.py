"""The engine probe: a vLLM stat-logger plugin that runs inside vLLM's API-server processes.

Pure Python, loaded by vLLM from ``PYTHONPATH`` (``specdec-exporter install-probe DIR``). It imports
only the standard library, ``prometheus_client``, vLLM and stdlib-only ``core`` modules; this
``__init__`` imports nothing, so the compatibility script can load ``probe.hooks`` alone.
"""
