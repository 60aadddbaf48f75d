"""The official `ollama` Python client against `hearth serve`'s /api/*.

Run by crates/cli/tests/it/serve_clients.rs. Greedy replies are compared with
the OpenAI endpoints' on the same server, so each check shows the same
model answering, not only a well-formed body.

Environment: HEARTH_HOST (http://127.0.0.1:PORT), HEARTH_MODEL_ID,
HEARTH_API_KEY (sent as a bearer token, as Open WebUI does), and for
images HEARTH_VISION_HOST and HEARTH_IMAGE (a PNG the vision model reads).
"""

import base64
import json
import os
import urllib.error
import urllib.request

import ollama

HOST = os.environ["HEARTH_HOST"]
MODEL = os.environ["HEARTH_MODEL_ID"]
AUTH = {"Authorization": "Bearer " + os.environ["HEARTH_API_KEY"]}
GREEDY = {"temperature": 0, "seed": 7}


def post(host, path, body):
    """POST JSON; (status, parsed body)."""
    req = urllib.request.Request(
        host + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **AUTH}
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def openai_chat(host, messages, max_tokens):
    status, v = post(host, "/v1/chat/completions", {
        "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 7,
    })
    assert status == 200, v
    return v["choices"][0]["message"]["content"]


def expect_error(call, status, says=""):
    try:
        call()
    except ollama.ResponseError as e:
        assert e.status_code == status, (e.status_code, e.error)
        assert says in e.error, e.error
        return e.error
    raise AssertionError(f"expected a {status}")


c = ollama.Client(host=HOST, headers=AUTH)

# Listings.
models = c.list().models
assert [m.model for m in models] == [f"{MODEL}:latest"], models
assert models[0].size > 100_000_000 and models[0].details.family == "gemma3", models
show = c.show(MODEL)
assert "completion" in show.capabilities and show.modelinfo["general.architecture"] == "gemma3", show
running = c.ps().models
assert len(running) == 1 and running[0].context_length > 0 and running[0].size >= models[0].size, running

# Chat, whole: the same greedy reply as /v1/chat/completions, with
# measured timings.
messages = [{"role": "user", "content": "Name three colors."}]
r = c.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 16})
assert r.message.content == openai_chat(HOST, messages, 16), r
assert r.done and r.done_reason == "length" and r.eval_count == 16, r
assert r.prompt_eval_count > 5 and r.eval_duration > 0 and r.prompt_eval_duration > 0, r
assert r.total_duration >= r.eval_duration + r.prompt_eval_duration, r

# Chat, streamed: the pieces join to the same reply; the last line is done.
parts = list(c.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 16}, stream=True))
assert "".join(p.message.content for p in parts) == r.message.content, parts
assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].eval_count == 16, parts[-1]
assert len(parts) > 3, "tokens arrive as they are made"

# Log-probabilities: the same as OpenAI's for the same greedy reply,
# whole and streamed.
lp = c.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 8}, logprobs=True, top_logprobs=3)
status, v = post(HOST, "/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0, "seed": 7, "logprobs": True, "top_logprobs": 3})
want = [(e["token"], e["logprob"]) for e in v["choices"][0]["logprobs"]["content"]]
assert [(e.token, e.logprob) for e in lp.logprobs] == want and len(want) == 8, (lp.logprobs, want)
assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob for e in lp.logprobs)
streamed_lp = [e.token for p in c.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 8}, logprobs=True, stream=True) for e in (p.logprobs or [])]
assert streamed_lp == [t for t, _ in want], streamed_lp

# Generate with the chat template is the same conversation.
g = c.generate(model=MODEL, prompt="Name three colors.", options={**GREEDY, "num_predict": 16})
assert g.response == r.message.content and g.done_reason == "length", g
streamed = "".join(p.response for p in c.generate(model=MODEL, prompt="Name three colors.", options={**GREEDY, "num_predict": 16}, stream=True))
assert streamed == g.response, streamed
# Raw generate is the legacy completion of the same text.
raw = c.generate(model=MODEL, prompt="The capital of France is", raw=True, options={**GREEDY, "num_predict": 8})
status, v = post(HOST, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
assert status == 200 and raw.response == v["choices"][0]["text"], (raw, v)
# A stop string ends the reply before it.
s = c.generate(model=MODEL, prompt="Count: 1, 2, 3,", raw=True, options={**GREEDY, "num_predict": 30, "stop": [","]})
assert "," not in s.response and s.done_reason == "stop", s

# format: a schema and "json".
schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": False}
f = c.chat(model=MODEL, messages=[{"role": "user", "content": "Give a person as JSON."}], format=schema, options={**GREEDY, "num_predict": 80})
person = json.loads(f.message.content)
assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int), person
j = c.generate(model=MODEL, prompt="A JSON object:", format="json", options={**GREEDY, "num_predict": 60})
assert f.done_reason == "stop" and j.response.startswith("{"), j
if j.done_reason == "stop":
    assert isinstance(json.loads(j.response), dict), j


# Tools: the client's own function-to-schema conversion; a reply is text or
# a call to the tool with its arguments; a call and its result go back.
def get_weather(city: str) -> str:
    """Get the weather in a city.

    Args:
      city: The city's name
    """
    return "sunny"


