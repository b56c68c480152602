"""tandem bench --batch (issue 27, item 4): one result row per batch size,
each carrying batch beside test and tok_per_s in the JSON; the markdown
table; the option's errors. Skips (77) without the default model."""
import json
import subprocess
import sys

from cli_env import default_model_paths

_, TANDEM, MODEL = default_model_paths()
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def bench(*args):
    return subprocess.run([TANDEM, "bench", "-m", MODEL, "-t", "2", "-r", "1", *args], capture_output=True, text=True,
                          timeout=600)


r = bench("--batch", "1,3", "-p", "8", "-n", "4", "-o", "json")
check(r.returncode == 0, f"bench --batch 1,3 -o json: rc={r.returncode} {r.stderr.strip()}")
if r.returncode == 0:
    rows = json.loads(r.stdout)["results"]
    check([x["batch"] for x in rows] == [1, 3], f"a row per batch size: {[x.get('batch') for x in rows]}")
    for x in rows:
        check(x["test"] == "pp8+tg4" and x["tok_per_s"] > 0 and x["pp_tok_per_s"] > 0 and x["tg_tok_per_s"] > 0
              and x["decode_ms_per_token"] > 0, f"batch {x['batch']}: {x}")
        # generated tokens over prefill and decode time: below the decode rate alone
        check(x["tok_per_s"] < x["tg_tok_per_s"], f"batch {x['batch']}: prefill time counted")

r = bench("--batch", "2", "-p", "4", "-n", "2")
check(r.returncode == 0 and "| batch |" in r.stdout and "| 2 | pp4+tg2 |" in r.stdout,
      f"markdown table: rc={r.returncode} {r.stdout[-300:]}")

for bad in ("0", "1,,2", "x", "1,300"):
    r = bench("--batch", bad, "-p", "4", "-n", "2")
    check(r.returncode == 2 and "--batch" in r.stderr, f"--batch {bad}: rc={r.returncode} {r.stderr.strip()}")
r = bench("--batch", "2", "-p", "4", "-n", "0")
check(r.returncode == 2 and "-n" in r.stderr, f"--batch without -n: rc={r.returncode} {r.stderr.strip()}")

print(f"{fails} failed")
sys.exit(1 if fails else 0)
