#!/usr/bin/env python3
"""An E2B-shaped audio tower with random weights (Gemma 3n or Gemma 4), for timing the audio encoder.

    python3 scripts/synth-audio-tower.py [gemma3n|gemma4] OUT_DIR      # needs torch, transformers 5.23
    cargo run --release -p hearth-media --example encode_audio -- OUT_DIR CLIP.wav

    python3 scripts/synth-audio-tower.py --mmproj LLAMA_CPP_DIR OUT_DIR   # Gemma 4, as llama.cpp's file
    hearth logits -m tests/fixtures/tiny/gemma4_audio/model-f32.gguf --mmproj OUT_DIR/mmproj-f16.gguf \
        --audio CLIP.wav --embeddings -t 2
    llama-mtmd-cli -m (the same) --mmproj OUT_DIR/mmproj-f16.gguf --audio CLIP.wav -p Hear -n 1 -t 2

With `--mmproj`, the Gemma 4 tower goes into a whole `Gemma4ForConditionalGeneration` (the tiny text model
of tests/fixtures/tiny/gemma4_audio, and a tiny vision tower, because llama.cpp's converter writes an mmproj
only for a model with one) and llama.cpp's `convert_hf_to_gguf.py --mmproj --outtype f16` writes
OUT_DIR/mmproj-f16.gguf: the same file for both engines, laid out as the converter lays it out.

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
llama = None
if args[:1] == ["--mmproj"] and len(args) == 3:
    llama, args = args[1], ["gemma4", args[2]]
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
if llama is not None:
    import shutil
    import subprocess
    import tempfile
    tiny = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tiny")
    whole = tf.Gemma4Config.from_pretrained(os.path.join(tiny, "gemma4_audio"))
    whole.audio_config = audio
    whole.vision_config = tf.Gemma4VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, patch_size=4, position_embedding_size=64, pooling_kernel_size=3)
    whole.boi_token_id, whole.eoi_token_id, whole.image_token_id = 515, 516, 517
    model = tf.Gemma4ForConditionalGeneration(whole).eval()
    # The tower's random weights above; the embedder's projection goes into the tiny text width.
    state = {k: v for k, v in tensors.items() if not k.startswith("model.embed_audio.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    with tempfile.TemporaryDirectory() as tmp:
        model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tiny, "gemma4_audio", f), tmp)
        shutil.copy(os.path.join(tiny, "gemma4_vision", "preprocessor_config.json"), tmp)
        env = dict(os.environ, PYTHONPATH=os.path.join(llama, "gguf-py"))
        subprocess.run([sys.executable, os.path.join(llama, "convert_hf_to_gguf.py"), tmp, "--mmproj",
                        "--outtype", "f16", "--outfile", os.path.join(OUT, "mmproj-f16.gguf")],
                       check=True, env=env)
    print("wrote", os.path.join(OUT, "mmproj-f16.gguf"))
    sys.exit(0)
save_file(tensors, os.path.join(OUT, "model.safetensors"))
json.dump(config, open(os.path.join(OUT, "config.json"), "w"), indent=1)
print("saved", OUT)
