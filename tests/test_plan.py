"""`tandem plan --device sim --hw PROFILE --vram-budget X --json` (static
placement, issue: profiler and static placement): for every model at hand
(the default model, Gemma 3, tiny synth models of three architectures
including MoE) and budgets from 1 MiB to three times the weights, the JSON
has budget_bytes, gpu_bytes and slices (name, bytes, backend), gpu_bytes
never exceeds the budget, the GPU slices' bytes fit in gpu_bytes, the host
pins the weights in place only when the CPU holds about half of them, and
the SVG picture is well-formed XML. Both hardware profiles of the paper."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

src = os.environ.get("TND_SRC", ".")
tandem = os.environ.get("TND_BIN", os.path.join(src, "build", "tandem"))
tmp = tempfile.mkdtemp()
models = [os.path.join(src, "models", f) for f in ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")]
models = [m for m in models if os.path.exists(m)]
for shape in ("tiny-llama", "tiny-qwen3", "tiny-qwen3moe"):
    out = os.path.join(tmp, shape + ".gguf")
    subprocess.run([tandem, "synth", "--shape", shape, "-o", out], check=True, capture_output=True)
    models.append(out)

fails = 0
checked = 0
split_seen = 0
for model in models:
    wbytes = os.path.getsize(model)
    for hw in ("rtx3060-laptop", "rtx4090-desktop"):
        budgets = ["1M", "10%", "30%", "50%", "100%", "150%", "300%", str(wbytes // 3 + 12345)]
        if "moe" in model:  # around the fixed GPU needs (~110 MiB): experts split between the sides
            budgets += ["118M", "124M", "130M"]
        for budget in budgets:
            for placement in ("static", "layer"):
                svg = os.path.join(tmp, "p.svg")
                r = subprocess.run([tandem, "plan", "-m", model, "--device", "sim", "--hw", hw, "--vram-budget", budget,
                                    "--placement", placement, "-c", "1024", "--json", "--svg", svg],
                                   capture_output=True, text=True, timeout=600)
                what = f"{os.path.basename(model)} {hw} {budget} {placement}"
                if r.returncode != 0:
                    fails += 1
                    print("FAIL", what, r.returncode, r.stderr[-300:])
                    continue
                j = json.loads(r.stdout)
                ok = all(k in j for k in ("budget_bytes", "gpu_bytes", "slices")) and j["budget_bytes"] > 0
                ok = ok and j["gpu_bytes"] <= j["budget_bytes"]
                ok = ok and all({"name", "bytes", "backend"} <= set(s) for s in j["slices"])
                ok = ok and all(s["backend"] in ("cpu", "gpu", "promote", "both") for s in j["slices"])
                on_gpu = sum(s["bytes"] for s in j["slices"] if s["backend"] in ("gpu", "both"))
                ok = ok and on_gpu <= j["gpu_bytes"]
                ok = ok and len(j["slices"]) > 0
                # split expert tensors: one entry per expert, the experts of a tensor sum to its bytes
                per = {}
                for s in j["slices"]:
                    if s["name"].endswith("]"):
                        base = s["name"][:s["name"].rindex("[")]
                        per.setdefault(base, []).append(s)
                for base, ex in per.items():
                    split_seen += 1
                    ok = ok and len(ex) > 1 and len({e["bytes"] for e in ex}) == 1
                    ok = ok and {e["backend"] for e in ex} >= {"gpu"} and len({e["backend"] for e in ex}) == 2
                # the host's pinning: the weights in place (all of them pinned) only when the
                # CPU's share (a split expert tensor's whole: the store keeps it whole) is about
                # half of them or more, else a store of that share
                host = j.get("host", {})
                total = sum(s["bytes"] for s in j["slices"])
                cpu = sum(s["bytes"] for s in j["slices"] if s["backend"] in ("cpu", "promote") and
                          not s["name"].endswith("]"))
                cpu += sum(sum(e["bytes"] for e in ex) for ex in per.values())
                ok = ok and isinstance(host.get("weights_in_place"), bool)
                if host.get("weights_in_place"):
                    ok = ok and host["pinned"] >= total and 2 * cpu >= 0.9 * total
                elif j["gpu_bytes"] > 0:
                    ok = ok and host.get("pinned", -1) >= cpu and 2 * cpu <= 1.1 * total
                for e in j.get("experts", []):
                    ok = ok and 0 <= e["gpu"] <= e["n_expert"] and 0 <= e["gpu_routing_share"] <= 1
                try:
                    root = ET.parse(svg).getroot()
                    ok = ok and root.tag.endswith("svg")
                except ET.ParseError as e:
                    ok = False
                    print("bad svg:", e)
                checked += 1
                if not ok:
                    fails += 1
                    print("FAIL", what, j.get("budget_bytes"), j.get("gpu_bytes"))
if split_seen == 0:
    fails += 1
    print("FAIL: no plan split an expert tensor")
print(f"{checked} plans checked ({split_seen} split expert tensors), {fails} failures")
sys.exit(1 if fails else 0)
