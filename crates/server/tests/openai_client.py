"""Drive a running `hearth serve` with the official `openai` Python client.

Run by crates/cli/tests/it/serve_openai.rs against the real model. Reads
HEARTH_BASE_URL (…/v1), HEARTH_API_KEY, HEARTH_MODEL_ID and HEARTH_CTX from
the environment; exits non-zero on the first failed check.
"""

import json
import os
import sys
import urllib.request

import openai

BASE = os.environ["HEARTH_BASE_URL"]
KEY = os.environ["HEARTH_API_KEY"]
MODEL = os.environ["HEARTH_MODEL_ID"]
CTX = int(os.environ["HEARTH_CTX"])

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=120)


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def metric(name):
    # /metrics is behind the key, as the API is.
    req = urllib.request.Request(BASE.removesuffix("/v1") + "/metrics",
                                 headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


def expect_error(cls, status, fn, what):
    try:
        fn()
    except cls as e:
        check(e.status_code == status, f"{what}: status {e.status_code} == {status}")
        body = e.body if isinstance(e.body, dict) else {}
        check("message" in body and "type" in body, f"{what}: OpenAI error shape {body}")
        return e
    except Exception as e:  # noqa: BLE001 - report what came instead
        check(False, f"{what}: expected {cls.__name__}, got {type(e).__name__}: {e}")
    check(False, f"{what}: expected {cls.__name__}, got success")


# Models.
models = client.models.list()
ids = [m.id for m in models.data]
check(ids == [MODEL], f"models.list gives {ids}")
check(client.models.retrieve(MODEL).id == MODEL, "models.retrieve")

# Chat, greedy.
question = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What is the capital of France?"},
]
chat = client.chat.completions.create(
    model=MODEL, messages=question, max_tokens=8, temperature=0
)
answer = chat.choices[0].message.content
print("chat:", json.dumps(answer))
check(chat.object == "chat.completion", "chat object")
check(chat.choices[0].message.role == "assistant", "chat role")
# The default model is a base model (not instruction-tuned): check shape, not wit.
check(len(answer) > 0, f"chat answers something: {answer!r}")
check(chat.choices[0].finish_reason in ("stop", "length"), "chat finish_reason")
check(
    chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    and chat.usage.completion_tokens <= 8
    and chat.usage.prompt_tokens > 5,
    f"chat usage {chat.usage}",
)

# Streaming chat gives the same text as a plain request, then a finish
# reason and usage. A repeated prompt reuses the cached prefix and computes
# its last token alone, which may round differently from the full prefill:
# so compare against a plain request that took the same path.
again = client.chat.completions.create(
    model=MODEL, messages=question, max_tokens=8, temperature=0
)
answer = again.choices[0].message.content
check(again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1,
      f"a repeated prompt reuses all but its last token: {again.usage}")
stream = client.chat.completions.create(
    model=MODEL,
    messages=question,
    max_tokens=8,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
pieces, finish, usage, roles = [], None, None, []
for chunk in stream:
    if not pieces:
        check(chunk.object == "chat.completion.chunk", "chunk object")
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.role:
            roles.append(c.delta.role)
        if c.delta.content:
            pieces.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
streamed = "".join(pieces)
print("stream:", json.dumps(streamed))
check(roles == ["assistant"], f"one role delta: {roles}")
check(streamed == answer, f"streamed text equals the plain answer: {streamed!r} vs {answer!r}")
check(finish in ("stop", "length"), f"stream finish_reason {finish}")
check(usage is not None and usage.completion_tokens == again.usage.completion_tokens, f"stream usage {usage}")

# The next turn reuses the cached prefix of the conversation.
saved_before = metric("hearth_prefill_tokens_saved_total")
turn2 = question + [
    {"role": "assistant", "content": answer},
    {"role": "user", "content": "And of Italy?"},
]
chat2 = client.chat.completions.create(model=MODEL, messages=turn2, max_tokens=8, temperature=0)
print("turn 2:", json.dumps(chat2.choices[0].message.content))
saved = metric("hearth_prefill_tokens_saved_total") - saved_before
check(saved >= chat.usage.prompt_tokens - 1, f"turn 2 reused {saved} prefill tokens")
check(chat2.usage.prompt_tokens_details.cached_tokens == saved, "turn 2 reports cached_tokens")

# Completions.
# llama.cpp's greedy continuation of this prompt starts " Bonjour\nSpanish".
PROMPT = "English: Good morning\nFrench:"
comp = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)
print("completion:", json.dumps(comp.choices[0].text))
check(comp.object == "text_completion", "completion object")
check(comp.choices[0].text.startswith(" Bonjour"), "completion says Bonjour")
check(comp.usage.completion_tokens <= 6, "completion usage")
comp = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)
text = "".join(
    c.choices[0].text
    for c in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, stream=True
    )
    if c.choices
)
check(text == comp.choices[0].text, f"streamed completion equals plain: {text!r}")

