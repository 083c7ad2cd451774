#!/usr/bin/env bash
# A copy of src/ with the tap's modules compiled to C extensions by mypyc (shipped with mypy, a
# dev dependency; needs a C compiler and Python's headers). The tap's per-request path runs cold
# among other streams' chunks, and compiled it costs a fraction of the interpreted one: see
# BENCHMARKS.md "Session 4". Interpreted and compiled, the tap is the same code and passes the
# same tests:
#
#   scripts/compile_tap.sh /tmp/compiled                       # ~30 s
#   PYTHONPATH=/tmp/compiled/src .venv/bin/pytest -m 'not injects_faults' tests/tap
#   .venv/bin/python benchmarks/tap_latency_cpu.py --tap-src /tmp/compiled/src
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/compile_tap.sh OUT_DIR}"
# Every module of the tap but its Protocols (contracts.py) and the package's __init__.
modules=(http1 jsonscan routes request spec sse stats upstream request_side response_side exchange proxy)

rm -rf "$out" && mkdir -p "$out"
git ls-files -z src | tar --null -T - -cf - | tar -xf - -C "$out"
cd "$out/src"
paths=()
for module in "${modules[@]}"; do paths+=("specdec_exporter/tap/$module.py"); done
log="$(mktemp)"
if ! "$OLDPWD/.venv/bin/mypyc" "${paths[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
rm -rf build "$log"
compiled=(specdec_exporter/tap/*.so)
echo "compiled ${#compiled[@]} tap modules into $out/src"
