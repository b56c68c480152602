"""The environment's knobs from the command line (src/config.h, issue 24):
a refused value fails `tandem run` with one line that names the variable
and the values it accepts; a tuning knob is part of the perf DB's cache
key (`tandem plan` caches a DB of its own under it, and a default run
then finds the default DB again; a knob set to its default value is the
default); `tandem --version` prints the build id and the knobs set."""
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()
fails = 0


def check(ok, what, detail=""):
    global fails
    if ok:
        print("ok  ", what)
    else:
        fails += 1
        print("FAIL", what, detail)


base = {k: v for k, v in os.environ.items() if not k.startswith("TND_")}

for var, val, accepts in (("TND_CPU_PF_DIST", "abc", "64 .. 16384"), ("TND_CUDA_MV", "bogus", "f16mma"),
                          ("TND_CPU_INT8", "no", "0 or 1")):
    r = subprocess.run([tandem, "run", "-m", model, "-p", "hi", "-n", "1"], capture_output=True, text=True,
                       env=dict(base, **{var: val}), timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if var in ln]
    check(r.returncode != 0 and len(lines) == 1 and f"{var}={val}" in lines[0] and accepts in lines[0],
          f"{var}={val}: one clear error line", r.stderr[-400:])

cache = tempfile.mkdtemp()
env = dict(base, TANDEM_CACHE=cache)
cmd = [tandem, "plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "-t", "2"]


def plan(extra):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **extra), timeout=600)
    check(r.returncode == 0, "plan %s" % extra, r.stderr[-400:])
    return r.stdout, sorted(f for f in os.listdir(cache) if f.startswith("perf-"))


out0, dbs0 = plan({})
check(len(dbs0) == 1, "a default plan caches one perf DB", str(dbs0))
out1, dbs1 = plan({"TND_CPU_PF_DIST": "512"})
check(len(dbs1) == 2, "TND_CPU_PF_DIST=512 caches a perf DB of its own", str(dbs1))
_, dbs2 = plan({"TND_CUDA_TILE_MV": "i8"})
check(len(dbs2) == 3, "TND_CUDA_TILE_MV=i8 caches another", str(dbs2))
out3, dbs3 = plan({})
check(dbs3 == dbs2 and out3 == out0, "a default run finds the default DB again", str(dbs3))
_, dbs4 = plan({"TND_CPU_PF_DIST": "3072", "TND_LOG": "1"})
check(dbs4 == dbs2, "a knob at its default, and TND_LOG, keep the default key", str(dbs4))

r = subprocess.run([tandem, "--version"], capture_output=True, text=True, env=dict(base, TND_CUDA_PDL="0"),
                   timeout=60)
check(r.returncode == 0 and "build: tandem " in r.stdout and "tuning: TND_CUDA_PDL=0" in r.stdout,
      "--version prints the build id and the knobs set", r.stdout)

print("failures:", fails)
sys.exit(1 if fails else 0)
