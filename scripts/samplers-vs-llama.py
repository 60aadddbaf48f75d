#!/usr/bin/env python3
"""End to end against llama.cpp: what `llama-server` and `hearth serve`
continue the same prompts with on the real 270M under DRY, XTC and top-nσ
at greedy-compatible settings (temperature 0; XTC at probability 1, which
is then deterministic), and without them. Prints, case by case, where the
two part and Hearth's two best raw log-probabilities there. The two
engines' logits differ by about 0.1, so a choice the penalties make close
can fall either way: `scripts/samplers-replay.sh` takes the model's numbers
out and compares the samplers alone.

Usage: scripts/samplers-vs-llama.py LLAMA_SERVER HEARTH_BINARY
       scripts/samplers-vs-llama.py --cases   (the cases as JSON, for the replay)
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_PREDICT = 40

PROMPTS = [
    "The list of colors: red, blue, green, red, blue, green, red, blue,",
    "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "Once upon a time, in a small village by the sea,",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "Q: What is the capital of France?\nA: Paris.\nQ: What is the capital of Spain?\nA:",
    "I love you. I love you. I love you. I",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Here are some tips for better sleep:\n1.",
    "Monday, Tuesday, Wednesday, Monday, Tuesday, Wednesday, Monday,",
    "The history of the Roman Empire began",
    "\"Hello,\" she said. \"Hello,\" he said. \"Hello,\"",
]

SETTINGS = {
    "greedy": {},
    "dry": {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
            "dry_penalty_last_n": 1024},
    "xtc": {"xtc_probability": 1.0, "xtc_threshold": 0.1},
    "dry+xtc+sigma": {"dry_multiplier": 0.8, "dry_allowed_length": 3,
                      "dry_sequence_breakers": ["\n", "."],
                      "xtc_probability": 1.0, "xtc_threshold": 0.2,
                      "top_n_sigma": 2.0},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except Exception:
            time.sleep(0.1)
    sys.exit("server did not come up")


def complete(port, prompt, extra, logprobs=False):
    body = {"prompt": prompt, "max_tokens": N_PREDICT, "temperature": 0,
            "seed": 1, "cache_prompt": False, **extra}
    if logprobs:
        body["logprobs"] = 2
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]


def run_all(cmd, port, logprobs=False):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(port, proc)
        return {(p, name): complete(port, p, s, logprobs)
                for p in PROMPTS for name, s in SETTINGS.items()}
    finally:
        proc.terminate()
        proc.wait()


def main():
    if sys.argv[1:] == ["--cases"]:
        json.dump([{"prompt": p, "setting": n, "params": v, "steps": N_PREDICT}
                   for p in PROMPTS for n, v in SETTINGS.items()], sys.stdout)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("llama_server")
    ap.add_argument("hearth")
    a = ap.parse_args()
    model = subprocess.check_output(["sh", os.path.join(ROOT, "scripts/fetch-model.sh")],
                                    text=True).strip()
    port = free_port()
    # llama.cpp's exact setting: f32 cache, flash attention off, 2 threads.
    llama = run_all([a.llama_server, "-m", model, "--port", str(port), "-t", "2",
                     "-c", "2048", "-fa", "off", "-ctk", "f32", "-ctv", "f32",
                     "--no-warmup", "-np", "1"], port)
    cases = [{"prompt": p, "setting": name, "text": llama[(p, name)]["text"]}
             for p in PROMPTS for name in SETTINGS]
    port = free_port()
    hearth = run_all([a.hearth, "serve", "-m", model, "--port", str(port), "-t", "2",
                      "--ctx", "2048", "--kv-cache", "f32", "--parallel", "1"],
                     port, logprobs=True)
    same = 0
    for c in cases:
        got = hearth[(c["prompt"], c["setting"])]
        if got["text"] == c["text"]:
            same += 1
            continue
        at = next(i for i, (x, y) in enumerate(zip(got["text"] + "\0", c["text"] + "\0"))
                  if x != y)
        print(f"differs: {c['setting']} {c['prompt'][:40]!r} at char {at}: "
              f"hearth {got['text'][at:at+20]!r} llama {c['text'][at:at+20]!r}")
        margins(got, at)
    print(f"{same} of {len(cases)} cases the same")


def margins(choice, at):
    """Hearth's two best raw log-probabilities at the token where the
    texts part."""
    lp = choice.get("logprobs") or {}
    pos = 0
    for tok, top in zip(lp.get("tokens", []), lp.get("top_logprobs", [])):
        if pos + len(tok) > at:
            best = sorted(top.items(), key=lambda kv: -kv[1])[:2]
            print(f"  at token {tok!r}: top two {best}")
            return
        pos += len(tok)


if __name__ == "__main__":
    main()
