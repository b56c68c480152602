"""A damaged model must not "succeed" (issue 30): GGUFs made broken here
(NaN or Inf in a norm, an embedding row, a quantized block's scale, an MoE
router; rms epsilon <= 0, rope freq_base 0, context_length 0) fail to load
with a message naming the tensor or key, where they used to exit 0 with
empty output. A NaN in a row the load's sampling skips is found by
--check-weights, and by the logits check if generation reaches it. Chat
templates: one that matches no known format is an error naming
--chat-template; a model without one gets chatml with a warning."""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
except ImportError as e:  # the device machine has no PyPI: skip, as the other oracle tests do
    print(f"skipped: {e}")
    sys.exit(77)

src = os.environ.get("TND_SRC", ".")
tandem = os.environ.get("TND_BIN", os.path.join(src, "build", "tandem"))
tmp = tempfile.mkdtemp()
base = {}
for shape in ("tiny-llama", "tiny-qwen3moe"):
    base[shape] = os.path.join(tmp, shape + ".gguf")
    subprocess.run([tandem, "synth", "--shape", shape, "-o", base[shape]], check=True, capture_output=True)

fails = 0
F16_NAN = np.frombuffer(np.array([np.nan], dtype=np.float16).tobytes(), dtype=np.uint8)


def broken(shape, name, edit):
    """A copy of the shape's synth model, edited in place through the gguf memmap."""
    path = os.path.join(tmp, name + ".gguf")
    shutil.copy(base[shape], path)
    r = gguf.GGUFReader(path, "r+")
    edit(r)
    r.data.flush()
    del r
    return path


def tensor(r, name):
    return next(t for t in r.tensors if t.name == name)


def set_field(key, value):
    def edit(r):
        f = r.fields[key]
        f.parts[f.data[0]][0] = value
    return edit


def nan_at(name, idx, value=np.nan):
    def edit(r):
        tensor(r, name).data.reshape(-1)[idx] = value
    return edit


def scale_nan(name, row, offset):
    """Sets the f16 scale at byte `offset` of the first block of a row to NaN."""
    def edit(r):
        t = tensor(r, name).data
        t.reshape(t.shape[-2] if t.ndim == 2 else -1, -1)[row][offset:offset + 2] = F16_NAN
    return edit


def expect(path, phrases, *extra, rc=1):
    global fails
    r = subprocess.run([tandem, "run", "-m", path, "-p", "hello world", "-n", "4", "--temp", "0", "-t", "2", *extra],
                       capture_output=True, text=True, errors="replace", timeout=300)
    ok = r.returncode == rc and all(p in r.stderr for p in phrases)
    print(("ok   " if ok else "FAIL ") + f"{os.path.basename(path)} {' '.join(extra)}: rc={r.returncode} "
          f"{r.stderr.strip()[-300:]}")
    fails += not ok
    return r


cases = [
    ("tiny-llama", "norm-nan", nan_at("blk.0.attn_norm.weight", 5), ["blk.0.attn_norm.weight", "NaN or Inf"]),
    ("tiny-llama", "out-norm-inf", nan_at("output_norm.weight", 0, np.inf), ["output_norm.weight", "NaN or Inf"]),
    # Q4_K: the block's d is its first 2 bytes; row 0 is among the sampled rows
    ("tiny-llama", "embd-nan", scale_nan("token_embd.weight", 0, 0), ["token_embd.weight", "row 0", "sampling"]),
    # Q6_K: d is the last 2 bytes of a 210-byte block; the last row is sampled
    ("tiny-llama", "down-nan", scale_nan("blk.1.ffn_down.weight", 255, 208), ["blk.1.ffn_down.weight", "row 255"]),
    ("tiny-qwen3moe", "router-nan", nan_at("blk.2.ffn_gate_inp.weight", 3 * 256 + 7),
     ["blk.2.ffn_gate_inp.weight", "row 3"]),
    ("tiny-llama", "eps-neg", set_field("llama.attention.layer_norm_rms_epsilon", -1.0),
     ["layer_norm_rms_epsilon", "above 0"]),
    ("tiny-llama", "eps-zero", set_field("llama.attention.layer_norm_rms_epsilon", 0.0),
     ["layer_norm_rms_epsilon", "above 0"]),
    ("tiny-llama", "rope-zero", set_field("llama.rope.freq_base", 0.0), ["rope.freq_base", "above 0"]),
    ("tiny-llama", "rope-nan", set_field("llama.rope.freq_base", np.nan), ["rope.freq_base", "not finite"]),
    ("tiny-llama", "ctx-zero", set_field("llama.context_length", 0), ["context_length", "above 0"]),
]
for shape, name, edit, phrases in cases:
    expect(broken(shape, name, edit), phrases)

# a NaN scale in a row the load does not sample (row 100 of the 512 of the
# output projection, output.weight or, when tied, token_embd; samples: 0, 34,
# 68, 102, ...): --check-weights finds it; a plain run computes every logit
# from it and stops with an error instead of printing nothing
D_OFFSET = {gguf.GGMLQuantizationType.Q4_K: 0, gguf.GGMLQuantizationType.Q6_K: 208,
            gguf.GGMLQuantizationType.Q8_0: 0, gguf.GGMLQuantizationType.Q4_0: 0}
head = next((t for t in gguf.GGUFReader(base["tiny-llama"]).tensors if t.name == "output.weight"), None)
head_name = head.name if head is not None else "token_embd.weight"
head_type = head.tensor_type if head is not None else next(
    t.tensor_type for t in gguf.GGUFReader(base["tiny-llama"]).tensors if t.name == "token_embd.weight")
hidden = broken("tiny-llama", "head-hidden", scale_nan(head_name, 100, D_OFFSET[head_type]))
expect(hidden, [head_name, "row 100", "scanning every weight"], "--check-weights")
expect(hidden, ["NaN or Inf logit", "--check-weights"])

# intact models still load, with and without the full scan
for shape in base:
    expect(base[shape], [], rc=0)
    expect(base[shape], [], "--check-weights", rc=0)


def with_template(text):
    """tiny-llama with the default model's vocab (which has a chat template),
    rewritten with tokenizer.chat_template = text."""
    model = os.path.join(src, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        return None
    vocab = os.path.join(tmp, "vocab.gguf")
    subprocess.run([tandem, "synth", "--shape", "tiny-llama", "--vocab", model, "--n-vocab", "49152", "-o", vocab],
                   check=True, capture_output=True)
    path = os.path.join(tmp, "tmpl.gguf")
    r = gguf.GGUFReader(vocab)
    w = gguf.GGUFWriter(path, arch="llama")
    for f in r.fields.values():
        if f.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.Tokenizer.CHAT_TEMPLATE) or f.name.startswith("GGUF."):
            continue
        t = f.types[0]
        w.add_key_value(f.name, f.contents(), t, sub_type=f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
    w.add_chat_template(text)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()
    return path


odd = with_template("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
if odd:
    expect(odd, ["chat template matches none", "--chat-template"], "--chat")
    expect(odd, [], "--chat", "--chat-template", "chatml", rc=0)
    expect(odd, [], rc=0)  # without --chat the template is not used
else:
    print("skipped the unknown-template cases: default model missing")
r = expect(base["tiny-llama"], ["no chat template; using chatml"], "--chat", rc=0)
sys.exit(1 if fails else 0)
