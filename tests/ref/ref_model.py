#!/usr/bin/env python3
"""Independent numpy reference forward pass for GGUF language models.

Written from the published architecture descriptions and the GGUF format, with
no code shared with tandem: every weight is dequantized by the PyPI package
`gguf` (gguf.quants.dequantize), and the math is plain numpy in float32
(--f64 for float64). It is slow but simple, and meant to be read.

Architectures: llama (incl. tied embeddings: token_embd is the output matrix
when output.weight is absent, as in SmolLM2), mistral (= llama), qwen2 (q/k/v
biases), qwen3 (per-head q/k RMSNorm), gemma3 (scaled embeddings, GELU-tanh,
post-attention/post-FFN norms, sliding-window layers with their own RoPE base,
per-head q/k norms), gemma2 (also soft-capping).

RoPE: GGUF llama files have q/k rows permuted by the converter so that
rotation pairs are adjacent dims (2i, 2i+1) ("normal"); qwen2/qwen3/gemma
rotate dims (i, i + n_rot/2) ("NeoX").

Usage (standalone, for debugging a forward pass):

    python3 tests/ref/ref_model.py MODEL --ids 1 2 3 -n 16
        prints the greedy continuation's ids (one line) and, with -v, each
        step's top-5 logits and decoded text.
    python3 tests/ref/ref_model.py MODEL --prompt "The capital of France is" -n 16 -v
        tokenizes with a small built-in tokenizer (BPE/SPM, good enough for
        plain prose; tandem's tokenizer is the real one) — prints the ids used.
    --dump FILE writes the same binary layout as `tandem run --dump` (magic
        TNDD, u32 version=1, n_vocab, n_prompt, n_gen, int32 prompt ids,
        int32 gen ids, float32 logits[n_gen][n_vocab]) so the two files can be
        compared with tests/ref/compare_dump.py-style code.
    --layers N   only run the first N layers (to bisect a mismatch).

As a library:

    m = RefModel(path)
    rows = m.eval(ids)            # logits (n_vocab,) of the last token
    ids, logits = m.greedy(prompt_ids, n)
"""

import argparse
import math
import struct
import sys

import numpy as np

try:
    import gguf
    from gguf import quants as gguf_quants
except ImportError:  # pragma: no cover
    gguf = None


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


