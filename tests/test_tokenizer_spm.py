#!/usr/bin/env python3
"""SPM vocabs: random texts tokenized by tandem and by the `sentencepiece`
library (an independent implementation, from PyPI) must give the same ids.

The sentencepiece model is assembled from the GGUF's pieces, scores and
token types (BPE model, byte fallback, a dummy-prefix space, no other
normalization), as the llama family's tokenizer.model is. Vocabs: the SPM ones
in ../shared/testdata/vocab (llama-spm, phi-3). Skipped (77) without
`sentencepiece` (with protobuf) or without any vocab.
"""
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("TND_SRC", os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))

SEP = "\n__ggml_vocab_test__\n"

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 2 +
            ["the", "ing", "tion", " the", "Hello", "world", "123", "2024"] * 2 +
            [" "] * 14 + ["\n"] * 3 + ["\t", "\r", "  ", "\u00a0", "\u3000"] +
            list("'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`") +
            list("éüßÄøçñÅ") + list("ΩωЖж") + list("中文字语言한국어日本語ひらがな") +
            ["\u0301", "\u0663", "\u00bd", "\u0e01", "\u17a2"] +
            ["😀", "🦙", "✅", "\u200b", "\u2581", "▁▁", "</s>", "<s>"] + list("！（）：，。、～"))


def random_text(rng):
    n = rng.choice([1, 2, 3, 5, 8, 13, 30, 60])
    t = "".join(rng.choice(ALPHABET) for _ in range(n))
    return t


def sp_model(kvs):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = kvs.get("tokenizer.ggml.unknown_token_id", (0, 0))[1]
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = bool(kvs.get("tokenizer.ggml.add_space_prefix", (0, True))[1])
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    toks = kvs["tokenizer.ggml.tokens"][1][1]
    scores = kvs["tokenizer.ggml.scores"][1][1]
    types = kvs["tokenizer.ggml.token_type"][1][1]
    for i, (tok, score, ty) in enumerate(zip(toks, scores, types)):
        # sentencepiece allows one UNKNOWN piece, the unk id; phi-3 marks its
        # padding pieces unknown too: as control pieces they stay unmatched.
        if i == m.trainer_spec.unk_id:
            ty = 2
        elif ty == 2:
            ty = 3
        p = m.pieces.add()
        p.piece = tok.decode("utf-8")
        p.score = score
        p.type = ty
    proc = spm.SentencePieceProcessor()
    proc.LoadFromSerializedProto(m.SerializeToString())
    return proc


def main():
    try:
        import sentencepiece  # noqa: F401
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except ImportError:
        print("python package `sentencepiece` (with protobuf) not installed; skipped")
        return 77
    from make_vocab_gguf import read_kvs

    bin_ = os.environ.get("TND_BIN")
    if not bin_ or not os.path.exists(bin_):
        print("TND_BIN not set or missing; skipped")
        return 77
    vocab_dir = os.path.join(SRC, "..", "shared", "testdata", "vocab")
    if not os.path.isdir(vocab_dir):
        vocab_dir = "/work/shared/testdata/vocab"
    paths = [os.path.join(vocab_dir, "ggml-vocab-%s.gguf" % n) for n in ("llama-spm", "phi-3")]
    n_texts = int(os.environ.get("TND_SPM_TEXTS", "400"))
    rng = random.Random(4321)
    texts = [random_text(rng) for _ in range(n_texts)]
    failures = ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "cases.txt")
        with open(inp, "wb") as f:
            f.write("".join(t + SEP for t in texts).encode("utf-8"))
        for path in paths:
            if not os.path.exists(path):
                print("%s missing; skipped" % os.path.basename(path))
                continue
            sp = sp_model(read_kvs(path))
            r = subprocess.run([bin_, "tokenize", "-m", path, "-f", inp, "--cases"], capture_output=True)
            if r.returncode != 0:
                print("%s: exit %d: %s" % (os.path.basename(path), r.returncode, r.stderr.decode()))
                failures += 1
                continue
            got = r.stdout.decode().split("\n")
            ok = shown = 0
            for k, text in enumerate(texts):
                want = sp.EncodeAsIds(text) if text else []
                g = [int(x) for x in got[k].split()] if k < len(got) else None
                if g == want:
                    ok += 1
                else:
                    failures += 1
                    if shown < 5:
                        shown += 1
                        print("  %s %r:\n    want %s\n    got  %s" % (os.path.basename(path), text, want, g))
            ran += 1
            print("%-28s %d/%d texts agree with sentencepiece" % (os.path.basename(path), ok, len(texts)))
    if not ran:
        print("no SPM vocab available; skipped")
        return 77
    print("FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
