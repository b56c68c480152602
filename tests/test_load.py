"""Decode speed when another process takes a core: CPU-only decode of the
default model with one busy-looping process beside it keeps at least 45% of
its speed alone (the thread pool hands a late thread's work to the others,
src/cpu/pool.c). Both measured in turn, three times each, in one run; the
medians are compared. CTest runs this test alone (RUN_SERIAL), so the
"alone" runs see no other test. Threads: 2, or the cores there are.
"""
import json
import os
import statistics
import subprocess
import sys

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ["TND_BIN"]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
THREADS = str(min(2, os.cpu_count() or 1))
MIN_SHARE = 0.45


def decode_speed():
    r = subprocess.run([BIN, "bench", "-m", MODEL, "-p", "0", "-n", "48", "-t", THREADS, "-r", "2", "-o", "json"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit("bench failed: " + r.stderr[-1000:])
    rows = [t for t in json.loads(r.stdout)["results"] if t["test"].startswith("tg")]
    return rows[0]["tok_per_s"]


def main():
    if not os.path.exists(MODEL):
        print("skipped: no default model")
        return 77
    if os.environ.get("TND_SANITIZED"):
        print("skipped: speed under the sanitizers means nothing")
        return 77
    alone, loaded = [], []
    for _ in range(3):
        alone.append(decode_speed())
        hog = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            loaded.append(decode_speed())
        finally:
            hog.kill()
            hog.wait()
    a, b = statistics.median(alone), statistics.median(loaded)
    print("alone %s tok/s, one core busy %s tok/s: %.0f%% (threads %s)"
          % (["%.1f" % x for x in alone], ["%.1f" % x for x in loaded], 100 * b / a, THREADS))
    ok = b >= MIN_SHARE * a
    print("%d passed, %d failed" % (int(ok), int(not ok)))
    if not ok:
        print("FAIL: with one core busy, decode kept %.0f%% of its speed (at least %.0f%% wanted)"
              % (100 * b / a, 100 * MIN_SHARE))
    return 0 if ok else 1


sys.exit(main())
