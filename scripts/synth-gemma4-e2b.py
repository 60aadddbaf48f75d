#!/usr/bin/env python3
"""A Gemma 4 E2B-shaped text model with random weights, for speed comparisons with llama.cpp.

    python3 scripts/synth-gemma4-e2b.py OUT_DIR      # needs torch, transformers 5.23, tokenizers
    python3 LLAMA/convert_hf_to_gguf.py OUT_DIR --outtype bf16 --outfile e2b-bf16.gguf
    LLAMA/build/bin/llama-quantize e2b-bf16.gguf e2b-q4_k_m.gguf Q4_K_M

Shapes as google/gemma-4-E2B's text config: 35 layers of width 1536, 8 query heads and 1 KV head of 256
(512 on the global layers), every fifth layer global, window 512, MLP 6144 (doubled on the 20 KV-sharing
layers), per-layer inputs of 256, vocabulary 262,144, final softcap 30. `hearth synth` has no Gemma 4
preset yet; this goes through transformers and llama.cpp's own converter and quantizer instead. The
vocabulary is the tiny test tokenizer padded with special `<unusedN>` tokens to 262,144 (the benchmarks
feed token ids, not text). Writes about 10 GB of bf16 safetensors.
"""
import os
import sys

import torch
import transformers as tf
from tokenizers import AddedToken, Tokenizer

OUT = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "tests", "fixtures", "tiny", "gemma4_vision")
LAYERS, VOCAB = 35, 262144
types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(LAYERS)]
cfg = tf.Gemma4TextConfig(
    vocab_size=VOCAB, hidden_size=1536, intermediate_size=6144, num_hidden_layers=LAYERS,
    num_attention_heads=8, num_key_value_heads=1, head_dim=256, sliding_window=512, layer_types=types,
    per_layer_config={str(i): {"head_dim": 512} for i, t in enumerate(types) if t == "full_attention"},
    final_logit_softcapping=30.0, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=256,
    num_kv_shared_layers=20, use_double_wide_mlp=True, tie_word_embeddings=True,
    rope_parameters={
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    })
torch.set_default_dtype(torch.bfloat16)
with torch.device("meta"):
    model = tf.Gemma4ForCausalLM(cfg)
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

tok = Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
n = tok.get_vocab_size()
tok.add_special_tokens([AddedToken(f"<unused{i}>", special=True, normalized=False) for i in range(VOCAB - n)])
tok.save(os.path.join(OUT, "tokenizer.json"))
with open(os.path.join(TINY, "tokenizer_config.json")) as src, open(os.path.join(OUT, "tokenizer_config.json"), "w") as dst:
    dst.write(src.read())
print("saved", OUT)
