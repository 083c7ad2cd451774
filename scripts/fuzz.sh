#!/usr/bin/env bash
# Coverage-guided fuzzing with atheris: every fuzz/fuzz_<target>.py runs for at most FUZZ_SECONDS
# (default 60) from its committed seeds in fuzz/corpus/<target>/; any crash fails the run and its
# input is kept in fuzz/artifacts/. New inputs go to a temporary directory, so the seeds stay put.
# FUZZ_SEED (default 1) fixes libFuzzer's random seed: CI explores the same sequence of inputs each
# run (as far as its time reaches), so it does not fail by luck; FUZZ_SEED=0 lets libFuzzer pick one
# (the long exploratory runs).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
seed="${FUZZ_SEED:-1}"
python=.venv/bin/python
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "fuzz: SKIPPED, atheris 3.0.0 has wheels for CPython 3.11 only" >&2
  exit 0
fi
"$python" -c 'import atheris' || { echo "fuzz: atheris missing: pip install -e '.[dev]'" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p fuzz/artifacts
status=0
for harness in fuzz/fuzz_*.py; do
  target="$(basename "$harness" .py)"
  target="${target#fuzz_}"
  mkdir -p "$work/$target"
  if "$python" "$harness" "$work/$target" "fuzz/corpus/$target" -max_total_time="$seconds" -seed="$seed" \
      -artifact_prefix="fuzz/artifacts/$target-" -print_final_stats=1 >"$work/$target.log" 2>&1; then
    echo "fuzz $target: $(grep -E '^stat::number_of_executed_units' "$work/$target.log" \
      | cut -d: -f4 | tr -d ' ') inputs in ${seconds} s, no crash"
  else
    grep -v '# Uses:' "$work/$target.log" | tail -30
    echo "fuzz $target: CRASH, input kept under fuzz/artifacts/" >&2
    status=1
  fi
done
exit "$status"
