#!/usr/bin/env python3
"""tandem's logits and greedy continuations against the numpy reference
(tests/ref/ref_model.py) on the default model.

For each prompt: `tandem run -m MODEL -p TEXT -n 64 --temp 0 --dump FILE`,
then the reference is run on the SAME prompt ids (taken from the dump).

1. Logits. The reference is teacher-forced on prompt + tandem's generated
   ids, so row i of both is conditioned on identical tokens. Checks per row:
   max|diff| / std(reference row) <= REL_MAX, Pearson correlation >= CORR_MIN,
   and over all rows of a prompt the mean of the first <= REL_MEAN; top-1
   equal unless the reference's margin of its argmax over tandem's argmax is
   below TIE (a near-tie).
2. Greedy. The reference's own 64-token greedy continuation must equal
   tandem's; a divergence passes only at a near-tie (the reference's margin
   of its choice over tandem's at the first differing step < TIE), and is
   reported as such.

Why these tolerances. tandem rounds every matmul input to 8-bit blocks
(Q8_0/Q8_1: 32 values, scale amax/127) for integer dot products; the
reference does float math. `ref_model.py --act-q8` emulates that rounding, and
measuring emulated vs float reference on 5 prompts x 64 rows of this model
gave: max|diff|/std up to 0.57 per row (mean over a prompt 0.16-0.25),
correlation >= 0.9979, per-logit diff std ~0.1, and argmax flips only where
the reference margin was <= 0.22 logits. Rounding to 8 bits makes the result
chaotic in float rounding order (float32 vs float64 with the same emulated
rounding differs as much as emulated vs float), so no engine doing 8-bit
activations can be held closer than that noise: the bounds sit ~2x above the
measured worst case (REL_MAX 1.0, REL_MEAN 0.4, CORR_MIN 0.995, TIE 0.5 =
~3.5 sigma of the difference of two logits). Bugs the test exists for (wrong
RoPE pairing, missing norm, wrong head mapping, off-by-one position, a broken
kernel on one layer) give correlations far below 0.99 and rel_max well above
1 (checked by running the reference with a layer dropped: see README).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "ref"))
import ref_model  # noqa: E402

REL_MAX = 1.0
REL_MEAN = 0.4
CORR_MIN = 0.995
TIE = 0.5
N_GEN = 64

PROMPTS = [
    "1, 2, 3, 4, 5,",                       # counting: no near-ties over 64 steps
    "10, 20, 30, 40,",
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n",
]


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(77)


def main():
    model = os.environ.get("TND_MODEL", os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tbin = os.environ.get("TND_BIN")
    if not os.path.exists(model):
        skip(f"{model} missing (scripts/fetch-default-model.sh)")
    if not tbin or not os.path.exists(tbin):
        skip("TND_BIN not set or missing")
    probe = subprocess.run([tbin, "run", "--help"], capture_output=True, text=True)
    if "not available" in probe.stderr or "unknown command" in probe.stderr:
        skip("this tandem has no `run` yet")

    ref = ref_model.RefModel(model)
    failures = []
    near_ties = []
    with tempfile.TemporaryDirectory() as tmp:
        for pi, text in enumerate(PROMPTS):
            dump = os.path.join(tmp, f"p{pi}.bin")
            cmd = [tbin, "run", "-m", model, "-p", text, "-n", str(N_GEN), "--temp", "0", "--dump", dump]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                failures.append(f"prompt {pi}: tandem run failed ({r.returncode}): {r.stderr[-500:]}")
                continue
            n_vocab, prompt, gen, got = ref_model.read_dump(dump)
            tag = f"prompt {pi} {text!r}"
            if n_vocab != ref.n_vocab:
                failures.append(f"{tag}: dump n_vocab {n_vocab} != {ref.n_vocab}")
                continue
            if not prompt or not gen:
                failures.append(f"{tag}: empty prompt or generation in dump")
                continue
            # A greedy dump must pick each token from its own row.
            for i, t in enumerate(gen):
                if int(np.argmax(got[i])) != t:
                    failures.append(f"{tag}: gen[{i}]={t} is not the argmax of dump row {i}")
                    break

            # 1. logits, teacher-forced on tandem's tokens
            ref.reset()
            rows = ref.eval(prompt + gen[:-1], all_logits=True)[len(prompt) - 1:]
            stats = ref_model.row_stats(rows, got, TIE)
            rel = np.array([s["rel_max"] for s in stats])
            corr = np.array([s["corr"] for s in stats])
            dstd = np.array([s["diff_std"] for s in stats])
            print(f"{tag}: {len(prompt)} prompt ids, {len(gen)} generated; "
                  f"max|d|/std max {rel.max():.3f} mean {rel.mean():.3f}; corr min {corr.min():.5f}; "
                  f"diff std mean {dstd.mean():.3f}")
            for s in stats:
                if s["rel_max"] > REL_MAX:
                    failures.append(f"{tag} row {s['row']}: max|diff|/std {s['rel_max']:.3f} > {REL_MAX}")
                if not s["corr"] >= CORR_MIN:
                    failures.append(f"{tag} row {s['row']}: correlation {s['corr']:.5f} < {CORR_MIN}")
                if s["ref_top"] != s["got_top"]:
                    if s["near_tie"]:
                        near_ties.append(f"{tag} row {s['row']}: top-1 {s['got_top']} vs reference "
                                         f"{s['ref_top']}, margin {s['margin']:.3f} < {TIE}")
                    else:
                        failures.append(f"{tag} row {s['row']}: top-1 {s['got_top']} vs reference "
                                        f"{s['ref_top']}, margin {s['margin']:.3f} >= {TIE}")
            if rel.mean() > REL_MEAN:
                failures.append(f"{tag}: mean max|diff|/std {rel.mean():.3f} > {REL_MEAN}")

            # 2. greedy continuation
            rgen, rrows = ref.greedy(prompt, len(gen))
            div = next((i for i, (a, b) in enumerate(zip(rgen, gen)) if a != b), None)
            if div is None:
                print(f"{tag}: greedy continuation identical ({len(gen)} tokens)")
            else:
                margin = float(rrows[div][rgen[div]] - rrows[div][gen[div]])
                msg = (f"{tag}: greedy diverges at step {div}: tandem {gen[div]}, reference {rgen[div]}, "
                       f"reference margin {margin:.3f}")
                if margin < TIE:
                    near_ties.append(msg + f" < {TIE} (near-tie)")
                    print("NEAR-TIE " + msg)
                else:
                    failures.append(msg + f" >= {TIE}")

    for m in near_ties:
        print("note:", m)
    for f in failures[:40]:
        print("FAIL:", f)
    n_bad = len({f.split(" ", 2)[1] for f in failures})
    print(f"{len(PROMPTS) - n_bad} passed, {n_bad} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
