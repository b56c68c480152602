"""Block formats against an independent oracle: the `gguf` package from PyPI.

For every format gguf-py can dequantize, random blocks (random bytes with the
half-float scales forced to finite values) and edge blocks (zero, negative,
subnormal, max, inf/nan scales; all-zero and all-one quant bits) are
dequantized by both gguf-py (numpy) and our reference (via quant_tool); the
results must be bit-identical (NaN matches any NaN).

Quantizers: where gguf-py has one (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
MXFP4) our bytes must equal its bytes. For the K-quants, our blocks are
decoded by gguf-py and every element must lie within half a step of its
input (the step is bounded by the group's range, see ref_kquants.c).

Dots: our integer vec_dot (activations quantized to the vec_dot_type) must
equal sum(gguf_dequant(w) * our dequantized activations) up to float
rounding of the per-block terms and their f32 accumulation.

Exit 77 (skip) if numpy or gguf is missing.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

TOOL = os.path.join(os.environ.get("TND_BUILD", "build"), "quant_tool")
if not os.path.exists(TOOL):
    print(f"FAIL: {TOOL} not built")
    sys.exit(1)

rng = np.random.default_rng(20240611)
np.seterr(all="ignore")  # inf/nan scales are among the edge cases
failures = []

# Byte offsets of the half-float scale fields of each block (format facts).
HALVES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.MXFP4: [],
}
BLOCK_TYPES = list(HALVES)
FLOAT_TYPES = [T.F32, T.F16, T.BF16]


def tool(args, data: bytes) -> bytes:
    r = subprocess.run([TOOL] + [str(a) for a in args], input=data, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"quant_tool {args} failed: {r.stderr.decode()}")
    return r.stdout


def ours_dequant(qtype, raw: np.ndarray) -> np.ndarray:
    return np.frombuffer(tool(["dequant", int(qtype)], raw.tobytes()), dtype=np.float32)


def ours_quant(qtype, x: np.ndarray) -> np.ndarray:
    return np.frombuffer(tool(["quant", int(qtype)], x.astype(np.float32).tobytes()), dtype=np.uint8)


def as_gguf_input(qtype, raw: np.ndarray) -> np.ndarray:
    """gguf-py takes F32/F16 as typed arrays, everything else as bytes."""
    raw = raw.reshape(-1) if qtype in FLOAT_TYPES else raw
    return raw.view(np.float32) if qtype == T.F32 else raw.view(np.float16) if qtype == T.F16 else raw


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def check(name, ok, detail=""):
    if ok:
        print(f"ok   {name}")
    else:
        print(f"FAIL {name} {detail}")
        failures.append(name)


def sane_halves(n):
    """Finite halves of both signs over a wide range, subnormals included."""
    mag = 2.0 ** rng.uniform(-20, 6, n)
    sign = rng.choice([-1.0, 1.0], n)
    return (mag * sign).astype(np.float16).view(np.uint16)


EDGE_HALVES = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00,
                        0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x3555], dtype=np.uint16)


def random_blocks(qtype, n):
    bs, ts = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, ts), dtype=np.uint8)
    for off in HALVES[qtype]:
        raw[:, off:off + 2] = sane_halves(n).view(np.uint8).reshape(n, 2)
    if qtype == T.MXFP4:  # finite scales (edge_blocks has every exponent)
        raw[:, 0] = rng.integers(64, 192, n)
    return raw


def edge_blocks(qtype):
    bs, ts = GGML_QUANT_SIZES[qtype]
    rows = []
    for fill in (0x00, 0xFF, 0x55, 0xAA, 0x0F, 0xF0):
        for h in EDGE_HALVES:
            b = np.full(ts, fill, dtype=np.uint8)
            for i, off in enumerate(HALVES[qtype]):
                hv = h if i == 0 else EDGE_HALVES[(list(EDGE_HALVES).index(h) + 3) % len(EDGE_HALVES)]
                b[off:off + 2] = np.array([hv], dtype=np.uint16).view(np.uint8)
            rows.append(b)
    if qtype == T.MXFP4:  # every exponent, every nibble
        rows = []
        for e in range(256):
            b = np.empty(ts, dtype=np.uint8)
            b[0] = e
            b[1:] = (np.arange(16, dtype=np.uint8) | (np.arange(15, -1, -1, dtype=np.uint8) << 4))
            rows.append(b)
    return np.stack(rows)


# ---- dequantization, bit-exact ------------------------------------------------

for qtype in BLOCK_TYPES:
    for label, raw in (("random", random_blocks(qtype, 400)), ("edge", edge_blocks(qtype))):
        theirs = gguf.quants.dequantize(raw, qtype).reshape(-1)
        ours = ours_dequant(qtype, raw)
        eq = same_bits(ours, theirs) if ours.shape == theirs.shape else np.array([False])
        bad = np.flatnonzero(~eq)
        detail = "" if eq.all() else f"{bad.size} differ, first at {bad[0]}: ours {ours[bad[0]]!r} gguf {theirs[bad[0]]!r}"
        check(f"dequant {qtype.name} {label}", bool(eq.all()), detail)

for qtype in FLOAT_TYPES:
    elem = 4 if qtype == T.F32 else 2
    raw = rng.integers(0, 256, size=(4096 * elem,), dtype=np.uint8)
    if qtype != T.F32:  # every 16-bit pattern too
        raw = np.concatenate([raw, np.arange(65536, dtype=np.uint16).view(np.uint8)])
    theirs = gguf.quants.dequantize(as_gguf_input(qtype, raw), qtype).reshape(-1)
    ours = ours_dequant(qtype, raw)
    eq = same_bits(ours, theirs)
    check(f"dequant {qtype.name}", bool(eq.all()), f"{(~eq).sum()} differ")


# ---- quantization ---------------------------------------------------------------

def test_inputs(bs, nblocks):
    """Rows of floats: gaussian blocks at many scales plus edge blocks."""
    x = rng.standard_normal((nblocks, bs)).astype(np.float32)
    x *= (2.0 ** rng.uniform(-16, 8, (nblocks, 1))).astype(np.float32)
    edges = []
    z = np.zeros(bs, np.float32)
    edges.append(z)                                          # all zero
    edges.append(np.full(bs, 0.75, np.float32))              # constant
    edges.append(np.full(bs, -3.0, np.float32))
    e = z.copy(); e[0] = -1.0; edges.append(e)               # one value
    e = z.copy(); e[-1] = 5.0; edges.append(e)
    e = np.linspace(-1, 1, bs, dtype=np.float32); edges.append(e)
    e = (np.arange(bs) % 17 - 8).astype(np.float32) * 0.5; edges.append(e)   # ties at half steps
    e = (np.arange(bs) % 33 - 16).astype(np.float32); edges.append(e)
    e = rng.standard_normal(bs).astype(np.float32); e[3] = 4.0; e[9] = -4.0; edges.append(e)  # +/- equal extremes
    e = rng.standard_normal(bs).astype(np.float32) * 1e-6; edges.append(e)  # subnormal half scales
    e = rng.standard_normal(bs).astype(np.float32) * 1e3; edges.append(e)
    # exact rounding ties: scales of 1 (Q4_0 d = -8/-8, Q8_0 d = 127/127,
    # Q4_1 / Q5_1 d = 15/15, 31/31) with values at k + 0.5
    e = (np.arange(bs) % 16 - 8 + 0.5).astype(np.float32); e[0] = -8; edges.append(e)
    e = (np.arange(bs) % 32 - 16 + 0.5).astype(np.float32); e[0] = -16; edges.append(e)
    e = ((np.arange(bs) * 7) % 254 - 126.5).astype(np.float32); e[0] = 127; edges.append(e)
    e = (np.arange(bs) % 15 + 0.5).astype(np.float32); e[0] = 0; e[1] = 15; edges.append(e)
    e = (np.arange(bs) % 31 + 0.5).astype(np.float32); e[0] = 0; e[1] = 31; edges.append(e)
    e = np.abs(rng.standard_normal(bs)).astype(np.float32) + 2.0; edges.append(e)  # all positive
    e = -np.abs(rng.standard_normal(bs)).astype(np.float32) - 2.0; edges.append(e)  # all negative
    return np.concatenate([x, np.stack(edges)]).astype(np.float32)


for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4]:
    bs, ts = GGML_QUANT_SIZES[qtype]
    x = test_inputs(bs, 2000)
    theirs = gguf.quants.quantize(x, qtype).reshape(-1)
    ours = ours_quant(qtype, x)
    eq = ours == theirs
    bad = np.flatnonzero(~eq)
    detail = "" if eq.all() else f"{bad.size} bytes differ, first in block {bad[0] // ts}"
    check(f"quantize {qtype.name} bit-exact with gguf-py", bool(eq.all()), detail)

for qtype, np_t in ((T.F16, np.float16), (T.BF16, None)):
    bits = rng.integers(0, 2**32, size=200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), test_inputs(32, 100).reshape(-1)])
    x = x[np.isfinite(x)] if qtype == T.F16 else x
    theirs = gguf.quants.quantize(x, qtype).view(np.uint8).reshape(-1)
    ours = ours_quant(qtype, x)
    check(f"quantize {qtype.name} bit-exact with gguf-py", bool(np.array_equal(ours, theirs)),
          f"{(ours != theirs).sum()} bytes differ")

# K-quants: decoded by gguf-py, every element within half a step. The step of
# a group is at most (range + dmin) / nq + d for min/max formats and s + d for
# symmetric ones (ceil-rounded 6/4/8-bit scales over a half super-scale d).
KQ = {  # qtype: (group size, nq or qhi, asymmetric, offsets of d, dmin)
    T.Q2_K: (16, 3, True, 80, 82), T.Q4_K: (32, 15, True, 0, 2), T.Q5_K: (32, 31, True, 0, 2),
    T.Q3_K: (16, 3, False, 108, None), T.Q6_K: (16, 31, False, 208, None),
}
for qtype, (gs, nq, asym, doff, moff) in KQ.items():
    bs, ts = GGML_QUANT_SIZES[qtype]
    x = test_inputs(bs, 300)
    ours = ours_quant(qtype, x).reshape(-1, ts)
    y = gguf.quants.dequantize(ours, qtype).reshape(x.shape)
    d = ours[:, doff:doff + 2].copy().view(np.float16).astype(np.float64).reshape(-1, 1)
    xg = x.reshape(x.shape[0], -1, gs).astype(np.float64)
    mx, mn = xg.max(-1), xg.min(-1)
    if asym:
        dmin = ours[:, moff:moff + 2].copy().view(np.float16).astype(np.float64).reshape(-1, 1)
        step = (mx - np.minimum(mn, 0) + dmin) / nq + d
    else:
        step = np.maximum(np.maximum(mx, 0) / (nq + 1), np.maximum(-mn, 0) / nq) + d
    err = np.abs(y.reshape(xg.shape) - xg).max(-1)
    ok = err <= 0.5 * step * (1 + 1e-5) + 1e-30
    detail = "" if ok.all() else f"worst err/step {np.max(err / np.maximum(step, 1e-30)):.3f}"
    check(f"quantize {qtype.name} round trip within half a step (gguf-py decode)", bool(ok.all()), detail)
    rel = np.sqrt(np.mean((y[:2000] - x[:2000]) ** 2) / np.mean(x[:2000].astype(np.float64) ** 2))
    print(f"     {qtype.name} relative rms error on gaussian blocks: {rel:.4f}")


# ---- dot products -----------------------------------------------------------------

MIN_OFF = {T.Q4_1: 2, T.Q5_1: 2}
for qtype in BLOCK_TYPES + FLOAT_TYPES:
    bs, ts = GGML_QUANT_SIZES[qtype]
    worst = 0.0
    ok_all = True
    for trial in range(30):
        nb = [1, 3, 7, 8][trial % 4]
        n = nb * (bs if bs > 1 else 37)
        nbk = n // bs
        if qtype in FLOAT_TYPES or trial % 2 == 0:
            w = ours_quant(qtype, (rng.standard_normal(n) * 0.1).astype(np.float32))
        else:
            w = random_blocks(qtype, nbk).reshape(-1)
        x = rng.standard_normal(n).astype(np.float32) * np.float32(2.0 ** rng.uniform(-4, 4))
        out = np.frombuffer(tool(["dot", int(qtype), n], w.tobytes() + x.tobytes()), dtype=np.float32)
        r, a = float(out[0]), out[1:].astype(np.float64)
        wv = gguf.quants.dequantize(as_gguf_input(qtype, w.reshape(nbk, ts)), qtype).reshape(-1).astype(np.float64)
        ref = float(np.dot(wv, a))
        # Rounding of each block's terms (a few ulps of their magnitude, at most
        # sum |w a| plus the min terms) and of the f32 accumulation over blocks.
        wb = np.abs(wv).reshape(-1, bs if bs > 1 else n)
        ab = np.abs(a).reshape(wb.shape)
        mag = float(np.sum((wb + 2 * wb.max(-1, keepdims=True)) * ab))
        tol = (wb.shape[0] + 4) * 2.4e-7 * mag
        if qtype in MIN_OFF:  # q8_1.s = fp16(d * sum q) instead of sum(d_h * q)
            m = np.abs(w.reshape(nbk, ts)[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1))
            tol += float(np.sum(m * ab.sum(-1))) * 2e-3
        err = abs(r - ref)
        worst = max(worst, err / max(tol, 1e-300))
        if not err <= tol:
            ok_all = False
    check(f"vec_dot {qtype.name} vs gguf-py dequant . activations (worst err/tol {worst:.3f})", ok_all)

if failures:
    print(f"{len(failures)} failed: {', '.join(failures)}")
    sys.exit(1)
print("all passed")
