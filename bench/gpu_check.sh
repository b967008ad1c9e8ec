#!/usr/bin/env bash
# The CUDA device check (issue 15): on a machine with an NVIDIA GPU, run riftco's
# conformance suite on cuda:0, the CUDA tests, the kernel benchmark (GB/s against the
# measured copy bandwidth, fp32 matmul against cuBLAS) and the training-step benchmark
# (against PyTorch CUDA eager), writing everything into one folder. Elsewhere it prints
# "no NVIDIA GPU/driver: skipped (<reason>)" and exits 0.
#
#   bench/gpu_check.sh [OUT_DIR]        (default: $OUT, else bench/results/gpu)
#   QUICK=1 bench/gpu_check.sh          (smaller sizes, fewer steps: about 2 minutes)
#
# Needs no network: riftco runs from this working tree. If it is not installed, a shim
# (bench/gpu_shim.py) makes the tree importable with its entry points. Python: $PYTHON,
# else .venv/bin/python when present, else python3. Each stage has its own time limit;
# a failing stage is reported and the next one still runs; the exit status is non-zero
# when conformance or the CUDA tests failed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
export PYTHONUNBUFFERED=1

if ! "$PY" -c "import riftco" >/dev/null 2>&1; then
  SHIM=$("$PY" "$ROOT/bench/gpu_shim.py" "${TMPDIR:-/tmp}/riftco-gpu-shim") || {
    echo "gpu_check: riftco is not importable and the shim could not be built"; exit 1; }
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
fi

REASON=$("$PY" - <<'PYEOF'
import sys
try:
    from riftco.backends.cuda.backend import availability
    ok, why = availability()
except Exception as exc:  # riftco itself broken: say so
    ok, why = False, f"{type(exc).__name__}: {exc}"
print(why)
sys.exit(0 if ok else 3)
PYEOF
)
if [ $? -ne 0 ]; then
  echo "no NVIDIA GPU/driver: skipped (${REASON})"
  exit 0
fi

OUT_DIR=${1:-${OUT:-$ROOT/bench/results/gpu}}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/log.txt"
: > "$LOG"
if [ "${QUICK:-0}" != "0" ]; then
  KARGS=(--quick); TARGS=(--steps 10 --configs large); CARGS=(--max-examples 5)
else
  KARGS=(); TARGS=(--steps 30); CARGS=()
fi
status=0
stage() {  # stage NAME SECONDS CMD...: run with a time limit, log it, remember failures
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$LOG"
  return "$rc"
}
RIFTCO=("$PY" -c 'import sys; from riftco.cli import main; sys.exit(main())')

stage gpu 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
stage backends 60 "${RIFTCO[@]}" backends
HTML=()
if "${RIFTCO[@]}" conformance --help 2>/dev/null | grep -q -- "--html"; then
  HTML=(--html "$OUT_DIR/conformance.html")
fi
stage conformance 300 "${RIFTCO[@]}" conformance cuda:0 --json "$OUT_DIR/conformance.json" --quiet \
  "${CARGS[@]}" "${HTML[@]}" || status=1
stage cuda-tests 180 "$PY" -m pytest -q -x -W "ignore::DeprecationWarning" tests/test_cuda_backend.py \
  tests/test_cuda_compile.py || status=1
stage kernels 240 "$PY" bench/gpu_kernels.py --device cuda:0 "${KARGS[@]}" \
  --json "$OUT_DIR/gpu_kernels.json"
stage train 240 "$PY" bench/gpu_train.py --device cuda:0 "${TARGS[@]}" \
  --json "$OUT_DIR/gpu_train.json"
stage summary 30 "$PY" bench/gpu_summary.py "$OUT_DIR"
echo "gpu_check: results in $OUT_DIR (exit $status)"
exit "$status"
