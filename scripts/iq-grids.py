#!/usr/bin/env python3
"""Writes the IQ formats' codebooks (crates/quant/data/*.grid) from
llama.cpp's ggml-common.h, where the formats define them.

Each grid is its table's entries in order, each entry's bytes little-endian
(the values the kernels read: 8 per uint64_t entry, 4 per uint32_t one).

    python3 scripts/iq-grids.py path/to/llama.cpp/ggml/src/ggml-common.h
"""
import pathlib
import re
import struct
import sys

# (table in ggml-common.h, entry bytes, entries, file)
TABLES = [
    ("iq2xxs_grid", 8, 256, "iq2xxs.grid"),
    ("iq2xs_grid", 8, 512, "iq2xs.grid"),
    ("iq2s_grid", 8, 1024, "iq2s.grid"),
    ("iq3xxs_grid", 4, 256, "iq3xxs.grid"),
    ("iq3s_grid", 4, 512, "iq3s.grid"),
    ("iq1s_grid", 8, 2048, "iq1s.grid"),
]


def table(header: str, name: str) -> list[int]:
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", \w+\)(.*?)GGML_TABLE_END", header, re.S)
    if not m:
        sys.exit(f"{name}: not in the header")
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def main() -> None:
    header = pathlib.Path(sys.argv[1]).read_text()
    out = pathlib.Path(__file__).resolve().parent.parent / "crates/quant/data"
    for name, size, count, file in TABLES:
        entries = table(header, name)
        if len(entries) != count:
            sys.exit(f"{name}: {len(entries)} entries, expected {count}")
        fmt = "<Q" if size == 8 else "<I"
        (out / file).write_bytes(b"".join(struct.pack(fmt, e) for e in entries))
        print(f"{file}: {count} entries")


if __name__ == "__main__":
    main()
