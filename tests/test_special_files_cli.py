"""Special files where tandem reads a file (issue 30): /dev/zero, a FIFO
with no writer and a directory as the placement file, the hw profile, the
model, the prompt file (-f) and tokenize's text file each give a prompt,
clear error naming what the file is; oversized text inputs are refused by
size, and so is a chat input line past 16 MiB. Every call has a timeout:
before the fix several of them hung or read until memory ran out."""
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()

tmp = tempfile.mkdtemp()
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
folder = os.path.join(tmp, "dir")
os.mkdir(folder)
big = os.path.join(tmp, "big")  # sparse: sizes without the disk
with open(big, "wb") as f:
    f.truncate(65 << 20)
kinds = {"/dev/zero": "a character device", fifo: "a FIFO", folder: "a directory"}
fails = 0


def expect(args, phrase, rc=1):
    global fails
    try:
        r = subprocess.run([tandem, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        ok = r.returncode == rc and phrase in r.stderr and "error" in r.stderr
        got = f"rc={r.returncode} {r.stderr.strip()[-200:]}"
    except subprocess.TimeoutExpired:
        ok, got = False, "timed out"
    print(("ok   " if ok else "FAIL ") + " ".join(args[:1] + args[3:]) + ": " + got)
    fails += not ok


run = ["run", "-m", model, "-n", "1", "-t", "2"]
for path, kind in kinds.items():
    expect([*run, "-p", "hi", "--device", "sim", "--placement", path], f"placement file '{path}' is {kind}")
    expect(["plan", "-m", model, "--device", "sim", "--hw", "rtx3060-laptop", "--placement", path], f"placement file '{path}' is {kind}")
    expect([*run, "-p", "hi", "--device", "sim", "--hw", path], f"hw profile '{path}' is {kind}")
    expect(["run", "-m", path, "-p", "hi", "-n", "1"], f"{path} is {kind}")
    expect(["info", path], f"{path} is {kind}")
    expect([*run, "-f", path], f"prompt file '{path}' is {kind}")
    expect(["tokenize", "-m", model, "-f", path], f"text file '{path}' is {kind}")
# sizes: the caps name the limit
expect([*run, "-f", big], "may be 64.0 MiB at most")
expect([*run, "-p", "hi", "--device", "sim", "--placement", big], "may be 16.0 MiB at most")
expect([*run, "-p", "hi", "--device", "sim", "--hw", big], "may be 1.0 MiB at most")
expect(["tokenize", "-m", model, "-f", big + "x"], "cannot open")
# a prompt file with a NUL byte is not text
nul = os.path.join(tmp, "nul.txt")
with open(nul, "wb") as f:
    f.write(b"hello\0world")
expect([*run, "-f", nul], "NUL byte")
# chat reads lines from stdin: one without end is refused at 16 MiB
try:
    with open("/dev/zero", "rb") as z:
        r = subprocess.run([tandem, "chat", "-m", model, "-n", "4", "-t", "2"], stdin=z, capture_output=True,
                           text=True, errors="replace", timeout=120)
    ok = r.returncode == 1 and "longer than 16 MiB" in r.stderr
    got = f"rc={r.returncode} {r.stderr.strip()[-200:]}"
except subprocess.TimeoutExpired:
    ok, got = False, "timed out"
print(("ok   " if ok else "FAIL ") + "chat < /dev/zero: " + got)
fails += not ok
r = subprocess.run([tandem, "chat", "-m", model, "-n", "4", "-t", "2", "--temp", "0"], input="Hi\n/quit\n",
                   capture_output=True, text=True, errors="replace", timeout=300)
ok = r.returncode == 0 and r.stdout.strip() != ""
print(("ok   " if ok else "FAIL ") + f"chat with two lines: rc={r.returncode} {r.stdout.strip()[:80]!r}")
fails += not ok
# regular files still work
ok_prompt = os.path.join(tmp, "prompt.txt")
with open(ok_prompt, "w") as f:
    f.write("The capital of France is")
r = subprocess.run([tandem, *run, "-f", ok_prompt, "--temp", "0"], capture_output=True, text=True, timeout=300)
print(("ok   " if r.returncode == 0 else "FAIL ") + f"run -f a text file: rc={r.returncode} {r.stderr[-200:]}")
fails += r.returncode != 0
sys.exit(1 if fails else 0)
