#!/usr/bin/env python3
"""Write tests/fixtures/tools/apply-template.json: the prompts llama.cpp's
`llama-server --jinja` renders (`/apply-template`) for conversations with
tools, calls and results, on the tiny native-tool models the test
`serve_native_tools` writes. Hearth's test then asks its own server for the
same prompts and compares them byte for byte.

Usage: scripts/native-tools-goldens.py LLAMA_SERVER
(builds the models with `cargo test` into a temporary folder first).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests/fixtures/tools/apply-template.json")

# Keys in the order clients write them (a template that prints a
# declaration with `tojson` keeps that order, in llama.cpp and in Hearth).
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city"},
            "days": {"type": "integer"},
            "units": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers",
        "parameters": {"type": "object", "properties": {
            "b": {"type": "number"}, "a": {"type": "number"}},
            "required": ["a", "b"]}}},
]


def call(id_, name, args):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


CASES = [
    ("declared", [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Oslo?"}], TOOLS),
    ("declared without a system turn", [
        {"role": "user", "content": "Add 2 and 3."}], TOOLS),
    ("a call and its result", [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", {"city": "Oslo", "days": 2})]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 3, \"sky\": \"clear\"}"}], TOOLS),
    ("two calls, results and an answer", [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and 2+3?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("c1", "get_weather", {"city": "Oslo", "units": "c"}),
                        call("c2", "add", {"a": 2, "b": 3.5})]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 degrees"},
        {"role": "tool", "tool_call_id": "c2", "content": "5.5"},
        {"role": "assistant", "content": "3 degrees; 5.5."},
        {"role": "user", "content": "Thanks."}], TOOLS),
    ("control text in arguments and results", [
        {"role": "user", "content": "Quote <turn|> and <|\"|> please"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", {"city": "<|\"|>}<tool_call|>", "days": 1})]},
        {"role": "tool", "tool_call_id": "c1", "content": "<|tool_response>x<escape>"}], TOOLS),
    ("no tools", [
        {"role": "user", "content": "Hello"}], None),
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def render(server, model, cases):
    port = free_port()
    p = subprocess.Popen([server, "-m", model, "--jinja", "--port", str(port), "-c", "512", "-t", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        out = []
        for name, messages, tools in cases:
            # llama-server turns thinking on by default where a template
            # has the switch; Hearth leaves it off unless asked.
            body = {"messages": messages, "chat_template_kwargs": {"enable_thinking": False}}
            if tools:
                body["tools"] = tools
            out.append((name, body, post(port, "/apply-template", body)["prompt"]))
        return out
    finally:
        p.terminate()
        p.wait()


def main():
    server = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, HEARTH_NATIVE_TOOLS_DIR=d)
        # The test writes the models, then fails on goldens that may not exist yet.
        subprocess.run(["cargo", "test", "-q", "-p", "hearth-cli", "--test", "serve_native_tools",
                        "prompts_with_tools_calls_and_results_match_llama_cpp"],
                       cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        goldens = []
        for model, file in [("gemma4", "gemma4-native.gguf"), ("functiongemma", "functiongemma-native.gguf")]:
            for name, body, prompt in render(server, os.path.join(d, file), CASES):
                goldens.append({"model": model, "name": f"{model}: {name}", "request": body, "prompt": prompt})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(goldens, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(goldens)} prompts written to {OUT}")


if __name__ == "__main__":
    main()
