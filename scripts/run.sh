#!/usr/bin/env bash
# Fetches the default model if absent, builds tandem, and answers a prompt
# greedily (a 135M model wanders when sampled; pass --temp 0.8 to sample):
#   scripts/run.sh "Name the capital of France." [more tandem run options]
# It builds only the tandem command. With no GPU visible (nvidia-smi) and
# no build/ yet, a CPU-only build in build-cpu/: `tandem run` runs on the
# CPU unless told --device cuda, which needs a GPU, and the CUDA code for
# every architecture (no GPU to pick one) takes minutes on a small machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-default-model.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release)
if [ ! -f build/CMakeCache.txt ] && ! nvidia-smi >/dev/null 2>&1; then
  dir=build-cpu
  flags+=(-DTND_CUDA=OFF)
fi
if [ ! -f "$dir/CMakeCache.txt" ]; then
  echo "building tandem in $dir/ (once)..." >&2
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
fi
cmake --build "$dir" -j"$(nproc)" --target tandem_cli >/dev/null
prompt=${1:-"Name the capital of France."}
shift || true
exec "$dir/tandem" run --chat --temp 0 -p "$prompt" "$@"
