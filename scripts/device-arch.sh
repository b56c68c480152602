#!/usr/bin/env bash
# The CUDA architecture checks on the device machine (a GPU), from the repo
# root, in steps (a device call can run several):
#   scripts/device-arch.sh build   # three builds, side by side:
#       build        exactly as the README says (no flags: the GPU's own code)
#       build-device -DCMAKE_CUDA_ARCHITECTURES=90 (Release: the one scripts/device-test.sh uses)
#       build-sm75   -DCMAKE_CUDA_ARCHITECTURES=75 (no code for an sm_80+ GPU:
#                    the driver runs its PTX; the run-time guard must fall back)
#   scripts/device-arch.sh ops     # --version of each; test_cuda_ops of the
#       README build and of the sm_75 build (every kernel choice refuses what
#       is missing)
#   scripts/device-arch.sh models  # greedy tokens of each build's GPU run against its CPU run
#       (tests/compare_dumps.py) on the tiny synth shapes and the default model,
#       and the README build's tokens against the sm_90 build's (identical)
#   scripts/device-arch.sh speed   # synth qwen3-8b decode, all on the GPU,
#       tg128: the README and sm_90 builds twice each in turn, then sm_75
# Logs go to /tmp/tnd/arch-logs, and packed to $OUT when that is set; the
# output ends with a summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
logs=/tmp/tnd/arch-logs # packed into $OUT/arch-logs.tgz at the end (few files come back)
mkdir -p "$logs" /tmp/tnd
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
fail=0

build() {
  local jobs=$(( $(nproc) / 3 > 0 ? $(nproc) / 3 : 1 ))
  ( cmake -S . -B build >"$logs/cfg-readme.log" 2>&1 && cmake --build build -j"$jobs" >"$logs/build-readme.log" 2>&1; echo "build: $?" ) &
  ( cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1 &&
      cmake --build build-device -j"$jobs" >"$logs/build-device.log" 2>&1; echo "build-device: $?" ) &
  ( cmake -S . -B build-sm75 -DCMAKE_CUDA_ARCHITECTURES=75 >/dev/null 2>&1 &&
      cmake --build build-sm75 -j"$jobs" >"$logs/build-sm75.log" 2>&1; echo "build-sm75: $?" ) &
  wait
  grep "tandem: CUDA architectures" "$logs/cfg-readme.log"
  for b in build build-device build-sm75; do [ -x $b/tandem ] || { echo "FAIL: $b/tandem was not built"; fail=1; }; done
}

# label build model prompt [run options]: the build's GPU run against its CPU run
cmp_run() {
  local label=$1 b=$2 model=$3 prompt=$4; shift 4
  local tag=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
  $b/tandem run -m "$model" -p "$prompt" -n 32 --temp 0 --cpu-exact --device cpu --dump /tmp/tnd/c-$tag.bin "$@" \
    >/tmp/tnd/c-$tag.txt 2>&1 || { echo "FAIL $label: cpu run"; tail -3 /tmp/tnd/c-$tag.txt; fail=1; return; }
  $b/tandem run -m "$model" -p "$prompt" -n 32 --temp 0 --cpu-exact --device cuda --dump /tmp/tnd/g-$tag.bin "$@" \
    >/tmp/tnd/g-$tag.txt 2>"$logs/stderr-$tag.txt" || { echo "FAIL $label: cuda run"; tail -3 "$logs/stderr-$tag.txt"; fail=1; return; }
  python3 tests/compare_dumps.py /tmp/tnd/c-$tag.bin /tmp/tnd/g-$tag.bin --label "$label: " || fail=1
  grep -q "no sm_90 code" "$logs/stderr-$tag.txt" && echo "   ($label: the fallback warning was printed)"
}

ops() {
  for b in build build-device build-sm75; do echo "== $b/tandem --version"; $b/tandem --version; done
  for b in build build-sm75; do
    echo "== $b/test_cuda_ops"
    timeout 240 $b/test_cuda_ops >"$logs/test_cuda_ops-$b.log" 2>&1
    local rc=$?
    grep -E "^FAIL|^arch:|passed, [0-9]+ failed" "$logs/test_cuda_ops-$b.log" | head -20
    [ $rc -eq 0 ] || { echo "FAIL: $b/test_cuda_ops exit $rc"; tail -5 "$logs/test_cuda_ops-$b.log"; fail=1; }
  done
}

models() {
  for s in tiny-llama tiny-qwen3 tiny-qwen3moe; do
    [ -f /tmp/tnd/$s.gguf ] || build/tandem synth --shape $s -o /tmp/tnd/$s.gguf --force >/dev/null 2>&1
  done
  for b in build build-device build-sm75; do
    for s in tiny-llama tiny-qwen3 tiny-qwen3moe; do
      cmp_run "$b $s" $b /tmp/tnd/$s.gguf "The capital of France is" -b 16
    done
    [ -f $M ] && cmp_run "$b default model" $b $M "The capital of France is"
  done
  echo "== README build against the sm_90 build (the same tokens)"
  for s in tiny_llama tiny_qwen3 tiny_qwen3moe default_model; do
    [ -f /tmp/tnd/g-build_$s.txt ] || { echo "skipped: $s (no run)"; continue; }
    if cmp -s /tmp/tnd/g-build_$s.txt /tmp/tnd/g-build_device_$s.txt; then
      echo "identical: $s: $(head -c 120 /tmp/tnd/g-build_$s.txt | tr '\n' ' ')"
    else
      echo "FAIL: $s differs"; diff /tmp/tnd/g-build_$s.txt /tmp/tnd/g-build_device_$s.txt | head -6; fail=1
    fi
  done
}

speed() {
  local M8=/tmp/tnd/qwen3-8b.gguf
  [ -f $M8 ] || /usr/bin/time -f "synth: %e s" build/tandem synth --shape qwen3-8b -o $M8 2>&1 | tail -1
  # the README build and the sm_90 build twice each, in turn (order effects
  # show as a spread between the two rounds), then the sm_75 build's fallbacks
  for b in build build-device build build-device build-sm75; do
    echo "== $b: synth qwen3-8b, all on the GPU, tg128"
    $b/tandem bench -m $M8 --device cuda -p 0 -n 128 -r 3 2>"$logs/bench-$b.err" | tee "$logs/bench-$b.md" | tail -3
    grep -h "warning" "$logs/bench-$b.err" | head -2
  done
}

for step in "$@"; do
  case $step in
    build|ops|models|speed) $step ;;
    *) echo "usage: $0 build|ops|models|speed ..." >&2; exit 2 ;;
  esac
done
[ -n "${OUT:-}" ] && tar czf "$OUT/arch-logs.tgz" -C /tmp/tnd arch-logs
echo "SUMMARY device-arch $*: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
