#!/usr/bin/env bash
# Hybrid execution and static placement on the device (after
# scripts/device-test.sh built build-device). Sections (default: all):
#   equiv  GPU equivalence: tests/test_cuda_hybrid on the default model
#          (placements, budgets, promotions; driver memory vs the budget)
#   dense  synth qwen3-14b at 50% of its weights: layer / attention-first file /
#          layer+promote all / static, prefill 512 and 2048, decode 128 after 2048
#   moe    synth qwen3-30b-a3b at 30%: layer / static / static+promote all
# Prints markdown tables (bench) with the physical limit and the timeline
# model's prediction next to each measurement.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-device/tandem
T=$(nproc)
mkdir -p /tmp/tnd
export TANDEM_CACHE=/tmp/tnd/cache
sections=${*:-equiv dense moe}
fail=0
for s in $sections; do
case $s in
equiv)
  echo "## GPU equivalence (test_cuda_hybrid)"
  TND_SRC=. timeout 400 build-device/test_cuda_hybrid >/tmp/tnd/equiv.log 2>&1 || fail=1
  grep -E "FAIL|diverges|identical|driver" /tmp/tnd/equiv.log | sort | uniq -c | sort -rn | head -30
  ;;
dense)
  M=/tmp/tnd/qwen3-14b.gguf
  [ -f $M ] || $B synth --shape qwen3-14b -o $M 2>&1 | tail -1
  echo "## synth qwen3-14b, budget 50%, $T threads"
  timeout 240 $B profile -m $M -t $T 2>&1 | tail -14
  for run in "512 0 0" "2048 128 2048"; do
    set -- $run
    ctx=$(( $1 > $3 + $2 ? $1 : $3 + $2 ))
    python3 bench/attn_first.py $B $M 50% $ctx $1 /tmp/tnd/attn14.txt auto || fail=1
    # without promotions prefill runs half the model on the CPU: measured at 512 only
    extra=$([ $1 = 512 ] && echo "--placement static")
    timeout 300 $B bench -m $M --device cuda --vram-budget 50% -t $T -p $1 -n $2 -d $3 -r ${REPS:-2} \
      --placement layer,promote=auto --placement /tmp/tnd/attn14.txt,promote=auto \
      --placement layer,promote=all --placement static,promote=auto $extra || fail=1
  done
  ;;
moe)
  M=/tmp/tnd/qwen3-30b-a3b.gguf
  [ -f $M ] || $B synth --shape qwen3-30b-a3b -o $M 2>&1 | tail -1
  echo "## synth qwen3-30b-a3b, budget 30%, $T threads"
  timeout 240 $B profile -m $M -t $T 2>&1 | tail -14
  for run in "512 0 0" "2048 128 2048"; do
    set -- $run
    extra=$([ $1 = 512 ] && echo "--placement static")
    timeout 300 $B bench -m $M --device cuda --vram-budget 30% -t $T -p $1 -n $2 -d $3 -r ${REPS:-2} \
      --placement layer,promote=auto --placement layer,promote=all --placement static,promote=auto $extra || fail=1
  done
  ;;
esac
done
exit $fail