# Stop strings and seeds.
stopped = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0, stop=["\n"])
check(stopped.choices[0].text == " Bonjour" and stopped.choices[0].finish_reason == "stop",
      f"stop string: {stopped.choices[0].text!r}")
a = client.chat.completions.create(model=MODEL, messages=question, max_tokens=12, temperature=1.0, seed=7)
b = client.chat.completions.create(model=MODEL, messages=question, max_tokens=12, temperature=1.0, seed=7)
check(a.choices[0].message.content == b.choices[0].message.content, "same seed, same text")

# Error cases.
bad_key = openai.OpenAI(base_url=BASE, api_key="wrong", max_retries=0)
expect_error(openai.AuthenticationError, 401, lambda: bad_key.models.list(), "wrong API key")
expect_error(
    openai.NotFoundError, 404,
    lambda: client.chat.completions.create(model="gpt-4o", messages=question, max_tokens=2),
    "unknown model",
)
for n in (0, 129):
    expect_error(
        openai.BadRequestError, 400,
        lambda: client.chat.completions.create(model=MODEL, messages=question, max_tokens=2, n=n),
        f"n = {n}",
    )
expect_error(
    openai.BadRequestError, 400,
    lambda: client.chat.completions.create(model=MODEL, messages=question, max_tokens=2, logprobs=True, top_logprobs=21),
    "top_logprobs = 21",
)
expect_error(
    openai.BadRequestError, 400,
    lambda: client.chat.completions.create(model=MODEL, messages=question, max_tokens=2, temperature=-1),
    "negative temperature",
)
e = expect_error(
    openai.BadRequestError, 400,
    lambda: client.completions.create(model=MODEL, prompt="word " * (CTX * 2), max_tokens=2),
    "prompt longer than the context",
)
check(str(CTX) in str(e), f"the error names the context size: {e}")
expect_error(
    openai.NotFoundError, 404,
    lambda: client.post("/nothing/here", cast_to=object, body={}),
    "unknown route",
)
huge = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10**9, temperature=0, stop=["\n"])
check(huge.choices[0].finish_reason in ("stop", "length"), "huge max_tokens is capped, not an error")

# n = 3: three choices from one prefill (the others copy its cache).
before = metric("hearth_prefill_tokens_evaluated_total")
three = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=8, temperature=1.0, seed=3, n=3)
evaluated = metric("hearth_prefill_tokens_evaluated_total") - before
check([c.index for c in three.choices] == [0, 1, 2], "n = 3 gives choices 0, 1, 2")
check(len({c.message.content for c in three.choices}) > 1, f"the choices differ: {[c.message.content for c in three.choices]}")
check(three.usage.completion_tokens == 24 and evaluated <= three.usage.prompt_tokens + 2,
      f"one prefill for three choices: {evaluated} prompt tokens evaluated for a {three.usage.prompt_tokens}-token prompt")
texts = {}
for chunk in client.chat.completions.create(model=MODEL, messages=question, max_tokens=6, temperature=1.0, seed=4, n=2, stream=True):
    for c in chunk.choices:
        texts.setdefault(c.index, "")
        texts[c.index] += c.delta.content or ""
check(sorted(texts) == [0, 1] and all(texts.values()), f"n = 2 streamed: {texts}")

