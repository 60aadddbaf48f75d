#!/usr/bin/env python3
"""The prompt-state store under many conversations: its RAM and disk
bounds hold, and what it serves.

CONVERSATIONS conversations of two turns each (a distinct first question of
about 250 tokens, a short answer, a follow-up), their turns shuffled so
that a conversation's second turn comes after many others' (its slot long
taken), are sent by CLIENTS threads to `hearth serve --parallel PARALLEL`
with `--cache-ram RAM --cache-dir DIR --cache-disk DISK`. While it runs,
the store's gauges, the folder's size and the server's RSS are sampled;
the run fails when a bound is passed.

  python3 scripts/prompt-cache-load.py --binary target/release/hearth \
      --model MODEL.gguf [--conversations 1000] [--ram 128M] [--disk 256M]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(s: str) -> int:
    return int(float(s[:-1]) * UNITS[s[-1]]) if s[-1] in UNITS else int(s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, messages: list[dict]) -> dict:
    body = json.dumps({"messages": messages, "max_tokens": 8, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line.startswith("hearth_prompt_cache_"):
                name, value = line.split()
                out[name] = float(value)
        return out


def dir_bytes_of(path: str, name: str) -> int:
    try:
        return os.path.getsize(os.path.join(path, name))
    except OSError:
        return 0


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def dir_bytes(path: str) -> int:
    total = 0
    for f in os.listdir(path):
        try:
            total += os.path.getsize(os.path.join(path, f))
        except OSError:  # renamed or removed while listed
            pass
    return total


def first_turn(i: int) -> list[dict]:
    words = " ".join(f"item{(i * 7919 + k) % 100003}" for k in range(60))
    return [{"role": "user", "content": f"Conversation {i}. Sort these: {words}"}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--conversations", type=int, default=1000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ram", default="128M")
    p.add_argument("--disk", default="256M")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="hearth-pc-load-")
    cache_dir = os.path.join(work, "states")
    port = free_port()
    log = open(os.path.join(work, "serve.log"), "wb")
    proc = subprocess.Popen(
        [a.binary, "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
         "--parallel", str(a.parallel), "--queue", str(4 * a.clients), "--ctx", "1024",
         "--cache-ram", a.ram, "--cache-dir", cache_dir, "--cache-disk", a.disk],
        stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                break
        except OSError:
            time.sleep(0.1)
    base_rss = rss_kib(proc.pid)

    rng = random.Random(a.seed)
    # Each conversation's second turn after its first, the rest shuffled.
    order = [(i, 0) for i in range(a.conversations)] + [(i, 1) for i in range(a.conversations)]
    rng.shuffle(order)
    seen: set[int] = set()
    turns = []
    pending = {}
    for i, t in order:
        if t == 1 and i not in seen:
            pending[i] = True
            continue
        turns.append((i, t))
        if t == 0:
            seen.add(i)
            if pending.pop(i, False):
                turns.append((i, 1))
    answers: dict[int, str] = {}
    lock = threading.Lock()
    queue = list(turns)
    reused = {0: [], 1: []}
    errors = []
    peak = {"ram": 0.0, "disk_gauge": 0.0, "disk_files": 0, "largest_file": 0, "rss_kib": base_rss}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            m = metrics(port)
            peak["ram"] = max(peak["ram"], m.get("hearth_prompt_cache_ram_bytes", 0))
            peak["disk_gauge"] = max(peak["disk_gauge"], m.get("hearth_prompt_cache_disk_bytes", 0))
            peak["disk_files"] = max(peak["disk_files"], dir_bytes(cache_dir))
            peak["largest_file"] = max(peak["largest_file"], max(
                (dir_bytes_of(cache_dir, f) for f in os.listdir(cache_dir)), default=0))
            peak["rss_kib"] = max(peak["rss_kib"], rss_kib(proc.pid))
            time.sleep(0.2)

    def client() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i, t = queue.pop(0)
                if t == 1 and i not in answers:
                    queue.append((i, t))
                    continue
            messages = first_turn(i)
            if t == 1:
                messages = messages + [{"role": "assistant", "content": answers[i]},
                                       {"role": "user", "content": "And the last one?"}]
            try:
                r = post(port, messages)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                errors.append(repr(e))
                continue
            with lock:
                if t == 0:
                    answers[i] = r["choices"][0]["message"]["content"]
                reused[t].append(r["usage"]["prompt_tokens_details"]["cached_tokens"])

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.monotonic()
    clients = [threading.Thread(target=client) for _ in range(a.clients)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.monotonic() - t0
    done.set()
    sampler.join()
    final = metrics(port)
    proc.terminate()
    proc.wait(timeout=60)
    second = reused[1]
    result = {
        "conversations": a.conversations, "requests": len(reused[0]) + len(second),
        "errors": len(errors), "wall_s": round(wall, 1),
        "ram_bound": size(a.ram), "peak_ram_gauge": peak["ram"],
        "disk_bound": size(a.disk), "peak_disk_gauge": peak["disk_gauge"],
        "peak_disk_files": peak["disk_files"], "largest_file": peak["largest_file"],
        "rss_before_mib": round(base_rss / 1024, 1), "peak_rss_mib": round(peak["rss_kib"] / 1024, 1),
        "second_turns_served_from_store": sum(1 for c in second if c > 100),
        "second_turns": len(second),
        **{k.replace("hearth_prompt_cache_", ""): v for k, v in final.items()},
    }
    print(json.dumps(result, indent=1))
    # The folder may also hold the one file being written, not yet counted.
    ok = (not errors and peak["ram"] <= size(a.ram) and peak["disk_gauge"] <= size(a.disk)
          and peak["disk_files"] <= size(a.disk) + peak["largest_file"])
    if errors:
        print("errors:", errors[:5], file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
