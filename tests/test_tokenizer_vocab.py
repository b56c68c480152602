#!/usr/bin/env python3
"""Tokenizer vectors: `tandem tokenize -m X.gguf -f case` against X.gguf.out.

For every vocab in ../shared/testdata/vocab with a .gguf, every case of
X.gguf.inp (cases end with a line `__ggml_vocab_test__`) must give the ids on
line k of X.gguf.out. Vocabs without a .gguf there use a vocab-only GGUF made
from a real model of that family under models/ when one is present
(scripts/make_vocab_gguf.py writes it), else they are skipped with a message.

Also checks that detokenizing the ids gives back the text (`tandem tokenize
--pieces` prints each piece) where the vocab can represent every byte.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile

SEP = b"\n__ggml_vocab_test__\n"


def find_vocab_dir():
    src = os.environ.get("TND_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    for d in (os.path.join(src, "..", "shared", "testdata", "vocab"), "/work/shared/testdata/vocab"):
        if os.path.isdir(d):
            return os.path.abspath(d), os.path.abspath(src)
    return None, os.path.abspath(src)


# Vocabs whose .gguf is not in the test data: a vocab-only GGUF of a real
# model of the family, made by scripts/make_vocab_gguf.py.
SUBSTITUTES = {
    "ggml-vocab-qwen2.gguf": "vocab-deepseek-r1-distill-qwen-7b.gguf",
    "ggml-vocab-llama-bpe.gguf": "vocab-llama-bpe.gguf",
}


def load_cases(inp_path, out_path):
    data = open(inp_path, "rb").read()
    cases = data.split(SEP)
    if cases and cases[-1] == b"":
        cases.pop()
    elif data.endswith(SEP[:-1]):
        cases[-1] = cases[-1][: -len(SEP) + 1]
    expected = open(out_path, "r", encoding="utf-8").read().split("\n")
    return cases, expected


def is_spm(path):
    """True for sentencepiece vocabs (tokenizer.ggml.model = llama)."""
    head = open(path, "rb").read(1 << 16)
    key = b"tokenizer.ggml.model"
    i = head.find(key)
    return i >= 0 and head[i + len(key) + 4 + 8:i + len(key) + 4 + 8 + 5] == b"llama"


def check_cli(bin_, gguf):
    """Exit codes and exact-bytes handling of `tandem tokenize`."""
    bad = 0

    def run(args, want_rc, want_out=None):
        nonlocal bad
        r = subprocess.run([bin_, "tokenize"] + args, capture_output=True)
        if r.returncode != want_rc or (want_out is not None and r.stdout != want_out):
            bad += 1
            print("  tokenize %s: exit %d (want %d), stdout %r, stderr %r" % (
                args, r.returncode, want_rc, r.stdout[:80], r.stderr[:200]))
        return r

    run(["--help"], 0)
    run(["-m", gguf], 2)                           # no text
    run(["-m", gguf, "-p", "a", "-f", "x"], 2)     # both
    run(["-m", gguf, "--frobnicate"], 2)
    run(["-m", "/nonexistent.gguf", "-p", "a"], 1)
    run(["-m", gguf, "-f", "/nonexistent.txt"], 1)
    if os.path.exists(gguf):
        # GPT-2: "Hello" is 15496, " world" 995, "\n" 198; nothing is added
        # or stripped, so the trailing newline of a file counts.
        run(["-m", gguf, "-p", "Hello world"], 0, b"15496 995\n")
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(b"Hello world\n")
            f.flush()
            run(["-m", gguf, "-f", f.name], 0, b"15496 995 198\n")
            run(["-m", gguf, "-f", f.name, "--bos"], 0, b"15496 995 198\n")  # GPT-2 adds nothing
        run(["-m", gguf, "-p", "<|endoftext|>a", "--special"], 0, b"50256 64\n")
        run(["-m", gguf, "-p", ""], 0, b"\n")
    print("CLI checks: %s" % ("FAIL" if bad else "ok"))
    return bad


def main():
    bin_ = os.environ.get("TND_BIN")
    vdir, src = find_vocab_dir()
    if not bin_ or not os.path.exists(bin_):
        print("TND_BIN not set or missing; skipped")
        return 77
    if not vdir:
        print("no vocab test data (../shared/testdata/vocab); skipped")
        return 77
    failures = check_cli(bin_, os.path.join(vdir, "ggml-vocab-gpt-2.gguf"))
    ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(vdir)):
            if not name.endswith(".gguf.inp"):
                continue
            vocab = name[: -len(".inp")]
            gguf = os.path.join(vdir, vocab)
            if not os.path.exists(gguf):
                sub = SUBSTITUTES.get(vocab)
                cand = os.path.join(src, "models", sub) if sub else None
                if cand and os.path.exists(cand):
                    gguf = cand
                else:
                    how = ""
                    if sub == "vocab-deepseek-r1-distill-qwen-7b.gguf":
                        how = " (scripts/make_vocab_gguf.py makes models/%s)" % sub
                    elif sub:
                        how = (" (needs models/%s: scripts/make_vocab_gguf.py --from MODEL.gguf -o models/%s"
                               " with a model of that family)" % (sub, sub))
                    print("%-32s skipped: no .gguf%s" % (vocab, how))
                    continue
            cases, expected = load_cases(os.path.join(vdir, name), os.path.join(vdir, vocab + ".out"))
            ok = rt_ok = rt_n = 0
            spm = is_spm(gguf)
            def run_case(k):
                path = os.path.join(tmp, "case%d.txt" % k)
                with open(path, "wb") as f:
                    f.write(cases[k])
                return subprocess.run([bin_, "tokenize", "-m", gguf, "-f", path, "--detok"], capture_output=True)

            # One process per case, as a user would run it; a few at a time.
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
                results = list(ex.map(run_case, range(len(cases))))
            for k, text in enumerate(cases):
                r = results[k]
                if r.returncode != 0:
                    print("  %s case %d: exit %d: %s" % (vocab, k, r.returncode, r.stderr.decode(errors="replace").strip()))
                    failures += 1
                    continue
                lines = r.stdout.split(b"\n")
                got = lines[0].decode().split()
                want = expected[k].split() if k < len(expected) else None
                if got == want:
                    ok += 1
                else:
                    failures += 1
                    print("  %s case %d %r:\n    want %s\n    got  %s" % (vocab, k, text[:60], " ".join(want or []), " ".join(got)))
                # Round trip: the detokenized bytes give the text back (SPM
                # vocabs add one leading space: the space prefix).
                joined = r.stdout[len(lines[0]) + 1:]
                want_text = text
                if spm and text:
                    want_text = b" " + text
                rt_n += 1
                if joined == want_text:
                    rt_ok += 1
                else:
                    failures += 1
                    print("  %s case %d: round trip gave %r for %r" % (vocab, k, joined[:80], text[:80]))
            ran += 1
            print("%-32s %d/%d cases, %d/%d round trips (%s)" % (vocab, ok, len(cases), rt_ok, rt_n, os.path.basename(gguf)))
    if not ran:
        print("no vocab could be tested; skipped")
        return 77
    print("FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
