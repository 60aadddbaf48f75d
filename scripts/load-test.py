#!/usr/bin/env python3
"""Bounded load test of `hearth serve` on loopback (Python 3.11, stdlib only).

Starts the server itself (or uses --url), then runs CLIENTS concurrent clients
of REQUESTS requests each: chat and completions, streaming and not, with
every 5th request hanging up early. Checks that every request completes or
gets a well-formed OpenAI error, that none hangs past --timeout, that the
server is healthy afterwards and its memory returns near its baseline.
Prints aggregate tokens/s and peak RSS. Exits non-zero on any failed check.

  python3 scripts/load-test.py --model tests/fixtures/tiny/gemma3/model-f32.gguf --parallel 2
  python3 scripts/load-test.py --model ~/.cache/hearth/models/gemma-3-270m-q4_k_m.gguf \
      --parallel 4 --ctx 512 --max-tokens 16

Another OpenAI-compatible server (llama.cpp's) runs the same load with --url
and --pid (for its memory); without Hearth's /metrics, tokens are counted
from the responses (usage, else one per streamed content chunk):

  python3 scripts/load-test.py --url http://127.0.0.1:8000 --pid PID --hang-up-every 0

With --stream-only every request is a streamed chat, so each one's time to
its first token (TTFT) is measured and its p50/p99 printed; with
--prompt-tokens N each chat carries earlier turns of about N tokens (a long
conversation; the first words differ from client to client), so the load
measures serving at depth; each request asks a new last question after the
same turns (as a regenerated or edited last message does), or with --grow
carries the client's earlier questions and replies too (a chat going on):

  python3 scripts/load-test.py --url http://127.0.0.1:8000 --stream-only \
      --prompt-tokens 2000 --clients 4 --requests 2 --max-tokens 64 --hang-up-every 0

With --compare-apis, the same streamed chat load goes through OpenAI's
/v1/chat/completions, Ollama's /api/chat and Anthropic's /v1/messages in
turn (in turn, --rounds times) on one server, and the aggregate tokens/s of
each API is printed side by side:

  python3 scripts/load-test.py --model ~/.cache/hearth/models/gemma-3-270m-q4_k_m.gguf \
      --parallel 4 --ctx 512 --max-tokens 64 --clients 8 --requests 4 --compare-apis
"""

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="use a running server at http://HOST:PORT instead of starting one")
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/hearth"))
    p.add_argument("--model", default=os.path.join(ROOT, "tests/fixtures/tiny/gemma3/model-f32.gguf"))
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one request may take")
    p.add_argument("--api-key", default=None)
    p.add_argument("--pid", type=int, help="with --url: the server's process id, for its memory")
    p.add_argument("--rounds", type=int, default=3, help="with --compare-apis: rounds of the three APIs in turn")
    p.add_argument("--compare-apis", action="store_true",
                   help="run the same streamed chat load through the OpenAI, Ollama and Anthropic endpoints")
    p.add_argument("--stream-only", action="store_true",
                   help="every request a streamed chat, each one's time to first token measured")
    p.add_argument("--prompt-tokens", type=int, default=0,
                   help="give each chat earlier turns of about this many tokens (0: a one-line question)")
    p.add_argument("--grow", action="store_true",
                   help="with --stream-only: each client's chat grows, a request's question and reply joining its turns")
    p.add_argument("--hang-up-every", type=int, default=5,
                   help="every Nth request hangs up early (0: none, so every token is delivered)")
    return p.parse_args()


