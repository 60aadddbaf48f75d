#!/usr/bin/env python3
"""Soak and abuse `hearth serve` on loopback for a stated time (stdlib only).

Starts the server with `--models` over the real model and the tiny vision
checkpoint (so images have a tower), then runs well-formed traffic and
abusive traffic at once until --minutes have passed:

  well-formed: streamed and plain chat, completions, JSON-schema grammars,
    tools, images, long prompts (~1,500 tokens), cancellations mid-stream,
    clients that read a stream slowly;
  abusive: half-open connections, slowloris headers, oversize bodies,
    invalid UTF-8, deeply nested JSON, malformed JSON, unknown models.

Every request's outcome and latency is recorded; the server's RSS and open
file descriptors are sampled once a second. At the end it prints, per kind,
the count, the outcomes, and p50/p99 latency; RSS and fds at minute 5 and at
the end; and whether the server still serves. Exits non-zero when a
well-formed request was lost (no answer, or a 5xx), hung past its timeout,
or a malformed one got anything but a 4xx.

  python3 scripts/soak.py --minutes 60 --parallel 8 --json docs/perf/soak.json
  python3 scripts/soak.py --minutes 2            # a quick check
"""

import argparse
import base64
import http.client
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.expanduser("~/.cache/hearth/models/gemma-3-270m-q4_k_m.gguf")
VISION = os.path.join(ROOT, "tests/fixtures/tiny/gemma3_vision")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/hearth"))
    p.add_argument("--model", default=MODEL)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--clients", type=int, default=12, help="well-formed clients at once")
    p.add_argument("--abusers", type=int, default=4, help="abusive clients at once")
    p.add_argument("--timeout", type=float, default=330.0,
                   help="seconds a well-formed request may take (the server's own limit is 300 s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the summary here")
    return p.parse_args()


class Ledger:
    """Every request's kind, outcome and latency, and the server's samples."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows = []
        self.samples = []

    def add(self, kind, outcome, seconds, detail=""):
        with self.lock:
            self.rows.append((kind, outcome, seconds, detail))


def start_server(a, folder):
    cmd = [a.binary, "serve", "--models", folder, "--host", "127.0.0.1", "--port", "0",
           "-t", str(a.threads), "--parallel", str(a.parallel), "--ctx", str(a.ctx),
           "--keep-alive", "-1", "--read-timeout", "10"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    addr = None
    log = []
    while addr is None:
        line = proc.stderr.readline()
        if not line:
            sys.exit("server exited before listening:\n" + "".join(log))
        log.append(line)
        if "listening on http://" in line:
            addr = line.split("listening on http://")[1].strip()
    threading.Thread(target=lambda: [log.append(l) for l in proc.stderr], daemon=True).start()
    host, port = addr.rsplit(":", 1)
    return proc, host, int(port), log


def request(host, port, method, path, body=None, timeout=60.0, headers=None):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


PARAGRAPH = ("The harbour town woke before dawn. Fishing boats slid out past the breakwater while "
             "the bakery on the corner lit its ovens and the smell of bread drifted down to the quay. ")


def random_png(rng, side=64):
    """A fresh random RGB PNG, so every image request is decoded and encoded
    (the server caches the embeddings of a picture it has seen)."""
    raw = b"".join(b"\0" + bytes(rng.getrandbits(8) for _ in range(side * 3)) for _ in range(side))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def well_formed(kind, rng):
    """(path, body, stream, model) of one well-formed request of `kind`."""
    topic = rng.choice(["the sea", "a clock", "bread", "winter", "a bridge", "numbers"])
    chat = {"model": "gemma-3-270m-q4_k_m", "max_tokens": rng.choice([16, 32, 48]),
            "messages": [{"role": "user", "content": f"Write two sentences about {topic}."}],
            "temperature": rng.choice([0, 0.7])}
    if kind == "chat":
        return "/v1/chat/completions", chat, False
    if kind in ("chat_stream", "cancel", "slow_reader"):
        chat["stream"] = True
        chat["max_tokens"] = 48
        return "/v1/chat/completions", chat, True
    if kind == "completion":
        return "/v1/completions", {"model": chat["model"], "prompt": f"A note on {topic}:",
                                   "max_tokens": 24}, False
    if kind == "grammar":
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "t", "schema": {
            "type": "object", "properties": {"title": {"type": "string", "maxLength": 20},
                                             "count": {"type": "integer"}},
            "required": ["title", "count"]}}}
        chat["max_tokens"] = 48
        return "/v1/chat/completions", chat, False
    if kind == "tools":
        chat["tools"] = [{"type": "function", "function": {
            "name": "get_weather", "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 16}}, "required": ["city"]}}}]
        chat["tool_choice"] = "required"
        chat["max_tokens"] = 48
        return "/v1/chat/completions", chat, False
    if kind == "long_prompt":
        chat["messages"][0]["content"] = (f"Note {rng.randrange(10**6)}. " + PARAGRAPH * 40
                                          + "\nSummarise the text above.")
        chat["max_tokens"] = 16
        return "/v1/chat/completions", chat, False
    if kind == "image":
        return "/v1/chat/completions", {"model": "gemma3_vision", "max_tokens": 8, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is in the picture?"},
                                         {"type": "image_url", "image_url": {
                                             "url": "data:image/png;base64," + base64.b64encode(
                                                 random_png(rng)).decode()}}]}]}, False
    raise ValueError(kind)


WELL_FORMED = {"chat": 3, "chat_stream": 3, "completion": 2, "grammar": 1, "tools": 1,
               "long_prompt": 1, "image": 1, "cancel": 1, "slow_reader": 1}


def run_stream(host, port, path, body, kind, timeout, rng):
    """A streamed request: read to [DONE], or hang up after two chunks
    (cancel), or read slowly (slow_reader). The outcome."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            return f"http_{r.status}"
        chunks = 0
        while True:
            line = r.readline()
            if not line:
                return "truncated"
            if line.startswith(b"data: "):
                chunks += 1
                if line.strip() == b"data: [DONE]":
                    return "ok"
                if kind == "cancel" and chunks == 2:
                    return "ok"  # hung up on purpose; the server must carry on
                if kind == "slow_reader":
                    time.sleep(rng.uniform(0.2, 0.6))
    finally:
        c.close()


