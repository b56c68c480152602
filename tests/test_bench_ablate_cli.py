"""bench --ablate (issue 29's ablations): after each placement, the same
without one MoE mechanism at a time, as rows of their own (md: the
placement cell names what is off; json: an "ablate" field, null for the
full system); bad lists, a dense model and --batch are refused with a
message and exit 2, before anything runs."""
import json
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()
tmp = tempfile.mkdtemp()
os.environ["TANDEM_CACHE"] = os.path.join(tmp, "cache")
moe = os.path.join(tmp, "moe.gguf")
subprocess.run([tandem, "synth", "--shape", "tiny-qwen3moe", "-o", moe], check=True, capture_output=True)
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def bench(m, *extra):
    return subprocess.run([tandem, "bench", "-m", m, "-p", "16", "-n", "8", "-r", "1", "-t", "2", "--predictor", "0",
                           "--device", "sim", "--hw", "rtx3060-laptop", "--vram-budget", "114M", *extra],
                          capture_output=True, text=True, timeout=600)


r = bench(moe, "--ablate", "hot,sync", "-o", "json")
check(r.returncode == 0, f"json: exit {r.returncode} {r.stderr[-300:]}")
rows = json.loads(r.stdout)["results"] if r.returncode == 0 else []
abl = [(row["ablate"], row["test"]) for row in rows]
check(abl == [(None, "pp16"), (None, "tg8"), ("hot", "pp16"), ("hot", "tg8"), ("sync", "pp16"), ("sync", "tg8")],
      f"json: rows in order, full system first ({abl})")
check(all(row["tok_per_s"] > 0 for row in rows), "json: every row measured")

r = bench(moe, "--ablate", "all", "--placement", "static")
check(r.returncode == 0, f"md, all: exit {r.returncode} {r.stderr[-300:]}")
cells = [line.split("|")[1].strip() for line in r.stdout.splitlines() if line.startswith("| static")]
want = ["static", "static, no hot-expert table", "static, no prefetch", "static, fixed 2-expert prefetch",
        "static, synchronous copies"]
check(cells == [w for w in want for _ in (0, 1)], f"md: one pair of rows each ({cells})")

for extra, needle in [(["--ablate", "hot,warp"], "--ablate"), (["--ablate", "hot,hot"], "--ablate"),
                      (["--ablate", "hot,"], "--ablate"), (["--ablate", ""], "--ablate"),
                      (["--ablate", "hot", "--batch", "1,2"], "--batch takes no --ablate"),
                      (["--ablate", "all", "--placement", "static", "--placement", "layer"], "more than the")]:
    r = bench(moe, *extra)
    check(r.returncode == 2 and needle in r.stderr and not r.stdout,
          f"{' '.join(extra)}: exit {r.returncode}, says {r.stderr.strip()[-120:]!r}")
r = bench(model, "--ablate", "hot")
check(r.returncode == 2 and "has no experts" in r.stderr and not r.stdout,
      f"dense model: exit {r.returncode}, says {r.stderr.strip()[-120:]!r}")
print(f"failures: {fails}")
sys.exit(1 if fails else 0)
