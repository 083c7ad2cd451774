#!/bin/sh
# vLLM with the engine probe, without rebuilding vLLM's image: the sidecar's image writes the
# probe into a host folder (install-probe), vLLM gets it read-only with -v and on its PYTHONPATH
# with -e; the probe writes its series into the volume specdec-probe-files (SPECDEC_PROBE_DIR),
# which the sidecar mounts read-only and reads them from, so vLLM never renders them on its
# /metrics (no tap: clients talk to vLLM on :8000 and every request is counted). Bucket edges: export SPECDEC_TEMPERATURE_BUCKETS
# and SPECDEC_BATCH_BUCKETS before running this; `-e NAME` passes each to both containers when it
# is set (both use the defaults when it is not). If your vLLM image sets PYTHONPATH itself (see
# `docker inspect`), append its value after /specdec-probe; if vLLM runs with VLLM_PLUGINS, add
# specdec_probe to it. Arguments are checked by tests/artifacts/test_integrations_probe.py;
# Docker is not run there.
set -eu
mkdir -p "$PWD/specdec-probe"
docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/specdec-probe:/specdec-probe" \
  ghcr.io/vllm-specdec-exporter/vllm-specdec-exporter:0.1.0 \
  install-probe /specdec-probe
docker run -d --name vllm --gpus all -p 8000:8000 -p 10088:10088 \
  -v "$PWD/specdec-probe:/specdec-probe:ro" -e PYTHONPATH=/specdec-probe \
  --mount type=volume,source=specdec-probe-files,target=/specdec-probe-files \
  -e SPECDEC_PROBE_DIR=/specdec-probe-files \
  -e SPECDEC_TEMPERATURE_BUCKETS -e SPECDEC_BATCH_BUCKETS \
  vllm/vllm-openai:v0.33.0 \
  --model meta-llama/Llama-3.1-8B-Instruct --port 8000 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}' \
  --per-request-spec-decode-metrics summary
docker run -d --name specdec-exporter --network container:vllm \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  --mount type=volume,source=specdec-probe-files,target=/specdec-probe-files,readonly \
  -e SPECDEC_PROBE_DIR=/specdec-probe-files \
  -e SPECDEC_TEMPERATURE_BUCKETS -e SPECDEC_BATCH_BUCKETS \
  ghcr.io/vllm-specdec-exporter/vllm-specdec-exporter:0.1.0 \
  run --vllm-url http://127.0.0.1:8000 --listen 0.0.0.0:10088 --speculative-method ngram
