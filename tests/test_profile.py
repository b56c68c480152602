"""`tandem profile` (issue: profiler, cost model and static placement) on a
tiny synth MoE model: from a hardware profile's cost model and measured on
SimGPU, --json carries the bandwidths, the switch costs, the calibrations
and per slice three CPU and three GPU times (1, 512 and 2048 tokens); the
measured perf DB is cached and a later static run uses it without
profiling again, apart per CPU activation mode; bad options exit 2 with a
message."""
import json
import os
import subprocess
import sys
import tempfile

src = os.environ.get("TND_SRC", ".")
tandem = os.environ.get("TND_BIN", os.path.join(src, "build", "tandem"))
tmp = tempfile.mkdtemp()
model = os.path.join(tmp, "moe.gguf")
subprocess.run([tandem, "synth", "--shape", "tiny-qwen3moe", "-o", model], check=True, capture_output=True)
env = dict(os.environ, TANDEM_CACHE=os.path.join(tmp, "cache"), TND_LOG="2")
fails = 0


def check(ok, what, detail=""):
    global fails
    if ok:
        print("ok  ", what)
    else:
        fails += 1
        print("FAIL", what, detail)


def profile(*args):
    r = subprocess.run([tandem, "profile", "-m", model, "-t", "2", "--json", *args], capture_output=True, text=True,
                       env=env, timeout=900)
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        return r, None


def sane(j, measured):
    keys = ("b_pcie", "b_cpu", "b_hbm", "switch_latency_s", "launch_s", "decode_calibration", "switch_host_s",
            "disturbed", "tokens", "slices", "expert_popularity")
    if not j or not all(k in j for k in keys) or j["tokens"] != [1, 512, 2048]:
        return False
    if not all(j[k] > 0 for k in ("b_pcie", "b_cpu", "b_hbm")) or not isinstance(j["disturbed"], bool):
        return False
    for s in j["slices"]:
        t = s["t_cpu_s"] + s["t_gpu_s"]
        if len(t) != 6 or not all(x >= 0 for x in t) or s["bytes"] <= 0:
            return False
    # measured: CPU times of the big slices are real timings; decode calibration within its bounds
    # (tnd_perf_decode_factor: 0.2-2.0)
    if measured and not (0.2 <= j["decode_calibration"] <= 2.0 and any(s["t_cpu_s"][0] > 0 for s in j["slices"])):
        return False
    return len(j["expert_popularity"]) > 0


r, j = profile("--device", "sim", "--hw", "rtx3060-laptop")
check(r.returncode == 0 and sane(j, False), "profile from the rtx3060-laptop cost model", r.stderr[-400:])

r, j = profile("--device", "sim")
check(r.returncode == 0 and sane(j, True), "profile measured on SimGPU", r.stderr[-400:])
cache = os.path.join(tmp, "cache")
dbs = [f for f in os.listdir(cache)] if os.path.isdir(cache) else []
check(len(dbs) >= 1, "the measured perf DB is cached", str(dbs))

# a static run finds the cached DB: no profiling again
r = subprocess.run([tandem, "run", "-m", model, "--device", "sim", "--placement", "static", "-t", "2", "-n", "2",
                    "--temp", "0", "-p", "hello"], capture_output=True, text=True, errors="replace", env=env,
                   timeout=900)
check(r.returncode == 0 and "profiling this model" not in r.stderr and "perf DB:" in r.stderr,
      "a static run reuses the cached perf DB", r.stderr[-400:])

# the CPU's activation mode is part of the cache key: a DB profiled with Q8
# activations (the default) never steers an exact-mode run, and back
run_args = [tandem, "run", "-m", model, "--device", "sim", "--placement", "static", "-t", "2", "-n", "2",
            "--temp", "0", "-p", "hello"]
r = subprocess.run(run_args + ["--cpu-exact"], capture_output=True, text=True, errors="replace", env=env, timeout=900)
check(r.returncode == 0 and "profiling this model" in r.stderr and len(os.listdir(cache)) == len(dbs) + 1,
      "--cpu-exact profiles anew, into a DB of its own", r.stderr[-400:])
r = subprocess.run(run_args, capture_output=True, text=True, errors="replace", env=dict(env, TND_CPU_INT8="0"),
                   timeout=900)
check(r.returncode == 0 and "profiling this model" not in r.stderr and len(os.listdir(cache)) == len(dbs) + 1,
      "TND_CPU_INT8=0 reuses the exact mode's DB", r.stderr[-400:])

measured = [f for f in dbs if any(ln.startswith("source measured") for ln in open(os.path.join(cache, f)))]
check(len(measured) == 1, "one measured DB of the default mode", str(dbs))


def mark(suffix):
    """Appends suffix to the measured DB's source line (past any marks)."""
    for f in measured:
        path = os.path.join(cache, f)
        with open(path) as fh:
            lines = fh.read().split("\n")
        lines = [ln.split(", ")[0] + suffix if ln.startswith("source ") else ln for ln in lines]
        with open(path, "w") as fh:
            fh.write("\n".join(lines))


def sources():
    out = []
    for f in measured:
        with open(os.path.join(cache, f)) as fh:
            out += [ln for ln in fh.read().split("\n") if ln.startswith("source ")]
    return out


bench = [tandem, "bench", "-m", model, "--device", "sim", "-t", "2", "-p", "8", "-n", "2", "-r", "2",
         "--placement", "static", "--placement", "layer"]
# a DB measured while another process used the GPU is measured again by the
# next run, once: the new one replaces it (SimGPU is never shared; a second
# shared one would be marked "measured twice")
mark(", disturbed, GPU shared")
r = subprocess.run(bench, capture_output=True, text=True, errors="replace", env=env, timeout=900)
n_again = r.stderr.count("measuring it again, once")
src = sources()
check(r.returncode == 0 and n_again == 1 and len(src) == 1 and "GPU shared" not in src[0],
      "a DB measured on a shared GPU is measured again once (%d times; %s)" % (n_again, src), r.stderr[-600:])
r = subprocess.run(run_args, capture_output=True, text=True, errors="replace", env=env, timeout=900)
check(r.returncode == 0 and "measuring it again" not in r.stderr and "profiling this model" not in r.stderr,
      "the DB measured again is reused", r.stderr[-400:])

# one found shared twice is kept; a disturbed DB warns once per process,
# however many contexts load it
for suffix in (", disturbed, GPU shared, measured twice", ", disturbed"):
    mark(suffix)
    r = subprocess.run(bench, capture_output=True, text=True, errors="replace", env=env, timeout=900)
    n_warn = r.stderr.count("measured while the machine was busy")
    check(r.returncode == 0 and n_warn == 1 and "measuring it again" not in r.stderr and "profiling" not in r.stderr,
          "a perf DB marked '%s' is kept and warns once per bench (got %d)" % (suffix, n_warn), r.stderr[-600:])

for args, want in ((["--bogus"], "unknown option"), (["-t", "0"], "bad or missing value"),
                   (["--device", "tpu"], "bad or missing value")):
    r = subprocess.run([tandem, "profile", "-m", model, *args], capture_output=True, text=True, env=env, timeout=60)
    check(r.returncode == 2 and want in r.stderr, "profile " + " ".join(args) + ": exit 2", r.stderr[-300:])

print("failures:", fails)
sys.exit(1 if fails else 0)