t = c.chat(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[get_weather], options={**GREEDY, "num_predict": 40})
for call in t.message.tool_calls or []:
    assert call.function.name == "get_weather" and isinstance(call.function.arguments["city"], str), call
history = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"},
]
back = c.chat(model=MODEL, messages=history, tools=[get_weather], options={**GREEDY, "num_predict": 8})
status, prompt = post(HOST, "/apply-template", {"messages": [
    history[0],
    {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "content": "sunny, 21 C", "name": "get_weather"},
]})
assert back.done and "Result of get_weather: sunny, 21 C" in prompt["prompt"], prompt

# Bad input, each in Ollama's own error shape; the server goes on.
expect_error(lambda: c.chat(model="no-such-model", messages=messages), 404, "no-such-model")
expect_error(lambda: c.chat(model=MODEL, messages=messages, options={"temperature": "hot"}), 400)
expect_error(lambda: c.chat(model=MODEL, messages=messages, options={"num_predict": 0}), 400, "num_predict")
expect_error(lambda: c.chat(model=MODEL, messages=messages, format={"type": 5}), 400)
# What the client itself refuses to send, sent as it is.
status, v = post(HOST, "/api/chat", {"model": MODEL, "messages": messages, "format": "yaml"})
assert status == 400 and "format" in v["error"], v
expect_error(lambda: c.chat(model=MODEL, messages=[{"role": "user", "content": "hi", "images": [base64.b64encode(b"not an image").decode()]}]), 400)
expect_error(lambda: c.chat(model=MODEL, messages=messages, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}}]), 400)
status, v = post(HOST, "/api/chat", {"model": MODEL, "messages": messages, "tools": [{"type": "function", "function": {"name": "f", "parameters": 5}}]})
assert status == 400 and "parameters" in v["error"], v
expect_error(lambda: c.embed(model=MODEL, input="hello"), 400, "does not embed")
expect_error(lambda: ollama.Client(host=HOST).list(), 401, "API key")
for body in [b"{not json", b'{"model": 5, "messages": "x"}']:
    req = urllib.request.Request(HOST + "/api/chat", data=body, headers={"Content-Type": "application/json", **AUTH})
    try:
        urllib.request.urlopen(req)
        raise AssertionError("accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400 and "error" in json.loads(e.read())
# Pull is the operator's act: off without --allow-pull (the vision server
# runs without it), and with it (the text server) a known alias or
# hf:OWNER/REPO/FILE.gguf through `hearth pull`'s store, never a local path.
if os.environ.get("HEARTH_VISION_HOST"):
    expect_error(
        lambda: ollama.Client(host=os.environ["HEARTH_VISION_HOST"], headers=AUTH).pull("gemma3-270m"),
        403,
        "--allow-pull",
    )
if os.environ.get("HEARTH_MODEL_FILE"):
    expect_error(lambda: c.pull(os.environ["HEARTH_MODEL_FILE"]), 400, "local paths are never looked at")
expect_error(lambda: c.pull("no-such-model-anywhere"), 400, "known alias")
expect_error(lambda: c.pull("hf:a/../b/x.gguf"), 400, "bad Hub spec")
# The alias, already in the cache, is pulled at once, its progress streamed
# as status lines.
home = os.environ.get("HEARTH_HOME") or os.path.expanduser("~/.cache/hearth")
if os.path.isfile(os.path.join(home, "models", "gemma-3-270m-q4_k_m.gguf")):
    lines = list(c.pull("gemma3-270m", stream=True))
    assert lines[0].status == "pulling manifest" and lines[-1].status == "success", lines
    assert c.pull("gemma3-270m").status == "success"
status, v = post(HOST, "/api/pull", {})
assert status == 400 and "model" in v["error"], v

# Loading a model (no messages) answers at once.
status, v = post(HOST, "/api/chat", {"model": MODEL, "messages": []})
assert status == 200 and v["done_reason"] == "load", v
assert c.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 2}).done

# Images, on the tiny vision model: the same greedy reply as OpenAI's
# image part with the same bytes.
if os.environ.get("HEARTH_VISION_HOST"):
    vhost = os.environ["HEARTH_VISION_HOST"]
    image = os.environ["HEARTH_IMAGE"]
    vc = ollama.Client(host=vhost, headers=AUTH)
    vm = vc.list().models[0].model
    r = vc.chat(model=vm, messages=[{"role": "user", "content": "Describe", "images": [image]}], options={**GREEDY, "num_predict": 6})
    with open(image, "rb") as fh:
        url = "data:image/png;base64," + base64.b64encode(fh.read()).decode()
    want = openai_chat(vhost, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe"}]}], 6)
    assert r.message.content == want and r.prompt_eval_count > 16, (r, want)
    expect_error(lambda: vc.chat(model=vm, messages=[{"role": "user", "content": "hi", "images": [base64.b64encode(b"GIF89a broken").decode()]}]), 400, "image")

# Tools beside a format, as agent frameworks send them: a reply that is a
# call to the tool, or JSON held to the format.
both = c.chat(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[get_weather], format=schema, options={**GREEDY, "num_predict": 80})
if both.message.tool_calls:
    assert both.message.tool_calls[0].function.name == "get_weather", both
else:
    assert set(json.loads(both.message.content)) == {"name", "age"}, both

print("all ollama client checks passed")
