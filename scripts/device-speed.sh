#!/usr/bin/env bash
# The headline rows of docs/BENCHMARKS.md on the device, default options
# except the budget, with the build B (default build-device; any build of this
# tree). Sections (default: all; each skips itself when fewer than its
# seconds are left of $TND_SPEED_SECONDS, default 420):
#   cpu    synth qwen3-8b CPU only, tg64: alone, then with 10 of the cores
#          busy (busy-loop processes), the thread pool's case
#   dense  synth qwen3-14b at --vram-budget 50%, tg128: alone, then with 10
#          cores busy
#   moe    synth qwen3-30b-a3b (--moe-skew 0.5) at 30%, tg128, random tokens
#   xfer   the dynamic-transfer ablation, synth qwen3-14b at 50%: layer
#          placement, static placement, static with Algorithm 2's promotions
#          (the default), tg128 then pp2048, with bench's limit columns
#   batch  synth qwen3-30b-a3b (--moe-skew 0.5) at 40%, bench --batch
#          1,4,16,64 -p 512 -n 64: generated tokens per second over prefill
#          and decode, as llama-batched-bench counts them
# Models are generated under /tmp/tnd (kept while the machine is).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-build-device}/tandem
T=$(nproc)
mkdir -p /tmp/tnd
export TANDEM_CACHE=/tmp/tnd/cache
start=$(date +%s)
limit=${TND_SPEED_SECONDS:-420}
left() { echo $(( limit - ($(date +%s) - start) )); }
hogs=()
hogs_on() { for _ in $(seq 1 "$1"); do sh -c 'while :; do :; done' & hogs+=($!); done; }
hogs_off() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; hogs=(); }
trap hogs_off EXIT
synth() { # shape file [options]
  [ -f "$2" ] || /usr/bin/time -f "synth $1: %e s" $B synth --shape "$1" -o "$2" "${@:3}" 2>&1 | tail -1
}
tg() { # label, bench arguments...: prints the decode row
  local label=$1; shift
  local out
  out=$(timeout 200 $B bench --no-limits -p 0 "$@" 2>/tmp/tnd/bench.err | grep -E "\| tg")
  echo "$label: ${out:-FAILED $(tail -2 /tmp/tnd/bench.err | tr '\n' ' ')}"
}
for s in ${*:-cpu dense moe}; do
  case $s in
  cpu)
    [ "$(left)" -gt 120 ] || { echo "cpu: skipped (time)"; continue; }
    synth qwen3-8b /tmp/tnd/qwen3-8b.gguf
    tg "8B CPU, alone" -m /tmp/tnd/qwen3-8b.gguf -n 64 -r 2 -t $T
    hogs_on 10; tg "8B CPU, 10 cores busy" -m /tmp/tnd/qwen3-8b.gguf -n 64 -r 2 -t $T; hogs_off
    ;;
  dense)
    [ "$(left)" -gt 150 ] || { echo "dense: skipped (time)"; continue; }
    synth qwen3-14b /tmp/tnd/qwen3-14b.gguf
    tg "14B 50%, alone" -m /tmp/tnd/qwen3-14b.gguf --device cuda --vram-budget 50% -n 128 -r 2 -t $T
    hogs_on 10; tg "14B 50%, 10 cores busy" -m /tmp/tnd/qwen3-14b.gguf --device cuda --vram-budget 50% -n 64 -r 2 -t $T; hogs_off
    ;;
  moe)
    [ "$(left)" -gt 120 ] || { echo "moe: skipped (time)"; continue; }
    synth qwen3-30b-a3b /tmp/tnd/qwen3-30b-a3b.gguf --moe-skew 0.5
    tg "30B-A3B 30%, random tokens" -m /tmp/tnd/qwen3-30b-a3b.gguf --device cuda --vram-budget 30% -n 128 -r 2 -t $T --tokens random
    ;;
  xfer)
    [ "$(left)" -gt 200 ] || { echo "xfer: skipped (time)"; continue; }
    synth qwen3-14b /tmp/tnd/qwen3-14b.gguf
    for run in "-p 0 -n 128 -r 2" "-p 2048 -n 0 -r 1"; do
      timeout 300 $B bench -m /tmp/tnd/qwen3-14b.gguf --device cuda --vram-budget 50% -t $T $run \
        --placement layer,promote=none --placement static,promote=none --placement static 2>/tmp/tnd/bench.err |
        grep -E "^\||^placement|^bandwidth" || tail -3 /tmp/tnd/bench.err
    done
    ;;
  batch)
    [ "$(left)" -gt 200 ] || { echo "batch: skipped (time)"; continue; }
    synth qwen3-30b-a3b /tmp/tnd/qwen3-30b-a3b.gguf --moe-skew 0.5
    timeout $(( $(left) - 10 )) $B bench -m /tmp/tnd/qwen3-30b-a3b.gguf --device cuda --vram-budget 40% -t $T \
      --batch ${TND_SPEED_BATCH:-1,4,16,64} -p 512 -n 64 -r 1 2>/tmp/tnd/bench.err | grep -E "^\||^placement|^bandwidth" ||
      tail -3 /tmp/tnd/bench.err
    ;;
  *) echo "usage: $0 [cpu|dense|moe|xfer|batch]..." >&2; exit 2 ;;
  esac
done
echo "device-speed: $(( $(date +%s) - start )) s"
