#!/usr/bin/env python3
"""Write the committed seed corpora, fuzz/seeds/<target>/, from the tiny
test fixtures and small synthetic files (Python's standard library only).
Run from anywhere: `python3 fuzz/make_seeds.py`. Deterministic; seeds stay
small (the whole tree is well under 1 MB)."""

import json
import os
import random
import shutil
import struct
import subprocess
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEEDS = os.path.join(HERE, "seeds")
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny")
GUARD_DATA = os.path.join(ROOT, "crates", "guard", "tests", "data")


def out(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


def sections(files):
    """A checkpoint-directory input: `--- NAME` then the file, per file."""
    b = b""
    for name, data in files:
        if isinstance(data, str):
            data = data.encode()
        b += b"--- " + name.encode() + b"\n" + data + b"\n"
    return b


# ---------------------------------------------------------------- gguf_parse
def gguf_seeds():
    d = os.path.join(SEEDS, "gguf_parse")
    os.makedirs(d, exist_ok=True)
    # seed.sh writes the synthetic GGUFs and a 64 KiB head of a real one.
    subprocess.run([os.path.join(HERE, "seed.sh"), d], check=True, stdout=subprocess.DEVNULL)


# ------------------------------------------------------------ hf_safetensors
DT = {"F32": ("<f", 4), "F16": ("<e", 2), "BF16": (None, 2), "I64": ("<q", 8)}


def st_header(tensors, meta=None):
    """tensors: [(name, dtype, shape)] -> header dict with contiguous offsets."""
    h = {}
    if meta is not None:
        h["__metadata__"] = meta
    off = 0
    for name, dt, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        size = n * DT[dt][1]
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    return h, off


def st_file(tensors, meta=None):
    h, size = st_header(tensors, meta)
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    data = bytes((i * 37) & 0x3F for i in range(size))
    return struct.pack("<Q", len(hb)) + hb + data


def st_json(tensors, meta=None):
    h, _ = st_header(tensors, meta)
    return json.dumps(h)


def gemma_tensors(layers, hidden=8, ffn=16, heads=2, kv=1, hd=4, vocab=13, dt="F32", prefix="model."):
    t = [(prefix + "embed_tokens.weight", dt, [vocab, hidden]), (prefix + "norm.weight", dt, [hidden])]
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        t += [
            (p + "input_layernorm.weight", dt, [hidden]),
            (p + "self_attn.q_proj.weight", dt, [heads * hd, hidden]),
            (p + "self_attn.k_proj.weight", dt, [kv * hd, hidden]),
            (p + "self_attn.v_proj.weight", dt, [kv * hd, hidden]),
            (p + "self_attn.o_proj.weight", dt, [hidden, heads * hd]),
            (p + "self_attn.q_norm.weight", dt, [hd]),
            (p + "self_attn.k_norm.weight", dt, [hd]),
            (p + "post_attention_layernorm.weight", dt, [hidden]),
            (p + "pre_feedforward_layernorm.weight", dt, [hidden]),
            (p + "post_feedforward_layernorm.weight", dt, [hidden]),
            (p + "mlp.gate_proj.weight", dt, [ffn, hidden]),
            (p + "mlp.up_proj.weight", dt, [ffn, hidden]),
            (p + "mlp.down_proj.weight", dt, [hidden, ffn]),
        ]
    return t


GEMMA3N_CONFIG = json.dumps({
    "model_type": "gemma3n_text", "hidden_size": 8, "intermediate_size": [16, 16],
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "sliding_window": 8, "vocab_size": 13, "vocab_size_per_layer_input": 11,
    "hidden_size_per_layer_input": 2, "layer_types": ["sliding_attention", "full_attention"],
    "num_kv_shared_layers": 1, "altup_num_inputs": 4, "laurel_rank": 2,
    "activation_sparsity_pattern": [0.95, 0.0], "final_logit_softcapping": 30.0,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
})

GEMMA4_CONFIG = json.dumps({
    "model_type": "gemma4_text", "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "num_global_key_value_heads": 1, "head_dim": 4, "global_head_dim": 8,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "sliding_window": 8,
    "vocab_size": 13, "layer_types": ["sliding_attention", "full_attention"],
    "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 2,
    "vocab_size_per_layer_input": 13, "enable_moe_block": True, "num_experts": 2,
    "top_k_experts": 1, "moe_intermediate_size": 4,
    "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
                        "sliding_attention": {"rope_theta": 10000.0}},
})