# logprobs: a greedy 20-token reply with the 5 likeliest alternatives.
lp = client.chat.completions.create(model=MODEL, messages=question, max_tokens=20, temperature=0, logprobs=True, top_logprobs=5)
entries = lp.choices[0].logprobs.content
check(len(entries) == 20, f"20 log-probabilities: {len(entries)}")
for e in entries:
    tops = [t.logprob for t in e.top_logprobs]
    check(len(tops) == 5 and tops == sorted(tops, reverse=True), f"top_logprobs sorted: {tops}")
    check(sum(2.718281828459045 ** t for t in tops) <= 1 + 1e-5, f"their probabilities sum to at most 1: {tops}")
    check(e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, "greedy takes the likeliest")
check("".join(e.token for e in entries) == lp.choices[0].message.content or lp.choices[0].finish_reason == "stop",
      "the tokens spell the reply")
streamed_lp = []
for chunk in client.chat.completions.create(model=MODEL, messages=question, max_tokens=20, temperature=0, logprobs=True, stream=True):
    for c in chunk.choices:
        if c.logprobs and c.logprobs.content:
            streamed_lp.extend(c.logprobs.content)
check([e.token for e in streamed_lp] == [e.token for e in entries], "streamed logprobs cover the same tokens")
legacy = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
check(len(legacy.choices[0].logprobs.tokens) == 5 and all(len(t) == 3 for t in legacy.choices[0].logprobs.top_logprobs),
      f"legacy logprobs: {legacy.choices[0].logprobs}")
# Two tool calls in one reply: with parallel_tool_calls the grammar allows
# a JSON array of calls, and a bias on the token `[{` makes the base model open one. Streamed,
# the arguments come in fragments that the SDK's helper joins.
weather = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
two_cities = [{"role": "user", "content": "What is the weather in Paris and in London?"}]
root = BASE.removesuffix("/v1")
def post_json(path, body):
    req = urllib.request.Request(root + path, data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())
open_array = post_json("/tokenize", {"content": "[{"})["tokens"]
check(len(open_array) == 1, f"`[{{` is one token: {open_array}")
bias = {str(open_array[0]): 10}
both = client.chat.completions.create(model=MODEL, messages=two_cities, tools=weather, tool_choice="required", max_tokens=120, temperature=0, logit_bias=bias, parallel_tool_calls=True)
calls = both.choices[0].message.tool_calls or []
check(both.choices[0].finish_reason == "tool_calls" and len(calls) >= 2, f"two calls in one reply: {calls}")
check(all(c.function.name == "get_weather" and isinstance(json.loads(c.function.arguments)["city"], str) for c in calls), "each call valid")
deltas = 0
with client.chat.completions.stream(model=MODEL, messages=two_cities, tools=weather, tool_choice="required", max_tokens=120, temperature=0, logit_bias=bias, parallel_tool_calls=True) as st:
    for ev in st:
        deltas += ev.type == "tool_calls.function.arguments.delta"
    streamed_calls = st.get_final_completion().choices[0].message.tool_calls
check([json.loads(c.function.arguments) for c in streamed_calls] == [json.loads(c.function.arguments) for c in calls],
      f"the streamed calls, joined by the SDK, are the same: {streamed_calls}")
check(deltas > 2 * len(calls), f"arguments came in {deltas} fragments")
single = client.chat.completions.create(model=MODEL, messages=two_cities, tools=weather, tool_choice="required", max_tokens=120, temperature=0, logit_bias=bias)
check(len(single.choices[0].message.tool_calls or []) == 1, "without parallel_tool_calls: one call")
# Both calls and their results go back.
history = two_cities + [both.choices[0].message.model_dump(exclude_none=True)] + [
    {"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in calls]
check(client.chat.completions.create(model=MODEL, messages=history, max_tokens=4).choices[0].finish_reason in ("stop", "length"), "two results back")

# The Responses API: whole and streamed, a function tool, a JSON Schema.
r = client.responses.create(model=MODEL, input=question[1]["content"], instructions=question[0]["content"], max_output_tokens=12, temperature=0)
same = client.chat.completions.create(model=MODEL, messages=question, max_tokens=12, temperature=0)
check(r.output_text == same.choices[0].message.content, f"responses.create answers as chat does: {r.output_text!r}")
check(r.status in ("completed", "incomplete") and r.usage.output_tokens <= 12 and r.usage.input_tokens == same.usage.prompt_tokens, f"response usage {r.usage}")
events = list(client.responses.create(model=MODEL, input=question[1]["content"], instructions=question[0]["content"], max_output_tokens=12, temperature=0, stream=True))
kinds = [e.type for e in events]
check(kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] in ("response.completed", "response.incomplete"), f"response events {kinds}")
check("".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text, "streamed deltas join to the text")
fn = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
called = client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=fn, tool_choice="required", max_output_tokens=60, temperature=0)
call = called.output[0]
check(call.type == "function_call" and call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str), f"function call {call}")
with client.responses.stream(model=MODEL, input="What is the weather in Paris?", tools=fn, tool_choice="required", max_output_tokens=60, temperature=0) as st:
    final = st.get_final_response()