def good_client(a, host, port, ledger, deadline, seed):
    rng = random.Random(seed)
    kinds = [k for k, w in WELL_FORMED.items() for _ in range(w)]
    while time.time() < deadline:
        kind = rng.choice(kinds)
        path, body, stream = well_formed(kind, rng)
        t0 = time.time()
        try:
            if stream:
                outcome = run_stream(host, port, path, body, kind, a.timeout, rng)
            else:
                status, data = request(host, port, "POST", path, json.dumps(body), a.timeout)
                outcome = "ok" if status == 200 else f"http_{status}"
                if status == 200:
                    json.loads(data)
        except socket.timeout:
            outcome = "hung"
        except Exception as e:  # noqa: BLE001 - every failure is an outcome
            outcome = f"lost:{type(e).__name__}"
        ledger.add(kind, outcome, time.time() - t0)


def abuse_once(kind, host, port, rng):
    """One abusive act; the outcome: `4xx` when refused as it should be,
    `closed` when the server dropped a connection that never finished its
    request (half-open, slowloris), else what came back."""
    if kind == "oversize":
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 67108864\r\n\r\n{\"messages\":")
        return status_of(s)
    if kind == "half_open":
        s = socket.create_connection((host, port), timeout=60)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 500\r\n\r\n{\"mess")
        return status_of(s)
    if kind == "slowloris":
        s = socket.create_connection((host, port), timeout=60)
        s.sendall(b"GET /v1/models HTTP/1.1\r\n")
        try:
            for i in range(30):
                time.sleep(1.0)
                s.sendall(f"X-Slow-{i}: a\r\n".encode())
        except OSError:
            pass
        return status_of(s)
    bodies = {
        "invalid_utf8": b'{"messages":[{"role":"user","content":"\xff\xfe\xfd"}]}',
        "deep_json": b'{"messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "malformed_json": b'{"messages": [{"role": "user", "content": "hi"',
        "unknown_model": json.dumps({"model": "no-such-model", "messages": [
            {"role": "user", "content": "hi"}]}).encode(),
        "bad_schema": json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "name": "x", "schema": {"type": "nonsense"}}}}).encode(),
    }
    status, _ = request(host, port, "POST", "/v1/chat/completions", bodies[kind], 60)
    return f"http_{status}"


def status_of(s):
    try:
        data = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    except (socket.timeout, ConnectionResetError):
        pass
    finally:
        s.close()
    if data.startswith(b"HTTP/1.1 "):
        return "http_" + data[9:12].decode()
    return "closed"


ABUSIVE = ["oversize", "half_open", "slowloris", "invalid_utf8", "deep_json",
           "malformed_json", "unknown_model", "bad_schema"]


def abuser(host, port, ledger, deadline, seed):
    rng = random.Random(seed)
    while time.time() < deadline:
        kind = rng.choice(ABUSIVE)
        t0 = time.time()
        try:
            outcome = abuse_once(kind, host, port, rng)
        except Exception as e:  # noqa: BLE001
            outcome = f"lost:{type(e).__name__}"
        ledger.add("abuse:" + kind, outcome, time.time() - t0)
        time.sleep(rng.uniform(0.0, 0.5))


