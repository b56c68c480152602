"""bench reports what kept each resource busy (issue 25): per test, the
share of the timed runs' wall time the CPU's ops took (measured), the GPU's
ops (the perf DB's times: a model) and PCIe (weight copies timed by
events, activations at the link's bandwidth). CPU-only decode is mostly
CPU work and has no GPU or PCIe share; on SimGPU with automatic
promotions every share is a fraction and the GPU's is positive."""
import json
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()
os.environ["TANDEM_CACHE"] = os.path.join(tempfile.mkdtemp(), "cache")
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def bench(*extra):
    r = subprocess.run([tandem, "bench", "-m", model, "-p", "32", "-n", "8", "-r", "2", "-o", "json", *extra],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stderr)
        return []
    return json.loads(r.stdout)["results"]


rows = bench("-t", "2")
check(len(rows) == 2, f"CPU: two rows ({len(rows)})")
for row in rows:
    b = row.get("busy", {})
    # the CPU's ops against the round's wall time: most of it, never more
    lo = 0.3 if row["test"].startswith("tg") else 0.05
    check(b.get("cpu") is not None and lo < b["cpu"] <= 1.05, f"CPU {row['test']}: cpu busy {b.get('cpu')}")
    check(b.get("gpu_model") is None and b.get("pcie") is None, f"CPU {row['test']}: no GPU or PCIe share ({b})")

rows = bench("-t", "2", "--device", "sim", "--hw", "rtx3060-laptop", "--vram-budget", "150M")
check(len(rows) == 2, f"sim: two rows ({len(rows)})")
for row in rows:
    b = row.get("busy", {})
    ok = all(b.get(k) is not None and 0 <= b[k] <= 1.05 for k in ("cpu", "gpu_model", "pcie"))
    check(ok and b["gpu_model"] > 0, f"sim {row['test']}: shares {b}")
print(f"failures: {fails}")
sys.exit(1 if fails else 0)
