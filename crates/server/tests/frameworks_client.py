"""A structured-output library and an orchestration framework against
`hearth serve`, unchanged (issue 92): instructor's typed extraction, and a
LangChain agent with a tool and a typed response through the provider's own
structured output (tools and `response_format` in one request).

Environment: HEARTH_BASE_URL (…/v1), HEARTH_API_KEY, HEARTH_MODEL_ID.
"""

import os

import instructor
import openai
import pydantic
from langchain.agents import create_agent
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

BASE = os.environ["HEARTH_BASE_URL"]
KEY = os.environ["HEARTH_API_KEY"]
MODEL = os.environ["HEARTH_MODEL_ID"]


class Forecast(pydantic.BaseModel):
    city: str
    sunny: bool


# instructor: its default mode asks for a forced call whose arguments are
# the model; JSON-schema mode asks for response_format.
for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
    client = instructor.from_openai(openai.OpenAI(base_url=BASE, api_key=KEY), mode=mode)
    got = client.chat.completions.create(model=MODEL, response_model=Forecast, max_tokens=60, temperature=0,
                                         messages=[{"role": "user", "content": "Is it sunny in Paris?"}])
    assert isinstance(got, Forecast), got
    print(f"instructor {mode}: {got!r}")

calls = []


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return "sunny"


# LangChain: an agent with a tool and a typed response by the provider's
# structured output, which sends the tools and response_format together.
llm = ChatOpenAI(model=MODEL, base_url=BASE, api_key=KEY, temperature=0, max_tokens=60, max_retries=0)
agent = create_agent(llm, tools=[get_weather], response_format=ProviderStrategy(Forecast))
try:
    state = agent.invoke({"messages": [{"role": "user", "content": "Is it sunny in Paris?"}]}, {"recursion_limit": 6})
    answer = state["structured_response"]
    assert isinstance(answer, Forecast), state
    print(f"langchain: {answer!r} after {len(calls)} call(s)")
except Exception as e:  # the base model may keep calling the tool
    from langgraph.errors import GraphRecursionError
    assert isinstance(e, GraphRecursionError) and calls, e
    print(f"langchain: the tool ran {len(calls)} times, then the steps ran out")

print("all frameworks client checks passed")
