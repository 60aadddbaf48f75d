"""Structured output through the official `openai` client against a running
`hearth serve` on the real model.

Run by crates/cli/tests/it/serve_structured.rs. Reads HEARTH_BASE_URL (…/v1)
and HEARTH_MODEL_ID. Every output must parse and validate with `jsonschema`
(formats checked where jsonschema can), through `response_format`, through
the client's `parse` with Pydantic models, and tool calls must match their
tool's parameter schema. Exits non-zero on the first failed check.
"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import List, Literal, Optional, Set, Union

import jsonschema
import openai
from pydantic import BaseModel, Field

BASE = os.environ["HEARTH_BASE_URL"]
MODEL = os.environ["HEARTH_MODEL_ID"]
client = openai.OpenAI(base_url=BASE, api_key="none", max_retries=0, timeout=300)
MAX_TOKENS = 600


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def validate(schema, value):
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)


S = {"type": "string", "maxLength": 40}
SCHEMAS = {
    "person": {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 130}, "email": {"type": "string", "format": "email"}}, "required": ["name", "age", "email"], "additionalProperties": False},
    "address": {"type": "object", "properties": {"street": S, "city": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "country": {"enum": ["US", "FR", "DE", "JP"]}}, "required": ["street", "city", "zip", "country"], "additionalProperties": False},
    "product": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "name": S, "price": {"type": "number", "minimum": 0, "exclusiveMaximum": 10000}, "tags": {"type": "array", "items": S, "maxItems": 4}}, "required": ["id", "name", "price", "tags"], "additionalProperties": False},
    "order": {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["sku", "qty"], "additionalProperties": False}}, "total": {"type": "number", "minimum": 0}}, "required": ["items", "total"], "additionalProperties": False},
    "event": {"type": "object", "properties": {"title": S, "date": {"type": "string", "format": "date"}, "all_day": {"type": "boolean"}}, "required": ["title", "date", "all_day"], "additionalProperties": False},
    "weather": {"type": "object", "properties": {"city": S, "temp_c": {"type": "number", "minimum": -90, "maximum": 60}, "condition": {"enum": ["sunny", "cloudy", "rain", "snow"]}}, "required": ["city", "temp_c", "condition"], "additionalProperties": False},
    "todos": {"type": "object", "properties": {"todos": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {"task": S, "done": {"type": "boolean"}}, "required": ["task", "done"], "additionalProperties": False}}}, "required": ["todos"], "additionalProperties": False},
    "sentiment": {"type": "object", "properties": {"label": {"enum": ["positive", "negative", "neutral"]}, "score": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["label", "score"], "additionalProperties": False},
    "pet_anyof": {"type": "object", "properties": {"pet": {"anyOf": [{"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["kind", "lives"], "additionalProperties": False}, {"type": "object", "properties": {"kind": {"const": "dog"}, "breed": S}, "required": ["kind", "breed"], "additionalProperties": False}]}}, "required": ["pet"], "additionalProperties": False},
    "optional_fields": {"type": "object", "properties": {"title": S, "subtitle": S, "pages": {"type": "integer", "minimum": 1, "maximum": 2000}}, "required": ["title"], "additionalProperties": False},
    "server_config": {"type": "object", "properties": {"server": {"type": "object", "properties": {"host": {"type": "string", "format": "hostname", "maxLength": 30}, "port": {"type": "integer", "minimum": 1, "maximum": 65535}}, "required": ["host", "port"], "additionalProperties": False}, "debug": {"type": "boolean"}}, "required": ["server", "debug"], "additionalProperties": False},
    "book": {"type": "object", "properties": {"title": S, "authors": {"type": "array", "items": S, "minItems": 1, "maxItems": 3}, "isbn": {"type": "string", "pattern": "^97[89][0-9]{10}$"}, "year": {"type": "integer", "minimum": 1450, "maximum": 2030}}, "required": ["title", "authors", "isbn", "year"], "additionalProperties": False},
    "recipe": {"type": "object", "properties": {"ingredients": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {"name": S, "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000}, "unit": {"enum": ["g", "ml", "cup", "tbsp", "piece"]}}, "required": ["name", "amount", "unit"], "additionalProperties": False}}, "steps": {"type": "array", "items": S, "minItems": 1, "maxItems": 3}}, "required": ["ingredients", "steps"], "additionalProperties": False},
    "review": {"type": "object", "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5}, "pros": {"type": "array", "items": S, "maxItems": 2}, "cons": {"type": "array", "items": S, "maxItems": 2}}, "required": ["rating", "pros", "cons"], "additionalProperties": False},
    "geo": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lon": {"type": "number", "minimum": -180, "maximum": 180}}, "required": ["lat", "lon"], "additionalProperties": False},
    "nullable": {"type": "object", "properties": {"username": S, "nickname": {"anyOf": [S, {"type": "null"}]}}, "required": ["username", "nickname"], "additionalProperties": False},
    "contact": {"type": "object", "properties": {"name": S, "phone": {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}}, "required": ["name", "phone"], "additionalProperties": False},
    "invoice": {"type": "object", "properties": {"number": {"type": "string", "pattern": "^INV-[0-9]{4}$"}, "currency": {"enum": ["USD", "EUR", "GBP"]}, "due": {"type": "string", "format": "date"}, "lines": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "object", "properties": {"desc": S, "amount": {"type": "number", "minimum": 0}}, "required": ["desc", "amount"], "additionalProperties": False}}}, "required": ["number", "currency", "due", "lines"], "additionalProperties": False},
    "translation": {"type": "object", "properties": {"source": {"enum": ["en", "fr", "de"]}, "target": {"enum": ["en", "fr", "de"]}, "text": S}, "required": ["source", "target", "text"], "additionalProperties": False},
    "counts_map": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100}, "maxProperties": 3},
    "yes_no": {"type": "object", "properties": {"answer": {"type": "boolean"}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["answer", "confidence"], "additionalProperties": False},
    "const_version": {"type": "object", "properties": {"version": {"const": "1.0"}, "status": {"enum": ["ok", "degraded", "down"]}}, "required": ["version", "status"], "additionalProperties": False},
    "matrix": {"type": "object", "properties": {"rows": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": -9, "maximum": 9}}}}, "required": ["rows"], "additionalProperties": False},
    "tree_ref": {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}, "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/leaf"}}}, "required": ["value", "children"], "additionalProperties": False}, "leaf": {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    "log_entry": {"type": "object", "properties": {"level": {"enum": ["debug", "info", "warn", "error"]}, "time": {"type": "string", "format": "date-time"}, "message": S}, "required": ["level", "time", "message"], "additionalProperties": False},
    "http_request": {"type": "object", "properties": {"method": {"enum": ["GET", "POST", "PUT", "DELETE"]}, "path": {"type": "string", "pattern": "^/[a-z0-9/]{0,30}$"}, "headers": {"type": "object", "additionalProperties": S, "maxProperties": 2}}, "required": ["method", "path", "headers"], "additionalProperties": False},
    "quiz": {"type": "object", "properties": {"question": S, "options": {"type": "array", "items": S, "minItems": 4, "maxItems": 4}, "answer_index": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["question", "options", "answer_index"], "additionalProperties": False},
    "payment_oneof": {"type": "object", "properties": {"payment": {"oneOf": [{"type": "object", "properties": {"method": {"const": "card"}, "last4": {"type": "string", "pattern": "^[0-9]{4}$"}}, "required": ["method", "last4"], "additionalProperties": False}, {"type": "object", "properties": {"method": {"const": "cash"}}, "required": ["method"], "additionalProperties": False}]}}, "required": ["payment"], "additionalProperties": False},
    "username": {"type": "object", "properties": {"username": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,15}$"}, "bio": {"type": "string", "minLength": 3, "maxLength": 30}}, "required": ["username", "bio"], "additionalProperties": False},
    "network": {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}, "mask_bits": {"type": "integer", "minimum": 0, "maximum": 32}}, "required": ["ip", "mask_bits"], "additionalProperties": False},
    "multi_type": {"type": "object", "properties": {"value": {"type": ["string", "number"], "maxLength": 20}, "unit": {"type": ["string", "null"], "maxLength": 10}}, "required": ["value", "unit"], "additionalProperties": False},
    "allof": {"allOf": [{"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}, {"type": "object", "properties": {"name": S}, "required": ["name"]}]},
    "top_array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1000}, "minItems": 2, "maxItems": 5},
}


def ask_schema(name, schema):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Reply with a JSON {name.replace('_', ' ')}."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        max_tokens=MAX_TOKENS,
        temperature=0.7,
        seed=11,
    )
    return name, schema, r.choices[0]


with ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(lambda kv: ask_schema(*kv), SCHEMAS.items()))
for name, schema, choice in results:
    text = choice.message.content
    check(choice.finish_reason == "stop", f"{name}: finished on its own ({choice.finish_reason}): {text[:200]!r}")
    try:
        value = json.loads(text)
        validate(schema, value)
    except Exception as e:  # noqa: BLE001 - report what failed
        check(False, f"{name}: {text!r} does not validate: {e}")
    check(True, f"{name} validates: {text}")
check(len(SCHEMAS) >= 30, f"{len(SCHEMAS)} schemas")

# json_object: any object.
r = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "A JSON object about cats."}],
    response_format={"type": "json_object"}, max_tokens=MAX_TOKENS, temperature=0.7, seed=3,
)
check(r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict), "json_object gives an object")

# Streaming under a schema: the pieces join to a valid document.
schema = SCHEMAS["weather"]
stream = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo as JSON."}],
    response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    max_tokens=MAX_TOKENS, temperature=0.7, seed=5, stream=True,
)
parts, finish = [], None
for chunk in stream:
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
validate(schema, json.loads("".join(parts)))
check(finish == "stop", "a streamed schema answer validates")

# llama.cpp's extensions on the legacy endpoint: json_schema and a GBNF grammar.
r = client.completions.create(model=MODEL, prompt="A city:", max_tokens=200, temperature=0.5, seed=2, extra_body={"json_schema": SCHEMAS["geo"]})
validate(SCHEMAS["geo"], json.loads(r.choices[0].text))
check(r.choices[0].finish_reason == "stop", "completions + json_schema validates")
r = client.completions.create(model=MODEL, prompt="Answer:", max_tokens=50, temperature=0.9, seed=4, extra_body={"grammar": 'root ::= ("yes" | "no") ", " [0-9]{1,2} "%"'})
import re  # noqa: E402

check(re.fullmatch(r"(yes|no), [0-9]{1,2}%", r.choices[0].text) is not None, f"GBNF output matches: {r.choices[0].text!r}")
r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Date?"}], max_tokens=50, temperature=0.9, seed=4, extra_body={"regex": "20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]"})
check(re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]", r.choices[0].message.content) is not None, f"regex output matches: {r.choices[0].message.content!r}")

# A constraint cut off by max_tokens says `length`, never `stop`.
r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=3, temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "l", "schema": SCHEMAS["recipe"]}})
check(r.choices[0].finish_reason == "length", f"a cut-off constraint ends with length: {r.choices[0].message.content!r}")


# Pydantic models through the client's own parse helper.
class Ingredient(BaseModel):
    name: str = Field(max_length=30)
    grams: int = Field(ge=1, le=1000)


class Recipe(BaseModel):
    title: str = Field(max_length=40)
    vegetarian: bool
    ingredients: List[Ingredient] = Field(min_length=1, max_length=3)
    difficulty: Literal["easy", "medium", "hard"]
    note: Optional[str] = Field(max_length=30)


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    breed: str = Field(max_length=20)


class Household(BaseModel):
    address: str = Field(max_length=40)
    pets: List[Union[Cat, Dog]] = Field(max_length=2)


parse = client.chat.completions.parse if hasattr(client.chat.completions, "parse") else client.beta.chat.completions.parse
for model_cls in (Recipe, Household):
    r = parse(
        model=MODEL, messages=[{"role": "user", "content": f"Give a {model_cls.__name__} as JSON."}],
        response_format=model_cls, max_tokens=MAX_TOKENS, temperature=0.7, seed=9,
    )
    parsed = r.choices[0].message.parsed
    check(isinstance(parsed, model_cls), f"parse() gives a {model_cls.__name__}: {parsed!r}")
    model_cls.model_validate_json(r.choices[0].message.content)

# uniqueItems: a tag list of enum items (at most 3) never repeats an item over 20 seeded runs, and a
# Pydantic `set[Enum]` (written as `uniqueItems` over a `$defs` enum) parses.
TAGS = {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["news", "sport", "tech", "food", "travel"]}, "uniqueItems": True, "maxItems": 3}}, "required": ["tags"], "additionalProperties": False}
lengths = []
for seed in range(20):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tag this: the new phone tastes of pizza in Rome. Tags: news, tech, tech, food."}],
        response_format={"type": "json_schema", "json_schema": {"name": "tags", "schema": TAGS}}, max_tokens=100, temperature=1.0, seed=seed,
    )
    value = json.loads(r.choices[0].message.content)
    validate(TAGS, value)
    check(len(set(value["tags"])) == len(value["tags"]), f"uniqueItems seed {seed}: {value}")
    lengths.append(len(value["tags"]))
check(max(lengths) >= 2, f"some runs hold several tags, so a repeat was possible: {lengths}")


class Topic(str, Enum):
    news = "news"
    sport = "sport"
    tech = "tech"


class Tagged(BaseModel):
    topics: Set[Topic] = Field(max_length=3)


r = parse(model=MODEL, messages=[{"role": "user", "content": "Topics?"}], response_format=Tagged, max_tokens=MAX_TOKENS, temperature=1.0, seed=3)
check(isinstance(r.choices[0].message.parsed, Tagged), f"parse() gives a set: {r.choices[0].message.parsed!r}")
validate(Tagged.model_json_schema(), json.loads(r.choices[0].message.content))

# Tools.
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER, "strict": True}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}},
]
PARAMS = {"get_weather": WEATHER, "add": ADD}
question = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def call_of(message):
    check(message.tool_calls and len(message.tool_calls) == 1, f"one tool call: {message}")
    call = message.tool_calls[0]
    args = json.loads(call.function.arguments)
    validate(PARAMS[call.function.name], args)
    return call, args


for seed in range(3):
    r = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS, temperature=0.8, seed=seed)
    check(r.choices[0].finish_reason == "tool_calls", "required: finish_reason tool_calls")
    call_of(r.choices[0].message)
    r = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=MAX_TOKENS, temperature=0.8, seed=seed)
    call, _ = call_of(r.choices[0].message)
    check(call.function.name == "add", "a named function is the one called")

# The round trip, not streamed and streamed: call, result, final answer.
for stream in (False, True):
    if stream:
        s = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS, temperature=0.8, seed=1, stream=True)
        calls, finish = {}, None
        for chunk in s:
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            for tc in d.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = tc.id or entry["id"]
                if tc.function:
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        check(finish == "tool_calls" and len(calls) == 1, f"streamed call: {calls} {finish}")
        c = calls[0]
        validate(PARAMS[c["name"]], json.loads(c["arguments"]))
        call_id, name, arguments = c["id"], c["name"], c["arguments"]
    else:
        r = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS, temperature=0.8, seed=1)
        call, _ = call_of(r.choices[0].message)
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    history = question + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none", max_tokens=40, temperature=0.7, seed=2)
    final = r.choices[0].message
    check(not final.tool_calls and final.content, f"round trip (stream={stream}) ends in a text answer: {final.content!r}")

# auto: either a text reply or a valid call, never a broken one claimed as a call.
for seed in range(3):
    r = client.chat.completions.create(model=MODEL, messages=question, tools=TOOLS, max_tokens=MAX_TOKENS, temperature=0.9, seed=seed)
    ch = r.choices[0]
    if ch.finish_reason == "tool_calls":
        call_of(ch.message)
    else:
        check(ch.message.content is not None and not ch.message.tool_calls, f"auto gives text: {ch.message.content[:80]!r}")
check(True, "auto replies are calls or text")


# Bad input: a 400 naming the problem, and the server keeps serving.
def expect_400(what, needle, **kw):
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5, **kw)
    except openai.BadRequestError as e:
        msg = e.body.get("message", "") if isinstance(e.body, dict) else str(e)
        check(needle.lower() in msg.lower(), f"{what}: 400 naming it: {msg}")
        return
    check(False, f"{what}: expected a 400")


def rf(schema):
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


expect_400("invalid schema", "type", response_format=rf({"type": "strng"}))
expect_400("schema that matches nothing", "json_schema", response_format=rf(False))
expect_400("unsatisfiable bounds", "json_schema", response_format=rf({"type": "integer", "minimum": 5, "maximum": 1}))
expect_400("$ref cycle", "matches no output", response_format=rf({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}))
big = {"type": "object", "properties": {f"field_{i:06d}": {"type": "string", "description": "x" * 40} for i in range(10400)}}
check(900_000 < len(json.dumps(big)) < 1_040_000, f"a 1 MB schema ({len(json.dumps(big))} bytes)")
expect_400("1 MB schema", "limit", response_format=rf(big))
expect_400("unsupported format", "format", response_format=rf({"type": "string", "format": "credit-card"}))
expect_400("grammar that matches nothing", "matches no output", extra_body={"regex": "[^\\s\\S]"})
expect_400("bad GBNF", "not defined", extra_body={"grammar": "root ::= missing"})
expect_400("two constraints", "one constraint", response_format={"type": "json_object"}, extra_body={"regex": "a"})
expect_400("unknown tool_choice", "tool_choice", tools=TOOLS, tool_choice="always")
expect_400("tool_choice naming no tool", "nope", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "still there?"}], max_tokens=4)
check(r.choices[0].finish_reason in ("stop", "length"), "the server keeps serving after bad requests")

print("all structured output checks passed")