class RefModel:
    """A GGUF model held as dequantized numpy arrays plus a KV cache."""

    def __init__(self, path, dtype=np.float32, n_layers=None, verbose=False, act_q8=False):
        if gguf is None:
            raise RuntimeError("the PyPI package 'gguf' is required")
        self.dtype = dtype
        # act_q8: round matmul inputs to 8-bit blocks the way an integer-dot
        # engine does (Q8_0/Q8_1: 32 values, d = amax/127 stored as fp16;
        # Q8_K: 256 values, float d) — to measure how far that alone moves
        # the logits, which is what tandem's tolerance is based on.
        self.act_q8 = act_q8
        self.act_block = {}   # weight name -> activation block size (0: float)
        r = gguf.GGUFReader(path)
        self.reader = r
        arch = _field(r, "general.architecture")
        self.arch = arch
        if arch not in ("llama", "mistral", "qwen2", "qwen3", "gemma3", "gemma2", "gemma"):
            raise RuntimeError(f"ref_model: unsupported architecture {arch!r}")

        def hp(key, default=None):
            return _field(r, f"{arch}.{key}", default)

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count"))
        self.n_head = int(hp("attention.head_count"))
        n_head_kv = hp("attention.head_count_kv", self.n_head)
        self.n_head_kv = int(n_head_kv)
        self.eps = float(hp("attention.layer_norm_rms_epsilon", 1e-6))
        self.n_ctx_train = int(hp("context_length", 2048))
        self.head_dim_k = int(hp("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(hp("attention.value_length", self.head_dim_k))
        self.n_rot = int(hp("rope.dimension_count", self.head_dim_k))
        self.rope_base = float(hp("rope.freq_base", 10000.0))
        scale_type = hp("rope.scaling.type")
        factor = hp("rope.scaling.factor")
        # Linear position scaling (positions divided by the factor).
        self.rope_pos_scale = 1.0
        if scale_type in ("linear",) and factor:
            self.rope_pos_scale = 1.0 / float(factor)
        self.neox = arch in ("qwen2", "qwen3", "gemma3", "gemma2", "gemma")
        self.is_gemma = arch.startswith("gemma")
        self.final_softcap = float(hp("final_logit_softcapping", 0.0) or 0.0)
        self.attn_softcap = float(hp("attn_logit_softcapping", 0.0) or 0.0)
        if arch == "gemma3":
            # Gemma 3 soft-caps neither attention nor final logits.
            self.final_softcap = 0.0
            self.attn_softcap = 0.0

        # Sliding-window attention (gemma2/gemma3): which layers are local,
        # the window, and the local layers' RoPE base.
        self.swa_window = int(hp("attention.sliding_window", 0) or 0)
        self.swa_layers = [False] * self.n_layer
        self.rope_base_swa = self.rope_base
        if arch == "gemma3" and self.swa_window:
            # Five local layers then one global (published Gemma 3 layout);
            # local layers use RoPE base 10000, global ones the file's base.
            pattern = int(hp("attention.sliding_window_pattern", 6) or 6)
            self.swa_layers = [(il % pattern) < (pattern - 1) for il in range(self.n_layer)]
            self.rope_base_swa = 10000.0
        elif arch == "gemma2" and self.swa_window:
            self.swa_layers = [(il % 2) == 0 for il in range(self.n_layer)]
        # Query scale: 1/sqrt(query_pre_attn_scalar) for gemma, where GGUF
        # does not store it the head size is used (true for the small models).
        self.q_scale = 1.0 / math.sqrt(self.head_dim_k)

        self.tensors = {t.name: t for t in r.tensors}
        if n_layers is not None:
            self.n_layer = min(self.n_layer, n_layers)

        self.tok_embd = self._get("token_embd.weight")       # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.out_norm = self._get("output_norm.weight")      # (n_embd,)
        if "output.weight" in self.tensors:
            self.output = self._get("output.weight")         # (n_vocab, n_embd)
        else:
            self.output = self.tok_embd                      # tied embeddings
        self.rope_freq_factors = None
        if "rope_freqs.weight" in self.tensors:
            self.rope_freq_factors = self._get("rope_freqs.weight").astype(np.float64)

        self.layers = []
        for il in range(self.n_layer):
            p = f"blk.{il}."
            L = {}
            for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                         "attn_q_norm", "attn_k_norm", "post_attention_norm",
                         "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"):
                if p + name + ".weight" in self.tensors:
                    L[name] = self._get(p + name + ".weight")
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                if p + name + ".bias" in self.tensors:
                    L[name + ".bias"] = self._get(p + name + ".bias")
            for need in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                         "ffn_norm", "ffn_up", "ffn_down"):
                if need not in L:
                    raise RuntimeError(f"ref_model: missing tensor {p}{need}.weight")
            self.layers.append(L)
        if verbose:
            print(f"ref_model: {arch}, {self.n_layer} layers, n_embd {self.n_embd}, "
                  f"heads {self.n_head}/{self.n_head_kv}, head_dim {self.head_dim_k}, "
                  f"n_rot {self.n_rot}, rope base {self.rope_base}, vocab {self.n_vocab}",
                  file=sys.stderr)
        self.reset()

    # -- weights ------------------------------------------------------------

    def _get(self, name):
        t = self.tensors[name]
        shape = tuple(int(x) for x in reversed(list(t.shape)))  # numpy order: (rows, ne0)
        a = gguf_quants.dequantize(t.data, t.tensor_type)
        tname = t.tensor_type.name
        if tname in ("F32", "F16", "BF16", "F64"):
            self.act_block[name] = 0
        elif tname.endswith("_K"):
            self.act_block[name] = 256
        else:
            self.act_block[name] = 32
        return np.ascontiguousarray(np.reshape(a, shape), dtype=self.dtype)

    # -- state --------------------------------------------------------------

    def reset(self):
        """Empties the KV cache."""
        self.n_past = 0
        cap = 256
        self.k_cache = [np.zeros((self.n_head_kv, cap, self.head_dim_k), self.dtype)
                        for _ in range(self.n_layer)]
        self.v_cache = [np.zeros((self.n_head_kv, cap, self.head_dim_v), self.dtype)
                        for _ in range(self.n_layer)]

    def _grow(self, need):
        cap = self.k_cache[0].shape[1]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        for il in range(self.n_layer):
            for cache in (self.k_cache, self.v_cache):
                old = cache[il]
                new = np.zeros((old.shape[0], cap, old.shape[2]), self.dtype)
                new[:, :old.shape[1]] = old
                cache[il] = new

    # -- ops ----------------------------------------------------------------

    def _mm(self, x, L, name):
        """x (T, n_in) times weight name (n_out, n_in) transposed."""
        w = L[name] if isinstance(L, dict) else L
        full = f"{self._cur_prefix}{name}.weight" if isinstance(L, dict) else name
        if self.act_q8:
            blk = self.act_block.get(full, 0)
            if blk and x.shape[-1] % blk == 0:
                x = _quant_act(x, blk)
        return x @ w.T

    def _rmsnorm(self, x, w):
        # x (..., n); w (n,). Mean of squares in float64 for a stable reference.
        x64 = x.astype(np.float64)
        ms = np.mean(x64 * x64, axis=-1, keepdims=True)
        return (x64 / np.sqrt(ms + self.eps) * w).astype(self.dtype)

    def _rope(self, x, pos, base):
        # x (T, H, D); pos (T,) absolute positions. Rotates the first n_rot dims.
        n_rot = self.n_rot
        half = n_rot // 2
        inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
        if self.rope_freq_factors is not None:
            inv = inv / self.rope_freq_factors[:half]
        ang = (pos.astype(np.float64) * self.rope_pos_scale)[:, None] * inv[None, :]  # (T, half)
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.astype(np.float64).copy()
        if self.neox:
            a = out[..., :half].copy()
            b = out[..., half:n_rot].copy()
        else:
            a = out[..., 0:n_rot:2].copy()
            b = out[..., 1:n_rot:2].copy()
        ra = a * cos - b * sin
        rb = a * sin + b * cos
        if self.neox:
            out[..., :half] = ra
            out[..., half:n_rot] = rb
        else:
            out[..., 0:n_rot:2] = ra
            out[..., 1:n_rot:2] = rb
        return out.astype(self.dtype)

    @staticmethod
    def _gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    @staticmethod
    def _silu(x):
        return x / (1.0 + np.exp(-x))

    # -- forward ------------------------------------------------------------

    def eval(self, ids, all_logits=False):
        """Appends tokens to the cache; returns the logits of the last token
        (n_vocab,) or, with all_logits, of every token (T, n_vocab)."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        if T == 0:
            raise ValueError("eval: no tokens")
        if ids.min() < 0 or ids.max() >= self.n_vocab:
            raise ValueError("eval: token id out of range")
        pos0 = self.n_past
        self._grow(pos0 + T)
        pos = np.arange(pos0, pos0 + T)
        H, Hkv, Dk, Dv = self.n_head, self.n_head_kv, self.head_dim_k, self.head_dim_v
        group = H // Hkv

        x = self.tok_embd[ids].astype(self.dtype)                    # (T, n_embd)
        if self.is_gemma:
            x = x * self.dtype(math.sqrt(self.n_embd))

        S = pos0 + T
        kpos = np.arange(S)
        causal = kpos[None, :] <= pos[:, None]                       # (T, S)

        for il, L in enumerate(self.layers):
            self._cur_prefix = f"blk.{il}."
            h = self._rmsnorm(x, L["attn_norm"])
            q = self._mm(h, L, "attn_q")
            k = self._mm(h, L, "attn_k")
            v = self._mm(h, L, "attn_v")
            if "attn_q.bias" in L:
                q = q + L["attn_q.bias"]
            if "attn_k.bias" in L:
                k = k + L["attn_k.bias"]
            if "attn_v.bias" in L:
                v = v + L["attn_v.bias"]
            q = q.reshape(T, H, Dk)
            k = k.reshape(T, Hkv, Dk)
            v = v.reshape(T, Hkv, Dv)
            if "attn_q_norm" in L:
                q = self._rmsnorm(q, L["attn_q_norm"])
            if "attn_k_norm" in L:
                k = self._rmsnorm(k, L["attn_k_norm"])
            local = self.swa_layers[il]
            base = self.rope_base_swa if local else self.rope_base
            q = self._rope(q, pos, base)
            k = self._rope(k, pos, base)
            self.k_cache[il][:, pos0:pos0 + T] = k.transpose(1, 0, 2)
            self.v_cache[il][:, pos0:pos0 + T] = v.transpose(1, 0, 2)
            K = self.k_cache[il][:, :S]                              # (Hkv, S, Dk)
            V = self.v_cache[il][:, :S]                              # (Hkv, S, Dv)
            mask = causal
            if local:
                mask = causal & ((pos[:, None] - kpos[None, :]) < self.swa_window)
            Q = q.transpose(1, 0, 2).reshape(Hkv, group * T, Dk)     # heads grouped by kv head
            sc = (Q @ K.transpose(0, 2, 1)).astype(np.float64) * self.q_scale  # (Hkv, g*T, S)
            sc = sc.reshape(Hkv, group, T, S)
            if self.attn_softcap:
                sc = np.tanh(sc / self.attn_softcap) * self.attn_softcap
            sc = np.where(mask[None, None], sc, -np.inf)
            sc = sc - sc.max(axis=-1, keepdims=True)
            p = np.exp(sc)
            p /= p.sum(axis=-1, keepdims=True)
            p = p.reshape(Hkv, group * T, S).astype(self.dtype)
            o = (p @ V).reshape(Hkv, group, T, Dv).reshape(H, T, Dv)   # head h = kv*group + g
            o = o.transpose(1, 0, 2).reshape(T, H * Dv)
            o = self._mm(o, L, "attn_output")
            if "attn_output.bias" in L:
                o = o + L["attn_output.bias"]
            if "post_attention_norm" in L:
                o = self._rmsnorm(o, L["post_attention_norm"])
            x = x + o

            h = self._rmsnorm(x, L["ffn_norm"])
            up = self._mm(h, L, "ffn_up")
            if "ffn_gate" in L:
                g = self._mm(h, L, "ffn_gate")
                act = self._gelu_tanh(g) if self.is_gemma else self._silu(g)
                f = act * up
            else:
                f = self._gelu_tanh(up) if self.is_gemma else self._silu(up)
            f = self._mm(f, L, "ffn_down")
            if "post_ffw_norm" in L:
                f = self._rmsnorm(f, L["post_ffw_norm"])
            x = x + f

        self.n_past = S
        if not all_logits:
            x = x[-1:]
        x = self._rmsnorm(x, self.out_norm)
        out_name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        logits = self._mm(x, self.output, out_name).astype(np.float64)
        if self.final_softcap:
            logits = np.tanh(logits / self.final_softcap) * self.final_softcap
        return logits if all_logits else logits[0]

    def greedy(self, prompt_ids, n, stop_ids=()):
        """Greedy continuation from an empty cache. Returns (ids, logits rows),
        row i being the logits token i was chosen from (argmax, lowest id on
        ties)."""
        self.reset()
        out, rows = [], []
        logits = self.eval(prompt_ids)
        for _ in range(n):
            rows.append(logits)
            tok = int(np.argmax(logits))
            out.append(tok)
            if tok in stop_ids:
                break
            logits = self.eval([tok])
        return out, np.array(rows)


def _quant_act(x, blk):
    """Rounds x (..., n) to 8-bit blocks of blk values (d = amax/127)."""
    shp = x.shape
    xb = x.astype(np.float64).reshape(-1, blk)
    d = np.abs(xb).max(axis=1, keepdims=True) / 127.0
    if blk == 32:
        d = d.astype(np.float16).astype(np.float64)   # Q8_0/Q8_1 keep d as fp16
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.clip(np.rint(xb * inv), -127, 127)
    return (q * d).reshape(shp).astype(x.dtype)


# ---- a small tokenizer, for standalone use only -----------------------------

def _bytes_to_unicode():
    # GPT-2's byte-level mapping: printable bytes map to themselves, the rest
    # to code points from 256 up, in byte order.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


class SimpleTokenizer:
    """Approximate tokenizer from GGUF metadata (gpt2 BPE or llama SPM)."""

    def __init__(self, reader):
        self.model = _field(reader, "tokenizer.ggml.model")
        self.tokens = list(_field(reader, "tokenizer.ggml.tokens"))
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.bos = _field(reader, "tokenizer.ggml.bos_token_id")
        add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
        self.add_bos = bool(add_bos) if add_bos is not None else (self.model == "llama")
        if self.model == "gpt2":
            merges = _field(reader, "tokenizer.ggml.merges")
            self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
            self.b2u = _bytes_to_unicode()
            self.u2b = {u: b for b, u in self.b2u.items()}
        else:
            scores = _field(reader, "tokenizer.ggml.scores")
            self.scores = list(scores) if scores is not None else [0.0] * len(self.tokens)

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                rk = self.ranks.get((parts[i], parts[i + 1]))
                if rk is not None and (best is None or rk < best):
                    best, bi = rk, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        return parts

    def _spm(self, text):
        parts = list(text)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                j = self.index.get(parts[i] + parts[i + 1])
                if j is not None and (best is None or self.scores[j] > best):
                    best, bi = self.scores[j], i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        ids = []
        for p in parts:
            if p in self.index:
                ids.append(self.index[p])
            else:
                for b in p.encode("utf-8"):
                    ids.append(self.index.get(f"<0x{b:02X}>", 0))
        return ids

    def encode(self, text):
        ids = [self.bos] if self.add_bos and self.bos is not None else []
        if self.model == "gpt2":
            import regex
            pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
            for w in pat.findall(text):
                u = "".join(self.b2u[b] for b in w.encode("utf-8"))
                ids += [self.index[p] for p in self._bpe(u)]
        else:
            ids += self._spm(text.replace(" ", "\u2581"))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if self.model == "gpt2":
                if all(c in self.u2b for c in t):
                    out += bytes(self.u2b[c] for c in t)
                else:
                    out += t.encode("utf-8")
            else:
                if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                    out.append(int(t[3:5], 16))
                else:
                    out += t.replace("\u2581", " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")


def write_dump(path, n_vocab, prompt_ids, gen_ids, rows):
    """Writes the `tandem run --dump` layout."""
    with open(path, "wb") as f:
        f.write(b"TNDD")
        f.write(struct.pack("<4I", 1, n_vocab, len(prompt_ids), len(gen_ids)))
        f.write(np.asarray(prompt_ids, "<i4").tobytes())
        f.write(np.asarray(gen_ids, "<i4").tobytes())
        f.write(np.asarray(rows, "<f4").reshape(len(gen_ids), n_vocab).tobytes())


def read_dump(path):
    """Reads a `tandem run --dump` file: (n_vocab, prompt_ids, gen_ids, logits)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 20 or data[:4] != b"TNDD":
        raise ValueError(f"{path}: not a TNDD dump")
    version, n_vocab, n_prompt, n_gen = struct.unpack_from("<4I", data, 4)
    if version != 1:
        raise ValueError(f"{path}: dump version {version}, expected 1")
    off = 20
    need = off + 4 * (n_prompt + n_gen) + 4 * n_gen * n_vocab
    if len(data) != need:
        raise ValueError(f"{path}: size {len(data)}, expected {need}")
    prompt = np.frombuffer(data, "<i4", n_prompt, off).tolist()
    off += 4 * n_prompt
    gen = np.frombuffer(data, "<i4", n_gen, off).tolist()
    off += 4 * n_gen
    logits = np.frombuffer(data, "<f4", n_gen * n_vocab, off).reshape(n_gen, n_vocab)
    return n_vocab, prompt, gen, logits


