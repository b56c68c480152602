#!/usr/bin/env python3
"""Sums a `tandem --trace` file per round: the round's length, then per track
(host, gpu, sm copies, copy engine, syncs) the ops by name, with their count
and total milliseconds, the largest first.

  scripts/trace-summary.py TRACE.json [TOP] [ROUNDS]

TOP: names shown per track (default 12); ROUNDS: a comma list of round
numbers to show (default all). A trace cut short (a killed run) is read up
to its last whole event."""
import json, sys, collections
if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help'):
    sys.exit(__doc__)
f = sys.argv[1]; top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
txt = open(f).read().strip()
if not txt.endswith('}'):  # cut short: close the event list
    txt = txt.rstrip(',\n') + ']}'
ev = json.loads(txt)['traceEvents']
rounds = {}
per = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0]))
for e in ev:
    if e.get('ph') != 'X' or e.get('pid') != 1: continue
    a = e.get('args', {}); r = a.get('round')
    if r is None: continue
    if e['tid'] == 6: rounds[r] = (e['name'], e['dur'] / 1e3)
    else:
        x = per[(r, e['tid'])][e['name']]; x[0] += 1; x[1] += e['dur'] / 1e3
tn = {1: 'host', 2: 'gpu', 3: 'sm', 4: 'ce', 5: 'sync'}
for r in sorted(rounds):
    name, ms = rounds[r]
    if len(sys.argv) > 3 and r not in [int(x) for x in sys.argv[3].split(',')]: continue
    print(f'== round {r}: {name} {ms:.2f} ms')
    for tid in (1, 2, 3, 4, 5):
        d = per.get((r, tid))
        if not d: continue
        tot = sum(v[1] for v in d.values())
        items = sorted(d.items(), key=lambda kv: -kv[1][1])[:top]
        print(f'  {tn[tid]} total {tot:.2f} ms: ' + '; '.join(f'{k} x{v[0]} {v[1]:.2f}' for k, v in items))
