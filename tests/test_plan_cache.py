"""`tandem plan` places the same on a first run (no perf DB: built, then
cached) and on a cached run (issue 30: the cache kept 7 digits, and the
knapsack broke near-ties between alike layers differently). Each case gets
a fresh, empty cache directory through XDG_CACHE_HOME."""
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()

fails = 0
for budget in ("50%", "200%", "250%"):
    env = dict(os.environ)
    env.pop("TANDEM_CACHE", None)
    env["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    cmd = [tandem, "plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "--vram-budget", budget,
           "-t", "2"]
    outs = []
    for run in ("first", "cached"):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    if budget != "50%":  # 50%: too small for the GPU's fixed needs, no perf DB
        cached = os.listdir(os.path.join(env["XDG_CACHE_HOME"], "tandem"))
        assert any(f.startswith("perf-") for f in cached), cached
    if outs[0] != outs[1]:
        fails += 1
        print(f"FAIL {budget}: first and cached plans differ\n--- first:\n{outs[0]}\n--- cached:\n{outs[1]}")
    else:
        print(f"ok {budget}")
sys.exit(1 if fails else 0)
