"""A simulated `vllm serve` 0.33 with speculative decoding, for tests, demos and benchmarks."""
