#!/usr/bin/env bash
# GPU checks, run on the device machine from the repo root (one command):
#   scripts/device-test.sh
# Builds with nvcc (Release, sm_90), runs tests/test_cuda_ops (every kernel
# against the CPU reference on odd shapes, and the VRAM budget against
# cudaMemGetInfo), tests/test_cuda_fused (the recipe's fused ops, also
# under memcheck), tests/test_cuda_hybrid (greedy continuations of the
# default model on the GPU and in hybrid placements against the CPU; needs
# models/, see README), the rest of ctest, the matvec bench (the default
# launch of every type, validated, and the tiled Q4_K rows), and (time
# permitting) compute-sanitizer memcheck over the tile layouts' kernels
# (test_cuda_q4kt), the prefill's dequant (test_cuda_dequant),
# test_cuda_q6kt, then test_cuda_ops. Full logs go
# to $OUT (or build-device/logs); the output ends with a summary.
# TND_NO_SANITIZER=1 skips the memcheck pass. Exit status: 0 if the CUDA
# tests passed (test_cuda_hybrid may skip, without models/) and the bench's
# validation passed, and test_cuda_fused passed.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
logs=${OUT:-build-device/logs}
mkdir -p "$logs"
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv >"$logs/gpu.txt" 2>&1
cat "$logs/gpu.txt"

echo "== configure + build ($jobs jobs)"
if ! cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/configure.log" 2>&1; then
  tail -40 "$logs/configure.log"; echo "SUMMARY: configure failed"; exit 1
fi
if ! cmake --build build-device -j"$jobs" >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -40; echo "SUMMARY: build failed"; exit 1
fi
[ -x build-device/test_cuda_ops ] || { echo "SUMMARY: test_cuda_ops was not built"; exit 1; }
echo "built in $(elapsed) s"

echo "== test_cuda_ops"
timeout 300 build-device/test_cuda_ops >"$logs/test_cuda_ops.log" 2>&1
rc_cuda=$?
grep -E "^FAIL" "$logs/test_cuda_ops.log" | head -80
grep -vE "^(ok|FAIL) " "$logs/test_cuda_ops.log" | tail -20
echo "test_cuda_ops exit $rc_cuda after $(elapsed) s"

echo "== test_cuda_fused (the recipe's fused norm+rope and add+norm; plain, then under memcheck)"
timeout 120 build-device/test_cuda_fused >"$logs/test_cuda_fused.log" 2>&1
rc_fused=$?
grep -E "^FAIL" "$logs/test_cuda_fused.log" | head -40
grep -E "graphs:|passed, [0-9]+ failed" "$logs/test_cuda_fused.log" | tail -2
if [ -z "${TND_NO_SANITIZER:-}" ] && command -v compute-sanitizer >/dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 build-device/test_cuda_fused \
    >"$logs/sanitizer-fused.log" 2>&1
  echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$logs/sanitizer-fused.log" | tail -1)"
fi
echo "test_cuda_fused exit $rc_fused after $(elapsed) s"

echo "== test_cuda_hybrid (greedy agreement with the CPU)"
timeout 300 env TND_SRC="$PWD" TND_BIN="$PWD/build-device/tandem" TND_BUILD="$PWD/build-device" \
  build-device/test_cuda_hybrid >"$logs/test_cuda_hybrid.log" 2>&1
rc_hybrid=$?
grep -E "^FAIL" "$logs/test_cuda_hybrid.log" | head -20
grep -E "GPU runs identical|passed, [0-9]+ failed|skip" "$logs/test_cuda_hybrid.log" | tail -3
echo "test_cuda_hybrid exit $rc_hybrid after $(elapsed) s"

echo "== matvec bench"
timeout 240 build-device/dev_cuda_matvec_bench 30 --i8 >"$logs/bench.log" 2>&1
rc_bench=$?
sed -n '/^summary/,$p' "$logs/bench.log"
[ $rc_bench -eq 0 ] || { grep -E "MISMATCH|failed" "$logs/bench.log" | head -20; tail -5 "$logs/bench.log"; }
echo "bench exit $rc_bench after $(elapsed) s"

echo "== rest of ctest (python oracles need the gguf package and models/, absent on a bare device)"
(cd build-device && timeout 150 ctest -E 'test_cuda_ops|test_cuda_fused|test_cuda_hybrid' -j"$jobs" --timeout 120) >"$logs/ctest.log" 2>&1
rc_ctest=$?
grep -E "tests passed|tests failed|\*\*\*Failed|Not Run|Skipped" "$logs/ctest.log" | head -20

# memcheck: first the kernels over the tile layouts (the Q4_K rings' bulk
# copies and mbarriers; the decode default) and the dequant's shared-memory
# staging, then the other kernels, time permitting
san() { # name, seconds, test binary
  local name=$1 secs=$2 bin=$3
  echo "== compute-sanitizer memcheck on $bin (up to $secs s)"
  timeout "$secs" compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "build-device/$bin" \
    >"$logs/sanitizer-$name.log" 2>&1
  local rc=$?
  grep -E "ERROR SUMMARY|Invalid|out of bounds|passed, " "$logs/sanitizer-$name.log" | head -30
  [ $rc -eq 124 ] && rc="timed out (partial log)"
  rc_san="${rc_san}${rc_san:+; }$name: $rc"
}
rc_san=
left=$(( 480 - $(elapsed) ))
if [ -z "${TND_NO_SANITIZER:-}" ] && command -v compute-sanitizer >/dev/null && [ $left -gt 90 ]; then
  san q4kt $((left - 30)) test_cuda_q4kt
  left=$(( 480 - $(elapsed) ))
  [ $left -gt 90 ] && san dequant $((left - 30)) test_cuda_dequant
  left=$(( 480 - $(elapsed) ))
  [ $left -gt 90 ] && san q6kt $((left - 30)) test_cuda_q6kt
  left=$(( 480 - $(elapsed) ))
  [ $left -gt 90 ] && san ops $((left - 30)) test_cuda_ops
fi
rc_san=${rc_san:-skipped}

{
  echo "SUMMARY after $(elapsed) s:"
  echo "  test_cuda_ops: exit $rc_cuda ($(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/test_cuda_ops.log" | tail -1))"
  echo "  test_cuda_fused: exit $rc_fused ($(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/test_cuda_fused.log" | tail -1))"
  echo "  test_cuda_hybrid: exit $rc_hybrid ($(grep -E 'GPU runs identical' "$logs/test_cuda_hybrid.log" | tail -1); $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/test_cuda_hybrid.log" | tail -1))"
  echo "  matvec bench:  exit $rc_bench; $(grep -E '^validation' "$logs/bench.log" | tail -1)"
  echo "  other ctest:   exit $rc_ctest ($(grep -E 'tests passed' "$logs/ctest.log" | tail -1))"
  echo "  sanitizer:     $rc_san"
} | tee "$logs/summary.txt"
[ $rc_cuda -eq 0 ] && [ $rc_fused -eq 0 ] && { [ $rc_hybrid -eq 0 ] || [ $rc_hybrid -eq 77 ]; } && [ $rc_bench -eq 0 ]
