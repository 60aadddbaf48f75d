#!/usr/bin/env python3
"""A Gemma 3n E2B-shaped text model with random weights, for speed comparisons with llama.cpp.

    python3 scripts/synth-gemma3n-e2b.py OUT_DIR      # needs torch, transformers 5.23
    python3 LLAMA/convert_hf_to_gguf.py OUT_DIR --outtype bf16 --outfile e2b-3n-bf16.gguf
    LLAMA/build/bin/llama-quantize e2b-3n-bf16.gguf e2b-3n-q4_k_m.gguf Q4_K_M

Shapes as google/gemma-3n-E2B's text config: 30 layers of width 2048, 8 query heads and 2 KV heads of
256, every fifth layer global, window 512, MLP 8192, AltUp with 4 streams, LAuReL rank 64, per-layer
inputs of 256 over a table of 262,144 ids, the last 10 layers sharing KV, activation sparsity 0.95 on the
first 10 layers, vocabulary 262,400, final softcap 30. `hearth synth` has no Gemma 3n preset; this goes
through transformers and llama.cpp's own converter and quantizer instead. The vocabulary is the tiny
test tokenizer (the converter pads it with `[PADn]` to 262,400; the benchmarks feed token ids, not
text). Writes about 9 GB of bf16 safetensors.
"""
import os
import shutil
import sys

import torch
import transformers as tf

if sys.argv[1] == "--add-shared-kv":
    import numpy as np
    sys.path.insert(0, os.environ.get("GGUF_PY", ""))
    import gguf
    src, dst = sys.argv[2], sys.argv[3]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vt = field.types[0]
        writer.add_key_value(field.name, field.contents(), vt,
                             sub_type=field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None)
    names = {t.name for t in reader.tensors}
    extra = []
    for i in range(20, 30):
        for n, shape in ((f"blk.{i}.attn_k.weight", (512, 2048)), (f"blk.{i}.attn_v.weight", (512, 2048)),
                         (f"blk.{i}.attn_k_norm.weight", (256,))):
            if n not in names:
                extra.append((n, np.zeros(shape, dtype=np.float16 if len(shape) == 2 else np.float32)))
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for n, a in extra:
        writer.add_tensor_info(n, a.shape, a.dtype, a.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    for _, a in extra:
        writer.write_tensor_data(a)
    writer.close()
    print("added", len(extra), "tensors ->", dst)
    sys.exit(0)

OUT = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "tests", "fixtures", "tiny", "gemma3n")
LAYERS = 30
types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(LAYERS)]
cfg = tf.Gemma3nTextConfig(
    vocab_size=262400, vocab_size_per_layer_input=262144, hidden_size=2048,
    intermediate_size=[8192] * LAYERS, num_hidden_layers=LAYERS, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, sliding_window=512, layer_types=types,
    hidden_size_per_layer_input=256, laurel_rank=64, altup_num_inputs=4, num_kv_shared_layers=10,
    activation_sparsity_pattern=[0.95] * 10 + [0.0] * (LAYERS - 10), final_logit_softcapping=30.0,
    tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    })
torch.set_default_dtype(torch.bfloat16)
with torch.device("meta"):
    model = tf.Gemma3nForCausalLM(cfg)
model = model.to_empty(device="cpu")
g = torch.Generator().manual_seed(0)
with torch.no_grad():
    for _, p in model.named_parameters():
        if p.dim() >= 2:
            p.normal_(0, p.shape[-1] ** -0.5, generator=g)
        else:
            p.fill_(1.0)
    for _, b in model.named_buffers():
        if b.is_floating_point():
            b.fill_(1.0)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
model.save_pretrained(OUT, safe_serialization=True, max_shard_size="4GB")
for f in ("tokenizer.model", "tokenizer_config.json"):
    shutil.copy(os.path.join(TINY, f), OUT)
print("saved", OUT)

# llama.cpp loads k/v projections and k norms for the KV-sharing layers too (the released checkpoints
# carry them; transformers drops them, so this random model has none). After converting and
# quantizing, add unused F16 zeros for them so llama-bench loads the file:
#     python3 scripts/synth-gemma3n-e2b.py --add-shared-kv IN.gguf OUT.gguf
