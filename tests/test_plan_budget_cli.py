"""What budget `tandem plan` plans for (issue 30): it used to profile, then
print "GPU budget 4398046511104.0 MiB" (the internal "no limit"). Now plan
on SimGPU without --hw or --vram-budget stops at once, asking for one;
otherwise plan says where its budget comes from, and a layout with no
limit (run --dry-run on SimGPU alone) says "unlimited"."""
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()
os.environ["TANDEM_CACHE"] = tempfile.mkdtemp()
fails = 0


def expect(args, rc, out=(), err=()):
    global fails
    r = subprocess.run([tandem, *args], capture_output=True, text=True, timeout=300)
    ok = (r.returncode == rc and all(x in r.stdout for x in out) and all(x in r.stderr for x in err)
          and "4398046511104" not in r.stdout + r.stderr)
    print(("ok   " if ok else "FAIL ") + " ".join(args[2:]) + f": rc={r.returncode} {r.stderr.strip()[-200:]}")
    if not ok:
        print(r.stdout[-1500:])
    fails += not ok
    return r


r = expect(["plan", "-m", model, "--device", "sim"], 2, err=["--hw PROFILE", "--vram-budget"])
fails += "profiling" in r.stderr
expect(["plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop"], 0,
       out=["GPU budget: the rtx3060-laptop profile's memory", "GPU budget              6144.0 MiB"])
# --hw: predictions from its cost model, not from profiling this machine
r = expect(["plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "--vram-budget", "300%"], 0,
           out=["(--vram-budget 300%)"])
expect(["plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "--vram-budget", "1G"], 0,
       out=["GPU budget: 1024.0 MiB (--vram-budget 1G)", "GPU budget              1024.0 MiB"])
expect(["run", "-m", model, "-p", "hi", "--device", "sim", "--placement", "layer", "--dry-run"], 0,
       out=["GPU budget           unlimited"])
sys.exit(1 if fails else 0)
