#!/usr/bin/env bash
# MoE decode on the device machine (docs/ARCHITECTURE.md "MoE"), from the
# repo root, in steps (a device call can run several):
#   scripts/device-moe.sh build  # Release, sm_90, into build-device
#   scripts/device-moe.sh test   # tests/test_expert_prefetch on CUDA (and
#       SimGPU): experts copied a layer ahead, logits as close to the CPU's
#       as without; tests/test_cuda_graphs (graphs on and off bit-identical)
#   scripts/device-moe.sh speed  # synth qwen3-30b-a3b --moe-skew 0.5 at 30%,
#       tg128, random and text tokens, TND_EXPERT_PREFETCH=0 then the default
#   scripts/device-moe.sh presched  # the same model and budgets: tg128,
#       random and text tokens, the default then --presched, twice over;
#       then --batch 4,16,64 -p 512 -n 64 both ways (docs/DECISIONS.md,
#       "PreSched: measured, opt-in")
#   scripts/device-moe.sh streams  # dev_expert_copy: an expert's pieces on
#       one stream against three (docs/DECISIONS.md, "AsyncIO's pieces: not
#       kept")
# Synth models go to /tmp/tnd (MOE_BUDGETS, MOE_TOKENS, MOE_N override the
# speed step's budgets, token kinds and tokens). Logs go to
# ${OUT:-build-device/logs}; the output ends with a summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
export TND_BIN=$PWD/build-device/tandem # the tests make their models with tandem synth
export TANDEM_CACHE=${TANDEM_CACHE:-/tmp/tnd/cache}
logs=${OUT:-build-device/logs}
mkdir -p "$logs" /tmp/tnd
M30=/tmp/tnd/qwen3-30b-a3b.gguf
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
      for t in test_expert_prefetch test_cuda_graphs; do
        timeout 300 build-device/$t >"$logs/$t.log" 2>&1
        rc=$?
        grep -E "^(sim|cuda) |failed|passed, [0-9]+ failed|skipped" "$logs/$t.log" | head -40
        echo "$t exit $rc"
        [ $rc -eq 0 ] || fail=1
      done
      ;;
    speed)
      [ -f $M30 ] || build-device/tandem synth --shape qwen3-30b-a3b --moe-skew 0.5 -o $M30 >"$logs/synth.log" 2>&1
      for b in ${MOE_BUDGETS:-30%}; do
        for tk in ${MOE_TOKENS:-random text}; do
          for pf in 0 auto; do
            echo "== budget $b, tokens $tk, TND_EXPERT_PREFETCH=$pf"
            TND_EXPERT_PREFETCH=$pf build-device/tandem bench -m $M30 --device cuda --vram-budget "$b" -t 16 -p 0 \
              -n "${MOE_N:-128}" -r 2 --tokens "$tk" --no-limits -v 2>&1 |
              grep -E "^bench:|^\| |GPU experts|error|warn" | tee -a "$logs/speed.log"
          done
        done
      done
      ;;
    presched)
      [ -f $M30 ] || build-device/tandem synth --shape qwen3-30b-a3b --moe-skew 0.5 -o $M30 >"$logs/synth.log" 2>&1
      B="build-device/tandem bench -m $M30 --device cuda -t 16 --no-limits --predictor 0"
      for b in ${MOE_BUDGETS:-30%}; do
        for rep in 1 2; do
          for tk in ${MOE_TOKENS:-random text}; do
            for ps in "" --presched; do
              echo "== budget $b, tokens $tk, ${ps:-the balance} (round $rep)"
              $B --vram-budget "$b" -p 0 -n "${MOE_N:-128}" -r 3 --tokens "$tk" $ps 2>&1 |
                grep -E "^\| |GPU experts|error|warn" | tee -a "$logs/presched.log"
            done
          done
        done
        for ps in "" --presched; do
          echo "== budget $b, --batch 4,16,64, ${ps:-the balance}"
          timeout 300 $B --vram-budget "$b" --batch 4,16,64 -p 512 -n 64 -r 1 $ps 2>&1 |
            grep -E "^\| |error|warn" | tee -a "$logs/presched.log"
        done
      done
      ;;
    streams)
      timeout 120 build-device/dev_expert_copy 50 2>&1 | tee "$logs/expert_copy.log"
      ;;
    *) echo "unknown step $s (build, test, speed, presched, streams)"; fail=1 ;;
    esac
  done
done
echo "SUMMARY: device-moe $([ $fail -eq 0 ] && echo ok || echo FAILED)"
exit $fail
