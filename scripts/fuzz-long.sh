#!/usr/bin/env bash
# A long libFuzzer run of one target, outside CI (issue 30: one hour each of
# fuzz_gguf and fuzz_tokenizer): builds build-fuzz (clang, CPU only), starts
# from fuzz/corpus/<target>, runs for SECONDS at low priority, then prints
# the run's last status lines and the size of the corpus it grew (kept in
# OUT, default /tmp/tnd-fuzz-<target>; crashes land there too).
# Usage: scripts/fuzz-long.sh gguf|tokenizer SECONDS [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:?usage: scripts/fuzz-long.sh gguf|tokenizer SECONDS [OUT]}
secs=${2:?usage: scripts/fuzz-long.sh gguf|tokenizer SECONDS [OUT]}
out=${3:-/tmp/tnd-fuzz-$t}
case $t in gguf | tokenizer) ;; *) echo "unknown target '$t' (gguf or tokenizer)" >&2; exit 2 ;; esac
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTND_FUZZ=ON -DTND_CUDA=OFF \
  -DCMAKE_C_FLAGS=-O1 >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "fuzz_$t" >/dev/null
mkdir -p "$out/corpus" "$out/crashes"
cp -n fuzz/corpus/"$t"/* "$out/corpus"/ 2>/dev/null || true
seeds=$(ls "$out/corpus" | wc -l)
start=$(date -u +%FT%TZ)
rc=0
nice -n 19 build-fuzz/fuzz_"$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/crashes/" "$out/corpus" >"$out/log" 2>&1 || rc=$?
echo "fuzz_$t: started $start, ${secs} s, exit $rc"
echo "corpus: $seeds seeds -> $(ls "$out/corpus" | wc -l) inputs; findings: $(ls "$out/crashes" | wc -l)"
grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$out/log" || tail -3 "$out/log"
exit $rc
