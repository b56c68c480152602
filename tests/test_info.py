"""`tandem info --json` against gguf-py's GGUFReader, an independent reader.

Compares every metadata key, type and value (arrays in full, strings byte for
byte), the header fields, and every tensor's name, type, shape, byte size and
offset, on: the vocab test files, a file written by tandem's writer with every
value type and every tensor type (also checking the type size table against
gguf-py's GGML_QUANT_SIZES), and the default model. Exits 77 (skipped) when
the default model is missing, after the other checks have run.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    from gguf import GGUFReader, GGUFValueType
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
except ImportError:
    print("gguf (PyPI) not installed; skipping")
    sys.exit(77)

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("TND_BIN", os.path.join(SRC, "build", "tandem"))
BUILD = os.environ.get("TND_BUILD", os.path.join(SRC, "build"))

VTYPE = {
    GGUFValueType.UINT8: "uint8", GGUFValueType.INT8: "int8", GGUFValueType.UINT16: "uint16",
    GGUFValueType.INT16: "int16", GGUFValueType.UINT32: "uint32", GGUFValueType.INT32: "int32",
    GGUFValueType.FLOAT32: "float32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "uint64", GGUFValueType.INT64: "int64",
    GGUFValueType.FLOAT64: "float64",
}

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def info_json(path):
    r = subprocess.run([BIN, "info", "--json", path], capture_output=True)
    if r.returncode != 0:
        raise AssertionError(f"tandem info {path} failed: {r.stderr.decode(errors='replace')}")
    return json.loads(r.stdout)


def jbytes(s):
    """Bytes of a JSON string from tandem (invalid bytes come as \\udcXX)."""
    return s.encode("utf-8", "surrogateescape")


def same_scalar(t, want, got):
    if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        w = float(want)
        if not np.isfinite(w):
            return got is None
        return got == w  # %.17g round-trips exactly
    if t == GGUFValueType.BOOL:
        return got is bool(want)
    return got == int(want)


def compare(path):
    r = GGUFReader(path)
    d = info_json(path)
    where = os.path.basename(path)
    check(d["version"] == int(r.fields["GGUF.version"].parts[-1][0]), f"{where}: version")
    check(d["size"] == os.path.getsize(path), f"{where}: size")
    check(d["alignment"] == r.alignment, f"{where}: alignment {d['alignment']} vs {r.alignment}")
    if len(r.tensors):
        check(d["data_offset"] == r.data_offset, f"{where}: data offset {d['data_offset']} vs {r.data_offset}")
    fields = [f for name, f in r.fields.items() if not name.startswith("GGUF.")]
    check(len(d["metadata"]) == len(fields) == d["n_kv"], f"{where}: {len(d['metadata'])} keys vs {len(fields)}")
    for m, f in zip(d["metadata"], fields):
        key = f"{where}: key {f.name}"
        check(m["key"] == f.name, f"{key}: name {m['key']!r}")
        check(m["type"] == VTYPE[f.types[0]], f"{key}: type {m['type']} vs {f.types[0]}")
        t = f.types[0]
        if t == GGUFValueType.STRING:
            check(jbytes(m["value"]) == bytes(f.parts[f.data[0]]), f"{key}: string value")
        elif t == GGUFValueType.ARRAY:
            et = f.types[1] if len(f.types) > 1 else None
            vals = m["value"]
            check(m["n"] == len(f.data) == len(vals), f"{key}: array length {m['n']} vs {len(f.data)}")
            if et is None:  # empty array: gguf-py does not report the element type
                continue
            check(m["elem_type"] == VTYPE[et], f"{key}: element type {m['elem_type']} vs {et}")
            if et == GGUFValueType.STRING:
                ok = all(jbytes(v) == bytes(f.parts[i]) for v, i in zip(vals, f.data))
            else:
                ok = all(same_scalar(et, f.parts[i][0], v) for v, i in zip(vals, f.data))
            check(ok, f"{key}: array values")
        else:
            check(same_scalar(t, f.parts[f.data[0]][0], m["value"]), f"{key}: value {m['value']!r}")
    check(len(d["tensors"]) == len(r.tensors) == d["n_tensors"], f"{where}: tensor count")
    n_params = 0
    for jt, t in zip(d["tensors"], r.tensors):
        key = f"{where}: tensor {t.name}"
        check(jt["name"] == t.name, f"{key}: name {jt['name']}")
        check(jt["type_id"] == int(t.tensor_type) and jt["type"] == t.tensor_type.name, f"{key}: type {jt['type']}")
        check(jt["shape"] == [int(x) for x in t.shape], f"{key}: shape {jt['shape']} vs {list(t.shape)}")
        check(jt["file_offset"] == t.data_offset, f"{key}: offset {jt['file_offset']} vs {t.data_offset}")
        check(jt["offset"] == t.data_offset - r.data_offset, f"{key}: relative offset")
        # gguf-py sizes Q8_1 with an old 40-byte block; ggml's is 36 (2 halves + 32 int8).
        if t.tensor_type != GGMLQuantizationType.Q8_1:
            check(jt["bytes"] == t.n_bytes, f"{key}: bytes {jt['bytes']} vs {t.n_bytes}")
        n_params += int(t.n_elements)
    check(d["n_params"] == n_params, f"{where}: parameter count {d['n_params']} vs {n_params}")
    check(d["tensor_bytes"] == sum(t["bytes"] for t in d["tensors"]), f"{where}: tensor bytes")
    print(f"ok: {where}: {len(fields)} keys, {len(r.tensors)} tensors")
    return d


def vocab_dir():
    for p in (os.path.join(SRC, "..", "shared", "testdata", "vocab"), "/work/shared/testdata/vocab"):
        if os.path.isdir(p):
            return p
    return None


def main():
    # 1. vocab files (no tensors)
    vd = vocab_dir()
    if vd:
        for name in sorted(os.listdir(vd)):
            if name.endswith(".gguf"):
                d = compare(os.path.join(vd, name))
                check(d["tokenizer"]["vocab_size"] > 0, f"{name}: vocab size")
    else:
        print("vocab test files not found; skipping those")

    with tempfile.TemporaryDirectory() as tmp:
        # 2. a file from tandem's writer: every value type, every tensor type
        sample = os.path.join(tmp, "sample.gguf")
        writer = os.path.join(BUILD, "test_gguf")
        subprocess.run([writer, "--write-sample", sample], check=True)
        d = compare(sample)
        r = GGUFReader(sample)
        by_type = {int(t.tensor_type): t for t in r.tensors}
        for qt in GGMLQuantizationType:
            if int(qt) >= 40:  # ids newer than tandem's table (NVFP4, ...): unknown to tandem
                continue
            check(int(qt) in by_type, f"writer sample lacks type {qt.name}")
            jt = next(x for x in d["tensors"] if x["type_id"] == int(qt))
            bs, ts = GGML_QUANT_SIZES[qt]
            if qt == GGMLQuantizationType.Q8_1:
                ts = 36  # see above
            check(jt["bytes"] == 6 * ts and jt["shape"] == [2 * bs, 3], f"type size of {qt.name}: {jt}")
        check(len(d["tensors"]) == len([q for q in GGMLQuantizationType if int(q) < 40]), "tensor types in sample")
        raw = next(f for n, f in r.fields.items() if n == "t.bytes")
        check(bytes(raw.parts[raw.data[0]]) == b"a\0b\xff\n\"\\", "gguf-py reads the writer's raw string bytes")
        check(d["hparams"] == {}, "no llama.* keys in the sample")

        # 3. an invalid file: exit 1, a message naming the file
        bad = os.path.join(tmp, "bad.gguf")
        with open(sample, "rb") as f:
            data = f.read()
        with open(bad, "wb") as f:
            f.write(data[: len(data) // 2])
        p = subprocess.run([BIN, "info", bad], capture_output=True, text=True)
        check(p.returncode == 1 and "bad.gguf" in p.stderr and "past end of file" in p.stderr,
              f"invalid file: rc {p.returncode}, stderr {p.stderr!r}")
        p = subprocess.run([BIN, "info", "--help"], capture_output=True, text=True)
        check(p.returncode == 0 and "--json" in p.stdout, "info --help")
        p = subprocess.run([BIN, "info", sample], capture_output=True, text=True)
        check(p.returncode == 0 and "[string x" not in p.stdout and '"a\\x00b\\xff\\n\\"\\\\"' in p.stdout,
              "text output escapes bytes")

    # 4. the default model
    model = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        print(f"default model missing ({model}); skipping it")
        sys.exit(1 if failures else 77)
    d = compare(model)
    check(d["architecture"] == "llama" and d["hparams"]["block_count"] == 30, "model summary")
    check(d["tokenizer"]["model"] == "gpt2" and d["tokenizer"]["vocab_size"] == 49152
          and d["tokenizer"]["merges"] == 48900 and d["tokenizer"]["chat_template"] is True, "tokenizer summary")
    text = subprocess.run([BIN, "info", model], capture_output=True, text=True, check=True).stdout
    check("[string x 49152]" in text and "blk.0.attn_q.weight" in text, "text output summarizes arrays")

    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
