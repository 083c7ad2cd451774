#!/usr/bin/env bash
# Every check CI runs, in order: install, lint, types, generated-file drift, Dockerfile commands,
# the fast test suite, then the real-vLLM stage (skip it locally with --skip-real-vllm or
# SPECDEC_SKIP_REAL_VLLM=1; CI never skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

skip_real="${SPECDEC_SKIP_REAL_VLLM:-0}"
for arg in "$@"; do
  case "$arg" in
    --skip-real-vllm) skip_real=1 ;;
    *) echo "usage: scripts/test.sh [--skip-real-vllm]" >&2; exit 2 ;;
  esac
done

python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# Schema validators of the prometheus-operator CRDs (no PyPI package ships them).
[ -d tools/crd-validate/node_modules ] || npm ci --prefix tools/crd-validate --no-audit --no-fund --silent

stage() { printf '\n=== %s\n' "$*"; }
stage "ruff";  .venv/bin/ruff check src tests benchmarks scripts $( [ -d tools ] && echo tools )
stage "mypy --strict"; .venv/bin/mypy && .venv/bin/mypy --strict tools
if [ -f tools/generate.py ]; then
  stage "generated files are current"; .venv/bin/python tools/generate.py --check
fi
stage "Dockerfile commands in fresh venvs"; .venv/bin/python scripts/check_dockerfile.py >/dev/null
stage "fast tests"; .venv/bin/pytest -m "not real_vllm"
stage "fuzz (atheris, at most 60 s a target)"; scripts/fuzz.sh

if [ "$skip_real" = "1" ]; then
  stage "real vLLM stage SKIPPED (--skip-real-vllm / SPECDEC_SKIP_REAL_VLLM=1)"
else
  stage "real vLLM stage"; .venv/bin/pytest -m real_vllm tests/real_vllm
fi
