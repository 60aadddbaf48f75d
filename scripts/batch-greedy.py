"""Greedy output together and alone: N concurrent temperature-0 requests of
128 tokens to `hearth serve --parallel P`, then each prompt once on a fresh
`--parallel 1` server; prints how many texts are identical (stdlib only).

  python3 scripts/batch-greedy.py target/release/hearth MODEL.gguf P N
"""
import json, subprocess, sys, time, http.client, threading
BIN, MODEL, P, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prompts = ["The history of the printing press", "Write a short poem about rain", "Explain how a bicycle works", "The best way to learn a language is",
           "Once upon a time in a small village", "The three laws of motion are", "A recipe for bread:", "In 1969, the first"][:N]
def serve(port, parallel):
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(port), "--parallel", str(parallel), "-c", "512", "-t", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2); c.request("GET", "/health"); 
            if c.getresponse().status == 200: return p
        except Exception: pass
        time.sleep(0.2)
    raise SystemExit("server did not start")
def ask(port, prompt, out, i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 128, "temperature": 0}), {"Content-Type": "application/json"})
    out[i] = json.loads(c.getresponse().read())["choices"][0]["text"]
together = [None] * N
p = serve(8131, P)
ts = [threading.Thread(target=ask, args=(8131, pr, together, i)) for i, pr in enumerate(prompts)]
[t.start() for t in ts]; [t.join() for t in ts]; p.terminate(); p.wait()
alone = [None] * N
for i, pr in enumerate(prompts):
    p = serve(8132, 1); ask(8132, pr, alone, i); p.terminate(); p.wait()
same = sum(a == b for a, b in zip(alone, together))
print(f"--parallel {P}, {N} concurrent greedy 128-token requests: {same}/{N} identical to alone")
for a, b in zip(alone, together):
    if a != b: print("DIFF:", repr(a[:80]), "|", repr(b[:80]))
