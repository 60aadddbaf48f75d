#!/usr/bin/env python3
"""Time to first token of a long conversation's next turn, after each way
its state is lost, with the prompt-state store and without it.

A conversation of TURNS turns (about 2,000 tokens by the 10th on the 270M)
is played once with greedy answers. Then, for each interruption below, a
fresh `hearth serve` replays the turn before the last (so its state is what
the server last saw), is interrupted, and is asked the last turn with
max_tokens 1: the answer's latency is the time to first token. Each
interruption runs with the store (`--cache-ram`, and `--cache-dir` where
the process ends) and without it (`--cache-ram 0`, no folder), in
alternating order, RUNS times; the ratio of the medians is the store's
gain.

  kept       nothing lost: the slot still holds the conversation
  evicted    --parallel 1; another conversation takes the slot
  unloaded   --models DIR --keep-alive 1s; the model is unloaded, then
             loaded again by the request (its load time included)
  restarted  SIGTERM, then a new process on the same --cache-dir
  woken      --idle-exit 2: the server exits by itself; a new process
             (the container's wake) answers once /health is 200

With --ids the conversation is kept as token ids, as a client of
llama.cpp's `/completion` keeps it: each turn's prompt is the last turn's
ids, the ids it generated (`return_tokens`) and the template's text up to
the next answer; so nothing is re-tokenized, which a model with random
weights (a synthetic preset) needs, its answers being pieces that do not
tokenize back to the same ids.

  python3 scripts/prompt-cache-ttft.py --binary target/release/hearth \
      --model MODEL.gguf [--threads 2] [--runs 3] [--ids] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TOPICS = [
    "the river that runs past the old mill", "a lighthouse keeper's long winter",
    "the baker who wakes at three", "a train that is always late",
    "the garden behind the library", "an orchestra tuning before a concert",
    "the last bookshop in a small town", "a fisherman mending nets",
    "the clockmaker's apprentice", "a market on a rainy morning",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: str, args: list[str], log: str):
        self.port = free_port()
        self.log = open(log, "ab")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL, stderr=self.log,
        )
        self.wait_healthy()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"server exited early (status {self.proc.returncode}); see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                    if r.status == 200:
                        self.healthy = time.monotonic()
                        return
            except OSError:
                pass
            time.sleep(0.02)
        sys.exit("server not healthy")

    def chat(self, messages: list[dict], max_tokens: int) -> tuple[dict, float]:
        return self.post("/v1/chat/completions", {"model": "model", "messages": messages,
                                                  "max_tokens": max_tokens, "temperature": 0, "seed": 1})

    def post(self, path: str, body: dict) -> tuple[dict, float]:
        req = urllib.request.Request(self.url(path), json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=600) as r:
            reply = json.load(r)
        return reply, time.monotonic() - t0

    def complete_ids(self, ids: list[int], max_tokens: int) -> tuple[dict, float]:
        return self.post("/completion", {"prompt": ids, "n_predict": max_tokens, "temperature": 0,
                                         "seed": 1, "return_tokens": True})

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.log.close()


def user_turn(i: int) -> dict:
    topic = TOPICS[i % len(TOPICS)]
    text = (f"Tell me more about {topic}. What happens next, who is there, "
            f"and what does the place look like at the end of the day?")
    return {"role": "user", "content": text}


def play(binary: str, model_args: list[str], turns: int, answer: int, log: str) -> list[dict]:
    """The conversation up to the last user turn, greedy answers."""
    s = Server(binary, [*model_args, "--cache-ram", "0"], log)
    messages: list[dict] = []
    try:
        for i in range(turns - 1):
            messages.append(user_turn(i))
            reply, _ = s.chat(messages, answer)
            messages.append({"role": "assistant",
                             "content": reply["choices"][0]["message"]["content"]})
        messages.append(user_turn(turns - 1))
        last, _ = s.chat(messages, 1)
        print(f"conversation: {turns} turns, last prompt {last['usage']['prompt_tokens']} tokens",
              file=sys.stderr)
    finally:
        s.stop()
    return messages


def play_ids(binary: str, model_args: list[str], turns: int, answer: int, log: str) -> list[list[int]]:
    """The turn before the last's prompt as ids, then the ids of the
    template's text from the end of its answer to the start of the next
    (each turn's prompt is the last turn's, the ids it generated, and such
    a text). A replay appends the ids it generates itself: a model of
    random weights, prefilled in other batches, may answer otherwise."""
    s = Server(binary, [*model_args, "--cache-ram", "0"], log)
    messages: list[dict] = []
    prompts: list[list[int]] = []
    ids: list[int] = []
    answer_text = None
    try:
        for i in range(turns):
            messages.append(user_turn(i))
            rendered = s.post("/apply-template", {"messages": messages})[0]["prompt"]
            start = 0
            if answer_text is not None:
                at = rendered.rfind(answer_text.strip())
                if at < 0:
                    sys.exit("the template did not keep the answer's text; --ids cannot follow it")
                start = at + len(answer_text.strip())
            delta = s.post("/tokenize", {"content": rendered[start:], "add_special": False,
                                         "parse_special": True})[0]["tokens"]
            ids = ids + delta
            prompts.append(ids)
            last_delta = delta
            if i < turns - 1:
                reply, _ = s.complete_ids(ids, answer)
                ids = ids + reply["tokens"]
                answer_text = reply["content"]
                messages.append({"role": "assistant", "content": answer_text})
        print(f"conversation: {turns} turns as ids, last prompt {len(prompts[-1])} tokens", file=sys.stderr)
    finally:
        s.stop()
    return [prompts[-2], last_delta]


def other_conversation() -> list[dict]:
    return [{"role": "user", "content": " ".join(f"Unrelated question number {i}?" for i in range(40))}]


def scenario(name: str, store: bool, a: argparse.Namespace, convo: list[dict], work: str) -> dict:
    """One run: replay the turn before the last, interrupt, time the last."""
    models = os.path.join(work, "models")
    model = ["-m", os.path.join(models, "model.gguf")] if name != "unloaded" else ["--models", models]
    base = [*model, "-t", str(a.threads), "--ctx", str(a.ctx), "--parallel", "1"]
    cache_dir = os.path.join(work, f"cache-{name}")
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache = ["--cache-ram", "1G", "--cache-dir", cache_dir] if store else ["--cache-ram", "0"]
    extra = {"unloaded": ["--keep-alive", "1s"], "woken": ["--idle-exit", "2"]}.get(name, [])
    log = os.path.join(work, "serve.log")
    s = Server(a.binary, [*base, *cache, *extra], log)
    before, answer = convo[:-2], convo[-2]
    if a.ids:
        replayed, _ = s.complete_ids(convo[0], a.answer)
        last_prompt = convo[0] + replayed["tokens"] + convo[1]
    else:
        s.chat(before, a.answer)
    out = {"scenario": name, "store": store}
    if name == "evicted":
        s.chat(other_conversation(), 1)
    elif name == "unloaded":
        deadline = time.monotonic() + 30
        while s.metric("hearth_models_loaded") > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    elif name == "restarted":
        s.stop()
        s = Server(a.binary, [*base, *cache], log)
    elif name == "woken":
        s.proc.wait(timeout=60)
        s.log.close()
        s = Server(a.binary, [*base, *cache], log)
        out["start_to_healthy_s"] = s.healthy - s.started
    if a.ids:
        reply, ttft = s.complete_ids(last_prompt, 1)
        out["prompt_tokens"], out["cached_tokens"] = reply["tokens_evaluated"], reply["tokens_cached"]
    else:
        reply, ttft = s.chat([*before, answer, convo[-1]], 1)
        out["prompt_tokens"] = reply["usage"]["prompt_tokens"]
        out["cached_tokens"] = reply["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    out["ttft_s"] = ttft
    s.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--answer", type=int, default=160, help="tokens per answer")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scenarios", default="kept,evicted,unloaded,restarted,woken")
    p.add_argument("--ids", action="store_true", help="keep the conversation as token ids (/completion)")
    p.add_argument("--json")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="hearth-ttft-")
    os.makedirs(os.path.join(work, "models"))
    os.symlink(os.path.abspath(a.model), os.path.join(work, "models", "model.gguf"))
    model_args = ["-m", os.path.join(work, "models", "model.gguf"), "-t", str(a.threads),
                  "--ctx", str(a.ctx)]
    player = play_ids if a.ids else play
    convo = player(a.binary, model_args, a.turns, a.answer, os.path.join(work, "serve.log"))
    rows = []
    for name in a.scenarios.split(","):
        for run in range(a.runs):
            order = [True, False] if run % 2 == 0 else [False, True]
            for store in order:
                r = scenario(name, store, a, convo, work)
                print(json.dumps(r), file=sys.stderr)
                rows.append(r)
    print("| turn 10 after | prompt tokens | reused with store | TTFT without store (s) | TTFT with store (s) | gain |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in a.scenarios.split(","):
        with_ = [r for r in rows if r["scenario"] == name and r["store"]]
        without = [r for r in rows if r["scenario"] == name and not r["store"]]
        m_with = statistics.median(r["ttft_s"] for r in with_)
        m_without = statistics.median(r["ttft_s"] for r in without)
        print(f"| {name} | {with_[0]['prompt_tokens']} | {with_[0]['cached_tokens']} | "
              f"{m_without:.3f} | {m_with:.3f} | {m_without / m_with:.1f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
