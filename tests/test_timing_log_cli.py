"""`tandem run --timing-log FILE`: a TSV header, then one line per generated
token (as many as the run reports), with its index, the time since the
generation started (increasing), the token's own time (positive, the step
between consecutive lines), the context's re-plan count (never decreasing)
and the monotonic clock (a fixed offset from the elapsed time, so another
process's log can be lined up with it). A file that cannot be created or
written is an error that names the option."""
import os
import re
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


tmp = tempfile.mkdtemp(prefix="tnd_tlog_")
path = os.path.join(tmp, "t.tsv")
r = subprocess.run([tandem, "run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0",
                    "--timing-log", path], capture_output=True, text=True, timeout=300)
check(r.returncode == 0, f"run --timing-log: rc={r.returncode} {r.stderr.strip()[-200:]}")
m = re.search(r"generation: (\d+) tokens", r.stderr)
n_gen = int(m.group(1)) if m else -1
check(n_gen > 1, f"run reports {n_gen} generated tokens")
lines = open(path).read().splitlines() if os.path.exists(path) else []
check(len(lines) >= 1 and lines[0] == "token\tt_s\tms\treplans\tclock_s", f"header: {lines[:1]}")
rows = []
for ln in lines[1:]:
    f = ln.split("\t")
    try:
        rows.append((int(f[0]), float(f[1]), float(f[2]), int(f[3]), float(f[4])) if len(f) == 5 else None)
    except ValueError:
        rows.append(None)
check(all(rows), f"every line has 5 numeric fields: {[ln for ln, x in zip(lines[1:], rows) if not x][:3]}")
rows = [x for x in rows if x]
check(len(rows) == n_gen, f"{len(rows)} lines for {n_gen} generated tokens")
check([x[0] for x in rows] == list(range(len(rows))), "token column counts 0, 1, ...")
check(all(b[1] > a[1] for a, b in zip(rows, rows[1:])), "t_s increases")
check(all(x[2] > 0 for x in rows), f"ms > 0 (min {min((x[2] for x in rows), default=None)})")
# the printed precision (us for t_s and clock_s, ms to 3 places) bounds the error
check(abs(rows[0][1] * 1e3 - rows[0][2]) < 0.01 if rows else False, "token 0's ms is its t_s")
check(all(abs((b[1] - a[1]) * 1e3 - b[2]) < 0.01 for a, b in zip(rows, rows[1:])), "ms is the step of t_s")
check(all(x[3] >= 0 for x in rows) and all(b[3] >= a[3] for a, b in zip(rows, rows[1:])),
      "replans never decrease")
off = [x[4] - x[1] for x in rows]
check(bool(off) and max(off) - min(off) < 1e-5, "clock_s - t_s is constant")

bad = os.path.join(tmp, "no-such-dir", "t.tsv")
r = subprocess.run([tandem, "run", "-m", model, "-p", "hi", "-n", "2", "--timing-log", bad],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 1 and "--timing-log" in r.stderr and bad in r.stderr and r.stdout == "",
      f"uncreatable file: rc={r.returncode} {r.stderr.strip()[:200]}")
if os.path.exists("/dev/full"):
    r = subprocess.run([tandem, "run", "-m", model, "-p", "hi", "-n", "2", "--timing-log", "/dev/full"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "--timing-log" in r.stderr and "cannot write" in r.stderr,
          f"unwritable file: rc={r.returncode} {r.stderr.strip()[-200:]}")
r = subprocess.run([tandem, "run", "-m", model, "-p", "hi", "--timing-log"], capture_output=True, text=True,
                   timeout=60)
check(r.returncode == 2 and "--timing-log" in r.stderr, f"missing value: rc={r.returncode}")
r = subprocess.run([tandem, "run", "--help"], capture_output=True, text=True, timeout=60)
check(r.returncode == 0 and "--timing-log FILE" in r.stdout, "run --help lists --timing-log")

for f in os.listdir(tmp):
    os.unlink(os.path.join(tmp, f))
os.rmdir(tmp)
print(f"{fails} failures")
sys.exit(1 if fails else 0)
