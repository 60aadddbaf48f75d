"""Stored responses through the official `openai` client, in two phases
around a server restart (the test kills the server between them):

    phase 1: two turns, the second naming the first by previous_response_id;
    phase 2: a third turn naming the second, then retrieve and delete.

The state between them (the ids, the prompt sizes) goes through
HEARTH_CHAIN_STATE. Environment: HEARTH_BASE_URL, HEARTH_API_KEY,
HEARTH_MODEL_ID.
"""

import json
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["HEARTH_BASE_URL"], api_key=os.environ["HEARTH_API_KEY"])
MODEL = os.environ["HEARTH_MODEL_ID"]
STATE = os.environ["HEARTH_CHAIN_STATE"]
ask = dict(model=MODEL, max_output_tokens=8, temperature=0)

if sys.argv[1] == "1":
    first = client.responses.create(input="My name is Ada.", **ask)
    assert first.store and first.previous_response_id is None, first
    second = client.responses.create(input="What is my name?", previous_response_id=first.id, **ask)
    assert second.previous_response_id == first.id, second
    # The second prompt holds the first turn, its answer and the new input.
    alone = client.responses.create(input="What is my name?", store=False, **ask)
    assert not alone.store
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens, (second.usage, alone.usage)
    try:
        client.responses.retrieve(alone.id)
        raise AssertionError("a store=false response was kept")
    except openai.NotFoundError:
        pass
    with open(STATE, "w") as f:
        json.dump({"second": second.id, "second_input": second.usage.input_tokens,
                   "second_output": second.usage.output_tokens}, f)
    print("phase 1 passed")
else:
    with open(STATE) as f:
        state = json.load(f)
    # Streamed this time: the stored conversation carries across the restart.
    events = list(client.responses.create(input="Say it again.", previous_response_id=state["second"], stream=True, **ask))
    assert events[-1].type in ("response.completed", "response.incomplete"), events[-1]
    third = events[-1].response
    assert third.previous_response_id == state["second"], third
    assert third.usage.input_tokens > state["second_input"] + state["second_output"], (third.usage, state)
    got = client.responses.retrieve(state["second"])
    assert got.id == state["second"] and got.output, got
    assert client.responses.retrieve(third.id).id == third.id
    deleted = client.responses.delete(state["second"])
    try:
        client.responses.retrieve(state["second"])
        raise AssertionError("deleted, still there")
    except openai.NotFoundError:
        pass
    try:
        client.responses.create(input="hi", previous_response_id="resp_unknown", **ask)
        raise AssertionError("an unknown previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert "previous_response_id" in str(e), e
    print("phase 2 passed")