def hf_safetensors_seeds():
    T = "hf_safetensors"
    out(T, "framed-gemma3", sections([("model.safetensors", st_json(gemma_tensors(2)))]))
    out(T, "framed-bf16-f16", sections([
        ("model.safetensors", st_json(gemma_tensors(1, dt="BF16")[:6] + gemma_tensors(1, dt="F16")[6:], {"format": "pt"}))]))
    out(T, "raw-gemma3", sections([("model.safetensors", st_file(gemma_tensors(1)))]))
    tens = gemma_tensors(2, prefix="model.language_model.")
    a, b = tens[: len(tens) // 2], tens[len(tens) // 2:]
    index = {"metadata": {"total_size": 1}, "weight_map": {n: "model-00001-of-00002.safetensors" for n, _, _ in a}}
    index["weight_map"].update({n: "model-00002-of-00002.safetensors" for n, _, _ in b})
    out(T, "sharded-index", sections([
        ("model.safetensors.index.json", json.dumps(index)),
        ("model-00001-of-00002.safetensors", st_json(a)),
        ("model-00002-of-00002.safetensors", st_json(b)),
    ]))
    out(T, "index-escapes", sections([
        ("model.safetensors.index.json", json.dumps({"weight_map": {"x": "../config.json", "y": "sub/model.safetensors", "z": 7}})),
    ]))
    out(T, "gemma3n-per-layer", sections([
        ("config.json", GEMMA3N_CONFIG),
        ("model.safetensors", st_json([
            ("model.language_model.embed_tokens_per_layer.weight", "F32", [11, 4]),
            ("model.language_model.altup_projections.0.weight", "F32", [8, 8]),
            ("model.language_model.altup_projections.1.weight", "F32", [8, 8]),
            ("model.language_model.altup_unembed_projections.0.weight", "F32", [8, 8]),
            ("model.language_model.layers.0.laurel.linear_left.weight", "F32", [2, 8]),
            ("model.language_model.layers.1.self_attn.k_proj.weight", "F32", [4, 8]),
            ("model.language_model.layers.0.altup.correct_output_scale", "F32", [8]),
        ])),
    ]))
    out(T, "gemma4-moe", sections([
        ("config.json", GEMMA4_CONFIG),
        ("model.safetensors", st_json([
            ("model.language_model.layers.0.experts.gate_up_proj", "BF16", [2, 8, 8]),
            ("model.language_model.layers.0.experts.down_proj", "BF16", [2, 8, 4]),
            ("model.language_model.layers.0.router.proj.weight", "F32", [2, 8]),
            ("model.language_model.layers.0.router.scale", "F32", [8]),
            ("model.language_model.layers.0.router.per_expert_scale", "F32", [2]),
            ("model.language_model.layers.0.layer_scalar", "F32", [1]),
            ("model.language_model.per_layer_projection_norm.weight", "F32", [2]),
            ("lm_head.weight", "F32", [13, 8]),
        ])),
    ]))
    out(T, "bad-dtype", sections([("model.safetensors", st_json([("model.norm.weight", "I64", [8])]))]))
    hdr = json.dumps({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 16]}})
    out(T, "short-data", sections([("model.safetensors", hdr)]))
    out(T, "empty", sections([("model.safetensors", "{}")]))
    real = read(TINY, "gemma3", "model.safetensors")
    n = struct.unpack("<Q", real[:8])[0]
    out(T, "fixture-header-only", sections([("model.safetensors", real[: 8 + n])]))


def hf_config_seeds():
    T = "hf_config"
    for m in sorted(os.listdir(TINY)):
        p = os.path.join(TINY, m, "config.json")
        if os.path.isfile(p):
            out(T, m + ".json", read(p))
    out(T, "gemma3n-small.json", GEMMA3N_CONFIG)
    out(T, "gemma4-small.json", GEMMA4_CONFIG)
    out(T, "gemma2-flat.json", json.dumps({
        "model_type": "gemma2", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 13,
        "max_position_embeddings": 64, "sliding_window": 8, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 4}))


