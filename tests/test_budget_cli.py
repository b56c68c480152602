"""`--vram-budget` (issue 30): 0, a plain fraction (0.4: a share or a size?),
values past 2^64 bytes and malformed text are refused with a message that
says what to write, by `run`, `plan` and `bench` alike, with exit status 2
(bad usage) and before the model is loaded; good values keep working
(the dry run's "GPU budget" line shows the bytes they mean)."""
import os
import re
import subprocess
import sys

import cli_env

src, tandem, model = cli_env.default_model_paths()

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


extra = {"run": ["-p", "hi", "-n", "1", "--dry-run"], "plan": [], "bench": ["-p", "1", "-n", "1", "-r", "1"]}
bad = {
    "0": "0 bytes",
    "0G": "0 bytes",
    "0.4": "ambiguous",
    "1.5": "whole bytes",
    "99999999999999999999": "too large",
    "17179869184G": "too large",
    "1024T": "too large",
    "abc": "want a size",
    "": "empty budget",
    "-5G": "want a size",
    "1e9": "want a size",
    "0x10": "want a size",
    "nan": "want a size",
    "inf%": "want a size",
    "6GB7": "want a size",
    "0%": "above 0%",
    "2000%": "at most 1000%",
    "0.0000001%": "0 bytes",  # valid text; the model makes it 0 bytes (after loading)
}
for cmd in ("run", "plan", "bench"):
    for value, phrase in bad.items():
        r = subprocess.run([tandem, cmd, "-m", model, "--device", "sim", "--vram-budget", value, *extra[cmd]],
                           capture_output=True, text=True, timeout=120)
        ok = r.returncode == 2 and "--vram-budget" in r.stderr and phrase in r.stderr and r.stdout == ""
        check(ok, f"{cmd} --vram-budget '{value}': rc={r.returncode} {r.stderr.strip()[:160]}")

wbytes = None
for value, mib in (("6G", 6144.0), ("1.5GiB", 1536.0), ("4523M", 4523.0), ("314572800", 300.0), ("307200k", 300.0),
                   ("150%", None)):
    # the first run profiles the model (a minute under sanitizers; the later ones find it cached)
    r = subprocess.run([tandem, "run", "-m", model, "--device", "sim", "--vram-budget", value, *extra["run"]],
                       capture_output=True, text=True, timeout=600)
    m = re.search(r"GPU budget\s+([0-9.]+) MiB", r.stdout)
    got = float(m.group(1)) if m else None
    if mib is None:  # a share of the weight bytes
        mib = round(1.5 * os.path.getsize(model) / 1048576, 1)
        ok = got is not None and abs(got - mib) < 0.05 * mib  # the file holds a little more than the weights
    else:
        ok = got == mib
    check(r.returncode == 0 and ok, f"run --vram-budget {value}: rc={r.returncode} budget {got} MiB (want {mib})")
sys.exit(1 if fails else 0)
