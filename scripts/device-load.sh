#!/usr/bin/env bash
# ATSInfer's Fig. 13 on the device: decode TPOT over time while CPU load,
# then GPU+PCIe load, then PCIe load alone come and go, for the load-aware
# policy (the default) and the static one (--no-adapt). For each policy,
# `tandem run --timing-log` decodes synth qwen3-14b at --vram-budget 50% and,
# once its first tokens are out, build/dev_stress plays the schedule beside
# it; the run is stopped when the schedule ends. Then scripts/plot-load.py
# prints a summary per phase and policy (tok/s, its ratio to the idle
# phases, re-plans, time to the first re-plan and to settle, the issue's
# goal: >= 70% of idle speed under load, settled within 2 s) and draws
# load.png (when matplotlib is there).
#
# Environment (defaults):
#   B=build-device       the build (configured and built here, tandem and
#                        dev_stress only, when it lacks them)
#   IDLE_S=8 LOAD_S=12   seconds of each idle and each loaded phase
#   CPU_N=10             busy threads of the CPU phase
#   GPU_FRAC=0.5 PCIE_MIB=256   the GPU phase's share of the SMs, copy block
#   PHASES="..."         the whole schedule instead, dev_stress arguments
#                        (e.g. "--phase 5:none --phase 10:cpu=10 --phase 5:none")
#   POLICIES="load-aware static"
#   MODEL=/tmp/tnd/qwen3-14b.gguf   (synthesized when missing)
#   RATE=40              tok/s at most, to size -n so the run outlasts the schedule
#   DIR=$OUT/load, else /tmp/tnd/load   logs, summary and plot
# Default schedule: 4 idle + 3 loaded phases, 68 s per policy; about 3-4
# minutes in all once the model and the profile exist.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BD=${B:-build-device}
B=$BD/tandem
S=$BD/dev_stress
M=${MODEL:-/tmp/tnd/qwen3-14b.gguf}
T=$(nproc)
IDLE_S=${IDLE_S:-8}
LOAD_S=${LOAD_S:-12}
CPU_N=${CPU_N:-10}
GPU_FRAC=${GPU_FRAC:-0.5}
PCIE_MIB=${PCIE_MIB:-256}
RATE=${RATE:-40}
POLICIES=${POLICIES:-load-aware static}
PHASES=${PHASES:-"--phase $IDLE_S:none --phase $LOAD_S:cpu=$CPU_N --phase $IDLE_S:none \
--phase $LOAD_S:gpu=$GPU_FRAC,pcie=$PCIE_MIB --phase $IDLE_S:none --phase $LOAD_S:pcie=$PCIE_MIB --phase $IDLE_S:none"}
if [ -n "${OUT:-}" ]; then DIR=${DIR:-$OUT/load}; else DIR=${DIR:-/tmp/tnd/load}; fi
PROMPT="Write a long story about a lighthouse keeper who finds a message in a bottle."
mkdir -p /tmp/tnd "$DIR"
export TANDEM_CACHE=/tmp/tnd/cache
start=$(date +%s)
say() { echo "[$(( $(date +%s) - start )) s] $*"; }
die() { say "FAILED: $*"; exit 1; }
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# the schedule's length, from the arguments dev_stress will get
# shellcheck disable=SC2086
set -- $PHASES
total=0
while [ $# -gt 0 ]; do
  if [ "$1" = --phase ] && [ $# -ge 2 ]; then total=$(python3 -c "print($total + float('${2%%:*}'))") || die "bad PHASES"; shift; fi
  shift
done
python3 -c "import sys; sys.exit(0 if $total > 0 else 1)" || die "PHASES has no --phase SECONDS:LOAD"
N=$(python3 -c "import math; print(math.ceil($total * $RATE) + 64)")
CTX=$(( N + 256 ))
say "schedule: $PHASES ($total s); -n $N -c $CTX, $T threads; logs in $DIR"

# the build: tandem and dev_stress with CUDA
if [ ! -x "$B" ] || [ ! -x "$S" ]; then
  say "building $BD (tandem_cli dev_stress)"
  [ -f "$BD/CMakeCache.txt" ] || cmake -S . -B "$BD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$DIR/configure.log" 2>&1 || { tail -20 "$DIR/configure.log"; die "configure"; }
  timeout 540 cmake --build "$BD" -j"$T" --target tandem_cli dev_stress >"$DIR/build.log" 2>&1 ||
    { tail -20 "$DIR/build.log"; die "build"; }
fi
# the injector's GPU loads work here (CUDA build, a GPU), before any long run
timeout 60 "$S" --phase 0.5:gpu="$GPU_FRAC",pcie=16 >"$DIR/selfcheck.log" 2>&1 ||
  { cat "$DIR/selfcheck.log"; die "dev_stress cannot load the GPU"; }
grep "^# phase" "$DIR/selfcheck.log" | sed 's/^/  self-check: /'

if [ ! -f "$M" ]; then
  [ "$M" = /tmp/tnd/qwen3-14b.gguf ] || die "no model $M"
  say "synth qwen3-14b"
  if ! timeout 400 "$B" synth --shape qwen3-14b -o "$M.part" >"$DIR/synth.log" 2>&1 || ! mv "$M.part" "$M"; then
    tail -5 "$DIR/synth.log"; rm -f "$M.part"; die "synth"
  fi
fi
run_args=(-m "$M" --device cuda --vram-budget 50% -t "$T" --temp 0 -p "$PROMPT")
# unloaded warm-up: the profile (measured once per model and build, cached)
# is taken now, not under load, and the weights are in the page cache
say "warm-up (profiles the machine if the cache has no profile)"
timeout 400 "$B" run "${run_args[@]}" -n 16 >/dev/null 2>"$DIR/warmup.err" || { tail -5 "$DIR/warmup.err"; die "warm-up run"; }
grep generation "$DIR/warmup.err" | sed 's/^/  /'

run_pid=
stress_pid=
# shellcheck disable=SC2317 # run by the traps
cleanup() {
  [ -n "$stress_pid" ] && kill -TERM "$stress_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill -TERM "$run_pid" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

series=()
fail=0
for pol in $POLICIES; do
  case $pol in
  load-aware) extra=() ;;
  static) extra=(--no-adapt) ;;
  *) die "unknown policy '$pol' (load-aware, static)" ;;
  esac
  tl=$DIR/$pol.tsv ph=$DIR/$pol.phases
  rm -f "$tl" "$ph"
  say "$pol: tandem run -n $N ${extra[*]}"
  timeout $(( ${total%.*} + 400 )) "$B" run "${run_args[@]}" -n "$N" -c "$CTX" --timing-log "$tl" "${extra[@]}" \
    >"$DIR/$pol.out" 2>"$DIR/$pol.err" &
  run_pid=$!
  # the schedule starts with decoding: wait for the first two tokens (the
  # load takes a while)
  deadline=$(( $(date +%s) + 240 ))
  while [ "$(lines "$tl")" -lt 3 ] && kill -0 $run_pid 2>/dev/null &&
        [ "$(date +%s)" -lt $deadline ]; do
    sleep 0.2
  done
  if [ "$(lines "$tl")" -lt 3 ]; then
    tail -5 "$DIR/$pol.err"; say "$pol: no tokens (see $DIR/$pol.err)"; fail=1
    kill -TERM $run_pid 2>/dev/null; wait $run_pid 2>/dev/null; run_pid=
    continue
  fi
  # shellcheck disable=SC2086
  timeout -s TERM $(( ${total%.*} + 60 )) "$S" $PHASES >"$ph" 2>"$DIR/$pol.stress.err" &
  stress_pid=$!
  wait $stress_pid; src=$?; stress_pid=
  [ $src -eq 0 ] || { cat "$DIR/$pol.stress.err"; say "$pol: dev_stress exit $src"; fail=1; }
  grep "^# phase" "$ph" | sed "s/^/  $pol: /"
  if kill -0 $run_pid 2>/dev/null; then
    kill -TERM $run_pid 2>/dev/null
  else
    say "$pol: the run ended before the schedule: $(tail -2 "$DIR/$pol.err" | tr '\n' ' ')"
  fi
  wait $run_pid 2>/dev/null; run_pid=
  say "$pol: $(( $(lines "$tl") - 1 )) tokens logged"
  series+=(--series "$pol" "$tl" "$ph")
done

[ ${#series[@]} -gt 0 ] || die "no policy produced a log"
echo
python3 scripts/plot-load.py "${series[@]}" --goal 0.7,2 -o "$DIR/load.png" \
  --title "$(basename "$M"), --vram-budget 50%, $T threads: decode TPOT under load" | tee "$DIR/summary.md"
prc=${PIPESTATUS[0]}
case $prc in
0) ;;
3) say "no matplotlib: summary only (draw later: python3 scripts/plot-load.py ${series[*]} -o load.png)" ;;
*) say "plot-load.py exit $prc"; fail=1 ;;
esac
say "device-load: done (logs in $DIR)"
exit $fail
