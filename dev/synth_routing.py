#!/usr/bin/env python3
"""Routing statistics of `tandem synth`'s MoE router, against real models.

synth builds each router row so that, for a token of topic k(v),
    logit_e ~ -skew log(1 + rank(e)) + corr T [k(v) = topic(e)] + N(0, 1.28^2)
(src/tools/synth.c, its file comment: T = 8, 16 topics of 8 experts, topic
popularity Zipf(skew)). This program draws tokens from that formula for
the qwen3-30b-a3b shape (128 experts, top 8) and prints, per setting, the
numbers a public measurement of real Qwen3-30B-A3B routing gives
(docs/ARCHITECTURE.md, "Synth routing against real routing"):
  - the share of a layer's experts that carry 90% of its routings,
  - concentration = 1 - entropy / log(n_expert) of the routing shares,
  - the most used expert's share,
  - and the top-8 popularity baseline's hit rate on held-out tokens, which
    `tandem bench` also reports on the device (a check of the formula:
    skew 0.5 / corr 0.6 gave 14.0% there with random tokens).
Usage: dev/synth_routing.py [n_tokens]   (numpy; ~10 s)
"""
import sys

import numpy as np

E, K_USED, T_GAIN, NOISE = 128, 8, 8.0, 1.28
N_TOPICS = E // K_USED


def stats(skew, corr, n_tok, seed):
    rng = np.random.default_rng(seed)
    b = -skew * np.log1p(rng.permutation(E))  # popularity ranks: a permutation per layer
    b -= b.mean()
    topic_of = rng.permutation(E) % N_TOPICS
    p = np.arange(1, N_TOPICS + 1.0) ** -skew
    k = rng.choice(N_TOPICS, size=n_tok, p=p / p.sum())
    lg = b + corr * T_GAIN * (topic_of[None, :] == k[:, None]) + rng.normal(0, NOISE, (n_tok, E))
    top = np.argsort(-lg, axis=1)[:, :K_USED]
    cnt = np.bincount(top.ravel(), minlength=E).astype(float)
    share = np.sort(cnt)[::-1] / cnt.sum()
    hot90 = (np.searchsorted(np.cumsum(share), 0.9) + 1) / E
    nz = share[share > 0]
    conc = 1 + (nz * np.log(nz)).sum() / np.log(E)
    half = n_tok // 2  # popularity from the first half, hits on the second
    pop = set(np.argsort(-np.bincount(top[:half].ravel(), minlength=E))[:K_USED])
    hit = np.mean([len(pop & set(r)) / K_USED for r in top[half:]])
    return hot90, conc, share[0], hit


def main():
    n_tok = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    print("| --moe-skew | --moe-corr | experts for 90% | concentration | top expert | popularity top-8 hit |")
    print("|---:|---:|---:|---:|---:|---:|")
    for skew in (0.0, 0.25, 0.5, 0.75, 1.0):
        for corr in (0.3, 0.6):
            m = np.mean([stats(skew, corr, n_tok, s) for s in range(4)], axis=0)  # 4 layers' draws
            print(f"| {skew} | {corr} | {m[0] * 100:.0f}% | {m[1]:.3f} | {m[2] * 100:.1f}% | {m[3] * 100:.1f}% |")


if __name__ == "__main__":
    main()
