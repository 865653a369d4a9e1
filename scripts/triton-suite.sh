#!/usr/bin/env bash
# Run Triton's own unit tests against blocktune and next to Triton's own interpreter.
#
#   scripts/triton-suite.sh TRITON_CHECKOUT [--gpu] [-k EXPR] [-m MARKEXPR] [--jobs N]
#                           [--cases-per-test N] [--shard I/K] [--timeout S] [--no-reference] [--ref-python PY]
#                           [--triton-version V] [--markdown OUT] [TEST_PATH ...]
#
# TRITON_CHECKOUT  a Triton source tree (python/triton/__init__.py gives the version to compare with)
# --gpu            run on the GPU (no TRITON_INTERPRET; --device cuda). The reference run then needs a
#                  Python with triton and a CUDA torch: --ref-python, else it is left out
# -k / -m          pytest's test selection, passed to both runs (default: see SELECTIONS below)
# --jobs N         pytest-xdist workers (when installed)
# --cases-per-test keep at most N evenly spread cases of each test function (default 0: all)
# --shard I/K      run shard I of K of every case (by a hash of the test id: a uniform sample; the K
#                  shards together are the whole suite). The junit files are named after the shard
# --timeout S      per-test timeout (pytest-timeout), default 120
# --triton-version the triton wheel for the reference run (default: the checkout's __version__; a
#                  commit on main between two releases carries the older number)
# --no-reference   reuse the last reference run's results instead of running Triton's interpreter
# TEST_PATH        paths under python/test/unit (default: language/, the cases marked `interpreter`
#                  on the CPU, and runtime/test_autotuner.py)
#
# Triton's interpreter runs from a venv under .cache/triton-ref-venv holding the triton wheel of the
# checkout's version, torch 2.13.0 (the CPU wheel) and the tests' own dependencies. Results go to
# .cache/triton-suite/{triton,blocktune}-*.xml; the summary is tools/triton_suite/summary.py.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage 0 ;; esac
CHECKOUT="$(cd "$1" && pwd)"; shift

GPU=0; KEXPR=""; MEXPR=""; JOBS=1; CASES=0; SHARD=""; TIMEOUT=120; REFERENCE=1; REF_PY=""; MARKDOWN=""; VERSION=""; PATHS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) GPU=1 ;;
    -k) KEXPR="$2"; shift ;;
    -m) MEXPR="$2"; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --cases-per-test) CASES="$2"; shift ;;
    --shard) SHARD="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    --no-reference) REFERENCE=0 ;;
    --ref-python) REF_PY="$2"; shift ;;
    --markdown) MARKDOWN="$2"; shift ;;
    --triton-version) VERSION="$2"; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) PATHS+=("$1") ;;
  esac
  shift
