#!/usr/bin/env bash
# A copy of the checkout's tracked files with the tap's modules compiled in place to C extensions
# by mypyc: the same build as the image's (setup.py with SPECDEC_COMPILE=1, its module list), with
# this checkout's venv (mypy and setuptools are dev dependencies; needs a C compiler and Python's
# headers). Interpreted and compiled, the tap is the same code and passes the same tests:
#
#   scripts/compile_tap.sh /tmp/compiled                       # ~25 s
#   PYTHONPATH=/tmp/compiled/src .venv/bin/pytest -m 'not injects_faults' tests/tap
#   .venv/bin/python benchmarks/tap_latency_cpu.py --tap-src /tmp/compiled/src
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/compile_tap.sh OUT_DIR}"
python="$PWD/.venv/bin/python"

rm -rf "$out" && mkdir -p "$out"
git ls-files -z src setup.py pyproject.toml README.md | tar --null -T - -cf - | tar -xf - -C "$out"
cd "$out"
log="$(mktemp)"
if ! SPECDEC_COMPILE=1 "$python" setup.py build_ext --inplace >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
rm -rf build "$log"
compiled=(src/specdec_exporter/tap/*.so)
echo "compiled ${#compiled[@]} tap modules into $out/src"
