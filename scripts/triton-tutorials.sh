#!/usr/bin/env bash
# Run Triton's tutorials 01-09, unchanged, against blocktune and report per tutorial whether it ran
# and whether its own checks against torch passed.
#
#   scripts/triton-tutorials.sh TRITON_CHECKOUT [--gpu] [--only 01,06,...] [--timeout S]
#                               [--cases-per-test N] [--benchmarks run|skip] [--out DIR]
#                               [--markdown OUT] [--quiet]
#
# TRITON_CHECKOUT  a Triton source tree; its python/tutorials/0[1-9]-*.py run as they are, their
#                  `import triton` answered by blocktune through the shim of tools/triton_suite
# --gpu            run on the GPU: kernels compile to PTX and the tutorials' `perf_report`
#                  benchmarks run and print their tables. Without it, kernels run in blocktune's
#                  interpreter (BLOCKTUNE_INTERPRET=1, on the CPU) and the benchmarks are skipped
# --only           tutorial numbers or names, comma-separated (default: all of 01-09)
# --timeout S      per tutorial (default 1800 on the CPU, 900 on the GPU)
# --cases-per-test the most cases of each pytest test of a tutorial (06's test_op), evenly spread
#                  (default 2 on the CPU, all on the GPU)
# --benchmarks     run or skip the `perf_report` sweeps (default: run with --gpu, skip on the CPU)
# --out DIR        logs (one folder per tutorial) and report.json (default .cache/triton-tutorials)
#
# Exit status 0 when every selected tutorial ran and its checks passed (or it has none).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
case "$1" in -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
PY="${BLOCKTUNE_PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
cd "$REPO"
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m tools.triton_tutorials.runner "$@"
