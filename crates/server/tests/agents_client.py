"""OpenAI's Agents SDK against `hearth serve`, unchanged: an agent with a tool
and a typed output (a Pydantic model), through the Chat Completions model and
the Responses model. The SDK sends the tools and the output's JSON Schema in
one request; with tool_choice `none` the answer must come back typed, and
with `required` the first turn must be a call the SDK runs.

Environment: HEARTH_BASE_URL (…/v1), HEARTH_API_KEY, HEARTH_MODEL_ID.
"""

import os

import pydantic
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from openai import AsyncOpenAI

BASE = os.environ["HEARTH_BASE_URL"]
KEY = os.environ["HEARTH_API_KEY"]
MODEL = os.environ["HEARTH_MODEL_ID"]
set_tracing_disabled(True)
client = AsyncOpenAI(base_url=BASE, api_key=KEY)


class Forecast(pydantic.BaseModel):
    city: str
    sunny: bool


calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return "sunny"


for name, model in (("chat completions", OpenAIChatCompletionsModel(model=MODEL, openai_client=client)),
                    ("responses", OpenAIResponsesModel(model=MODEL, openai_client=client))):
    typed = Agent(name="forecaster", instructions="Answer about the weather.", tools=[get_weather],
                  output_type=Forecast, model=model,
                  model_settings=ModelSettings(tool_choice="none", temperature=0, max_tokens=60))
    result = Runner.run_sync(typed, "Is it sunny in Paris?", max_turns=2)
    assert isinstance(result.final_output, Forecast), (name, result.final_output)
    print(f"{name}: typed output {result.final_output!r}")
    # A forced call first: the SDK runs the tool, then (tool_choice reset
    # after the call, the SDK's default) asks again with the tools and the
    # output type together.
    before = len(calls)
    forced = Agent(name="caller", instructions="Answer about the weather.", tools=[get_weather],
                   output_type=Forecast, model=model,
                   model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=60))
    try:
        result = Runner.run_sync(forced, "Is it sunny in Paris?", max_turns=3)
        outcome = repr(result.final_output)
    except Exception as e:  # a base model may keep calling: the turns run out
        outcome = f"{type(e).__name__} after the calls"
    assert len(calls) > before, (name, calls)
    print(f"{name}: the tool ran ({calls[before:]}), then {outcome}")

print("all agents client checks passed")
