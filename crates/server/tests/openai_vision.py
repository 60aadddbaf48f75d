"""The official `openai` client sends a chat with an image part to `hearth serve`
(the tiny Gemma 3 vision model) and reads the answer whole and streamed."""
import base64
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["HEARTH_BASE_URL"], api_key="unused")
image = open(os.environ["HEARTH_IMAGE"], "rb").read()
url = "data:image/png;base64," + base64.b64encode(image).decode()
messages = [{"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": url}},
]}]

whole = client.chat.completions.create(model="gemma3_vision", messages=messages, max_tokens=8,
                                       temperature=0)
assert whole.choices[0].finish_reason in ("stop", "length"), whole
assert whole.usage.prompt_tokens > 16, whole.usage  # the image's 16 soft tokens are in the prompt
text = whole.choices[0].message.content

parts = []
for chunk in client.chat.completions.create(model="gemma3_vision", messages=messages, max_tokens=8,
                                            temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == text, ("".join(parts), text)

try:
    client.chat.completions.create(model="gemma3_vision", max_tokens=4, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%not base64"}}]}])
    sys.exit("a malformed data URL was accepted")
except openai.BadRequestError as e:
    assert "base64" in str(e), e

# A phone's photo (4000x3000 JPEG, several MB as base64) under the default body limit.
photo = open(os.environ["HEARTH_PHOTO"], "rb").read()
big = [{"role": "user", "content": [
    {"type": "text", "text": "What is in this photo?"},
    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(photo).decode()}},
]}]
r = client.chat.completions.create(model="gemma3_vision", messages=big, max_tokens=4, temperature=0)
assert r.usage.prompt_tokens > 16, r.usage
print("photo of", len(photo), "bytes answered:", repr(r.choices[0].message.content))

print("prompt tokens", whole.usage.prompt_tokens, "reply", repr(text))
print("all openai vision checks passed")
