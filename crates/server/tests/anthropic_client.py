"""The official `anthropic` Python client against `hearth serve`'s
/v1/messages and /v1/messages/count_tokens.

Run by crates/cli/tests/it/serve_clients.rs. Greedy replies (temperature 0,
sent through `extra_body`: the current SDK no longer takes `temperature` as
an argument) are compared with /v1/chat/completions on the same server.

Environment: HEARTH_HOST, HEARTH_MODEL_ID, HEARTH_API_KEY, and for images
HEARTH_VISION_HOST and HEARTH_IMAGE.
"""

import base64
import json
import os
import urllib.error
import urllib.request

import anthropic

HOST = os.environ["HEARTH_HOST"]
MODEL = os.environ["HEARTH_MODEL_ID"]
KEY = os.environ["HEARTH_API_KEY"]
GREEDY = {"temperature": 0}


def post(host, path, body, stream=False):
    req = urllib.request.Request(host + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "x-api-key": KEY})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            raw = r.read().decode()
            return r.status, raw if stream else json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def openai_chat(host, messages, max_tokens, **extra):
    status, v = post(host, "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra})
    assert status == 200, v
    return v


def expect_error(call, cls, kind, says=""):
    try:
        call()
    except cls as e:
        assert e.body["type"] == "error" and e.body["error"]["type"] == kind, e.body
        assert says in e.body["error"]["message"], e.body
        return
    raise AssertionError(f"expected {cls.__name__}")


c = anthropic.Anthropic(base_url=HOST, api_key=KEY)
system = "Answer briefly."
question = [{"role": "user", "content": "Name three colors."}]
want = openai_chat(HOST, [{"role": "system", "content": system}] + question, 16)

# Whole: the same greedy reply and prompt size as the OpenAI endpoint.
m = c.messages.create(model=MODEL, max_tokens=16, system=system, messages=question, extra_body=GREEDY)
assert m.content[0].type == "text" and m.content[0].text == want["choices"][0]["message"]["content"], (m, want)
assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 16, m
assert m.usage.input_tokens == want["usage"]["prompt_tokens"], (m.usage, want["usage"])
counted = c.messages.count_tokens(model=MODEL, system=system, messages=question)
assert counted.input_tokens == m.usage.input_tokens, counted

# Streamed: the SDK's text stream and final message agree with the whole.
with c.messages.stream(model=MODEL, max_tokens=16, system=system, messages=question, extra_body=GREEDY) as s:
    pieces = list(s.text_stream)
    final = s.get_final_message()
assert "".join(pieces) == m.content[0].text and len(pieces) > 3, pieces
assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 16, final
# The event sequence, read off the wire.
status, raw = post(HOST, "/v1/messages", {"model": MODEL, "max_tokens": 4, "messages": question, "stream": True, **GREEDY}, stream=True)
events = [line[len("event: "):] for line in raw.splitlines() if line.startswith("event: ")]
assert events[:3] == ["message_start", "ping", "content_block_start"], events
assert set(events[3:-3]) == {"content_block_delta"}, events
assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"], events

# A stop sequence ends the reply before it, and is named.
st = c.messages.create(model=MODEL, max_tokens=40, stop_sequences=[","], messages=[{"role": "user", "content": "List: red, green, blue, white"}], extra_body=GREEDY)
if st.stop_reason == "stop_sequence":
    assert st.stop_sequence == "," and "," not in st.content[0].text, st
else:
    assert st.stop_reason in ("end_turn", "max_tokens") and "," not in st.content[0].text, st

# Tools: a forced call, then its result back; the call streamed in
# input_json_delta fragments that the SDK joins.
tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
call = c.messages.create(model=MODEL, max_tokens=60, tools=tools, tool_choice={"type": "any"}, messages=ask, extra_body=GREEDY)
use = [b for b in call.content if b.type == "tool_use"]
assert call.stop_reason == "tool_use" and len(use) == 1 and use[0].name == "get_weather", call
assert isinstance(use[0].input["city"], str), use
with c.messages.stream(model=MODEL, max_tokens=60, tools=tools, tool_choice={"type": "tool", "name": "get_weather"}, messages=ask, extra_body=GREEDY) as s:
    streamed = s.get_final_message()
assert [b.type for b in streamed.content] == ["tool_use"] and streamed.content[0].input == use[0].input, streamed
# Off the wire: the call's input arrives in several fragments as it is written.
status, raw = post(HOST, "/v1/messages", {"model": MODEL, "max_tokens": 60, "messages": ask, "tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}, "stream": True, **GREEDY}, stream=True)
fragments = raw.count('"input_json_delta"')
assert status == 200 and fragments > 1, raw
turns = ask + [
    {"role": "assistant", "content": call.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id, "content": "sunny, 21 C"}]},
]
answer = c.messages.create(model=MODEL, max_tokens=8, tools=tools, messages=turns, extra_body=GREEDY)
assert answer.stop_reason in ("max_tokens", "end_turn") and answer.content[0].type == "text", answer
with_result = c.messages.count_tokens(model=MODEL, tools=tools, messages=turns).input_tokens
assert with_result > c.messages.count_tokens(model=MODEL, tools=tools, messages=ask).input_tokens

# Thinking asked of a model that does not think: an ordinary answer.
t = c.messages.create(model=MODEL, max_tokens=4, messages=question, thinking={"type": "enabled", "budget_tokens": 1024}, extra_body=GREEDY)
assert [b.type for b in t.content] == ["text"], t

# Bad input, in Anthropic's error shape; the server goes on.
status, v = post(HOST, "/v1/messages", {"model": MODEL, "messages": question})
assert status == 400 and v["type"] == "error" and v["error"]["type"] == "invalid_request_error" and "max_tokens" in v["error"]["message"], v
expect_error(lambda: c.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]), anthropic.BadRequestError, "invalid_request_error", "video")
expect_error(lambda: c.messages.create(model="no-such-model", max_tokens=4, messages=question), anthropic.NotFoundError, "not_found_error", "no-such-model")
bad_image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(b"not an image").decode()}}
expect_error(lambda: c.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": [bad_image]}]), anthropic.BadRequestError, "invalid_request_error")
bad_tool = [{"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}]
expect_error(lambda: c.messages.create(model=MODEL, max_tokens=4, tools=bad_tool, tool_choice={"type": "any"}, messages=question), anthropic.BadRequestError, "invalid_request_error")
bad_key = anthropic.Anthropic(base_url=HOST, api_key="wrong")
expect_error(lambda: bad_key.messages.create(model=MODEL, max_tokens=4, messages=question), anthropic.AuthenticationError, "authentication_error")
assert c.messages.create(model=MODEL, max_tokens=2, messages=question).content

# An image block on the tiny vision model: the same greedy reply as
# OpenAI's image part with the same bytes.
if os.environ.get("HEARTH_VISION_HOST"):
    vhost = os.environ["HEARTH_VISION_HOST"]
    with open(os.environ["HEARTH_IMAGE"], "rb") as fh:
        data = base64.b64encode(fh.read()).decode()
    vc = anthropic.Anthropic(base_url=vhost, api_key=KEY)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    models = json.loads(urllib.request.urlopen(urllib.request.Request(vhost + "/v1/models", headers={"x-api-key": KEY})).read())
    vm = models["data"][0]["id"]
    r = vc.messages.create(model=vm, max_tokens=6, messages=[{"role": "user", "content": [block, {"type": "text", "text": "Describe"}]}], extra_body=GREEDY)
    want = openai_chat(vhost, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}}, {"type": "text", "text": "Describe"}]}], 6)
    assert r.content[0].text == want["choices"][0]["message"]["content"], (r, want)
    assert r.usage.input_tokens == want["usage"]["prompt_tokens"] > 16, (r.usage, want["usage"])

# Structured outputs: the SDK's `messages.parse` with a Pydantic model sends
# output_config.format and validates the answer.
import pydantic


class Forecast(pydantic.BaseModel):
    city: str
    sunny: bool


parsed = c.messages.parse(model=MODEL, max_tokens=60, messages=[{"role": "user", "content": "Is it sunny in Paris?"}], output_format=Forecast, extra_body=GREEDY)
assert isinstance(parsed.parsed_output, Forecast), parsed
status, v = post(HOST, "/v1/messages", {"model": MODEL, "max_tokens": 60, "messages": question, "output_format": {"type": "json_schema", "schema": Forecast.model_json_schema()}, **GREEDY})
assert status == 200 and Forecast.model_validate_json(v["content"][0]["text"]), v
status, v = post(HOST, "/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": question, "output_config": {"format": {"type": "json_schema"}}})
assert status == 400 and "output_config.format.schema" in v["error"]["message"], v

print("all anthropic client checks passed")
