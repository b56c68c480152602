#!/usr/bin/env bash
# The test command (README): builds tandem twice (release, and ASan+UBSan)
# and runs every test in both; then the SimGPU and hybrid-executor tests
# and the batcher (submitted to from other threads) under ThreadSanitizer;
# then a short libFuzzer run of each fuzz target (TND_FUZZ_SECONDS, 30 s).
# About 50 min on a 2-core machine.
# Needs: cmake, a C compiler, clang (fuzzing), python3 with numpy and gguf;
# for tandem serve's tests libmicrohttpd, jansson, the openai package and
# chromium (scripts/setup.sh installs all of them), and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# the layering of src/ (docs/ARCHITECTURE.md): no folder includes back into itself
python3 scripts/check-includes.py
scripts/fetch-default-model.sh
# Real models of other families for the tokenizer vectors and reference checks.
scripts/fetch-gemma3.sh || echo "warning: could not fetch Gemma 3 270M; its checks will skip"
python3 scripts/make_vocab_gguf.py || echo "warning: no qwen2 vocab; its vectors will skip"

echo "== release build and tests"
# With no GPU visible the CUDA code cannot run here, only compile: sm_75, 80
# and 90 compile every branch of the __CUDA_ARCH__ guards (< 800, >= 800,
# >= 900) at 3 of the 7 builds the default list takes (cmake/cuda_arch.cmake).
# With a GPU the default policy stands: its own architecture.
arch=()
if ! nvidia-smi >/dev/null 2>&1; then arch=(-DCMAKE_CUDA_ARCHITECTURES="75-real;80-real;90-real"); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${arch[@]}" >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 1500

echo "== ASan+UBSan build and tests"
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DTND_SANITIZE=ON -DCMAKE_C_FLAGS=-O1 >/dev/null
cmake --build build-san -j"$jobs"
TND_SANITIZED=1 ctest --test-dir build-san --output-on-failure -j"$jobs" --timeout 1500

echo "== ThreadSanitizer: SimGPU, the hybrid executor, the batcher (submit from other threads)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DTND_TSAN=ON -DTND_CUDA=OFF -DCMAKE_C_FLAGS=-O1 >/dev/null
cmake --build build-tsan -j"$jobs" --target tandem_cli test_sim test_hybrid test_batcher
# TND_TSAN: every op runs ~10x slower under TSan and races do not need the
# default model, so these tests run its parts on tiny synthetic models
TND_SANITIZED=1 TND_TSAN=1 TSAN_OPTIONS=halt_on_error=1 \
  ctest --test-dir build-tsan --output-on-failure --timeout 1500 -R 'test_sim|test_hybrid$|test_hybrid_cli|test_batcher'

if command -v clang >/dev/null; then
  echo "== fuzz (short run)"
  cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTND_FUZZ=ON -DCMAKE_C_FLAGS=-O1 >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzzers
  for f in build-fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    n=$(basename "$f")
    corpus=$(mktemp -d)
    cp -r fuzz/corpus/"${n#fuzz_}"/. "$corpus"/ 2>/dev/null || true
    "$f" -max_total_time="${TND_FUZZ_SECONDS:-30}" -max_len=65536 -rss_limit_mb=2048 "$corpus" 2>&1 | tail -3
    rm -rf "$corpus"
  done
fi
echo "all tests passed"
