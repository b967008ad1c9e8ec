#!/usr/bin/env bash
# The CUDA device check: decisive in one call of at most 9 minutes on a machine with an
# NVIDIA GPU, and never a silent pass.
#
#   bench/gpu_check.sh [OUT_DIR]        (default: $OUT, else bench/results/gpu)
#   QUICK=1 bench/gpu_check.sh          (fewer examples and steps)
#
# 1. Versions first: GPU and driver, python, numpy, cuda-bindings, NVRTC, riftco.
# 2. Where `nvidia-smi -L` lists no GPU and the backend is unavailable: "skipped", exit 0.
#    Where it lists one and the backend is unavailable (an import error, a missing NVRTC,
#    a slow cuInit): exit 2 with the reason.
# 3. smoke (<= 60 s, RIFTCO_CUDA_SYNC=1: every launch waited for, a fault names its own
#    kernel): from_numpy -> add -> matmul tiled and wide -> softmax -> embedding with a bad
#    id -> to_numpy. A failure ends the check there.
# 4. conformance on cuda:0, the CUDA tests, the training step against PyTorch CUDA eager,
#    the kernel benchmark, then a planted fault (bench/gpu_fault.py: named, fails fast,
#    no cascade). Stage limits sum to 480 s; each failure sets the exit status.
# After every stage the summary (OUT_DIR/summary.json, stages.tsv) is rewritten, so a
# call killed in a later stage still leaves the earlier stages' verdicts behind.
#
# Needs no network: where riftco is not installed, bench/gpu_shim.py makes the working
# tree importable with its entry points. Python: $PYTHON, else .venv/bin/python, else python3.
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
    echo "gpu_check: riftco is not importable and the shim could not be built"; exit 2; }
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
fi

echo "== versions"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
else
  echo "gpu: nvidia-smi not found"
fi
timeout 30 "$PY" - <<'PYEOF'
import platform, subprocess, sys
print(f"python: {sys.version.split()[0]} ({sys.executable})")
def show(label, fn):
    try:
        print(f"{label}: {fn()}")
    except Exception as exc:
        print(f"{label}: unavailable ({type(exc).__name__}: {exc})")
show("numpy", lambda: __import__("numpy").__version__)
show("cuda-bindings", lambda: __import__("importlib.metadata").metadata.version("cuda-bindings"))
def nvrtc():
    from riftco.backends.cuda.compiler import nvrtc_version
    return ".".join(map(str, nvrtc_version()))
show("nvrtc", nvrtc)
def riftco_version():
    import riftco
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except Exception:
        rev = ""
    return f"{riftco.__version__}" + (f" (git {rev})" if rev else "")
show("riftco", riftco_version)
show("machine", lambda: f"{platform.machine()} {platform.platform()}")
PYEOF

REASON=$(timeout 30 "$PY" - <<'PYEOF'
import sys
try:
    from riftco.backends.cuda.backend import availability
    ok, why = availability()
except BaseException as exc:  # riftco itself broken: say so
    ok, why = False, f"{type(exc).__name__}: {exc}"
print(why or "available")
sys.exit(0 if ok else 3)
PYEOF
)
avail=$?
[ -n "$REASON" ] || REASON="the availability probe printed nothing (exit $avail)"
GPU_LISTED=0
if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  GPU_LISTED=1
fi
if [ "$avail" -ne 0 ]; then
  if [ "$GPU_LISTED" = 1 ]; then
    echo "gpu_check: FAILED: nvidia-smi lists a GPU but the cuda backend is unavailable: $REASON"
    exit 2
  fi
  echo "no NVIDIA GPU/driver: skipped (${REASON})"
  exit 0
fi
echo "backend: available"

OUT_DIR=${1:-${OUT:-$ROOT/bench/results/gpu}}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/log.txt"
STAGES="$OUT_DIR/stages.tsv"
: > "$LOG"
printf 'stage\texit\tseconds\tlimit\n' > "$STAGES"
if [ "${QUICK:-0}" != "0" ]; then
  TARGS=(--steps 10 --configs large); CARGS=(--max-examples 5); KARGS=(--quick)
else
  TARGS=(--steps 20 --configs small,large); CARGS=(--max-examples 10); KARGS=(--quick)
fi
status=0
summarize() { timeout 15 "$PY" bench/gpu_summary.py "$OUT_DIR" >/dev/null 2>&1 || true; }
stage() {  # stage NAME SECONDS CMD...: time-limited, logged, its verdict kept at once
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "== $name: TIMED OUT after ${limit}s" | tee -a "$LOG"
  echo "== $name: exit $rc" | tee -a "$LOG"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >> "$STAGES"
  summarize
  return "$rc"
}
RIFTCO=("$PY" -c 'import sys; from riftco.cli import main; sys.exit(main())')

stage backends 20 "${RIFTCO[@]}" backends || status=1
if ! stage smoke 60 "$PY" bench/gpu_smoke.py --device cuda:0 --json "$OUT_DIR/smoke.json"; then
  echo "gpu_check: the smoke stage failed: nothing longer runs (exit 1); see $LOG"
  exit 1
fi
stage conformance 180 "${RIFTCO[@]}" conformance cuda:0 --json "$OUT_DIR/conformance.json" \
  --quiet "${CARGS[@]}" || status=1
stage cuda-tests 50 "$PY" -m pytest -q -x -p no:cacheprovider -W "ignore::DeprecationWarning" \
  tests/backends/cuda/test_cuda_backend.py || status=1
stage train 80 "$PY" bench/gpu_train.py --device cuda:0 "${TARGS[@]}" \
  --json "$OUT_DIR/gpu_train.json" || status=1
stage kernels 60 "$PY" bench/gpu_kernels.py --device cuda:0 "${KARGS[@]}" \
  --json "$OUT_DIR/gpu_kernels.json" || status=1
# Last: a planted illegal-address fault poisons this process's CUDA context on purpose.
stage fault 30 "$PY" bench/gpu_fault.py --device cuda:0 || status=1
"$PY" bench/gpu_summary.py "$OUT_DIR"
echo "gpu_check: results in $OUT_DIR (exit $status)"
exit "$status"
