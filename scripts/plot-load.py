#!/usr/bin/env python3
"""Decode speed under load that comes and goes (ATSInfer Fig. 13;
scripts/device-load.sh): reads, per policy, the timing log of `tandem run
--timing-log` and the phase log (stdout) of the dev_stress run beside it,
prints a summary per phase, and with -o draws TPOT over time (smoothed over
--window seconds), both policies on one plot, the load phases shaded and the
re-plans marked.

  plot-load.py --series load-aware T1.tsv P1.log --series static T2.tsv P2.log [-o load.png]

Times are seconds since the series' first phase started (both logs carry
CLOCK_MONOTONIC). Token 0 (it includes the prompt) and tokens before the
first phase are left out.

Summary columns, per series and phase:
  tok/s      1000 / mean TPOT of the phase's tokens
  vs idle    that over the tok/s of all the series' `none` phases together
  TPOT +%    the mean TPOT's increase over the `none` phases'
  replans    re-plans counted during the phase
  1st replan seconds from the phase's start to its first re-plan
  settle     seconds from the phase's start until the smoothed TPOT enters
             --band (default 15%) of the phase's steady TPOT (the median over
             its second half) and stays there --hold seconds (default 1, or
             to the phase's end); it includes up to one --window of
             smoothing lag; `-` when it never does
Then, per loaded phase, how much smaller the load-aware policy's TPOT
increase is than the static one's (the paper's measure), when both series
are named `load-aware` and `static`. With --goal RATIO,SECONDS, a line per
phase says whether it met the issue's goal (loaded: >= RATIO of the idle
speed; after each change of load: settled within SECONDS); the exit status
stays 0 (the goal is a measurement to report, not a failure of the plot).

Needs matplotlib only for -o (no pandas); the summary needs nothing.
Exit status: 0; 1 on unreadable or empty logs; 3 when -o is given and
matplotlib is missing (after the summary)."""
import argparse
import bisect
import statistics
import sys


def fail(msg, code=1):
    print(f"plot-load: error: {msg}", file=sys.stderr)
    sys.exit(code)


def read_timing(path):
    """[(clock_s, ms, replans)] of tokens 1.. ; lines cut short (a run
    stopped by a signal) are skipped."""
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(f"timing log {path}: {e.strerror}")
    if not lines or lines[0].split("\t")[:5] != ["token", "t_s", "ms", "replans", "clock_s"]:
        fail(f"timing log {path}: no 'token t_s ms replans clock_s' header (from tandem run --timing-log)")
    rows = []
    for ln in lines[1:]:
        f = ln.split("\t")
        if len(f) != 5:
            continue
        try:
            tok, ms, rp, clock = int(f[0]), float(f[2]), int(f[3]), float(f[4])
        except ValueError:
            continue
        if tok > 0:
            rows.append((clock, ms, rp))
    if not rows:
        fail(f"timing log {path}: no tokens past the first")
    return rows


def read_phases(path):
    """(t0 clock, [(start, end, load)] in seconds since t0). A log without
    its end line (the injector was killed) ends its last phase at its last
    start + 1e9."""
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(f"phase log {path}: {e.strerror}")
    starts = []
    end = None
    for ln in lines:
        f = ln.split("\t")
        if ln.startswith("#") or len(f) != 4 or f[0] == "clock_s":
            continue
        try:
            clock, t = float(f[0]), float(f[1])
        except ValueError:
            continue
        if f[2] == "end":
            end = clock
        else:
            starts.append((clock, f[3]))
            if len(starts) == 1:
                t0 = clock - t  # the injector's own start
    if not starts:
        fail(f"phase log {path}: no phase lines (from dev_stress)")
    phases = []
    for i, (c, load) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else (end if end is not None else c + 1e9)
        phases.append((c - t0, stop - t0, load))
    return t0, phases


def smooth(ts, ms, window):
    """Mean TPOT over the trailing window at each token."""
    out, lo, acc = [], 0, 0.0
    for i, t in enumerate(ts):
        acc += ms[i]
        while ts[lo] <= t - window:
            acc -= ms[lo]
            lo += 1
        out.append(acc / (i - lo + 1))
    return out


