#!/usr/bin/env bash
# Fetches the default model if absent, builds tandem, and answers a prompt
# greedily (a 135M model wanders when sampled; pass --temp 0.8 to sample):
#   scripts/run.sh "Name the capital of France." [more tandem run options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-default-model.sh
if [ ! -x build/tandem ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j"$(nproc)" >/dev/null
prompt=${1:-"Name the capital of France."}
shift || true
exec build/tandem run --chat --temp 0 -p "$prompt" "$@"
