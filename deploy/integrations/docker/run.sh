#!/bin/sh
# vLLM and the sidecar in two containers sharing one network namespace (--network container:):
# the sidecar reaches vLLM on 127.0.0.1:8000, and its tap and /metrics are published through the
# vLLM container's ports. Send clients to :10089 (the tap) or straight to :8000 (no temperature
# split). Arguments are checked by tests/artifacts/test_integrations.py; Docker is not run there.
set -eu
docker run -d --name vllm --gpus all \
  -p 8000:8000 -p 10088:10088 -p 10089:10089 \
  vllm/vllm-openai:v0.33.0 \
  --model meta-llama/Llama-3.1-8B-Instruct --port 8000 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}' \
  --per-request-spec-decode-metrics summary
docker run -d --name specdec-exporter --network container:vllm \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  ghcr.io/vllm-specdec-exporter/vllm-specdec-exporter:0.1.0 \
  run --vllm-url http://127.0.0.1:8000 --listen 0.0.0.0:10088 \
  --proxy-listen 0.0.0.0:10089 --speculative-method ngram