def analyse(name, tpath, ppath, window, band, hold):
    t0, phases = read_phases(ppath)
    rows = [r for r in read_timing(tpath) if r[0] >= t0]
    if not rows:
        fail(f"{name}: no token after the first phase started (do the logs belong together?)")
    ts = [r[0] - t0 for r in rows]
    ms = [r[1] for r in rows]
    rp = [r[2] for r in rows]
    sm = smooth(ts, ms, window)
    idle = [m for t, m in zip(ts, ms) if any(a <= t < b and load == "none" for a, b, load in phases)]
    idle_ms = statistics.fmean(idle) if idle else None
    out = []
    for i, (a, b, load) in enumerate(phases):
        lo, hi = bisect.bisect_left(ts, a), bisect.bisect_left(ts, b)
        p = {"phase": i + 1, "load": load, "start": a, "secs": min(b, ts[-1]) - a, "tokens": hi - lo}
        if hi - lo >= 2:
            mean_ms = statistics.fmean(ms[lo:hi])
            p["tok_s"] = 1000.0 / mean_ms
            if idle_ms:
                p["vs_idle"] = idle_ms / mean_ms
                p["tpot_inc"] = mean_ms / idle_ms - 1
            before = rp[lo - 1] if lo > 0 else rp[lo]
            p["replans"] = rp[hi - 1] - before
            first = next((ts[j] for j in range(lo, hi) if rp[j] > (rp[j - 1] if j > 0 else rp[j])), None)
            p["first_replan"] = first - a if first is not None else None
            half = sm[(lo + hi) // 2:hi]
            if len(half) >= 4:
                steady = statistics.median(half)
                out_ = [abs(sm[j] - steady) > band * steady for j in range(lo, hi)]
                # the first token from which the smoothed TPOT stays in the
                # band for `hold` seconds (or to the phase's end): noise later
                # in the phase does not count as not having settled
                for j in range(lo, hi):
                    k = j
                    while k < hi and not out_[k - lo] and ts[k] - ts[j] < hold:
                        k += 1
                    if k == hi or ts[k] - ts[j] >= hold:
                        p["settle"] = ts[j] - a
                        break
        out.append(p)
    return {"name": name, "phases": phases, "ts": ts, "ms": ms, "rp": rp, "sm": sm, "stats": out,
            "idle_ms": idle_ms, "covered": ts[-1] >= phases[-1][1] - 1.0 if phases[-1][1] < 1e8 else True}


def fmt(v, f="{:.2f}"):
    return "-" if v is None else f.format(v)


def summary(series):
    print("| policy | phase | load | s | tokens | tok/s | vs idle | TPOT +% | replans | 1st replan s | settle s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in series:
        for p in s["stats"]:
            print(f"| {s['name']} | {p['phase']} | {p['load']} | {p['secs']:.1f} | {p['tokens']} | "
                  f"{fmt(p.get('tok_s'), '{:.1f}')} | {fmt(p.get('vs_idle'))} | "
                  f"{fmt(p['tpot_inc'] * 100 if 'tpot_inc' in p else None, '{:+.0f}')} | "
                  f"{p.get('replans', '-')} | {fmt(p.get('first_replan'))} | {fmt(p.get('settle'))} |")
    for s in series:
        if not s["covered"]:
            print(f"warning: {s['name']}: the run ended {s['phases'][-1][1] - s['ts'][-1]:.1f} s before the "
                  f"schedule (a stop token, or -n too small)")
    by = {s["name"]: s for s in series}
    if "load-aware" in by and "static" in by:
        la, st = by["load-aware"]["stats"], by["static"]["stats"]
        print("\nTPOT increase over idle, per loaded phase (the paper's measure: how much smaller the "
              "load-aware increase is)")
        print("| phase | load | static | load-aware | reduction |")
        print("|---|---|---|---|---|")
        for a, b in zip(la, st):
            if a["load"] == "none" or "tpot_inc" not in a or "tpot_inc" not in b:
                continue
            red = 1 - a["tpot_inc"] / b["tpot_inc"] if b["tpot_inc"] > 0 else None
            print(f"| {a['phase']} | {a['load']} | {b['tpot_inc'] * 100:+.0f}% | {a['tpot_inc'] * 100:+.0f}% | "
                  f"{fmt(red * 100 if red is not None else None, '{:.0f}%')} |")


def goal_check(series, ratio, secs):
    """The issue's done-when, per phase of each series: under load at least
    `ratio` of the idle speed; after every change of load (each phase but
    the first) settled within `secs`. Returns the number of misses."""
    misses = 0
    print(f"\ngoal: loaded phases >= {ratio:.0%} of idle speed, settled within {secs:g} s of every change")
    for s in series:
        for p in s["stats"]:
            why = []
            if p["load"] != "none" and p.get("vs_idle") is not None and p["vs_idle"] < ratio:
                why.append(f"{p['vs_idle']:.0%} of idle")
            if p["phase"] > 1 and p.get("tok_s") is not None and (p.get("settle") is None or p["settle"] > secs):
                why.append(f"settled after {p['settle']:.2f} s" if p.get("settle") is not None else "never settled")
            if p.get("tok_s") is None:
                why.append("no tokens")
            misses += bool(why)
            print(f"  {s['name']:<12} phase {p['phase']} {p['load']:<20} {'MISS: ' + ', '.join(why) if why else 'ok'}")
    return misses


def shade_color(load):
    if load == "none":
        return None
    keys = {kv.split("=")[0] for kv in load.split(",")}
    if keys == {"cpu"}:
        return "#f4a582"
    if "cpu" in keys:
        return "#c2a5cf"
    return "#92c5de"


def plot(series, path, title, window):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing: pip install matplotlib (the summary above needs nothing)", 3)
    fig, ax = plt.subplots(figsize=(11, 4.8))
    colors = ["#d6604d", "#2166ac", "#1b7837", "#762a83"]
    xmax = max(s["ts"][-1] for s in series)
    for a, b, load in series[0]["phases"]:
        b = min(b, xmax)
        c = shade_color(load)
        if c:
            ax.axvspan(a, b, color=c, alpha=0.35, lw=0)
        if b > a:
            ax.text((a + b) / 2, 1.01, load, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize=8)
    for k, s in enumerate(series):
        c = colors[k % len(colors)]
        ax.plot(s["ts"], s["ms"], ".", ms=1.5, color=c, alpha=0.25)
        ax.plot(s["ts"], s["sm"], "-", lw=1.4, color=c, label=f"{s['name']} (TPOT, {window:g} s mean)")
        marks = [j for j in range(1, len(s["rp"])) if s["rp"][j] > s["rp"][j - 1]]
        if marks:
            ax.plot([s["ts"][j] for j in marks], [s["sm"][j] for j in marks], "v", ms=5, color=c,
                    markeredgecolor="black", markeredgewidth=0.4, ls="none",
                    label=f"{s['name']}: re-plan ({s['rp'][-1] - s['rp'][0]})")
    hi = max(statistics.quantiles(s["sm"], n=100)[98] if len(s["sm"]) > 2 else max(s["sm"]) for s in series)
    ax.set_ylim(0, hi * 1.25)
    ax.set_xlim(0, xmax)
    ax.set_xlabel("time since the load schedule started (s)")
    ax.set_ylabel("decode TPOT (ms)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    if title:
        ax.set_title(title, pad=16)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", nargs=3, action="append", required=True, metavar=("NAME", "TIMING", "PHASES"),
                    help="a policy's name, its timing log and the phase log of the injector beside it")
    ap.add_argument("-o", "--output", help="PNG to write (needs matplotlib)")
    ap.add_argument("--window", type=float, default=0.5, help="smoothing window in seconds (default 0.5)")
    ap.add_argument("--band", type=float, default=0.15, help="settled: within this fraction of steady (0.15)")
    ap.add_argument("--hold", type=float, default=1.0, help="settled: staying in the band this long (1 s)")
    ap.add_argument("--title", default="")
    ap.add_argument("--goal", metavar="RATIO,SECONDS",
                    help="also check each phase: loaded >= RATIO of idle, settled within SECONDS (e.g. 0.7,2)")
    a = ap.parse_args()
    if a.window <= 0 or a.band <= 0 or a.hold <= 0:
        fail("--window, --band and --hold must be > 0", 2)
    series = [analyse(n, t, p, a.window, a.band, a.hold) for n, t, p in a.series]
    summary(series)
    if a.goal:
        try:
            ratio, secs = (float(x) for x in a.goal.split(","))
        except ValueError:
            fail("--goal needs RATIO,SECONDS (e.g. 0.7,2)", 2)
        goal_check(series, ratio, secs)
    if a.output:
        plot(series, a.output, a.title, a.window)


if __name__ == "__main__":
    main()
