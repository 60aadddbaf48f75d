"""The official `openai` client sends a chat with an `input_audio` part to `hearth serve` (the tiny
Gemma 3n audio model) and reads the answer whole and streamed."""
import base64
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["HEARTH_BASE_URL"], api_key="unused")
clip = base64.b64encode(open(os.environ["HEARTH_AUDIO"], "rb").read()).decode()
messages = [{"role": "user", "content": [
    {"type": "text", "text": "What is said here?"},
    {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}},
]}]

whole = client.chat.completions.create(model="gemma3n_audio", messages=messages, max_tokens=8,
                                       temperature=0)
assert whole.choices[0].finish_reason in ("stop", "length"), whole
assert whole.usage.prompt_tokens > 24, whole.usage  # the clip's 24 audio tokens are in the prompt
text = whole.choices[0].message.content

parts = []
for chunk in client.chat.completions.create(model="gemma3n_audio", messages=messages, max_tokens=8,
                                            temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == text, ("".join(parts), text)

try:
    client.chat.completions.create(model="gemma3n_audio", max_tokens=4, messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "%%%not base64", "format": "wav"}}]}])
    sys.exit("malformed audio was accepted")
except openai.BadRequestError as e:
    assert "base64" in str(e), e

print("prompt tokens", whole.usage.prompt_tokens, "reply", repr(text))
print("all openai audio checks passed")
