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
# The real tools the tests drive (promtool, amtool, Prometheus, Alertmanager, Chromium) and a C
# compiler with Python's headers (the compiled tap's stage): installed from Debian's packages when
# missing and this runs as root, so a fresh machine skips no test.
apt_packages=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || apt_packages+=(prometheus)
command -v amtool >/dev/null || apt_packages+=(prometheus-alertmanager)
command -v chromium >/dev/null || apt_packages+=(chromium)
command -v jsonnet >/dev/null || apt_packages+=(jsonnet)
command -v cc >/dev/null || apt_packages+=(gcc libc6-dev)
headers="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$headers/Python.h" ] || apt_packages+=(python3-dev)
if [ "${#apt_packages[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  # Debian's packages would start their services on install; nothing here should hold ports.
  # policy-rc.d refuses those starts, so nothing needs stopping afterwards (and a kill by name
  # could hit a prometheus that another program on the machine started).
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# Schema validators of the prometheus-operator CRDs (no PyPI package ships them).
[ -d tools/crd-validate/node_modules ] || npm ci --prefix tools/crd-validate --no-audit --no-fund --silent

stage() { printf '\n=== %s\n' "$*"; }
stage "ruff"; .venv/bin/ruff check src tests benchmarks scripts tools fuzz setup.py
stage "ruff format"; .venv/bin/ruff format --check src tests benchmarks scripts tools fuzz setup.py
stage "mypy --strict"; .venv/bin/mypy && .venv/bin/mypy --strict tools
if [ -f tools/generate.py ]; then
  stage "generated files are current"; .venv/bin/python tools/generate.py --check
fi
stage "Dockerfile commands in fresh venvs"; .venv/bin/python scripts/check_dockerfile.py >/dev/null
stage "fast tests"; .venv/bin/pytest -m "not real_vllm"
stage "the tap compiled by mypyc: its tests"
compiled="$(mktemp -d)"
scripts/compile_tap.sh "$compiled"
PYTHONPATH="$compiled/src" .venv/bin/python -c \
  'import specdec_exporter.tap.proxy as m; assert m.__file__.endswith(".so"), m.__file__'
PYTHONPATH="$compiled/src" .venv/bin/pytest -q -m "not real_vllm and not injects_faults" tests/tap
rm -rf "$compiled"
stage "fuzz (atheris, at most 60 s a target)"; scripts/fuzz.sh

if [ "$skip_real" = "1" ]; then
  stage "real vLLM stage SKIPPED (--skip-real-vllm / SPECDEC_SKIP_REAL_VLLM=1)"
else
  stage "real vLLM stage"; .venv/bin/pytest -m real_vllm tests/real_vllm
fi
