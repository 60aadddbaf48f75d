#!/usr/bin/env bash
# Create the seed corpus for the gguf_parse fuzz target in DIR (default
# fuzz/corpus/gguf_parse, gitignored; make_seeds.py writes the committed
# fuzz/seeds/gguf_parse with it). Seeds: small synthetic GGUFs covering every
# metadata value type, nested arrays and a few tensor types, plus the head of
# the tiny Gemma 3 fixture.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/corpus/gguf_parse}"
fixtures="$here/../tests/fixtures/tiny/gemma3"
mkdir -p "$out"

# The first 64 KiB of a real model: header, tokenizer metadata, tensor index.
head -c 65536 "$fixtures/model-q8_0.gguf" > "$out/gemma3-q8_0-head64k.gguf"

python3 - "$out" <<'PY'
import struct, sys, os
out = sys.argv[1]

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

# value type ids from the GGUF spec
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FIX = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
       F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        body = b"".join(val(et, x) for x in items)
        return struct.pack("<IQ", et, len(items)) + body
    return struct.pack(FIX[t], v)

def gguf(kvs, tensors, version=3, align=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += s(k) + struct.pack("<I", t) + val(t, v)
    off, offs = 0, []
    for name, dims, ty, data in tensors:
        offs.append(off)
        off = (off + len(data) + align - 1) // align * align
    for (name, dims, ty, data), o in zip(tensors, offs):
        head += s(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ty, o)
    head += b"\0" * (-len(head) % align)
    body = b""
    for (name, dims, ty, data), o in zip(tensors, offs):
        body += b"\0" * (o - len(body)) + data
    return head + body

def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

all_types = [
    ("general.architecture", STR, "gemma3"),
    ("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 700), ("i16", I16, -700),
    ("u32", U32, 70000), ("i32", I32, -70000), ("f32", F32, 1.5),
    ("bool", BOOL, 1), ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)),
    ("f64", F64, 0.25),
    ("tokens", ARR, (STR, ["<pad>", "a", "\u2581b"])),
    ("scores", ARR, (F32, [0.0, -1.0, -2.0])),
    ("types", ARR, (I32, [3, 1, 1])),
    ("nested", ARR, (ARR, [(I32, [1, -2]), (F64, [0.5]), (ARR, [(U8, [1])])])),
]
f32_4x2 = struct.pack("<8f", *range(8))
q8_0 = struct.pack("<e", 0.5) + bytes(range(32))
f16 = struct.pack("<4e", 1, 2, 3, 4)
write("all-types.gguf", gguf(all_types, [
    ("a", [4, 2], 0, f32_4x2),   # F32
    ("b", [32], 8, q8_0),        # Q8_0
    ("c", [4], 1, f16),          # F16
]))
write("empty.gguf", gguf([], []))
write("v2-meta-only.gguf", gguf(all_types[:4], [], version=2))
write("aligned64.gguf", gguf([("general.alignment", U32, 64)],
                             [("x", [2, 1, 1, 1], 0, struct.pack("<2f", 1, 2)),
                              ("y", [8], 24, b"\1" * 8)], align=64))  # I8
write("zero-dim.gguf", gguf([], [("z", [0, 3], 0, b"")]))
PY
ls -l "$out"