check(final.output[0].type == "function_call" and json.loads(final.output[0].arguments) == json.loads(call.arguments), "the streamed call's arguments, joined by the SDK")
back = client.responses.create(model=MODEL, tools=fn, max_output_tokens=6, temperature=0, input=[
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
    {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
])
check(back.usage.input_tokens > called.usage.input_tokens, "a call and its output go back into the conversation")
person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": False}
shaped = client.responses.create(model=MODEL, input="A person as JSON.", text={"format": {"type": "json_schema", "name": "person", "schema": person, "strict": True}}, max_output_tokens=80, temperature=0)
got = json.loads(shaped.output_text)
check(set(got) == {"name", "age"} and isinstance(got["age"], int), f"text.format json_schema: {got}")
# Tools and a typed answer in one request, as agent frameworks send them:
# the SDK's `parse` with a Pydantic model beside a strict tool. `none` is
# the typed answer, `required` a call, `auto` either (the grammar admits
# both; the reply is whichever the model wrote, and it parses).
import pydantic


class GetWeather(pydantic.BaseModel):
    city: str


class Forecast(pydantic.BaseModel):
    city: str
    sunny: bool


strict_tools = [openai.pydantic_function_tool(GetWeather)]
paris = [{"role": "user", "content": "Is it sunny in Paris?"}]
for choice in ("none", "required", "auto"):
    got = client.chat.completions.parse(model=MODEL, messages=paris, tools=strict_tools, tool_choice=choice, response_format=Forecast, max_tokens=60, temperature=0)
    msg = got.choices[0].message
    called = [c.function.parsed_arguments for c in msg.tool_calls or []]
    if choice == "none":
        check(msg.parsed is not None and not called, f"tool_choice none with a format: a typed answer {msg}")
    elif choice == "required":
        check(len(called) == 1 and isinstance(called[0], GetWeather), f"tool_choice required with a format: a call {msg}")
    else:
        check((msg.parsed is not None) != bool(called), f"tool_choice auto with a format: a call or a typed answer {msg}")
with client.chat.completions.stream(model=MODEL, messages=paris, tools=strict_tools, tool_choice="none", response_format=Forecast, max_tokens=60, temperature=0) as st:
    check(st.get_final_completion().choices[0].message.parsed is not None, "streamed: the typed answer beside tools")
shaped_tools = client.responses.create(model=MODEL, input="Is it sunny in Paris?", tools=fn, tool_choice="none", text={"format": {"type": "json_schema", "name": "forecast", "schema": Forecast.model_json_schema()}}, max_output_tokens=60, temperature=0)
check(Forecast.model_validate_json(shaped_tools.output_text).city != "", f"Responses: tools and text.format together {shaped_tools.output_text!r}")
expect_error(openai.BadRequestError, 400, lambda: client.responses.create(model=MODEL, input="hi", previous_response_id="resp_1"), "an unknown previous_response_id")
expect_error(openai.BadRequestError, 400, lambda: client.responses.create(model=MODEL, input="hi", tools=[{"type": "web_search"}]), "a tool type we do not run")

# For the test to compare with `hearth logits`: the prompt's ids and the reply's.
prompt = post_json("/apply-template", {"messages": question})["prompt"]
prompt_ids = post_json("/tokenize", {"content": prompt, "add_special": not prompt.startswith("<bos>")})["tokens"]
check(len(prompt_ids) == lp.usage.prompt_tokens, f"the template's ids: {len(prompt_ids)} == {lp.usage.prompt_tokens}")
with open(os.environ["HEARTH_LOGPROBS_OUT"], "w") as f:
    json.dump({"prompt": prompt_ids, "reply": [e.id for e in entries], "logprobs": [e.logprob for e in entries]}, f)

print("all openai client checks passed")