def start_server(a):
    cmd = [a.binary, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
           "--parallel", str(a.parallel), "--ctx", str(a.ctx), "-t", str(a.threads),
           "--queue", str(a.clients * 2)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://(\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.kill()
    sys.exit("the server did not start")


def rss_kib(pid, field="VmRSS"):
    """A memory figure of `pid` from /proc in KiB (VmHWM: the peak RSS)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


WORDS = ("river stone lantern orchard violet copper harbor meadow thunder quiet "
         "candle winter garden silver engine forest window bridge mountain paper").split()


def history(i, tokens):
    """Earlier turns of a conversation of about `tokens` tokens for client
    `i` (about four tokens for every three words), its own from the first
    word on."""
    turns, words, k = [], int(tokens * 0.75), 0
    while words > 0:
        n = min(words, 150)
        text = " ".join(WORDS[(i * 7 + k * 3 + w * w) % len(WORDS)] for w in range(n))
        turns.append({"role": "user", "content": f"Client {i}, note {k}: {text}"})
        turns.append({"role": "assistant", "content": f"Noted, client {i}."})
        words, k = words - n, k + 1
    return turns


class Client:
    def __init__(self, addr, timeout, key, hang_up_every=5, stream_only=False, prompt_tokens=0, grow=False):
        self.stream_only = stream_only
        self.grow = grow
        self.histories = {}
        self.prompt_tokens = prompt_tokens
        self.hang_up_every = hang_up_every
        self.host, self.port = addr.split(":")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def conn(self):
        return http.client.HTTPConnection(self.host, int(self.port), timeout=self.timeout)

    def get(self, path):
        c = self.conn()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def run(self, i, j, max_tokens):
        """One request; returns a result dict."""
        chat = self.stream_only or (i + j) % 2 == 0
        stream = self.stream_only or (i * 3 + j) % 4 < 2
        n = self.hang_up_every
        hang_up = n > 0 and (i * 8 + j) % n == n - 1
        payload = {"max_tokens": max_tokens, "temperature": 0.8, "seed": i * 100 + j}
        if chat:
            turns = self.histories.setdefault(i, history(i, self.prompt_tokens) if self.prompt_tokens else [])
            question = {"role": "user", "content": f"Client {i} asks question {j}: tell me a story."}
            payload["messages"] = turns + [question]
            path = "/v1/chat/completions"
        else:
            payload["prompt"] = f"Client {i}, request {j}: once upon a time"
            path = "/v1/completions"
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        t0 = time.time()
        res = {"stream": stream, "hang_up": hang_up, "tokens": 0, "status": None, "ok": False}
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(payload), headers=self.headers)
            r = c.getresponse()
            res["status"] = r.status
            if r.status != 200:
                body = json.loads(r.read())
                res["ok"] = isinstance(body.get("error", {}).get("message"), str)
                res["error"] = body["error"]["message"]
            elif stream:
                done = False
                content_chunks = 0
                for raw in r:
                    line = raw.decode().strip()
                    if hang_up and line.startswith("data: "):
                        res["ok"] = True  # got a chunk, now hang up
                        break
                    if line == "data: [DONE]":
                        done = True
                        break
                    if line.startswith("data: "):
                        chunk = json.loads(line[6:])
                        if "error" in chunk:
                            res["error"] = chunk["error"]["message"]
                        if chunk.get("usage"):
                            res["tokens"] = chunk["usage"]["completion_tokens"]
                            res["prompt_tokens"] = chunk["usage"].get("prompt_tokens")
                            res["usage"] = True
                        for choice in chunk.get("choices") or []:
                            piece = choice.get("text") or (choice.get("delta") or {}).get("content")
                            if piece:
                                content_chunks += 1
                                res.setdefault("ttft", time.time() - t0)
                                res["text"] = res.get("text", "") + piece
                if done and not res.get("usage"):
                    # No usage chunk (not every server sends one): one token
                    # per content chunk, as llama.cpp streams them.
                    res["tokens"] = content_chunks
                    res["counted_chunks"] = True
                res["ok"] = res["ok"] or (done and "error" not in res)
            else:
                if hang_up:
                    res["ok"] = True  # hang up before reading the answer
                else:
                    body = json.loads(r.read())
                    res["tokens"] = body["usage"]["completion_tokens"]
                    res["ok"] = body["choices"][0]["finish_reason"] in ("stop", "length")
        except Exception as e:  # noqa: BLE001 - any failure is a failed request
            res["error"] = f"{type(e).__name__}: {e}"
        finally:
            c.close()
        if self.grow and chat:
            # The next request of this client carries this one's turn.
            self.histories[i] = turns + [question, {"role": "assistant", "content": res.get("text", "")}]
        res["seconds"] = time.time() - t0
        # The socket's timeout bounds each read, not the whole request: a
        # stream that keeps trickling can run past the limit. It failed.
        if res["seconds"] > self.timeout and res["ok"]:
            res["ok"] = False
            res["error"] = f"took {res['seconds']:.1f} s, past the {self.timeout:.0f} s limit"
        return res


def streamed_chat(client, api, i, j, max_tokens):
    """One streamed chat through `api`; the tokens its last event reports."""
    content = f"Client {i} asks question {j}: tell me a story."
    seed = i * 100 + j
    if api == "openai":
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0.8, "seed": seed, "stream": True, "stream_options": {"include_usage": True}}
    elif api == "ollama":
        path = "/api/chat"
        body = {"messages": [{"role": "user", "content": content}],
                "options": {"num_predict": max_tokens, "temperature": 0.8, "seed": seed}}
    else:
        path = "/v1/messages"
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0.8, "stream": True}
    c = client.conn()
    tokens = None
    try:
        c.request("POST", path, body=json.dumps(body), headers=client.headers)
        r = c.getresponse()
        if r.status != 200:
            return None
        # Only the last event carries the count: parse no other (the client
        # shares the machine's cores with the server, so its work must be
        # the same small amount whatever the API).
        last = {"openai": b'"usage":{', "ollama": b'"done":true', "anthropic": b'"message_delta"'}[api]
        for raw in r:
            if last not in raw:
                continue
            line = raw.decode().strip().removeprefix("data: ")
            v = json.loads(line)
            if api == "openai" and v.get("usage"):
                tokens = v["usage"]["completion_tokens"]
            elif api == "ollama" and v.get("done"):
                tokens = v["eval_count"]
            elif api == "anthropic" and v.get("type") == "message_delta":
                tokens = v["usage"]["output_tokens"]
    finally:
        c.close()
    return tokens


def compare_apis(client, a):
    """The same streamed chat load through each API in turn, `--rounds` times."""
    totals = {api: [0, 0.0, 0] for api in ("openai", "ollama", "anthropic")}
    for _ in range(a.rounds):
        for api in totals:
            t0 = time.time()
            with ThreadPoolExecutor(max_workers=a.clients) as pool:
                got = list(pool.map(lambda k: streamed_chat(client, api, k // a.requests, k % a.requests, a.max_tokens),
                                    range(a.clients * a.requests)))
            totals[api][1] += time.time() - t0
            totals[api][0] += sum(t or 0 for t in got)
            totals[api][2] += sum(t is None for t in got)
    base = totals["openai"][0] / totals["openai"][1]
    print(f"streamed chat, {a.clients} clients x {a.requests} requests x {a.rounds} rounds, max_tokens {a.max_tokens}, --parallel {a.parallel}")
    print("| API | endpoint | tokens | seconds | tokens/s | vs OpenAI | failed |")
    print("|---|---|---|---|---|---|---|")
    names = {"openai": "/v1/chat/completions", "ollama": "/api/chat", "anthropic": "/v1/messages"}
    worst = 0.0
    for api, (tokens, secs, failed) in totals.items():
        rate = tokens / secs
        worst = max(worst, abs(rate / base - 1))
        print(f"| {api} | {names[api]} | {tokens} | {secs:.1f} | {rate:.1f} | {rate / base:.3f} | {failed} |")
    return sum(f for _, _, f in totals.values()), worst


def metric(client, name):
    _, body = client.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main():
    a = parse_args()
    proc = None
    if a.url:
        addr = a.url.removeprefix("http://").rstrip("/")
    else:
        proc, addr = start_server(a)
    client = Client(addr, a.timeout, a.api_key, a.hang_up_every, a.stream_only, a.prompt_tokens, a.grow)
    pid = proc.pid if proc else a.pid
    deadline = time.time() + 120
    while True:
        try:
            status = client.get("/health")[0]
            if status == 404:  # a server without /health
                status = client.get("/v1/models")[0]
            if status == 200:
                break
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit("the server did not become healthy")
        time.sleep(0.1)

    # Warm up, then take the memory baseline.
    client.run(0, 0, a.max_tokens)
    if a.compare_apis:
        failed, worst = compare_apis(client, a)
        print(f"largest difference from OpenAI's rate: {worst * 100:.1f}%")
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        sys.exit(1 if failed else 0)
    base_rss = rss_kib(pid)
    hearth = b"hearth_completion_tokens_total" in client.get("/metrics")[1]
    tokens_before = metric(client, "hearth_completion_tokens_total") if hearth else 0.0

    def worker(i):
        return [client.run(i, j, a.max_tokens) for j in range(a.requests)]

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=a.clients) as pool:
        results = [r for rs in pool.map(worker, range(a.clients)) for r in rs]
    wall = time.time() - t0

    # Let cancelled generations drain, then check the server.
    for _ in range(100):
        if not hearth or (metric(client, "hearth_slots_busy") == 0 and metric(client, "hearth_queue_depth") == 0):
            break
        time.sleep(0.1)
    healthy = client.get("/health" if hearth else "/v1/models")[0] == 200
    end_rss = rss_kib(pid)
    peak_rss = rss_kib(pid, "VmHWM")

    failed = [r for r in results if not r["ok"]]
    by_status = {}
    for r in results:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    client_tokens = sum(r["tokens"] for r in results)
    # Without the server's count, what the clients received is all we know
    # (hung-up requests then count only what arrived before the hang-up).
    server_tokens = (metric(client, "hearth_completion_tokens_total") - tokens_before) if hearth else client_tokens
    slowest = max(r["seconds"] for r in results)
    print(f"model:          {os.path.basename(a.model) if not a.url else a.url}")
    print(f"parallel:       {a.parallel if not a.url else '(set on the server)'}   clients: {a.clients} x {a.requests} requests, max_tokens {a.max_tokens}")
    print(f"requests:       {len(results)} in {wall:.1f} s; statuses {by_status}; hung up early: {sum(r['hang_up'] for r in results)}")
    print(f"failed:         {len(failed)}")
    for r in failed[:5]:
        print(f"   {r}")
    print(f"slowest:        {slowest:.1f} s (limit {a.timeout:.0f} s)")
    counted = sum(1 for r in results if r.get("counted_chunks"))
    print(f"tokens:         {client_tokens} delivered, {server_tokens:.0f} generated"
          + (" (cancelled included)" if hearth else " (counted by the clients)")
          + (f"; {counted} streams counted by chunks" if counted else ""))
    print(f"aggregate:      {server_tokens / wall:.1f} generated tokens/s, {client_tokens / wall:.1f} delivered tokens/s")
    if hearth:
        print(f"server decode:  {metric(client, 'hearth_decode_tokens_per_second'):.1f} tokens/s (lifetime, from /metrics)")
        print(f"cancelled:      {metric(client, 'hearth_generations_cancelled_total'):.0f}; rejected (429): {metric(client, 'hearth_requests_rejected_total'):.0f}")
    if base_rss is not None and end_rss is not None:
        print(f"memory (RSS):   {base_rss / 1024:.1f} MiB after warm-up, {end_rss / 1024:.1f} MiB after the load, peak {peak_rss / 1024:.1f} MiB")
    ttfts = sorted(r["ttft"] for r in results if "ttft" in r)
    if ttfts:
        def pct(q):
            return ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))]
        print(f"ttft:           p50 {pct(0.50):.3f} s, p99 {pct(0.99):.3f} s over {len(ttfts)} streams")
    prompts = [r["prompt_tokens"] for r in results if r.get("prompt_tokens")]
    if prompts:
        print(f"prompt tokens:  {min(prompts)} to {max(prompts)} a request (as the server counts them)")
    print(f"healthy after:  {healthy}")

    code = 0
    if failed or not healthy:
        code = 1
    if base_rss and end_rss and end_rss > base_rss * 1.5 + 64 * 1024:
        print("memory did not come back near its baseline")
        code = 1
    if proc:
        proc.terminate()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed"
        print(f"server exit:    {rc}")
        if rc != 0:
            code = 1
    print("PASS" if code == 0 else "FAIL")
    sys.exit(code)


if __name__ == "__main__":
    main()
