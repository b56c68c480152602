#!/usr/bin/env python3
"""Writes a hand-made tensor placement for `--placement FILE`: attention
(q, k, v, output weights and the KV cache) of every layer on the GPU, then
FFN tensors from the last layer backwards while they fit; the rest on the
CPU. It is the "attention on the GPU, FFN split" placement of the hybrid
execution benchmarks, computed for one model, budget and context.

usage: bench/attn_first.py TANDEM MODEL BUDGET CTX BATCH OUT [PROMOTE]
  (BUDGET as tandem takes it: 4523M, 50%; PROMOTE as --promote, whose slots
  take room too)"""
import json
import re
import subprocess
import sys

tandem, model, budget, ctx, batch, out = sys.argv[1:7]
promote = sys.argv[7] if len(sys.argv) > 7 else "none"
base = ["plan", "-m", model, "--vram-budget", budget, "-c", ctx, "-b", batch, "--promote", promote, "--json"]
# the GPU's fixed needs (activations, scratch, norms): the plan with no weights there
fixed = json.loads(subprocess.run([tandem, *base, "--placement", "cpu"], check=True, capture_output=True,
                                  text=True).stdout)
room = fixed["budget_bytes"] - fixed["gpu_bytes"]
rnd = lambda b: (b + 255) // 256 * 256  # noqa: E731  (the layout's alignment)
layer = lambda s: int(s["name"].split(".")[1])  # noqa: E731
attn = [s for s in fixed["slices"] if ".attn_" in s["name"] and s["backend"] != "both"]
ffn = [s for s in fixed["slices"] if ".ffn_" in s["name"] and s["backend"] != "both" and "norm" not in s["name"]]


def write(room):
    lines, used = [], 0
    for kv in fixed["kv"]:
        used += kv["bytes"]
        lines.append(f"blk.{kv['layer']}.kv gpu")
    for s in attn:
        used += rnd(s["bytes"])
        lines.append(f"{s['name']} gpu")
    if used > room:
        sys.exit(f"attention alone ({used >> 20} MiB) does not fit the {room >> 20} MiB left for weights")
    for s in sorted(ffn, key=lambda s: -layer(s)):
        if used + rnd(s["bytes"]) <= room:
            used += rnd(s["bytes"])
            lines.append(f"{s['name']} gpu")
    with open(out, "w") as f:
        f.write(f"# attention + KV on the GPU, FFN from the last layer while it fits: {used >> 20} of {room >> 20} MiB\n")
        f.write("\n".join(lines) + "\n")
    return len(lines), used


# GPU matmuls need more scratch than the CPU placement's: shrink until the plan fits
for _ in range(6):
    n, used = write(room)
    r = subprocess.run([tandem, *base, "--placement", out], capture_output=True, text=True)
    if r.returncode == 0:
        print(f"{out}: {n} GPU entries, {used >> 20} MiB of weights and KV caches")
        sys.exit(0)
    m = re.search(r"needs ([0-9.]+) MiB.*budget is ([0-9.]+) MiB", r.stderr)
    if not m:
        sys.exit(r.stderr)
    room -= int((float(m.group(1)) - float(m.group(2)) + 1) * 1048576)
sys.exit("could not fit the placement")
