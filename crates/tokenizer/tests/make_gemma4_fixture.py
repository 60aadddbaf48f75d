#!/usr/bin/env python3
"""Writes the Gemma 4 tokenizer fixtures that tests/gemma4_tiny.rs compares
against:

* tests/fixtures/gemma4_tiny.json: reference ids for the tiny Gemma 4 model
  (tests/fixtures/tiny/gemma4_e2b), from two references (below);
* tests/fixtures/tokenizer/gemma4_newlines.gguf (repository root): a
  vocabulary-only copy of that model's GGUF whose tokenizer gains newline
  tokens and merges, two Gemma 4 turn markers, a user-defined token and a
  merge whose result is not in the vocabulary, with add_bos_token = false;
  the tiny vocabulary has no newline token at all, so this is what exercises
  the newline-run rule. tests/fixtures/gemma4_newlines.json holds
  llama.cpp's ids for it (Hugging Face has no tokenizer.json for it).

Two references, each in its own interpreter because they live in different
virtual environments:

* Hugging Face `tokenizers` loading the tokenizer.json the GGUF was made from
  (`python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers`);
* llama.cpp through llama-cpp-python (vocab_only) loading the GGUF itself.

Usage, from the repository root:

    python3 crates/tokenizer/tests/make_gemma4_fixture.py \
        --hf-python /tmp/tokvenv/bin/python \
        --llama-python ~/.cache/hearth/bench-venv/bin/python

The script re-runs itself as `... hf` / `... llama` under each interpreter;
those sub-commands print one JSON object to stdout.

The Rust test follows llama.cpp (what GGUF users compare against); cases
where Hugging Face disagrees are listed under `hf_differs` rather than
dropped, so a reader can see them.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "tiny", "gemma4_e2b")
GGUF = os.path.join(MODEL_DIR, "model-f32.gguf")
TOKENIZER_JSON = os.path.join(MODEL_DIR, "tokenizer.json")
OUT = os.path.join(HERE, "fixtures", "gemma4_tiny.json")
NL_GGUF = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "gemma4_newlines.gguf")
NL_OUT = os.path.join(HERE, "fixtures", "gemma4_newlines.json")

# (name, text). The tiny vocabulary (512 tokens, 178 merges) was trained on
# licence text, so English words merge while most other scripts, and the
# newline, which is not in it, fall back to <0xNN> byte tokens.
CASES = [
    ("empty", ""),
    ("ascii", "Hello world"),
    ("licence_words", "the License for the specific language"),
    ("licence_sentence", "You may not use this file except in compliance with the License."),
    ("copyright", "Copyright (C) 2024, the Free Software Foundation, Inc. -- see LICENSE.md"),
    ("single_space", " "),
    ("four_spaces", "    "),
    ("nine_spaces", "         "),
    ("leading_spaces", "  leading spaces"),
    ("trailing_spaces", "trailing spaces   "),
    ("inner_spaces", "a  b   c    d     e"),
    ("newline", "\n"),
    ("two_newlines", "\n\n"),
    ("two_lines", "line one\nline two"),
    ("newline_run", "para\n\n\npara\n"),
    ("newlines_then_space", "\n\n leading newlines and a space"),
    ("tabs", "tab\tseparated\tvalues\t"),
    ("indent_mix", "\t\t indented\n    four"),
    ("whitespace_mix", "mixed \t \n whitespace \r\n end"),
    ("latin1", "café naïve Ünïcödé ÀÉÎ"),
    ("cjk", "日本語のテキストと中文"),
    ("emoji", "emoji 🍕🎉 and 👍🏽!"),
    ("combining", "e\u0301 zero\u200bwidth nb\u00a0sp"),
    ("literal_lower_block", "\u2581 literal \u2581\u2581 block"),
    ("control_chars", "a\x00b\x0c form\x7ffeed"),
    ("bos_only", "<bos>"),
    ("bos_text_eos", "<bos>Hello<eos>"),
    ("unk_inside", "text with <unk> inside"),
    ("pads", "<pad><pad> x"),
    ("partial_special", "<bos <eos> <bo"),
    ("markdown", "**bold** and `code` [link](http://x.y/z?a=1&b=2)"),
    ("numbers", "1234567890 3.14159 -42"),
    ("repeats", "the the the the thethethe"),
]


# Cases for the derived vocabulary (only llama.cpp can read it).
NL_CASES = [
    ("one_newline", "a\nb"),
    ("two_newlines", "a\n\nb"),
    ("three_newlines", "\n\n\n"),
    ("four_newlines", "x\n\n\n\ny"),
    ("five_newlines_whole_token", "x\n\n\n\n\ny"),
    ("six_newlines", "\n\n\n\n\n\n"),
    ("seven_newlines", "the\n\n\n\n\n\n\nend\n"),
    ("spaces_around_newlines", "  \n  \n\n  "),
    ("crlf", "one\r\n\r\ntwo"),
    ("tabs_and_newlines", "tab\n\t\n\t\t\n"),
    ("turns", "<|turn>user\nHi there<turn|>\n<|turn>model\n"),
    ("turn_markers_glued", "<turn|><|turn><turn|>\n\n<|turn"),
    ("user_defined", "[multimodal] and[multimodal]\n"),
    ("merge_result_not_in_vocab", "zz zzz pizza"),
    ("newline_only_cjk", "\n日本\n\n"),
]

# Token replacements: ids 504..511 are single characters that no merge uses.
NL_TOKENS = {
    504: ("[multimodal]", 4),  # user-defined
    506: ("\n", 1),
    507: ("\n\n", 1),
    508: ("\n\n\n\n", 1),
    509: ("\n\n\n\n\n", 1),  # reachable only as a whole run
    510: ("<|turn>", 3),
    511: ("<turn|>", 3),
}
NL_MERGES_FIRST = ["z z", "\n \n"]  # "zz" is not a token
NL_MERGES_LAST = ["\n\n \n\n"]


# A minimal GGUF reader/writer: enough to copy metadata and drop tensors.
GGUF_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_read_kv(path):
    import struct

    b = open(path, "rb").read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF" and version == 3, (magic, version)
    off = 24

    def read_str(o):
        (n,) = struct.unpack_from("<Q", b, o)
        return b[o + 8 : o + 8 + n].decode("utf-8"), o + 8 + n

    def read_val(t, o):
        if t == 8:
            return read_str(o)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            items = []
            for _ in range(n):
                x, o = read_val(et, o)
                items.append(x)
            return (et, items), o
        fmt = "<" + GGUF_SCALAR[t]
        return struct.unpack_from(fmt, b, o)[0], o + struct.calcsize(fmt)

    kvs = []
    for _ in range(n_kv):
        k, off = read_str(off)
        (t,) = struct.unpack_from("<I", b, off)
        off += 4
        v, off = read_val(t, off)
        kvs.append([k, t, v])
    return kvs


def gguf_write_kv(path, kvs):
    import struct

    out = bytearray(struct.pack("<4sIQQ", b"GGUF", 3, 0, len(kvs)))

    def put_str(s):
        e = s.encode("utf-8")
        out.extend(struct.pack("<Q", len(e)) + e)

    def put_val(t, v):
        if t == 8:
            put_str(v)
        elif t == 9:
            et, items = v
            out.extend(struct.pack("<IQ", et, len(items)))
            for x in items:
                put_val(et, x)
        else:
            out.extend(struct.pack("<" + GGUF_SCALAR[t], v))

    for k, t, v in kvs:
        put_str(k)
        out.extend(struct.pack("<I", t))
        put_val(t, v)
    # No tensors: the data section is empty, only the alignment padding.
    out.extend(b"\0" * ((-len(out)) % 32))
    with open(path, "wb") as f:
        f.write(out)


def make_newlines_gguf():
    kvs = gguf_read_kv(GGUF)
    by_key = {k: kv for kv in kvs for k in [kv[0]]}
    tokens = by_key["tokenizer.ggml.tokens"][2][1]
    types = by_key["tokenizer.ggml.token_type"][2][1]
    merges = by_key["tokenizer.ggml.merges"][2][1]
    used = {part for m in merges for part in m.split(" ", 1)}
    for i, (text, ty) in NL_TOKENS.items():
        assert tokens[i] not in used, tokens[i]
        tokens[i] = text
        types[i] = ty
    merges[:0] = NL_MERGES_FIRST
    merges.extend(NL_MERGES_LAST)
    by_key["tokenizer.ggml.add_bos_token"][2] = False  # Gemma 4 forces it on
    os.makedirs(os.path.dirname(NL_GGUF), exist_ok=True)
    gguf_write_kv(NL_GGUF, kvs)


def ref_hf():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(TOKENIZER_JSON)
    out = {"version": __import__("tokenizers").__version__, "cases": {}}
    for name, text in CASES:
        with_bos = tok.encode(text, add_special_tokens=True).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        out["cases"][name] = {
            "ids_bos": with_bos,
            "ids_nobos": plain,
            "decoded": tok.decode(plain, skip_special_tokens=False),
        }
    json.dump(out, sys.stdout)


def ref_llama(model_path=GGUF, cases=CASES):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    out = {
        "version": llama_cpp.__version__,
        "eog_ids": [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)],
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "cases": {},
    }
    for name, text in cases:
        b = text.encode("utf-8")
        c = {}
        for bos in (True, False):
            for special in (True, False):
                key = "ids_%s_%s" % ("bos" if bos else "nobos", "special" if special else "nospecial")
                c[key] = llm.tokenize(b, add_bos=bos, special=special)
        # Piece by piece as in generation (llama_token_to_piece), which is
        # what Hearth's decode mirrors; llama_detokenize would also apply
        # clean_spaces.
        raw = llm.detokenize(c["ids_nobos_nospecial"], special=False)
        c["decoded"] = raw.decode("utf-8", errors="replace")
        out["cases"][name] = c
    json.dump(out, sys.stdout)


def run(python, mode):
    res = subprocess.run(
        [os.path.expanduser(python), os.path.abspath(__file__), mode],
        check=True,
        capture_output=True,
    )
    return json.loads(res.stdout)


def compact(obj, indent=0):
    """JSON with one case per few lines: lists of ids stay on one line."""
    pad = " " * indent
    if isinstance(obj, dict):
        items = [
            "%s %s: %s" % (pad, json.dumps(k), compact(v, indent + 1)) for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and not all(isinstance(x, int) for x in obj):
        items = ["%s %s" % (pad, compact(v, indent + 1)) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", choices=["hf", "llama", "llama-newlines"])
    ap.add_argument("--hf-python", default=sys.executable)
    ap.add_argument("--llama-python", default=None)
    args = ap.parse_args()
    if args.mode == "hf":
        return ref_hf()
    if args.mode == "llama":
        return ref_llama()
    if args.mode == "llama-newlines":
        return ref_llama(NL_GGUF, NL_CASES)

    make_newlines_gguf()
    hf = run(args.hf_python, "hf")
    llama = run(args.llama_python, "llama") if args.llama_python else None
    cases = []
    hf_differs = []
    for name, text in CASES:
        h = hf["cases"][name]
        case = {"name": name, "text": text}
        if llama:
            l = llama["cases"][name]
            for k in ("ids_bos_special", "ids_nobos_special", "ids_bos_nospecial", "ids_nobos_nospecial"):
                case[k] = l[k]
            case["llama_round_trips"] = l["decoded"] == text
            # HF always matches its special tokens in text, so it compares
            # with llama.cpp's parse_special = true.
            if h["ids_bos"] != l["ids_bos_special"] or h["ids_nobos"] != l["ids_nobos_special"]:
                hf_differs.append(name)
        case["hf_ids_bos"] = h["ids_bos"]
        case["hf_ids_nobos"] = h["ids_nobos"]
        case["hf_round_trips"] = h["decoded"] == text
        cases.append(case)

    doc = {
        "source": "crates/tokenizer/tests/make_gemma4_fixture.py",
        "model": "tests/fixtures/tiny/gemma4_e2b/model-f32.gguf (tokenizer.ggml.model = gemma4) and its tokenizer.json",
        "references": {
            "hf_tokenizers": hf["version"],
            "llama_cpp_python": llama["version"] if llama else None,
        },
        "llama_eog_ids": llama["eog_ids"] if llama else None,
        "notes": [
            "ids_{bos,nobos}_{special,nospecial}: llama.cpp (Llama.tokenize with add_bos, special); the test follows these.",
            "hf_ids_{bos,nobos}: tokenizers' encode with add_special_tokens true/false; HF always matches special tokens in text.",
            "*_round_trips: whether that reference's decode of its own ids without BOS gives the text back (llama.cpp: token pieces concatenated, no clean_spaces).",
            "hf_differs: cases where HF's ids differ from llama.cpp's with parse_special.",
        ],
        "hf_differs": hf_differs,
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(compact(doc) + "\n")
    n = len(cases)
    print("wrote %s: %d cases, %d where HF differs from llama.cpp %s" % (OUT, n, len(hf_differs), hf_differs))

    if not args.llama_python:
        print("no --llama-python: %s not rewritten" % NL_OUT)
        return
    nl = run(args.llama_python, "llama-newlines")
    nl_cases = []
    for name, text in NL_CASES:
        c = nl["cases"][name]
        case = {"name": name, "text": text}
        for k in ("ids_bos_special", "ids_nobos_special", "ids_bos_nospecial", "ids_nobos_nospecial"):
            case[k] = c[k]
        case["llama_round_trips"] = c["decoded"] == text
        nl_cases.append(case)
    doc = {
        "source": "crates/tokenizer/tests/make_gemma4_fixture.py",
        "model": "tests/fixtures/tokenizer/gemma4_newlines.gguf (derived from the tiny gemma4_e2b GGUF, see the script)",
        "references": {"llama_cpp_python": nl["version"]},
        "llama_eog_ids": nl["eog_ids"],
        "llama_add_bos": nl["add_bos"],
        "notes": [
            "Same fields as gemma4_tiny.json, llama.cpp only.",
            "The file says add_bos_token = false; llama.cpp forces it on for Gemma 4.",
        ],
        "cases": nl_cases,
    }
    with open(NL_OUT, "w", encoding="utf-8") as f:
        f.write(compact(doc) + "\n")
    print("wrote %s and %s: %d cases" % (NL_GGUF, NL_OUT, len(nl_cases)))


if __name__ == "__main__":
    main()
