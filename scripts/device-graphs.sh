#!/usr/bin/env bash
# CUDA graphs (TND_CUDA_GRAPHS, docs/ARCHITECTURE.md "CUDA graphs") on the
# device machine, from the repo root, in steps (a device call can run several):
#   scripts/device-graphs.sh build  # Release, sm_90, into build-device
#   scripts/device-graphs.sh test   # tests/test_cuda_graphs: graphs on and off
#       bit-identical (GPU alone, hybrid, plan changes, batched rounds) and
#       the host syncs / launches / graph launches per decode token
#   scripts/device-graphs.sh speed  # synth qwen3-8b tg128 all on the GPU and
#       at a 50% budget, and --batch 4, with TND_CUDA_GRAPHS=0 then 1, bench -v
# Logs go to ${OUT:-build-device/logs}; the output ends with a summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
export TND_BIN=$PWD/build-device/tandem # test_cuda_graphs makes its models with tandem synth
logs=${OUT:-build-device/logs}
mkdir -p "$logs" /tmp/tnd
M8=/tmp/tnd/qwen3-8b.gguf
fail=0

for step in "${@:-build test speed}"; do
  for s in $step; do
    case $s in
    build)
      cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/configure.log" 2>&1 &&
        cmake --build build-device -j"$(nproc)" >"$logs/build.log" 2>&1 ||
        { grep -E "error|Error" "$logs/build.log" | head -20; echo "FAIL: build"; fail=1; }
      ;;
    test)
      timeout 300 build-device/test_cuda_graphs >"$logs/test_cuda_graphs.log" 2>&1
      rc=$?
      grep -E "^  |per decode token|^FAIL|passed, [0-9]+ failed|warn|skipped" "$logs/test_cuda_graphs.log" | head -80
      echo "test_cuda_graphs exit $rc"
      [ $rc -eq 0 ] || fail=1
      ;;
    speed)
      [ -f $M8 ] || build-device/tandem synth --shape qwen3-8b -o $M8 >"$logs/synth.log" 2>&1
      for g in 0 1; do
        echo "== TND_CUDA_GRAPHS=$g"
        for args in "--placement gpu -p 0 -n 128 -r 3" "--vram-budget 50% -p 0 -n 128 -r 2" "-p 16 -n 64 -r 2 --batch 4"; do
          # shellcheck disable=SC2086
          TND_CUDA_GRAPHS=$g build-device/tandem bench -m $M8 --device cuda --no-limits -v $args 2>&1 |
            grep -E "^bench:|^\| |error|warn" | tee -a "$logs/speed.log"
        done
      done
      ;;
    *) echo "unknown step $s (build, test, speed)"; fail=1 ;;
    esac
  done
done
echo "SUMMARY: device-graphs $([ $fail -eq 0 ] && echo ok || echo FAILED)"
exit $fail
