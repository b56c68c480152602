"""`--trace FILE.json` (run, bench): the rounds as Chrome/Perfetto trace
events. The file is one JSON object whose "traceEvents" every event has
ph, ts, pid and tid; complete ("X") events have a duration >= 0; every
track an X event uses is named by "M" metadata; a hybrid run on SimGPU
fills the host, GPU, SM copy, copy engine, sync and round tracks, and the
plan's predicted rounds (a second process) match the measured rounds one
for one. Tracing changes no token; TND_TRACE's table still prints beside
it; bench writes one file per placement; an unwritable path is an error."""
import json
import os
import subprocess
import sys
import tempfile

import cli_env

src, tandem, model = cli_env.default_model_paths()
fails = 0


def check(ok, what):
    global fails
    if not ok:
        fails += 1
        print("FAIL:", what)


def run(cmd, *args, env=None):
    r = subprocess.run([tandem, cmd, "-m", model, "-t", "2", *args], capture_output=True, text=True, timeout=900,
                       env=env)
    return r.returncode, r.stdout, r.stderr


def validate(path, what):
    """The file's events, after checking their structure (None if unreadable)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{what}: {path} does not load: {e}")
        return None
    check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), f"{what}: no traceEvents list")
    events = doc.get("traceEvents", [])
    named_threads, named_procs, used = set(), set(), set()
    for e in events:
        for k in ("ph", "ts", "pid", "tid"):
            check(k in e, f"{what}: event without {k}: {e}")
        if e.get("ph") == "X":
            check(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"{what}: X event duration: {e}")
            check(isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, f"{what}: X event ts: {e}")
            check(isinstance(e.get("name"), str) and e["name"], f"{what}: X event without a name: {e}")
            used.add((e["pid"], e["tid"]))
        elif e.get("ph") == "M":
            check(e.get("name") in ("process_name", "thread_name") and e.get("args", {}).get("name"),
                  f"{what}: metadata event: {e}")
            (named_threads if e.get("name") == "thread_name" else named_procs).add(
                (e["pid"], e["tid"]) if e.get("name") == "thread_name" else e["pid"])
        else:
            check(False, f"{what}: unexpected phase {e.get('ph')}")
    for pt in used:
        check(pt in named_threads, f"{what}: track {pt} has no thread_name")
        check(pt[0] in named_procs, f"{what}: process {pt[0]} has no process_name")
    return events


def tracks(events):
    """{(pid, thread name): number of X events}"""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    out = {}
    for e in events:
        if e["ph"] == "X":
            k = (e["pid"], names.get((e["pid"], e["tid"]), "?"))
            out[k] = out.get(k, 0) + 1
    return out


with tempfile.TemporaryDirectory() as tmp:
    prompt = ["-p", "The three primary colors are", "-n", "6", "--temp", "0", "-c", "128", "-b", "8"]
    hybrid = ["--device", "sim", "--hw", "rtx3060-laptop", "--placement", "random:3", "--promote", "all"]
    rc, ref, err = run("run", *prompt, *hybrid)
    check(rc == 0, f"run without --trace: {err[-400:]}")

    path = os.path.join(tmp, "run.json")
    env = dict(os.environ, TND_TRACE="2")
    rc, out, err = run("run", *prompt, *hybrid, "--trace", path, env=env)
    check(rc == 0, f"run --trace: {err[-400:]}")
    check(out == ref, "--trace changed the output")
    check("trace (host time" in err, "TND_TRACE=2's table is missing beside --trace")
    ev = validate(path, "run sim") or []
    t = tracks(ev)
    print("sim tracks:", t)
    for frag in ("host thread", "GPU compute stream: ops", "SM copies", "copy engine", "syncs"):
        check(any(frag in k[1] and n > 0 for k, n in t.items()), f"sim: no events on the '{frag}' track")
    rounds = [n for k, n in t.items() if k == (1, "rounds")]
    predicted = [n for k, n in t.items() if k[0] == 2]
    # a prefill chunk or more, then a decode step per generated token but the last
    check(rounds and rounds[0] >= 6, f"measured rounds: {rounds}")
    check(predicted == rounds, f"predicted rounds {predicted} against measured {rounds}")

    path = os.path.join(tmp, "cpu.json")
    rc, out, err = run("run", *prompt, "--device", "cpu", "--trace", path)
    check(rc == 0, f"run --device cpu --trace: {err[-400:]}")
    ev = validate(path, "run cpu") or []
    t = tracks(ev)
    check(any("host thread" in k[1] for k in t) and not any("GPU compute" in k[1] or "copy engine" in k[1] for k in t),
          f"cpu tracks: {t}")

    base = os.path.join(tmp, "bench.json")
    rc, out, err = run("bench", "-p", "16", "-n", "4", "-r", "1", "--no-limits", "--device", "sim", "--hw",
                       "rtx3060-laptop", "--placement", "layer", "--placement", "random:4,promote=all", "--trace", base)
    check(rc == 0, f"bench --trace: {err[-400:]}")
    for k in (1, 2):
        p = os.path.join(tmp, f"bench-{k}.json")
        check(os.path.exists(p), f"bench wrote no {p}")
        if os.path.exists(p):
            validate(p, f"bench placement {k}")

    # --batch: a trace per batch size; a batched round of one token per sequence is a decode step
    base = os.path.join(tmp, "batch.json")
    rc, out, err = run("bench", "-p", "8", "-n", "3", "-r", "1", "--no-limits", "--device", "sim", "--batch", "1,2",
                       "--trace", base)
    check(rc == 0, f"bench --batch --trace: {err[-400:]}")
    for k in (1, 2):
        p = os.path.join(tmp, f"batch-{k}.json")
        ev = validate(p, f"bench batch {k}") if os.path.exists(p) else None
        check(ev is not None, f"bench --batch wrote no {p}")
        names = [e["name"] for e in ev or [] if e.get("pid") == 1 and e.get("tid") == 6]
        check(any(n.startswith("prefill") for n in names) and any(n.startswith("decode") and f"({k} tokens)" in n
                                                                 for n in names), f"batch {k} rounds: {names}")

    rc, out, err = run("run", *prompt, "--trace", os.path.join(tmp, "no", "such", "dir.json"))
    check(rc == 1 and "--trace" in err and "cannot write" in err, f"unwritable trace path: rc {rc}: {err[-300:]}")

print("ok" if not fails else f"{fails} failures")
sys.exit(1 if fails else 0)
