#!/usr/bin/env python3
"""An E2B-shaped audio tower with random weights (Gemma 3n or Gemma 4), for timing the audio encoder.

    python3 scripts/synth-audio-tower.py [gemma3n|gemma4] OUT_DIR      # needs torch, transformers 5.23
    cargo run --release -p hearth-media --example encode_audio -- OUT_DIR CLIP.wav

Gemma 3n (the default), as google/gemma-3n-E2B's audio config (the defaults of `Gemma3nAudioConfig`):
width 1536, 12 conformer blocks of 8 heads, sub-sampling convolutions of 128 and 32 channels, chunk 12,
left context 13, reduction 4, and the embedder into the text width 2048; 188 audio tokens a prompt.
About 1.4 GB.

Gemma 4, as google/gemma-4-E2B's (the defaults of `Gemma4AudioConfig`): width 1024, 12 blocks of 8 heads,
sub-sampling convolutions of 128 and 32 channels, an output projection to 1536 and the embedder into the
text width 1536; 25 tokens a second. The clippable products get finite bounds (wide enough not to cut
random activations), as the released checkpoint stores them. About 0.6 GB.

Only the audio tower and its embedder are written (`model.audio_tower.*`, `model.embed_audio.*`, bf16),
with a `config.json` that names them; the encoder reads nothing else.
"""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import save_file

args = sys.argv[1:]
family = args.pop(0) if args and args[0] in ("gemma3n", "gemma4") else "gemma3n"
if len(args) != 1:
    sys.exit(__doc__)
OUT = args[0]
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
if family == "gemma3n":
    audio = tf.Gemma3nAudioConfig()
    text = tf.Gemma3nTextConfig(hidden_size=2048)
    m = tf.models.gemma3n.modeling_gemma3n
    encoder = m.Gemma3nAudioEncoder(audio)
    embedder = m.Gemma3nMultimodalEmbedder(audio, text)
    config = {"model_type": "gemma3n", "audio_soft_tokens_per_image": 188,
              "audio_config": audio.to_dict(), "text_config": {"hidden_size": 2048}}
else:
    audio = tf.Gemma4AudioConfig()
    text = tf.Gemma4TextConfig(hidden_size=1536)
    m = tf.models.gemma4.modeling_gemma4
    encoder = m.Gemma4AudioModel(audio)
    embedder = m.Gemma4MultimodalEmbedder(audio, text)
    config = {"model_type": "gemma4", "audio_config": audio.to_dict(), "vision_config": None,
              "text_config": {"hidden_size": 1536}}
tensors = {}
with torch.no_grad():
    for prefix, module in (("model.audio_tower.", encoder), ("model.embed_audio.", embedder)):
        module.to(torch.bfloat16)
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, p[0].numel() ** -0.5)
            tensors[prefix + name] = p.detach().contiguous()
        for name, b in module.named_buffers():
            if name.endswith(("input_min", "output_min", "input_max", "output_max")):
                b.fill_(-100.0 if name.endswith("min") else 100.0)
                tensors[prefix + name] = b.detach().to(torch.float32).contiguous()
print(f"{sum(t.numel() for t in tensors.values()) / 1e6:.0f} M parameters")
save_file(tensors, os.path.join(OUT, "model.safetensors"))
json.dump(config, open(os.path.join(OUT, "config.json"), "w"), indent=1)
print("saved", OUT)