def hf_tokenizer_seeds():
    T = "hf_tokenizer"
    g3 = os.path.join(TINY, "gemma3")
    g4 = os.path.join(TINY, "gemma4_e2b")
    out(T, "gemma3-spm", sections([
        ("tokenizer.model", read(g3, "tokenizer.model")),
        ("tokenizer_config.json", read(g3, "tokenizer_config.json")),
    ]))
    out(T, "gemma3-json", sections([("tokenizer.json", read(g3, "tokenizer.json"))]))
    out(T, "gemma4-bpe", sections([
        ("config.json", read(g4, "config.json")),
        ("tokenizer.json", read(g4, "tokenizer.json")),
    ]))
    small = json.loads(small_tokenizer_json())
    out(T, "small-added", sections([
        ("tokenizer.json", json.dumps(small)),
        ("added_tokens.json", json.dumps({"<unused0>": 9, "<|x|>": 20, "far": 99999})),
        ("tokenizer_config.json", json.dumps({
            "add_eos_token": True, "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
            "added_tokens_decoder": {"7": {"content": "<image>", "special": True}, "12": {"content": "x\u2581y"}}})),
        ("chat_template.jinja", "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}"),
        ("config.json", json.dumps({"model_type": "gemma3", "text_config": {"vocab_size": 16}, "eos_token_id": [1, 5]})),
    ]))
    out(T, "gemma4-small", sections([
        ("config.json", json.dumps({"model_type": "gemma4", "eos_token_id": [1, 106]})),
        ("tokenizer.json", json.dumps(dict(small, post_processor={"single": [{"SpecialToken": {"id": "<bos>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<eos>"}}]}))),
    ]))


def small_tokenizer_json():
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    pieces = ["\u2581", "a", "b", "ab", "\u2581a", "<0x0A>", "<0x41>"]
    vocab = {t: i for i, t in enumerate(specials + pieces)}
    return json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(specials)],
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "vocab": vocab,
                  "merges": ["a b", ["\u2581", "a"]]},
    })


def spm_model_seeds():
    T = "spm_model"
    seen = set()
    for m in sorted(os.listdir(TINY)):
        p = os.path.join(TINY, m, "tokenizer.model")
        if os.path.isfile(p):
            b = read(p)
            if b not in seen:
                seen.add(b)
                out(T, m + ".model", b)
    b = read(TINY, "gemma3", "tokenizer.model")
    out(T, "head-512.model", b[:512])

    def varint(n):
        r = b""
        while True:
            x = n & 0x7F
            n >>= 7
            if n:
                r += bytes([x | 0x80])
            else:
                return r + bytes([x])

    def piece(text, score, kind):
        t = text.encode()
        body = b"\x0a" + varint(len(t)) + t + b"\x15" + struct.pack("<f", score) + b"\x18" + varint(kind)
        return b"\x0a" + varint(len(body)) + body

    tiny = b"".join([piece("<unk>", 0, 2), piece("<s>", 0, 3), piece("</s>", 0, 3),
                     piece("<0x41>", 0, 6), piece("\u2581a", -1.0, 1), piece("b", -2.0, 1)])
    out(T, "handmade.model", tiny + b"\x12\x04\x08\x02\x10\x00")


# ------------------------------------------------------------- chat templates
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

GEMMA2_TEMPLATE = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"""

CHATML_THINK = """{%- set ns = namespace(last_user=0) -%}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor -%}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content.startswith('<think>') %}{{ m.content.split('</think>')[-1].strip() }}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if not enable_thinking %}<think>

</think>

