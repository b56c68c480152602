#!/usr/bin/env bash
# Benchmarks on the device (after scripts/device-test.sh built build-device):
# CPU kernels against the measured read bandwidth, synth qwen3-8b decode and
# prefill on the CPU (16 threads) and fully on the GPU (with the fraction of
# the HBM roofline), the default model on both. Prints markdown tables.
# Usage: scripts/device-bench.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-device/tandem
logs=${OUT:-build-device/logs}
mkdir -p "$logs" /tmp/tnd
T=$(nproc)
echo "## CPU matvec kernels vs read bandwidth ($T threads)"
for bw in build-device/dev_matvec_f32_bw build-device/dev_matvec_bw; do
  [ -x $bw ] && timeout 150 $bw -t 1,$T -f Q4_0,Q4_K,Q6_K,Q8_0 2>&1 | tee "$logs/$(basename $bw).log" | tail -25
done
[ -x build-device/dev_matmul_prefill ] && timeout 60 build-device/dev_matmul_prefill 2>&1 | tail -8
M8=/tmp/tnd/qwen3-8b.gguf
[ -f $M8 ] || { /usr/bin/time -f "synth: %e s" $B synth --shape qwen3-8b -o $M8 2>&1 | tail -2; }
wb=$(python3 -c "import os; print(os.path.getsize('$M8'))")
echo "## synth qwen3-8b ($((wb / 1048576)) MiB)"
$B bench -m $M8 -t $T -p 512 -n 64 -r 2 -o json | tee "$logs/q8b_cpu.json"
$B bench -m $M8 --device cuda -p 512 -n 128 -r 3 -o json | tee "$logs/q8b_gpu.json"
python3 - "$logs/q8b_gpu.json" "$wb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); wb = int(sys.argv[2])
for t in r["results"]:
    if t["test"].startswith("tg"):
        print(f"GPU decode {t['tok_per_s']:.1f} tok/s = {t['tok_per_s'] * wb / 1e9:.0f} GB/s of weights "
              f"= {100 * t['tok_per_s'] * wb / 4268e9:.1f}% of the HBM roofline (4268 GB/s measured)")
PY
if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  echo "## default model"
  $B bench -t $T -p 512 -n 128 -r 3
  $B bench --device cuda -p 512 -n 128 -r 3
fi
