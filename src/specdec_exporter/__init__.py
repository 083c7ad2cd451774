"""vllm-specdec-exporter: speculative-decoding metrics, alerts and a request tap for vLLM."""

__version__ = "0.1.0"
