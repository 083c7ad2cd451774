"""The request-path tap: a pass-through HTTP/1.1 proxy in front of vLLM that splits acceptance by
temperature bucket, from each response's ``metrics.speculative_decoding``."""
