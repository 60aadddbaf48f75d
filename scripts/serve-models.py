#!/usr/bin/env python3
"""Many models in one `hearth serve`, measured on real files.

Serves a folder holding the 270M Q4_K_M, the same model requantized to Q8_0
(`hearth quantize`, made once into the work folder) and the tiny vision
model with its projector, with `--max-loaded 2 --keep-alive 2s`, and reports:

  - requests alternating between the three models: every answer's status,
    the server's peak RSS (sampled every 20 ms) against the sum of the two
    largest models' resident sizes (each measured alone, loaded by a
    one-model server) plus 20%;
  - 8 concurrent first requests for an unloaded model: loads counted in
    /metrics;
  - a model idle past --keep-alive: seen leaving /api/ps;
  - a request for a missing model: the 404 and the models it names;
  - a listed model's file deleted: the error, and the others still serving;
  - time to first token for a model not yet loaded, with the file's pages
    dropped from the page cache (posix_fadvise DONTNEED on a private copy;
    no other process maps it) and with them cached, beside a single-model
    server's start (`serve -m`: process start to the first token), both
    with the pages dropped and cached.

  python3 scripts/serve-models.py [--hearth target/release/hearth] \
      [--work /tmp/hearth-serve-models] [--threads 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests/fixtures/tiny/gemma3_vision"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, raw.decode(errors="replace")


def first_token(port, model, timeout=300):
    """Seconds from sending a streamed chat to its first content chunk."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = {"model": model, "max_tokens": 8, "stream": True, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}]}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    first = None
    for line in r:
        if first is None and line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
            first = time.perf_counter() - t0
    conn.close()
    return first


def chat(port, model):
    return request(port, "POST", "/v1/chat/completions", {
        "model": model, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Name a colour."}]})


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def run(self):
        while not self.stop:
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except OSError:
                return
            time.sleep(0.02)


def start(hearth, args, threads):
    port = free_port()
    p = subprocess.Popen([hearth, "serve", "--port", str(port), "-t", str(threads), *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    while True:
        try:
            status, _ = request(port, "GET", "/health", timeout=2)
            if status == 200:
                return p, port, time.perf_counter() - t0
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit("server exited: " + p.stderr.read())
        time.sleep(0.01)


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_alone(hearth, path, threads):
    """RSS of a one-model server after one answer, in KiB."""
    p, port, _ = start(hearth, ["-m", str(path)], threads)
    try:
        chat(port, None)
        return rss_kib(p.pid)
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", default=str(ROOT / "target/release/hearth"))
    ap.add_argument("--work", default="/tmp/hearth-serve-models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    home = Path(os.environ.get("HEARTH_HOME", Path.home() / ".cache/hearth"))
    q4 = home / "models/gemma-3-270m-q4_k_m.gguf"
    work = Path(a.work)
    models = work / "models"
    shutil.rmtree(models, ignore_errors=True)
    (models / "vision").mkdir(parents=True)
    q8 = work / "gemma-3-270m-q8_0.gguf"
    if not q8.exists():
        subprocess.run([a.hearth, "quantize", "-q", "--type", "q8_0", str(q4), str(q8)], check=True)
    # Private copies: no other process maps them, so their pages can be dropped.
    shutil.copy(q4, models / "gemma-3-270m-q4_k_m.gguf")
    shutil.copy(q8, models / "gemma-3-270m-q8_0.gguf")
    shutil.copy(TINY / "model-f32.gguf", models / "vision/model-f32.gguf")
    shutil.copy(TINY / "mmproj-f32.gguf", models / "vision/mmproj-f32.gguf")
    ids = ["gemma3-270m", "gemma-3-270m-q8_0", "vision/model-f32"]
    files = {ids[0]: models / "gemma-3-270m-q4_k_m.gguf", ids[1]: models / "gemma-3-270m-q8_0.gguf",
             ids[2]: models / "vision/model-f32.gguf"}
    print(f"hearth {a.hearth}, {a.threads} threads, models in {models}")

    alone = {m: resident_alone(a.hearth, f, a.threads) for m, f in files.items()}
    two = sorted(alone.values())[-2:]
    budget = sum(two) * 1.2
    print("RSS of each model served alone (KiB): " + ", ".join(f"{m} {v}" for m, v in alone.items()))

    serve_args = ["--models", str(models), "--max-loaded", "2", "--keep-alive", "2s", "--queue", "16"]
    p, port, _ = start(a.hearth, serve_args, a.threads)
    sampler = Sampler(p.pid)
    sampler.start()
    statuses = []
    for _ in range(3):
        for m in ids:
            status, body = chat(port, m)
            statuses.append(status)
            assert status == 200, body
    sampler.stop = True
    sampler.join()
    print(f"alternating 3 models x 3 rounds: statuses {sorted(set(statuses))} ({len(statuses)} requests); "
          f"peak RSS {sampler.peak} KiB vs two largest alone + 20% = {budget:.0f} KiB "
          f"({'within' if sampler.peak <= budget else 'OVER'})")

    def metric(name):
        _, text = request(port, "GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])

    t0 = time.perf_counter()
    while request(port, "GET", "/api/ps")[1]["models"]:
        time.sleep(0.05)
        assert time.perf_counter() - t0 < 10
    print(f"keep-alive 2s: /api/ps empty {time.perf_counter() - t0:.2f} s after the last answer")

    before = metric("hearth_model_loads_total")
    with cf.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda _: chat(port, ids[1])[0], range(8)))
    print(f"8 concurrent first requests: statuses {got}; loads {metric('hearth_model_loads_total') - before:.0f}")

    status, body = chat(port, "gemma-7b")
    print(f"missing model: {status} {body['error']['code']}: {body['error']['message']}")

    doomed = models / "doomed.gguf"
    shutil.copy(TINY / "model-f32.gguf", doomed)
    stop(p)
    p, port, _ = start(a.hearth, serve_args, a.threads)
    doomed.unlink()
    status, body = chat(port, "doomed")
    print(f"deleted while listed: {status} {body['error']['code']}: {body['error']['message'][:120]}")
    print(f"  then {ids[0]}: {chat(port, ids[0])[0]}; server alive: {p.poll() is None}")
    stop(p)

    # Time to first token for a model not yet loaded.
    rows = {"on demand, pages cold": [], "on demand, pages warm": [],
            "serve -m start, pages cold": [], "serve -m start, pages warm": []}
    for run in range(a.runs):
        for kind in rows:
            drop = "cold" in kind
            if drop:
                drop_cache(files[ids[0]])
            if kind.startswith("serve -m"):
                t0 = time.perf_counter()
                port = free_port()
                p = subprocess.Popen([a.hearth, "serve", "-m", str(files[ids[0]]), "--port", str(port),
                                      "-t", str(a.threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                while True:
                    try:
                        if request(port, "GET", "/health", timeout=2)[0] == 200:
                            break
                    except OSError:
                        time.sleep(0.005)
                ttft = time.perf_counter() - t0 + first_token(port, None)
            else:
                p, port, _ = start(a.hearth, serve_args, a.threads)
                if drop:
                    drop_cache(files[ids[0]])
                ttft = first_token(port, ids[0])
            rows[kind].append(ttft * 1000)
            stop(p)
    for kind, v in rows.items():
        print(f"TTFT {kind:24s} median {statistics.median(v):7.1f} ms  runs " + " ".join(f"{x:.0f}" for x in v))


if __name__ == "__main__":
    main()
