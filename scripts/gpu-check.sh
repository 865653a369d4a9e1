#!/usr/bin/env bash
# On a GPU machine (the H100 lent by the device tool): the `gpu` tests, then the benchmarks, then a
# short table. The GPU image has torch/triton/llvmlite/cuda-bindings but not the web/db stack:
# `../shared/tools/device-wheels` and then
# `../shared/tools/device-wheels platformdirs pydantic-settings python-dotenv opentelemetry-api`
# (and `pytest-xdist execnet`, which spread the gpu tests over the host's cores)
# put those wheels in .whl/ (carry it) and this script installs them first:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# Usage: scripts/gpu-check.sh [tests|kernels|launch|matmul|matmul_tma|matmul_tma_timing|tuning|dropout|layernorm_bwd|grouped_gemm|attention|all|fleet|suite|tutorials]...   (default: all)
#        BENCH_ARGS_<name>="..." passes arguments to one benchmark (e.g. BENCH_ARGS_attention=--quick); BENCH_TIMEOUT=S bounds each
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ] && ! python3 -c "import fastapi, sqlalchemy, optuna" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/blocktune-gpu-check}; mkdir -p "$OUT"; export OUT
export BLOCKTUNE_CACHE_DIR=${BLOCKTUNE_CACHE_DIR:-/tmp/blocktune-cache}
what=("$@"); [ ${#what[@]} -eq 0 ] && what=(all)
has() { for w in "${what[@]}"; do [ "$w" = "$1" ] || [ "$w" = all ] && return 0; done; return 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader || true
summary=()
if has tests; then
  # the gpu tests are mostly compiles (CPU): spread over the host's cores by file when xdist is there
  # (`device-wheels pytest-xdist execnet`), one GPU shared by the processes
  par=(); python3 -c "import xdist" 2>/dev/null && par=(-n "${GPU_TEST_PROCS:-8}" --dist loadfile)
  python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 "${par[@]}" --ignore=tests/service/test_contract.py --ignore=tests/test_import_structure.py tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
  summary+=("gpu tests: $(grep -E '[0-9]+ (passed|failed)' "$OUT/gpu-tests.log" | tail -1)")
fi
for b in kernels launch matmul matmul_tma matmul_tma_timing tuning dropout layernorm_bwd grouped_gemm attention; do
  # matmul_tma_timing is a diagnostic (issue 13's per-tile TMA matmul), run only when named: not part of `all`
  if has "$b" && [ -f "bench/$b.py" ] && { [ "$b" != matmul_tma_timing ] || [[ " ${what[*]} " == *" $b "* ]]; }; then
    args="BENCH_ARGS_$b"   # e.g. BENCH_ARGS_attention="--quick"; BENCH_TIMEOUT bounds each
    (cd bench && timeout "${BENCH_TIMEOUT:-900}" python3 "$b.py" ${!args:-} 2>&1) | tee "$OUT/bench-$b.log" | tail -30
  fi
done
# the fleet (issue 10): needs two GPUs and a PostgreSQL server (carry .pgbundle from
# scripts/postgres-bundle.sh where the host has none); not part of `all`
if [[ " ${what[*]} " == *" fleet "* ]]; then
  command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || bash scripts/postgres-bundle.sh --install
  timeout "${BENCH_TIMEOUT:-900}" python3 bench/fleet.py ${BENCH_ARGS_fleet:-} 2>&1 | tee "$OUT/bench-fleet.log" | tail -60
  # the shared job's and the tuner's gpu tests, with the wheels installed above (a pytest line
  # after this script has none of them: it cannot import fastapi)
  python3 -m pytest -m gpu -q -p no:cacheprovider tests/tuner/test_gpu_tuning.py tests/service/test_shared_job.py 2>&1 \
    | tee "$OUT/fleet-gpu-tests.log" | tail -3
  summary+=("fleet gpu tests: $(grep -E '[0-9]+ (passed|failed)' "$OUT/fleet-gpu-tests.log" | tail -1)")
fi
# Triton's own unit tests and tutorials against blocktune (issue 13): need a Triton checkout with
# python/test/unit and python/tutorials (TRITON_CHECKOUT, default .triton-tut: carry it); not part of `all`.
# The suite keeps 3 cases a test function (SUITE_CASES); every case is four runs of
# SUITE_CASES=0 SUITE_ARGS="--shard I/4" (I = 1..4, ~4 min each), summed by tools/triton_suite/summary.py
TRITON_CHECKOUT=${TRITON_CHECKOUT:-.triton-tut}
if [[ " ${what[*]} " == *" suite "* ]]; then
  TRITON_SUITE_CACHE="$OUT/triton-suite" BLOCKTUNE_PYTHON=python3 timeout "${SUITE_TIMEOUT:-560}" \
    bash scripts/triton-suite.sh "$TRITON_CHECKOUT" --gpu --ref-python python3 --cases-per-test "${SUITE_CASES:-3}" \
    --jobs "${SUITE_JOBS:-12}" --timeout 120 \
    --triton-version "$(python3 -c 'import triton; print(triton.__version__)' 2>/dev/null || echo unknown)" --markdown "$OUT/triton-suite.md" ${SUITE_ARGS:-} 2>&1 | tee "$OUT/triton-suite.log" | tail -25
  summary+=("triton suite: $(grep -iE 'of the cases|passes' "$OUT/triton-suite.log" | tail -1)")
fi
if [[ " ${what[*]} " == *" tutorials "* ]]; then
  BLOCKTUNE_PYTHON=python3 timeout "${TUTORIALS_TIMEOUT:-560}" bash scripts/triton-tutorials.sh "$TRITON_CHECKOUT" --gpu \
    --benchmarks "${TUTORIALS_BENCHMARKS:-skip}" --out "$OUT/tutorials" --markdown "$OUT/tutorials.md" ${TUTORIALS_ARGS:-} 2>&1 \
    | tee "$OUT/tutorials.log" | tail -25
fi
echo
echo "=== summary ==="
for s in "${summary[@]}"; do echo "$s"; done
for b in kernels launch matmul matmul_tma matmul_tma_timing tuning dropout layernorm_bwd grouped_gemm attention fleet; do
  [ -f "$OUT/bench-$b.log" ] && { echo "--- $b"; grep -E '^\||geomean|µs|ms ' "$OUT/bench-$b.log" | tail -20; }
done
exit 0
