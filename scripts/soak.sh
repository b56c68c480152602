#!/usr/bin/env bash
# The soak of tests/test_soak.c at full length, from the repo root:
#   scripts/soak.sh [TOKENS] [DEVICE]
# TOKENS defaults to 10000, DEVICE to cuda when a GPU is visible, else sim
# (cpu also works). Builds into build-soak (CUDA when nvcc is found) unless
# TND_BUILD names a build folder holding test_soak. Prints the tokens per
# second and the process's RSS and the GPU backend's memory, warm and at
# most; exits with the test's status (0: both stayed within 10%).
# TND_MODEL=FILE soaks another model (a `tandem synth` one where the default
# model is not at hand).
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${1:-10000}
device=${2:-}
if [ -z "$device" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=cuda; else device=sim; fi
fi
build=${TND_BUILD:-}
if [ -z "$build" ]; then
  build=build-soak
  export PATH=/usr/local/cuda/bin:$PATH
  cuda=OFF
  command -v nvcc >/dev/null 2>&1 && cuda=ON
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTND_CUDA=$cuda -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build "$build" -j"$(nproc)" --target test_soak >/dev/null
fi
[ -n "${TND_MODEL:-}" ] || [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || scripts/fetch-default-model.sh
echo "soak: $tokens tokens on $device"
TND_SRC=$PWD TND_SOAK_TOKENS=$tokens TND_SOAK_DEVICE=$device "$build/test_soak"
