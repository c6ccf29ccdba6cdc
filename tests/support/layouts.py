"""Checkpoint layouts of the hub, materialised without their weights (tests only).

tests/data/layouts/layouts.json describes each layout: the config, how the hub splits the
tensors into files (shards and their index, a consolidated file beside them, .bin copies, one
file), and what SGLang's loader selects. `build(name, root)` writes the directory: config.json,
real safetensors headers (every tensor's dtype, shape and offsets, from the config as the
architecture names them) and the files extended to their full size as sparse files, so a 16 GB
checkpoint costs a few kilobytes of disk. `.bin` files are sparse files of their shard's size
(nothing reads them: SGLang's selection only looks at their names).
"""

import json
import math
import struct
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "layouts" / "layouts.json"
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}
CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
BLOCK = 128


def layouts():
    """{name: description} of every layout (the `_about` key left out)."""
    return {k: v for k, v in json.loads(DATA.read_text()).items() if not k.startswith("_")}


def _linear(name, out_dim, in_dim, dtype, fp8):
    """A linear layer's weight, and its block scales where the checkpoint is FP8."""
    if not fp8:
        return [(f"{name}.weight", dtype, [out_dim, in_dim])]
    scales = [math.ceil(out_dim / BLOCK), math.ceil(in_dim / BLOCK)]
    return [(f"{name}.weight", "F8_E4M3", [out_dim, in_dim]),
            (f"{name}.weight_scale_inv", "F32", scales)]


def _layer(c, i, dtype, fp8):
    h, d = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    p = f"model.layers.{i}"
    out = []
    for proj, rows, cols in (("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h),
                             ("o_proj", h, q)):
        out += _linear(f"{p}.self_attn.{proj}", rows, cols, dtype, fp8)
    if c.get("qkv_bias"):
        out += [(f"{p}.self_attn.{n}_proj.bias", dtype, [s]) for n, s in (("q", q), ("k", kv), ("v", kv))]
    if c.get("qk_norm"):
        out += [(f"{p}.self_attn.{n}_norm.weight", dtype, [d]) for n in ("q", "k")]
    for proj, rows, cols in (("gate_proj", c["intermediate_size"], h),
                             ("up_proj", c["intermediate_size"], h),
                             ("down_proj", h, c["intermediate_size"])):
        out += _linear(f"{p}.mlp.{proj}", rows, cols, dtype, fp8)
    out += [(f"{p}.input_layernorm.weight", dtype, [h]),
            (f"{p}.post_attention_layernorm.weight", dtype, [h])]
    return out


def tensors(desc):
    """[(name, dtype, shape)] of the checkpoint, Hugging Face's names, in the hub's order."""
    c = desc["config"]
    dtype = CONFIG_DTYPES[c["torch_dtype"]]
    out = [("model.embed_tokens.weight", dtype, [c["vocab_size"], c["hidden_size"]])]
    for i in range(c["num_hidden_layers"]):
        out += _layer(c, i, dtype, desc.get("fp8", False))
    out.append(("model.norm.weight", dtype, [c["hidden_size"]]))
    if not c.get("tie_word_embeddings"):
        out.append(("lm_head.weight", dtype, [c["vocab_size"], c["hidden_size"]]))
    return out


def nbytes(dtype, shape):
    return DTYPE_BYTES[dtype] * math.prod(shape)


def mistral_name(name):
    """Mistral's own names in consolidated.safetensors (the same tensors)."""
    table = [("model.embed_tokens", "tok_embeddings"), ("model.norm", "norm"),
             ("lm_head", "output"), ("model.layers", "layers"), ("self_attn.q_proj", "attention.wq"),
             ("self_attn.k_proj", "attention.wk"), ("self_attn.v_proj", "attention.wv"),
             ("self_attn.o_proj", "attention.wo"), ("mlp.gate_proj", "feed_forward.w1"),
             ("mlp.down_proj", "feed_forward.w2"), ("mlp.up_proj", "feed_forward.w3"),
             ("input_layernorm", "attention_norm"), ("post_attention_layernorm", "ffn_norm")]
    for old, new in table:
        name = name.replace(old, new)
    return name


def split(items, count):
    """The tensors in `count` files of about equal size, in order (as the hub's shards are)."""
    total = sum(nbytes(d, s) for _, d, s in items)
    shards, current, size = [], [], 0
    for item in items:
        current.append(item)
        size += nbytes(item[1], item[2])
        if size >= total * (len(shards) + 1) / count and len(shards) < count - 1:
            shards.append(current)
            current = []
    return shards + [current]


def write_safetensors(path, items):
    """A safetensors file: its real header, its data a hole of the right size."""
    header, offset = {}, 0
    for name, dtype, shape in items:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        handle.truncate(8 + len(text) + offset)
    return offset


def _sharded(root, pattern, shards, index_name):
    weight_map, total = {}, 0
    for i, items in enumerate(shards, 1):
        name = pattern.format(i=i, n=len(shards))
        if name.endswith(".bin"):
            size = sum(nbytes(d, s) for _, d, s in items)
            with open(root / name, "wb") as handle:
                handle.truncate(size)
        else:
            size = write_safetensors(root / name, items)
        total += size
        weight_map.update({n: name for n, _, _ in items})
    (root / index_name).write_text(json.dumps({"metadata": {"total_size": total},
                                               "weight_map": weight_map}, indent=1))


def build(name, root):
    """Write layout `name` under `root`/`name`; return the directory."""
    desc = layouts()[name]
    path = Path(root) / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(desc["config"], indent=1))
    items = tensors(desc)
    if "single" in desc:
        write_safetensors(path / desc["single"], items)
    else:
        shards = split(items, desc["shards"]["count"])
        _sharded(path, desc["shards"]["pattern"], shards, "model.safetensors.index.json")
        if "bin" in desc:
            _sharded(path, desc["bin"]["pattern"], split(items, desc["bin"]["count"]),
                     "pytorch_model.bin.index.json")
    if "consolidated" in desc:
        write_safetensors(path / desc["consolidated"],
                          [(mistral_name(n), d, s) for n, d, s in items])
    return path


def on_disk_bytes(path):
    """What every *.safetensors and *.bin in the directory adds up to (the old count)."""
    return sum(p.stat().st_size for p in Path(path).iterdir()
               if p.suffix in (".safetensors", ".bin"))
