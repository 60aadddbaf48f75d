#!/usr/bin/env python3
"""A random PEFT LoRA adapter shaped for a GGUF model, for LoRA speed benchmarks.

    python3 scripts/make-bench-lora.py MODEL.gguf OUT_DIR [--rank 16] [--alpha A] [--seed 0] [--gguf OUT.gguf]

Needs only numpy, safetensors and gguf (gguf-py); no torch. Reads the layer count and every projection's
shape from MODEL.gguf (the metadata is printed beside the tensor shapes; the shapes decide), and writes
OUT_DIR/adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, all seven projections) and
OUT_DIR/adapter_model.safetensors in the layout `peft` saves for Gemma3ForCausalLM:

    base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_A.weight   [r, in]   f32
    base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_B.weight    [out, r]  f32

(the pattern of tests/fixtures/tiny/gemma3/lora_a). A ~ N(0, 1/in), B ~ N(0, 0.01^2): small, but not zero as
peft's fresh B is, so nothing can skip the adapter. lora_alpha defaults to the rank (scale 1). A layer without
one of the projections (e.g. no attn_v where values are the keys) gets no adapter for it. With --gguf it also
writes the same adapter as llama.cpp's convert_lora_to_gguf.py lays it out (general.type adapter, adapter.type
lora, adapter.lora.alpha; blk.{i}.attn_q.weight.lora_a ne [in, r], .lora_b ne [r, out], f32), since that
converter needs the base model's HF config.json, which a GGUF-only model does not have.
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

try:
    import gguf
except ImportError:
    sys.path.insert(0, os.environ.get("GGUF_PY", ""))
    import gguf

# HF module path -> GGUF tensor name, in the order peft's target_modules are listed here
MODULES = [
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
]
PREFIX = "base_model.model.model.layers"


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=None, help="lora_alpha (default: the rank, so scale 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", help="also write the adapter as a llama.cpp LoRA GGUF here")
    a = ap.parse_args()
    r = a.rank
    alpha = float(r) if a.alpha is None else a.alpha

    reader = gguf.GGUFReader(a.model)
    arch = field(reader, "general.architecture")
    meta = {k: field(reader, f"{arch}.{k}") for k in (
        "block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
        "attention.key_length", "attention.value_length", "feed_forward_length")}
    print(f"{a.model}: architecture {arch}, " + ", ".join(f"{k} {v}" for k, v in meta.items()), file=sys.stderr)
    shapes = {t.name: [int(x) for x in t.shape] for t in reader.tensors}  # ggml ne: [in, out]
    n_layer = meta["block_count"]
    if n_layer is None:
        n_layer = 1 + max(int(n.split(".")[1]) for n in shapes if n.startswith("blk."))

    rng = np.random.default_rng(a.seed)
    tensors, gg, targets, missing = {}, [], set(), []
    for i in range(n_layer):
        for hf, gn in MODULES:
            ne = shapes.get(f"blk.{i}.{gn}.weight")
            if ne is None:
                missing.append(f"blk.{i}.{gn}")
                continue
            n_in, n_out = ne[0], ne[1]
            A = (rng.standard_normal((r, n_in)) / np.sqrt(n_in)).astype(np.float32)
            B = (rng.standard_normal((n_out, r)) * 0.01).astype(np.float32)
            tensors[f"{PREFIX}.{i}.{hf}.lora_A.weight"] = A
            tensors[f"{PREFIX}.{i}.{hf}.lora_B.weight"] = B
            gg.append((f"blk.{i}.{gn}.weight", A, B))
            targets.add(hf.split(".")[1])
    if not tensors:
        sys.exit(f"{a.model}: no blk.N.{{attn_q,...,ffn_down}}.weight tensors found")
    if missing:
        print(f"no adapter for {len(missing)} missing projections: {', '.join(missing[:8])}"
              + (" ..." if len(missing) > 8 else ""), file=sys.stderr)

    os.makedirs(a.out_dir, exist_ok=True)
    cfg = {
        "base_model_name_or_path": field(reader, "general.name") or os.path.basename(a.model),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "lora_alpha": int(alpha) if alpha == int(alpha) else alpha,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": r,
        "target_modules": sorted(targets),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }
    with open(os.path.join(a.out_dir, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(tensors, os.path.join(a.out_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    n = sum(t.size for t in tensors.values())
    print(f"{a.out_dir}: {len(tensors)} tensors, {n} parameters ({4 * n / 2**20:.1f} MiB f32), "
          f"r {r}, lora_alpha {alpha:g}, {n_layer} layers", file=sys.stderr)

    if a.gguf:
        w = gguf.GGUFWriter(a.gguf, arch)
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for name, A, B in gg:  # numpy [r, in] is ggml ne [in, r]; [out, r] is ne [r, out]
            w.add_tensor(name + ".lora_a", A)
            w.add_tensor(name + ".lora_b", B)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        print(f"{a.gguf}: llama.cpp LoRA GGUF, {2 * len(gg)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