{% endif %}{% endif -%}"""

HOSTILE = {
    "nested-range": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "huge-range": "{{ range(10**12) | length }}",
    "repeat": "{{ 'x' * 1000000000 }}",
    "repeat-loop": "{% set s = 'xxxxxxxxxx' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}{{ s | length }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "recursive-loop": "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
    "deep-nesting": "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
    "join-big": "{{ range(100000) | join(',') | length }}",
    "ns-counter": "{% set ns = namespace(n=0) %}{% for m in messages %}{% for c in m.content %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
    "python-methods": "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k.upper() }}={{ v }}{% endfor %}{{ messages[0].content.strip().lower().split(' ') | tojson }}{{ 'x'.startswith('x') }}{{ '{}'.format(1) }}",
    "raise": "{{ raise_exception('no') }}",
    "pow": "{{ 2 ** 100000 }}{{ 10 ** 10 ** 10 }}",
    "filters": "{{ messages | map(attribute='content') | map('upper') | list | tojson(indent=2) }}{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ 'a\n b' | indent(3) }}{{ [3,1,2] | sort | reverse | list }}",
}


def chat_template_seeds():
    T = "chat_template"
    out(T, "gemma3.jinja", GEMMA3_TEMPLATE)
    out(T, "gemma2.jinja", GEMMA2_TEMPLATE)
    out(T, "chatml-think.jinja", CHATML_THINK)
    for k, v in HOSTILE.items():
        out(T, k + ".jinja", v)


def random_seeds(target, n, lo, hi, seed):
    r = random.Random(seed)
    for i in range(n):
        out(target, f"random-{i}", bytes(r.randrange(256) for _ in range(r.randrange(lo, hi))))


# ---------------------------------------------------------------------- media
def png(w, h, color=2, depth=8, interlace=0, rows=None, extra=b"", idat=None):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    if idat is None:
        stride = (w * ch * depth + 7) // 8
        raw = b"".join(b"\x00" + bytes((x * 7 + y * 3) & 0xFF for x in range(stride)) for y in range(h))
        idat = zlib.compress(raw, 9)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def image_seeds():
    T = "image_decode"
    for f in ["img_a.png", "img_b.jpg", "img_a.webp", "img_c.png"]:
        out(T, f, read(TINY, "gemma3_vision", f))
    out(T, "rgb8.png", png(5, 3))
    out(T, "rgba8.png", png(4, 4, color=6))
    out(T, "gray1.png", png(9, 2, color=0, depth=1))
    out(T, "gray-alpha16.png", png(3, 3, color=4, depth=16))
    plte = struct.pack(">I", 6) + b"PLTE" + b"\xff\x00\x00\x00\xff\x00" + struct.pack(">I", zlib.crc32(b"PLTE\xff\x00\x00\x00\xff\x00"))
    trns = struct.pack(">I", 1) + b"tRNS" + b"\x80" + struct.pack(">I", zlib.crc32(b"tRNS\x80"))
    out(T, "palette-trns.png", png(4, 2, color=3, depth=2, extra=plte + trns))
    out(T, "interlaced.png", png(7, 7, interlace=1, idat=zlib.compress(b"\x00" * 200)))
    out(T, "claims-100000x100000.png", png(100000, 100000, idat=zlib.compress(b"\x00" * 64)))
    out(T, "claims-16384x16384.png", png(16384, 16384, color=6, idat=zlib.compress(b"\x00" * 4096, 9)))
    out(T, "claims-8000x8000.png", png(8000, 8000, color=0, idat=zlib.compress(b"\x00" * 20000, 9)))
    # JPEG: SOI, a baseline SOF0 claiming 65500x65500, then EOI.
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 65500, 65500, 1) + b"\x01\x11\x00"
    out(T, "claims-65500.jpg", b"\xff\xd8" + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x00" * 16 + b"\xff\xd9")
    # WebP lossless header claiming 16384x16384.
    bits = (16383) | (16383 << 14)
    vp8l = b"\x2f" + struct.pack("<I", bits) + b"\x00" * 8
    out(T, "claims-16384.webp", b"RIFF" + struct.pack("<I", 4 + 8 + len(vp8l)) + b"WEBPVP8L" + struct.pack("<I", len(vp8l)) + vp8l)


def wav(samples, rate=16000, channels=1, bits=16, fmt=1, data_size=None, riff_size=None):
    if bits == 8:
        data = bytes((s + 128) & 0xFF for s in samples)
    elif bits == 16:
        data = b"".join(struct.pack("<h", s) for s in samples)
    elif bits == 24:
        data = b"".join(struct.pack("<i", s * 256)[:3] for s in samples)
    elif fmt == 3:
        data = b"".join(struct.pack("<f", s / 32768) for s in samples)
    else:
        data = b"".join(struct.pack("<i", s * 65536) for s in samples)
    block = channels * bits // 8
    fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * block, block, bits)
    ds = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt_chunk + b"data" + struct.pack("<I", ds) + data
    rs = len(body) if riff_size is None else riff_size
    return b"RIFF" + struct.pack("<I", rs) + body


def audio_seeds():
    T = "audio_decode"
    import math
    tone = [int(8000 * math.sin(i * 0.3)) for i in range(800)]
    out(T, "mono16.wav", wav(tone))
    out(T, "stereo8-8k.wav", wav(tone[:600], rate=8000, channels=2, bits=8))
    out(T, "mono24-44k.wav", wav(tone, rate=44100, bits=24))
    out(T, "float32.wav", wav(tone, rate=22050, bits=32, fmt=3))
    out(T, "claims-2^32-samples.wav", wav(tone[:200], data_size=0xFFFFFFFF, riff_size=0xFFFFFFFF))
    out(T, "claims-zero.wav", wav(tone[:200], data_size=0, riff_size=0))
    out(T, "rate-1hz.wav", wav(tone[:200], rate=1))
    out(T, "truncated.wav", wav(tone)[:60])
    out(T, "sweep-head.ogg", read(ROOT, "tests", "fixtures", "audio", "sweep.ogg"))
    out(T, "speech.opus", read(ROOT, "tests", "fixtures", "audio", "speech.opus"))
    # Silent MPEG-1 layer III frames (128 kbit/s, 44.1 kHz: 417 bytes each).
    frame = b"\xff\xfb\x90\x64" + b"\x00" * 413
    out(T, "silence.mp3", frame * 4)
    out(T, "id3-silence.mp3", b"ID3\x03\x00\x00\x00\x00\x00\x0a" + b"\x00" * 10 + frame * 2)


# -------------------------------------------------------------------- grammars
GBNF = {
    "json.gbnf": r'''root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
''',
    "arith.gbnf": '''# arithmetic
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")"
num ::= [0-9]+
''',
    "list.gbnf": 'root ::= item{1,3} "\\n"\nitem ::= "- " [a-zA-Z ]{,20} "\\n"\n',
    "classes.gbnf": 'root ::= [^\\n] . [\\u00e9-\\U0001F600] "\\x41\\t\\r" [\\]\\-^] {2,}\n',
    "alts.gbnf": 'root ::= "a"\nroot ::= "b" | x?\nx ::= ("c" | "d")*\n',
    "token-ref.gbnf": 'root ::= <[12]> !<[3]>\n',
    "undefined.gbnf": 'root ::= missing\n',
}


def grammar_seeds():
    for name, g in GBNF.items():
        out("gbnf", name, g)
    T = "grammar"
    out(T, "gbnf-json", "gbnf\n" + GBNF["json.gbnf"])
    out(T, "gbnf-arith", "gbnf\n" + GBNF["arith.gbnf"])
    out(T, "regex-date", "regex\n\\d{4}-\\d{2}-\\d{2}")
    out(T, "regex-alt", "regex\n(yes|no|maybe)( [a-z]{1,8}){0,3}")
    out(T, "regex-rep", "regex\n(a{1,100}){1,100}b")
    out(T, "lark-simple", 'lark\nstart: "a"+ b\nb: /[0-9]{2}/\n')
    out(T, "lark-json", 'lark\nstart: %json {"type": "object", "properties": {"a": {"type": "integer"}}}\n')
    out(T, "json-object", "json_object\n")
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}, "required": ["name"]},
        {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "minItems": 1, "maxItems": 4, "uniqueItems": True},
        {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"},
        {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "number", "multipleOf": 0.5}]},
        {"type": "string", "format": "date-time"},
        {"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 2},
        {"oneOf": [{"const": 1}, {"const": "1"}], "allOf": [{"type": ["integer", "string"]}]},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        False,
        True,
    ]
    for i, s in enumerate(schemas):
        out(T, f"schema-{i}", "json\n" + json.dumps(s))
    out(T, "schema-bare", json.dumps(schemas[0]))


def calc_seeds():
    T = "calc"
    progs = [
        "1 + 2 * 3", "x = 1,250 * 20%; round(x / 3, 2)", "$1,200.50 - 3.5 = 1197", "2 ** 10 ^ 2",
        "sqrt(2) * sqrt(8)", "7 // 2 + 7 % 2", "max(1, 2, 3) - min(4, -5)", "floor(-2.5) + ceil(2.1) + abs(-3)",
        "a = 3\nb = a * a\nb / 0", "2 ^ 0.5", "(((((1)))))", "10 ** 5000 * 10 ** 5000",
        "<<20*4=80>> and <<2*80=160>> then <<1/3=0.33>>", "-(-(-1))", ".5 + 5. + 1e3", "round(2.5) round(3.5)",
    ]
    for i, p in enumerate(progs):
        out(T, f"prog-{i}", p)
    with open(os.path.join(GUARD_DATA, "gsm8k_annotations.jsonl")) as f:
        for i, line in enumerate(f):
            if i >= 10:
                break
            anns = json.loads(line)["annotations"]
            if anns:
                out(T, f"gsm8k-{i}", "\n".join(anns))


def logic_seeds():
    T = "logic"
    for d in ["grammar", "puzzles"]:
        p = os.path.join(GUARD_DATA, d)
        for f in sorted(os.listdir(p)):
            if f.endswith(".py"):
                b = read(p, f)
                if len(b) < 4000:
                    out(T, f"{d}-{f}", b)
    out(T, "all-ops.py", """from z3 import *
