"""JSON output escapes its strings (issue 30): `profile --json`, `bench -o
json`, `plan --json` and `info --json` with a model path, a hardware
profile (its name comes from its file name) and a placement file whose
names hold a quote, a backslash and a tab parse with Python's json, and
the strings come back unchanged."""
import json
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()

tmp = tempfile.mkdtemp()
os.environ["TANDEM_CACHE"] = os.path.join(tmp, "cache")
odd = os.path.join(tmp, 'we"ird\\dir\tx')
os.mkdir(odd)
m = os.path.join(odd, 'mo"del\\.gguf')
os.symlink(os.path.abspath(model), m)
hw = os.path.join(odd, 'g"pu\\.hw')
with open(hw, "w") as f:
    f.write("base = rtx3060-laptop\n")
pl = os.path.join(odd, 'pl"ace\\.txt')
with open(pl, "w") as f:
    f.write("blk.1?.* gpu\n")
fails = 0


def parse(args):
    global fails
    r = subprocess.run([tandem, *args], capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        print(f"FAIL {args[0]}: rc={r.returncode} invalid JSON ({e}): {r.stdout[:300]!r} {r.stderr[-300:]}")
        fails += 1
        return None
    if r.returncode != 0:
        print(f"FAIL {args[0]}: rc={r.returncode} {r.stderr[-300:]}")
        fails += 1
        return None
    return doc


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


d = parse(["profile", "--json", "-m", m, "--device", "sim", "--hw", hw, "-t", "2"])
if d:
    check(d["model"] == m and 'g"pu\\' in d["source"], f"profile --json: model {d['model']!r}, source {d['source']!r}")
d = parse(["bench", "-o", "json", "-m", m, "--device", "sim", "--hw", hw, "--placement", pl, "-p", "8", "-n", "2",
           "-r", "1", "-t", "2", "--no-limits"])
if d:
    check(d["model"] == m and d["results"] and all(x["placement"] == pl for x in d["results"]),
          f"bench -o json: model {d['model']!r}, placements {[x['placement'] for x in d['results']]}")
d = parse(["plan", "--json", "-m", m, "--device", "sim", "--hw", hw, "--vram-budget", "300%", "-t", "2"])
if d:
    check(d["model"] == m and 'g"pu\\' in d["predicted"]["source"],
          f"plan --json: model {d['model']!r}, source {d['predicted']['source']!r}")
d = parse(["plan", "--json", "-m", m, "--device", "sim", "--hw", hw, "--placement", pl, "-t", "2"])
if d:
    check(d["model"] == m and pl in d["placement"], f"plan --json --placement: placement {d['placement']!r}")
d = parse(["info", "--json", m])
if d:
    check(d["file"] == m, f"info --json: file {d['file']!r}")
sys.exit(1 if fails else 0)