def row_stats(ref, got, tie=0.5):
    """Compares logits rows got (n, V) with the reference rows ref (n, V).
    Per row: max|diff| / std(ref row), Pearson correlation, whether the
    argmaxes agree, and the reference's margin of its argmax over got's
    argmax (0 when they agree). Returns a list of dicts."""
    out = []
    for i, (r, g) in enumerate(zip(np.asarray(ref, np.float64), np.asarray(got, np.float64))):
        d = g - r
        rt, gt = int(np.argmax(r)), int(np.argmax(g))
        out.append({
            "row": i,
            "rel_max": float(np.abs(d).max() / r.std()),
            "diff_std": float(d.std()),
            "corr": float(np.corrcoef(r, g)[0, 1]),
            "ref_top": rt, "got_top": gt,
            "margin": float(r[rt] - r[gt]),
            "near_tie": bool(rt != gt and r[rt] - r[gt] < tie),
        })
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference forward pass (greedy)")
    ap.add_argument("model")
    ap.add_argument("--ids", type=int, nargs="+", help="prompt token ids")
    ap.add_argument("--prompt", help="prompt text (built-in approximate tokenizer)")
    ap.add_argument("-n", type=int, default=16, help="tokens to generate")
    ap.add_argument("--f64", action="store_true", help="float64 math")
    ap.add_argument("--layers", type=int, help="run only the first N layers")
    ap.add_argument("--dump", help="write a TNDD dump like `tandem run --dump`")
    ap.add_argument("--compare", metavar="DUMP",
                    help="read a `tandem run --dump` file, run the reference on its prompt "
                         "and generated ids, and print per-row differences")
    ap.add_argument("--act-q8", action="store_true",
                    help="round matmul inputs to 8-bit blocks like an integer-dot engine")
    ap.add_argument("-v", "--verbose", action="store_true", help="print top-5 per step and the text")
    a = ap.parse_args(argv)
    if a.compare is None and (a.ids is None) == (a.prompt is None):
        ap.error("give exactly one of --ids or --prompt (or --compare DUMP)")
    m = RefModel(a.model, np.float64 if a.f64 else np.float32, a.layers, a.verbose, a.act_q8)
    if a.compare is not None:
        n_vocab, prompt, gen, got = read_dump(a.compare)
        if n_vocab != m.n_vocab:
            print(f"dump n_vocab {n_vocab} != model {m.n_vocab}", file=sys.stderr)
            return 1
        ref = m.eval(prompt + gen[:-1], all_logits=True)[len(prompt) - 1:]
        print(f"prompt {len(prompt)} ids, {len(gen)} generated")
        for st in row_stats(ref, got):
            flag = "" if st["ref_top"] == st["got_top"] else (
                "  NEAR-TIE" if st["near_tie"] else "  TOP-1 MISMATCH")
            print(f"row {st['row']:3d}: max|d|/std {st['rel_max']:.4f}  d.std {st['diff_std']:.4f}  "
                  f"corr {st['corr']:.6f}  top {st['ref_top']}/{st['got_top']} "
                  f"margin {st['margin']:.4f}{flag}")
        return 0
    tok = None
    if a.prompt is not None or a.verbose:
        tok = SimpleTokenizer(m.reader)
    ids = a.ids if a.ids is not None else tok.encode(a.prompt)
    if a.prompt is not None:
        print("prompt ids:", " ".join(map(str, ids)), file=sys.stderr)
    gen, rows = m.greedy(ids, a.n)
    if a.verbose:
        for i, (t, r) in enumerate(zip(gen, rows)):
            top = np.argsort(-r, kind="stable")[:5]
            desc = "  ".join(f"{j}:{r[j]:.3f}({tok.decode([j])!r})" for j in top)
            print(f"step {i}: {desc}", file=sys.stderr)
        print("text:", repr(tok.decode(ids + gen)), file=sys.stderr)
    print(" ".join(map(str, gen)))
    if a.dump:
        write_dump(a.dump, m.n_vocab, ids, gen, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
