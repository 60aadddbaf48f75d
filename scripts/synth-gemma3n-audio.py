#!/usr/bin/env python3
"""A Gemma 3n E2B-shaped audio tower with random weights, for timing the audio encoder.

    python3 scripts/synth-gemma3n-audio.py OUT_DIR      # needs torch, transformers 5.23
    cargo run --release -p hearth-media --example encode_audio -- OUT_DIR CLIP.wav

Shapes as google/gemma-3n-E2B's audio config (the defaults of `Gemma3nAudioConfig`): width 1536,
12 conformer blocks of 8 heads, sub-sampling convolutions of 128 and 32 channels, chunk 12, left context
13, reduction 4, and the embedder into the text width 2048; 188 audio tokens a prompt. Only the audio
tower and its embedder are written (`model.audio_tower.*`, `model.embed_audio.*`, bf16), with a
`config.json` that names them; the encoder reads nothing else. About 1.4 GB.
"""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import save_file

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
audio = tf.Gemma3nAudioConfig()
text = tf.Gemma3nTextConfig(hidden_size=2048)
torch.manual_seed(0)
with torch.no_grad():
    encoder = tf.models.gemma3n.modeling_gemma3n.Gemma3nAudioEncoder(audio).to(torch.bfloat16)
    embedder = tf.models.gemma3n.modeling_gemma3n.Gemma3nMultimodalEmbedder(audio, text).to(torch.bfloat16)
    tensors = {}
    for prefix, module in (("model.audio_tower.", encoder), ("model.embed_audio.", embedder)):
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, p.shape[-1] ** -0.5)
            tensors[prefix + name] = p.detach().contiguous()
print(f"{sum(t.numel() for t in tensors.values()) / 1e6:.0f} M parameters")
save_file(tensors, os.path.join(OUT, "model.safetensors"))
config = {"model_type": "gemma3n", "audio_soft_tokens_per_image": 188,
          "audio_config": audio.to_dict(), "text_config": {"hidden_size": 2048}}
json.dump(config, open(os.path.join(OUT, "config.json"), "w"), indent=1)
print("saved", OUT)
