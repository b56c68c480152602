#!/usr/bin/env python3
"""Compares two `tandem run --dump` files of the same prompt (e.g. CPU and
GPU, or two placements): same prompt ids, the same greedy tokens until they
diverge, and a divergence allowed only at a near-tie.

A divergence at step i is a near-tie when, in the FIRST run's logits at step i,
the token the second run chose scores within --tie of the first run's choice:
both backends then disagree only about which of two (almost) equally likely
tokens comes first, which rounding alone can decide. Before the divergence the
logits rows must agree within --max-diff (absolute), which bounds how far the
second backend's arithmetic strays. Exit 0 if both hold, 1 otherwise.
"""
import argparse
import struct
import sys

import numpy as np


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"TNDD":
        raise SystemExit(f"{path}: not a tandem dump")
    ver, nv, n_prompt, n_gen = struct.unpack_from("<4I", data, 4)
    off = 20
    prompt = np.frombuffer(data, "<i4", n_prompt, off)
    off += 4 * n_prompt
    gen = np.frombuffer(data, "<i4", n_gen, off)
    off += 4 * n_gen
    logits = np.frombuffer(data, "<f4", n_gen * nv, off).reshape(n_gen, nv)
    return prompt, gen, logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tie", type=float, default=0.25, help="near-tie logit gap (default 0.25)")
    ap.add_argument("--max-diff", type=float, default=1.0, help="largest |logit difference| allowed before divergence")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    pa, ga, la = read_dump(args.a)
    pb, gb, lb = read_dump(args.b)
    if not np.array_equal(pa, pb):
        print(f"{args.label}FAIL: prompts differ")
        return 1
    n = min(len(ga), len(gb))
    div = next((i for i in range(n) if ga[i] != gb[i]), None)
    upto = n if div is None else div + 1
    diff = float(np.abs(la[:upto] - lb[:upto]).max()) if upto else 0.0
    ok = diff <= args.max_diff
    msg = f"{args.label}{n} tokens, max |logit diff| {diff:.4f}"
    if div is None:
        msg += ", identical greedy tokens"
    else:
        gap = float(la[div, ga[div]] - la[div, gb[div]])
        near = gap <= args.tie
        ok = ok and near
        msg += f", diverge at step {div} (gap {gap:.4f} in the first run: {'near-tie' if near else 'NOT a near-tie'})"
    print(("ok   " if ok else "FAIL ") + msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
