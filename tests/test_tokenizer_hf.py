#!/usr/bin/env python3
"""Random texts tokenized by tandem and by Hugging Face `tokenizers` (an
independent implementation, from PyPI) must give the same ids.

The HF tokenizer is assembled from the GGUF's own vocab and merges plus the
pre-tokenizer the family's tokenizer.json uses. Vocabs: SmolLM2 (smollm),
GPT-2 (gpt-2), and the qwen2 vocab of scripts/make_vocab_gguf.py when it is
there; the SmolLM2 vocab is also run under the gpt2, llama3, qwen2 and
deepseek-coder pre-tokenizers (a copy with another tokenizer.ggml.pre), which
checks those split rules on many more inputs than the vectors have.
Skipped (77) without `tokenizers` or without any vocab; without `gguf`
only each vocab under its own pre-tokenizer.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("TND_SRC", os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))

SEP = "\n__ggml_vocab_test__\n"

# Split patterns of the families' tokenizer.json files.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


PRE = {
    "gpt-2": byte_level(True),
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level(True)]},
    "llama-bpe": {"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(False)]},
    "qwen2": {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]},
    "deepseek-r1-qwen": {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]},
    "gpt-4o": {"type": "Sequence", "pretokenizers": [split(GPT4O), byte_level(False)]},
    "tekken": {"type": "Sequence", "pretokenizers": [split(TEKKEN), byte_level(False)]},
    "deepseek-coder": {"type": "Sequence", "pretokenizers": [
        split(r"[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"),
        split("[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"), split(r"\p{N}"), byte_level(False)]},
}

# Characters the random texts are made of: the classes the patterns tell apart.
ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 2 +
            ["123", "2024", "99999", "3.14"] + [" "] * 12 + ["\n"] * 3 + ["\t", "\r", "\r\n", "\u00a0", "\u3000", "\u2009"] +
            list("'''\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`") +
            ["'s", "'S", "'ll", "'Re", "'ve", "'d", "'M", "'t"] +
            list("éüßÄøçñÅ") + list("ĳǅΩωЖжʰ") + ["ΑΒΓ", "HELLO", "CamelCase", "ALLcaps", "a\u0301b", "\u02b0x"] + list("中文字语言한국어日本語ひらがなカタカナ") +
            ["\u0301", "\u0663", "\u00bd", "\u2160", "\u0e01", "\u17a2", "\u1780"] +
            ["😀", "🦙", "✅", "👍🏽", "😶\u200d🌫\ufe0f", "\u200b", "\ufeff", "\u2581"] +
            list("！（）：，。、～「」‘’“”…"))


def random_text(rng):
    n = rng.choice([1, 2, 3, 5, 8, 13, 30, 60])
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def hf_tokenizer(kvs, pre_name):
    from tokenizers import Tokenizer
    toks = [s.decode("utf-8") for s in kvs["tokenizer.ggml.tokens"][1][1]]
    types = kvs["tokenizer.ggml.token_type"][1][1] if "tokenizer.ggml.token_type" in kvs else [1] * len(toks)
    merges = [s.decode("utf-8") for s in kvs["tokenizer.ggml.merges"][1][1]]
    added = []
    for i, (tok, ty) in enumerate(zip(toks, types)):
        if ty in (3, 4):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == 3})
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE[pre_name],
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": pre_name in ("llama-bpe", "gpt-4o", "tekken"),
                  "vocab": {t: i for i, t in reversed(list(enumerate(toks)))}, "merges": merges},
    }
    return Tokenizer.from_str(json.dumps(spec))


def main():
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print("python package `tokenizers` not installed; skipped")
        return 77
    from make_vocab_gguf import read_kvs, write_vocab, STR
    try:  # write_vocab needs it for the copies under other pre-tokenizers
        import gguf  # noqa: F401
        have_gguf = True
    except ImportError:
        have_gguf = False

    bin_ = os.environ.get("TND_BIN")
    if not bin_ or not os.path.exists(bin_):
        print("TND_BIN not set or missing; skipped")
        return 77
    vocab_dir = os.path.join(SRC, "..", "shared", "testdata", "vocab")
    if not os.path.isdir(vocab_dir):
        vocab_dir = "/work/shared/testdata/vocab"
    sources = [
        (os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"), ["smollm", "gpt-2", "llama-bpe", "qwen2", "deepseek-coder", "gpt-4o", "tekken"]),
        (os.path.join(vocab_dir, "ggml-vocab-gpt-2.gguf"), ["gpt-2"]),
        (os.path.join(SRC, "models", "vocab-deepseek-r1-distill-qwen-7b.gguf"), ["deepseek-r1-qwen"]),
    ]
    n_texts = int(os.environ.get("TND_HF_TEXTS", "400"))
    rng = random.Random(1234)
    texts = [random_text(rng) for _ in range(n_texts)]
    failures = ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "cases.txt")
        with open(inp, "wb") as f:
            f.write("".join(t + SEP for t in texts).encode("utf-8"))
        for path, pres in sources:
            if not os.path.exists(path):
                print("%s missing; skipped" % os.path.basename(path))
                continue
            kvs = read_kvs(path)
            for pre in pres:
                model = path
                if kvs["tokenizer.ggml.pre"][1].decode() != pre:
                    if not have_gguf:
                        print("%s pre %s: python package `gguf` not installed; skipped" % (os.path.basename(path), pre))
                        continue
                    kv2 = dict(kvs)
                    kv2["tokenizer.ggml.pre"] = (STR, pre.encode())
                    model = os.path.join(tmp, "vocab-%s.gguf" % pre)
                    write_vocab(kv2, model)
                hf = hf_tokenizer(kvs, pre)
                r = subprocess.run([bin_, "tokenize", "-m", model, "-f", inp, "--cases"], capture_output=True)
                if r.returncode != 0:
                    print("%s/%s: exit %d: %s" % (os.path.basename(path), pre, r.returncode, r.stderr.decode()))
                    failures += 1
                    continue
                got = r.stdout.decode().split("\n")
                ok = 0
                shown = 0
                for k, text in enumerate(texts):
                    want = hf.encode(text, add_special_tokens=False).ids
                    g = [int(x) for x in got[k].split()] if k < len(got) else None
                    if g == want:
                        ok += 1
                    else:
                        failures += 1
                        if shown < 5:
                            shown += 1
                            print("  %s/%s %r:\n    want %s\n    got  %s" % (os.path.basename(path), pre, text, want, g))
                ran += 1
                print("%-40s pre %-16s %d/%d texts agree with HF tokenizers" % (os.path.basename(path), pre, ok, len(texts)))
    if not ran:
        print("no vocab available; skipped")
        return 77
    print("FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
