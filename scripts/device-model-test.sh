#!/usr/bin/env bash
# Model-level GPU checks on the device (after scripts/device-test.sh built
# build-device): greedy continuations on the GPU against the CPU (divergence
# only at near-ties), the VRAM budget refusal, synth shapes (dense and MoE).
# Usage: scripts/device-model-test.sh [MODEL.gguf]
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-device/tandem
M=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
logs=${OUT:-build-device/logs}
mkdir -p "$logs" /tmp/tnd
fail=0
cmp_run() { # label model prompt [extra args]
  local label=$1 model=$2 prompt=$3; shift 3
  $B run -m "$model" -p "$prompt" -n 48 --temp 0 -t 16 --cpu-exact --device cpu --dump /tmp/tnd/c.bin "$@" >/tmp/tnd/c.txt 2>&1 || { echo "FAIL $label: cpu run"; tail -3 /tmp/tnd/c.txt; fail=1; return; }
  $B run -m "$model" -p "$prompt" -n 48 --temp 0 --cpu-exact --device cuda --dump /tmp/tnd/g.bin "$@" >/tmp/tnd/g.txt 2>&1 || { echo "FAIL $label: cuda run"; tail -3 /tmp/tnd/g.txt; fail=1; return; }
  python3 tests/compare_dumps.py /tmp/tnd/c.bin /tmp/tnd/g.bin --label "$label: " || fail=1
}
if [ -f "$M" ]; then
  for p in "The capital of France is" "Once upon a time, in a small village," "def fibonacci(n):" "The three laws of thermodynamics are"; do
    cmp_run "$(basename "$M") '$p'" "$M" "$p"
  done
  cmp_run "chat" "$M" "What is the capital of France?" --chat
  echo "== GPU answer:"; $B run -m "$M" -p "What is the capital of France?" --chat -n 24 --temp 0 --device cuda 2>&1 | tail -3
  echo "== budget refusal (50M for a 94 MiB model):"
  $B run -m "$M" -p hi -n 4 --device cuda --vram-budget 50M 2>&1 | tail -2
fi
for s in tiny-llama tiny-qwen3 tiny-qwen3moe; do
  $B synth --shape $s -o /tmp/tnd/$s.gguf --force >/dev/null 2>&1 || { echo "FAIL synth $s"; fail=1; continue; }
  cmp_run "$s" /tmp/tnd/$s.gguf "hello world" -b 16
done
echo "model tests: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