def sampler(pid, ledger, start, deadline):
    while time.time() < deadline + 1:
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            return
        ledger.samples.append((time.time() - start, rss, fds))
        time.sleep(1.0)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def expected(kind, outcome):
    """Whether `outcome` is right for `kind`."""
    if not kind.startswith("abuse:"):
        # 429 is an answer (queue full), not a loss; the load is sized to avoid it.
        return outcome in ("ok", "http_429")
    act = kind[6:]
    if act in ("half_open", "slowloris"):
        return outcome in ("closed", "http_408", "http_400")
    if act == "unknown_model":
        return outcome == "http_404"
    return outcome.startswith("http_4")


def main():
    a = parse_args()
    if not os.path.isfile(a.binary):
        sys.exit(f"no binary at {a.binary}: cargo build --release")
    folder = os.path.join("/tmp", f"hearth-soak-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    for src, name in [(a.model, "gemma-3-270m-q4_k_m.gguf"), (VISION, "gemma3_vision")]:
        dst = os.path.join(folder, name)
        if not os.path.exists(dst):
            os.symlink(os.path.abspath(src), dst)
    proc, host, port, log = start_server(a, folder)
    ledger = Ledger()
    start = time.time()
    deadline = start + a.minutes * 60
    threads = [threading.Thread(target=sampler, args=(proc.pid, ledger, start, deadline), daemon=True)]
    threads += [threading.Thread(target=good_client, args=(a, host, port, ledger, deadline, a.seed * 1000 + i))
                for i in range(a.clients)]
    threads += [threading.Thread(target=abuser, args=(host, port, ledger, deadline, a.seed * 2000 + i))
                for i in range(a.abusers)]
    for t in threads:
        t.start()
    last = start
    while any(t.is_alive() for t in threads[1:]):
        time.sleep(5)
        if time.time() - last >= 60:
            last = time.time()
            with ledger.lock:
                bad = sum(1 for k, o, _, _ in ledger.rows if not expected(k, o))
                n = len(ledger.rows)
            s = ledger.samples[-1] if ledger.samples else (0, 0, 0)
            print(f"[{(time.time() - start) / 60:5.1f} min] {n} requests, {bad} unexpected, "
                  f"RSS {s[1] / 1024:.0f} MiB, fds {s[2]}", flush=True)
    # Still serving at the end?
    try:
        status, _ = request(host, port, "POST", "/v1/chat/completions", json.dumps(
            {"model": "gemma-3-270m-q4_k_m", "max_tokens": 4,
             "messages": [{"role": "user", "content": "Say hi."}]}), 120)
        serving = status == 200
    except Exception:  # noqa: BLE001
        serving = False
    alive = proc.poll() is None
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    summary = summarize(a, ledger, serving, alive, log)
    print(json.dumps(summary, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    ok = (summary["unexpected"] == 0 and serving and alive and not summary["panicked"])
    sys.exit(0 if ok else 1)


def summarize(a, ledger, serving, alive, log):
    kinds = {}
    for kind, outcome, secs, _ in ledger.rows:
        k = kinds.setdefault(kind, {"n": 0, "outcomes": {}, "lat": []})
        k["n"] += 1
        k["outcomes"][outcome] = k["outcomes"].get(outcome, 0) + 1
        if outcome == "ok" or kind.startswith("abuse:"):
            k["lat"].append(secs)
    table = {kind: {"n": k["n"], "outcomes": k["outcomes"],
                    "p50_s": round(pct(k["lat"], 0.5), 3), "p99_s": round(pct(k["lat"], 0.99), 3)}
             for kind, k in sorted(kinds.items())}
    samples = ledger.samples

    def at(minute):
        pick = [s for s in samples if s[0] >= minute * 60]
        return pick[0] if pick else (samples[-1] if samples else (0, 0, 0))
    m5, end = at(5), samples[-1] if samples else (0, 0, 0)
    return {
        "minutes": a.minutes, "parallel": a.parallel, "threads": a.threads,
        "clients": a.clients, "abusers": a.abusers,
        "requests": len(ledger.rows),
        "unexpected": sum(1 for k, o, _, _ in ledger.rows if not expected(k, o)),
        "lost_or_hung": sum(1 for k, o, _, _ in ledger.rows
                            if not k.startswith("abuse:") and (o.startswith("lost") or o == "hung" or o == "truncated" or o.startswith("http_5"))),
        "kinds": table,
        "rss_kib": {"minute_5": m5[1], "end": end[1], "max": max((s[1] for s in samples), default=0)},
        "fds": {"minute_5": m5[2], "end": end[2], "max": max((s[2] for s in samples), default=0)},
        "rss_growth_pct": round(100.0 * (end[1] - m5[1]) / m5[1], 2) if m5[1] else None,
        "still_serving": serving, "alive": alive,
        "panicked": any("panicked" in l for l in log),
    }


if __name__ == "__main__":
    main()