done
# The default selection is two runs: language/ as Triton's own interpreter CI selects it (the
# cases marked `interpreter`; on the GPU all of them), and runtime/test_autotuner.py whole (it has
# no such marks). Paths or -m given on the command line make it one run of exactly that.
SELECTIONS=()
if [ ${#PATHS[@]} -gt 0 ] || [ -n "$MEXPR" ]; then
  [ ${#PATHS[@]} -gt 0 ] || PATHS=(language/ runtime/test_autotuner.py)
  SELECTIONS=("main|$MEXPR|${PATHS[*]}")
else
  [ "$GPU" = 1 ] && LANG_MARK="" || LANG_MARK="interpreter"
  SELECTIONS=("language|$LANG_MARK|language/" "autotuner||runtime/test_autotuner.py")
fi

if [ -n "${BLOCKTUNE_PYTHON:-}" ]; then
  PY="$BLOCKTUNE_PYTHON"
  # the tests run from inside the checkout: a relative interpreter path would point nowhere there
  case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac
  [ -x "$PY" ] || command -v "$PY" >/dev/null || { echo "triton-suite: no Python at '$PY' (BLOCKTUNE_PYTHON)" >&2; exit 2; }
else
  PY="$REPO/.venv/bin/python"
  [ -x "$PY" ] || PY="$(command -v python3)"
fi
CACHE="${TRITON_SUITE_CACHE:-$REPO/.cache/triton-suite}"
REF_VENV="${TRITON_REF_VENV:-$REPO/.cache/triton-ref-venv}"
UNIT="$CHECKOUT/python/test/unit"
[ -d "$UNIT" ] || { echo "$CHECKOUT has no python/test/unit: not a Triton checkout" >&2; exit 2; }
[ -n "$VERSION" ] || VERSION="$(sed -n "s/^__version__ = ['\"]\([^'\"]*\)['\"].*/\1/p" "$CHECKOUT/python/triton/__init__.py")"
# a copy of the checkout's files inside another repository (a carried folder) has no commit of its own
COMMIT=unknown
[ "$(git -C "$CHECKOUT" rev-parse --show-toplevel 2>/dev/null)" = "$CHECKOUT" ] && COMMIT="$(git -C "$CHECKOUT" rev-parse --short HEAD)"
mkdir -p "$CACHE"

PYTHONPATH="$REPO" "$PY" -m tools.triton_suite.shim "$CHECKOUT" "$CACHE/shim" --plugins-dir "$CACHE/plugins" >/dev/null

# The options both runs share. The device is the tests' own conftest option.
if [ "$GPU" = 1 ]; then DEVICE=cuda; INTERPRET=0; else DEVICE=cpu; INTERPRET=1; fi
COMMON=(-q -p no:cacheprovider -p _triton_suite_sample --cases-per-test "$CASES" --timeout "$TIMEOUT"
        --continue-on-collection-errors --device "$DEVICE" -o junit_logging=no)
[ -n "$KEXPR" ] && COMMON+=(-k "$KEXPR")
[ -n "$SHARD" ] && COMMON+=(--shard "$SHARD")
# each shard's results keep their own files, so that a summary over several shards' folders adds up
SHARD_TAG="${SHARD:+-shard${SHARD/\//of}}"

xdist_args() {  # $1: the python that runs pytest
  if [ "$JOBS" -gt 1 ] && "$1" -c "import xdist" 2>/dev/null; then echo "-n $JOBS"
  elif [ "$JOBS" -gt 1 ]; then echo "pytest-xdist is not installed for $1: running serially" >&2; fi
}

# The tests run from python/test, not python/test/unit: unit's own `cuda/` package would hide
# cuda-python's `cuda` (blocktune's driver) wherever the working directory comes first on sys.path,
# and `-P` does not reach pytest-xdist's workers (each starts with its working directory on sys.path).
# `--rootdir` keeps the test ids relative to python/test/unit, whatever config file sits above.
run_suite() {  # $1: label, $2: python, $3: PYTHONPATH, $4: junit file prefix
  local label="$1" py="$2" pypath="$3" prefix="$4" sel name mark paths
  rm -f "$prefix"-*"$SHARD_TAG".xml
  for sel in "${SELECTIONS[@]}"; do
    IFS='|' read -r name mark paths <<<"$sel"
    echo "== $label: Triton $VERSION ($COMMIT) tests $paths${mark:+ (-m $mark)} on $DEVICE" >&2
    # shellcheck disable=SC2046,SC2086
    (cd "$UNIT/.." && TRITON_INTERPRET="$INTERPRET" BLOCKTUNE_INTERPRET="$INTERPRET" PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}" "$py" -P -m pytest "${COMMON[@]}" \
       --rootdir "$UNIT" ${mark:+-m "$mark"} $(xdist_args "$py") --junitxml="$prefix-$name$SHARD_TAG.xml" $(printf "unit/%s " $paths) 2>&1 | tail -n 3) || true
  done
}

ensure_reference_venv() {
  local stamp="$REF_VENV/.triton-suite-$VERSION"
  [ -f "$stamp" ] && return 0
  echo "== creating $REF_VENV (triton==$VERSION, torch 2.13.0 CPU)" >&2
  python3 -m venv "$REF_VENV"
  # Triton 3.6's interpreter converts 1-element arrays with int(), which NumPy 2.4 refuses
  # (fixed in Triton 3.7): keep its NumPy to the versions it was released against.
  local numpy="numpy"
  case "$VERSION" in 3.[0-6].*) numpy="numpy<2.4" ;; esac
  "$REF_VENV/bin/pip" install -q "torch==2.13.0" "triton==$VERSION" "$numpy" scipy pytest pytest-timeout pytest-xdist
  rm -f "$REF_VENV"/.triton-suite-*
  touch "$stamp"
}

run_suite blocktune "$PY" "$CACHE/shim:$CACHE/plugins:$REPO" "$CACHE/blocktune"

if [ "$REFERENCE" = 1 ]; then
  if [ "$GPU" = 1 ] && [ -z "$REF_PY" ]; then
    echo "== no --ref-python for the GPU run: reporting blocktune's run against the last reference" >&2
  else
    if [ -z "$REF_PY" ]; then ensure_reference_venv; REF_PY="$REF_VENV/bin/python"; fi
    run_suite "Triton's interpreter" "$REF_PY" "$CACHE/plugins" "$CACHE/triton"
  fi
fi
compgen -G "$CACHE/triton-*.xml" >/dev/null || { echo "no reference results in $CACHE/triton-*.xml" >&2; exit 1; }

SUMMARY=()
for f in "$CACHE"/triton-*.xml; do SUMMARY+=(--reference "$f"); done
for f in "$CACHE"/blocktune-*.xml; do SUMMARY+=(--blocktune "$f"); done
[ -n "$MARKDOWN" ] && SUMMARY+=(--markdown "$MARKDOWN")
[ "$GPU" = 1 ] && SUMMARY+=(--reference-name "Triton on the GPU")
PYTHONPATH="$REPO" "$PY" -m tools.triton_suite.summary "${SUMMARY[@]}"
