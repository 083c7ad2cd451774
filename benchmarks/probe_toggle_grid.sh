#!/usr/bin/env bash
# The engine probe's end-to-end cost at every point of issue 30's grid, by the within-process
# A/B (`probe_e2e.py run --toggle 2`, BENCHMARKS.md "Engine probe overhead"): about 600 window
# pairs a point (SE ~0.3 points on a 2-core VM), some 40 minutes a point, 8 hours in all. A
# script run, not CI's: nothing else may run on the machine meanwhile.
#
#   benchmarks/probe_toggle_grid.sh [OUT.jsonl] [POINT...]
#   .venv/bin/python benchmarks/probe_e2e.py report OUT.jsonl
#
# POINT is tokens/concurrency/api-servers (default: all twelve), e.g. 24/1/1 256/4/2. The
# request counts are sized from the rates measured in session 19 (requests/s: 24 tokens 4.5,
# 13.6, 27 at concurrency 1, 4, 16; 256 tokens 0.4, 1.2, 2.5); the machine's speed moves
# between sessions (session 21's ran ~35% slower: ~60 minutes a point). With `without` instead
# of `probe-files` in VARIANTS the same runs are the A/A control; ARMS (`probe_e2e.py run --arms`,
# default on,off) measures the in-process controls in the same runs, e.g.
# ARMS=on,off,no-temperature,no-batch (each arm then has a quarter of the windows: give SCALE=2,
# twice the requests, for the standard error of a two-arm run).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-toggle-grid.jsonl}
shift || true
variants=${VARIANTS:-probe-files}
arms=${ARMS:-on,off}
scale=${SCALE:-1}
points=("$@")
if [ ${#points[@]} -eq 0 ]; then
  points=(24/1/1 24/4/1 24/16/1 256/1/1 256/4/1 256/16/1 24/1/2 24/4/2 24/16/2 256/1/2 256/4/2 256/16/2)
fi
requests_for() {
  case "$1/$2" in
    24/1) echo 10800 ;; 24/4) echo 32000 ;; 24/16) echo 64000 ;;
    256/1) echo 1000 ;; 256/4) echo 2900 ;; 256/16) echo 6000 ;;
    *) echo "no request count for $1 tokens at concurrency $2" >&2; exit 2 ;;
  esac
}
for point in "${points[@]}"; do
  IFS=/ read -r tokens concurrency servers <<<"$point"
  requests=$(( $(requests_for "$tokens" "$concurrency") * scale ))
  echo "$(date -u +%H:%M) ${tokens} tokens, concurrency ${concurrency}, ${servers} API server(s)"
  .venv/bin/python benchmarks/probe_e2e.py run --toggle 2 --rounds 1 --variants "$variants" --arms "$arms" \
    --tokens "$tokens" --concurrency "$concurrency" --api-servers "$servers" \
    --requests "$requests" --out "$out"
done
