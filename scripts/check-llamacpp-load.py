#!/usr/bin/env python3
"""Loads a GGUF with llama.cpp (through llama-cpp-python) and compares its
per-position logits for a token sequence with `hearth logits` on the same file.

It answers two questions about a file Hearth wrote (`hearth quantize`, `hearth
synth`): does llama.cpp accept it, and do both engines compute the same thing
from it? Printed per position: llama.cpp's top-1 id, Hearth's top-1 id, and the
largest |logit difference| over the whole vocabulary; then one JSON summary line.

Usage (the venv comes from scripts/bench-vs-llamacpp.sh):
  ~/.cache/hearth/bench-venv/bin/python scripts/check-llamacpp-load.py \
      -m /tmp/synth-1b.gguf [--ids 2,100,200] [--hearth target/release/hearth]

Exit status: 0 when the file loads in both and top-1 ids agree on at least
--min-agree of the positions (default 0: report only), 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

# Default token ids: a BOS-led sequence for Gemma's 262144-token vocabulary,
# and one under 512 for the tiny test vocabularies.
DEFAULT_IDS = "2,106,1645,108,496,3291,236764,1078"
TINY_IDS = "2,106,164,108,496,329,236,17"


def llama_logits(path: str, ids_text: str | None, threads: int) -> tuple[list[int], np.ndarray]:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=path,
        n_ctx=256,
        n_batch=256,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    if ids_text is None:
        ids_text = DEFAULT_IDS if llm.n_vocab() >= 262144 else TINY_IDS
    ids = [int(t) for t in ids_text.split(",")]
    if max(ids) >= llm.n_vocab():
        raise SystemExit(f"token id {max(ids)} is outside the vocabulary of {llm.n_vocab()}")
    llm.eval(ids)
    return ids, np.array(llm.scores[: len(ids)], dtype=np.float32)


def hearth_logits(binary: str, path: str, ids: list[int], threads: int) -> np.ndarray:
    cmd = [binary, "logits", "-m", path, "-t", str(threads), "--full",
           "--ids", ",".join(map(str, ids))]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    rows = []
    for line in out.stdout.splitlines():
        if line.strip():
            rows.append(json.loads(line)["logits"])
    return np.array(rows, dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--ids", help=f"comma-separated token ids (default {DEFAULT_IDS}, "
                    f"or {TINY_IDS} for vocabularies under 262144)")
    ap.add_argument("--hearth", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "hearth"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--min-agree", type=float, default=0.0)
    args = ap.parse_args()

    ids, ref = llama_logits(args.model, args.ids, args.threads)
    ours = hearth_logits(args.hearth, args.model, ids, args.threads)
    if ref.shape != ours.shape:
        print(f"shape mismatch: llama.cpp {ref.shape}, hearth {ours.shape}", file=sys.stderr)
        return 1
    agree = 0
    worst = 0.0
    for pos, tok in enumerate(ids):
        a, b = int(np.argmax(ref[pos])), int(np.argmax(ours[pos]))
        d = float(np.max(np.abs(ref[pos] - ours[pos])))
        gap = float(np.sort(ref[pos])[-1] - np.sort(ref[pos])[-2])
        worst = max(worst, d)
        agree += a == b
        print(f"pos {pos:2d} id {tok:6d}: llama.cpp top-1 {a:6d}  hearth top-1 {b:6d}  "
              f"{'same' if a == b else 'DIFF'}  max|dlogit| {d:.4f}  (llama.cpp top-2 gap {gap:.4f})")
    summary = {
        "model": args.model,
        "ids": ids,
        "top1_agree": agree,
        "positions": len(ids),
        "max_abs_logit_diff": round(worst, 5),
        "llama_top1": [int(np.argmax(r)) for r in ref],
        "hearth_top1": [int(np.argmax(r)) for r in ours],
    }
    print(json.dumps(summary))
    return 0 if agree >= args.min_agree * len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