a, b, c = Ints('a b c')
p, q = Bools('p q')
s = Solver()
s.add(1 <= a <= 9, b == a / 2, c == a % 3, Implies(p, q), Xor(p, q), If(p, a, b) > 0)
s.add(Distinct(a, b, c), Sum(a, b) == Product(b, c) - Abs(-c), Or(Not(p), And(q, a != 3)))
solve(a > 0)
print(s.check())
m = s.model()
print(m)
print(m.eval(a))
""")


def ifeval_seeds():
    T = "ifeval"
    with open(os.path.join(GUARD_DATA, "ifeval_visible.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    for i, r in enumerate(rows[:24]):
        out(T, f"row-{i}", r["prompt"] + "\n===\n" + r["response"][:1500])
    for i, r in enumerate(rows[24:30]):
        inp = {"key": r["key"], "prompt": r["prompt"][:300], "instruction_id_list": r["instruction_id_list"], "kwargs": r["kwargs"]}
        out(T, f"jsonl-{i}", json.dumps(inp) + "\n===\n" + r["response"][:800])


def server_seeds():
    T = "server_request"
    img = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    bodies = {
        "chat-basic": ("chat", {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                "temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "stop": ["\n\n", "END"], "seed": 1, "n": 2}),
        "chat-tools": ("chat", {"messages": [{"role": "user", "content": "weather?"},
                                             {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
                                             {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                                "tools": [{"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
                                "tool_choice": {"type": "function", "function": {"name": "get"}}, "parallel_tool_calls": False}),
        "chat-schema": ("chat", {"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
                                 "logprobs": True, "top_logprobs": 5, "frequency_penalty": 0.5, "presence_penalty": -0.5, "logit_bias": {"12": -100}}),
        "chat-image": ("chat", {"messages": [{"role": "user", "content": [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": img}}, {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}],
                                "stream": True, "stream_options": {"include_usage": True}}),
        "chat-grammar": ("chat", {"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"yes\" | \"no\"", "think": True, "thinking_budget": 100, "guard": ["calc", "logic"], "reasoning_effort": "low"}),
        "chat-regex": ("chat", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "regex", "regex": "[0-9]+"}, "max_completion_tokens": 5, "top_k": 40, "min_p": 0.1, "repeat_penalty": 1.1}),
        "completion": ("completions", {"model": "m", "prompt": "Once upon", "max_tokens": 8, "echo": False, "logprobs": 3, "stop": "\n"}),
        "completion-ids": ("completions", {"prompt": [2, 100, 200], "n": 3, "temperature": 0}),
        "messages": ("messages", {"model": "claude", "max_tokens": 64, "system": [{"type": "text", "text": "sys"}],
                                  "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": img.split(',')[1]}}]},
                                               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {"x": 1}}]},
                                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "2"}]}],
                                  "tools": [{"name": "calc", "description": "d", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
                                  "thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 0.5, "stop_sequences": ["X"], "stream": True}),
        "count-tokens": ("count_tokens", {"messages": [{"role": "user", "content": "hello"}]}),
        "ollama-chat": ("ollama_chat", {"model": "gemma3", "messages": [{"role": "user", "content": "hi", "images": ["iVBORw0KGgo="]}], "stream": False, "keep_alive": "1h30m",
                                        "options": {"temperature": 0.2, "num_predict": 10, "top_k": 5, "seed": 3, "stop": ["a"], "num_ctx": 2048}, "format": "json", "think": True, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
        "ollama-load": ("ollama_chat", {"model": "gemma3", "messages": [], "keep_alive": 0}),
        "ollama-generate": ("ollama_generate", {"model": "gemma3", "prompt": "hi", "system": "s", "raw": False, "keep_alive": -1, "format": {"type": "object"}, "logprobs": True, "top_logprobs": 2}),
        "ollama-raw": ("ollama_generate", {"prompt": "raw text", "raw": True, "logprobs": True, "top_logprobs": 3, "keep_alive": "500ms"}),
    }
    for name, (ep, body) in bodies.items():
        out(T, name, ep + "\n" + json.dumps(body))
    out(T, "chat-not-object", "chat\n[1, 2]")
    out(T, "messages-empty", "messages\n{}")


def telegram_seeds():
    T = "telegram_update"
    chat = {"id": -1001, "type": "supergroup", "title": "g"}
    frm = {"id": 7, "is_bot": False, "first_name": "A", "username": "a"}

    def msg(**k):
        m = {"message_id": 1, "date": 1700000000, "chat": chat, "from": frm}
        m.update(k)
        return m

    ups = {
        "text": {"update_id": 1, "message": msg(text="hello")},
        "command": {"update_id": 2, "message": msg(text="/guard@HearthBot on", entities=[{"type": "bot_command", "offset": 0, "length": 15}])},
        "photo": {"update_id": 3, "message": msg(photo=[{"file_id": "s", "file_unique_id": "u1", "width": 90, "height": 90}, {"file_id": "L", "file_unique_id": "u2", "width": 900, "height": 900, "file_size": 1000}], caption="look")},
        "voice": {"update_id": 4, "message": msg(voice={"file_id": "v", "file_unique_id": "u", "duration": 3, "mime_type": "audio/ogg"})},
        "voice-no-mime": {"update_id": 5, "message": msg(voice={"file_id": "v", "file_unique_id": "u", "duration": 3})},
        "audio": {"update_id": 6, "message": msg(audio={"file_id": "a", "file_unique_id": "u", "duration": 3, "title": "t"})},
        "sticker": {"update_id": 7, "message": msg(sticker={"file_id": "s", "file_unique_id": "u", "width": 1, "height": 1, "is_animated": False, "is_video": False, "type": "regular"})},
        "video-note": {"update_id": 8, "message": msg(video_note={"file_id": "s", "file_unique_id": "u", "length": 1, "duration": 1})},
        "document": {"update_id": 9, "message": msg(document={"file_id": "d", "file_unique_id": "u", "file_name": "x.pdf"})},
        "edited": {"update_id": 10, "edited_message": msg(text="edit", edit_date=1700000001)},
        "channel-post": {"update_id": 11, "channel_post": {"message_id": 1, "date": 1, "chat": {"id": -100, "type": "channel", "title": "c"}, "text": "post"}},
        "callback": {"update_id": 12, "callback_query": {"id": "q", "from": frm, "chat_instance": "c", "data": "x"}},
        "private-raw": {"update_id": 13, "message": {"message_id": 2, "date": 1, "chat": {"id": 5, "type": "private", "first_name": "B"}, "text": "hi", "unknown_field": [1, 2]}},
        "no-update-id": {"message": msg(text="x")},
    }
    for name, u in ups.items():
        out(T, name + ".json", json.dumps(u))


def main():
    if os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    gguf_seeds()
    hf_safetensors_seeds()
    hf_config_seeds()
    hf_tokenizer_seeds()
    spm_model_seeds()
    chat_template_seeds()
    random_seeds("chat_template_gen", 12, 16, 600, 1)
    image_seeds()
    audio_seeds()
    grammar_seeds()
    random_seeds("json_schema_gen", 12, 16, 400, 2)
    calc_seeds()
    logic_seeds()
    ifeval_seeds()
    server_seeds()
    telegram_seeds()
    total = 0
    for d, _, files in os.walk(SEEDS):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    print(f"seeds: {total} bytes")


if __name__ == "__main__":
    main()
