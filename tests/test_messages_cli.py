"""Messages that used to mislead (issue 30): -c past tandem's cap names the
cap (2^24) under run and plan; a prompt too long for a context already at
the model's maximum does not suggest a larger --ctx-size (below it, it
does, naming the maximum); plan -c past the model's context fails as run
does; `bench --device cuda` without a GPU and a bench whose every placement
failed print no empty table. (A model with context_length 0:
test_broken_model.py.)"""
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()

fails = 0
os.environ["TANDEM_CACHE"] = tempfile.mkdtemp()  # bench --device sim caches a perf DB


def expect(args, rc, has=(), lacks=(), stdout_empty=True):
    global fails
    r = subprocess.run([tandem, *args], capture_output=True, text=True, timeout=300)
    ok = (r.returncode == rc and all(h in r.stderr for h in has) and not any(x in r.stderr for x in lacks)
          and (not stdout_empty or r.stdout == ""))
    print(("ok   " if ok else "FAIL ") + " ".join(a if len(a) < 40 else "..." for a in args) +
          f": rc={r.returncode} {r.stderr.strip()[-250:]}" + ("" if not r.stdout or not stdout_empty else
                                                             f" stdout: {r.stdout[:200]!r}"))
    fails += not ok
    return r


for cmd in (["run", "-p", "hi"], ["plan", "--device", "sim", "--hw", "rtx3060-laptop"]):
    expect([cmd[0], "-m", model, *cmd[1:], "-c", "100000000"], 2, has=["16777216"], lacks=["positive integer"])
expect(["plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "-c", "10000"], 1, has=["exceeds the model's training context 8192"])

prompt = os.path.join(tempfile.mkdtemp(), "long.txt")
with open(prompt, "w") as f:
    f.write("word " * 9000)  # about 9000 tokens, past the model's 8192
run = ["run", "-m", model, "-f", prompt, "-n", "1", "-t", "2"]
expect([*run, "-c", "8192"], 1, has=["context length 8192, the model's maximum"], lacks=["--ctx-size"])
expect([*run, "-c", "4096"], 1, has=["larger --ctx-size, up to the model's 8192"])

bench = ["bench", "-m", model, "-p", "8", "-n", "2", "-r", "1", "-t", "2", "--no-limits"]
probe = subprocess.run([tandem, *bench, "--device", "cuda"], capture_output=True, text=True, timeout=600)
if probe.returncode == 0:
    print("skipped bench --device cuda without a GPU: this machine has one")
else:
    expect([*bench, "--device", "cuda"], 1, has=["--device cuda:"])
for fmt in ("md", "json"):
    expect([*bench, "--device", "sim", "--hw", "rtx3060-laptop", "--placement", "/nonexistent/placement.txt", "-o", fmt], 1,
           has=["cannot open placement file"])
sys.exit(1 if fails else 0)
