#!/usr/bin/env python3
"""Cold start, measured: process start to first token, for Hearth and
(optionally) llama.cpp on the same model file and thread count.

For each engine, RUNS times, alternating engines run by run:
  cli     `complete -p Hi -n 1` (llama.cpp: llama-completion): process start
          to exit, which follows the first token by the time it takes to
          print it and unmap; plus the load time the engine reports itself.
  server  `serve` (llama.cpp: llama-server): process start to /health 200,
          and to the answer of a one-token completion (its first token).

With --cold the page cache is dropped before every run (root only), so the
model, the binary and its libraries are read from disk again. Run it on a
copy of the model that no other process maps: pages a running process keeps
mapped stay cached. The residency of the model file after the drop is
checked with fincore when it is installed.

  python3 scripts/cold-start.py --hearth target/release/hearth -m MODEL.gguf \
      [--llama-dir LLAMA_BUILD/bin] [--threads 2] [--runs 5] [--cold] [--json OUT]

Prints one line per measurement (median and every run, in milliseconds).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def resident_bytes(path: str) -> int | None:
    """Bytes of `path` in the page cache (fincore), or None without it."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", path],
        capture_output=True,
        text=True,
    )
    try:
        return int(out.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def request(port: int, method: str, path: str, body: dict | None = None, timeout: float = 120.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_health(port: int, proc: subprocess.Popen, limit: float = 120.0) -> float:
    """Seconds (perf_counter) at which /health first answered 200."""
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            status, _ = request(port, "GET", "/health", timeout=2.0)
            if status == 200:
                return time.perf_counter()
        except OSError:
            pass
        time.sleep(0.005)
    raise RuntimeError("server never became healthy")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_ms(engine: str, stderr: str) -> float | None:
    """The load time the engine reports about itself."""
    pat = {
        "hearth": r"loaded in ([\d.]+) ?ms",
        "llama": r"load time =\s+([\d.]+) ms",
    }[engine]
    m = re.search(pat, stderr)
    return float(m.group(1)) if m else None


def cli_cmd(engine: str, args, extra: list[str]) -> list[str]:
    if engine == "hearth":
        return [args.hearth, "complete", "-m", args.model, "-p", "Hi", "-n", "1",
                "-t", str(args.threads), "--temp", "0", "-c", str(args.ctx)]
    return [os.path.join(args.llama_dir, "llama-completion"), "-m", args.model, "-p", "Hi",
            "-n", "1", "-t", str(args.threads), "--temp", "0", "-c", str(args.ctx),
            "-no-cnv", *extra]


def server_cmd(engine: str, args, port: int, extra: list[str]) -> list[str]:
    if engine == "hearth":
        return [args.hearth, "serve", "-m", args.model, "-t", str(args.threads),
                "-c", str(args.ctx), "--port", str(port)]
    return [os.path.join(args.llama_dir, "llama-server"), "-m", args.model,
            "-t", str(args.threads), "-c", str(args.ctx), "-np", "1",
            "--host", "127.0.0.1", "--port", str(port), *extra]


def run_cli(engine: str, args, extra: list[str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(cli_cmd(engine, args, extra), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    wall = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0:
        raise RuntimeError(f"{engine} cli failed: {p.stderr[-2000:]}")
    return {"exit_ms": wall, "load_ms": load_ms(engine, p.stderr)}


def run_server(engine: str, args, extra: list[str]) -> dict:
    port = free_port()
    log = open(os.devnull, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(server_cmd(engine, args, port, extra), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        t_health = wait_health(port, proc)
        status, body = request(port, "POST", "/v1/completions",
                            {"prompt": "Hi", "max_tokens": 1, "temperature": 0})
        t_token = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"{engine} completion answered {status}: {body[:300]!r}")
    finally:
        stop(proc)
        log.close()
    return {"health_ms": (t_health - t0) * 1e3, "token_ms": (t_token - t0) * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hearth", required=True, help="the hearth binary")
    ap.add_argument("-m", "--model", required=True, help="a GGUF file")
    ap.add_argument("--llama-dir", help="folder with llama-completion and llama-server")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096, help="context of both engines")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each run")
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.cold and os.geteuid() != 0:
        ap.error("--cold needs root (it writes /proc/sys/vm/drop_caches)")

    # Configurations: (name, engine, extra flags for llama.cpp).
    configs = [("hearth", "hearth", [])]
    if args.llama_dir:
        configs.append(("llama.cpp", "llama", []))
        # llama.cpp runs an empty warm-up pass at load by default.
        configs.append(("llama.cpp --no-warmup", "llama", ["--no-warmup"]))

    results: dict[str, dict[str, list]] = {name: {} for name, _, _ in configs}
    residency: list[int] = []
    if not args.cold:
        # Warm the cache once (and check every command works).
        for _, engine, extra in configs:
            run_cli(engine, args, extra)
    for i in range(args.runs):
        for kind in ("cli", "server"):
            for name, engine, extra in configs:
                if args.cold:
                    drop_caches()
                    res = resident_bytes(args.model)
                    if res is not None:
                        residency.append(res)
                r = run_cli(engine, args, extra) if kind == "cli" else run_server(engine, args, extra)
                for k, v in r.items():
                    results[name].setdefault(f"{kind}_{k}", []).append(v)
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    state = "cold page cache" if args.cold else "warm page cache"
    print(f"# {state}; model {args.model}; {args.threads} threads; ctx {args.ctx}; {args.runs} runs")
    if residency:
        print(f"# model bytes still cached after each drop: max {max(residency)}")
    labels = {
        "cli_exit_ms": "complete -n 1: start -> exit (first token)",
        "cli_load_ms": "complete -n 1: load time it reports",
        "server_health_ms": "serve: start -> /health 200",
        "server_token_ms": "serve: start -> first token (1-token completion answered)",
    }
    for name, series in results.items():
        for key, label in labels.items():
            vals = [v for v in series.get(key, []) if v is not None]
            if not vals:
                continue
            runs = " ".join(f"{v:.0f}" for v in vals)
            print(f"{name:24} {label:58} median {statistics.median(vals):7.1f} ms  [{runs}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cold": args.cold, "threads": args.threads, "ctx": args.ctx,
                       "results": results, "residency": residency}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
