"""The official `openai` client transcribes and translates clips through `hearth serve` (a model
that hears) in every response format, streamed and not, and prints each clip's texts as JSON
lines for the Rust test to hold against `hearth complete` and `hearth transcribe`."""
import json
import os
import re
import sys

import openai

client = openai.OpenAI(base_url=os.environ["HEARTH_BASE_URL"], api_key="unused")
clips = os.environ["HEARTH_CLIPS"].split(os.pathsep)
language = os.environ.get("HEARTH_LANGUAGE", "en")
CUE = re.compile(r"(\d\d):(\d\d):(\d\d)[,.](\d\d\d) --> (\d\d):(\d\d):(\d\d)[,.](\d\d\d)")


def seconds(h, m, s, ms):
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def cues(text):
    """The (start, end) of each cue of an SRT or WebVTT text."""
    found = [m.groups() for m in CUE.finditer(text)]
    return [(seconds(*g[:4]), seconds(*g[4:])) for g in found]


def transcribe(path, **kw):
    with open(path, "rb") as f:
        return client.audio.transcriptions.create(model="whisper-1", file=f, language=language, **kw)


for path in clips:
    whole = transcribe(path)
    text = whole.text
    assert isinstance(text, str), whole
    usage = whole.usage
    assert usage.type == "tokens" and usage.input_tokens > 0, usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens, usage

    plain = transcribe(path, response_format="text")
    assert plain.strip() == text, (plain, text)

    verbose = transcribe(path, response_format="verbose_json")
    assert verbose.text == text, (verbose.text, text)
    assert verbose.language == "english", verbose.language
    segments = verbose.segments
    assert segments[0].start == 0 and abs(segments[-1].end - verbose.duration) < 1e-6, segments
    assert all(a.end == b.start for a, b in zip(segments, segments[1:])), segments
    assert all(s.end - s.start <= 30 for s in segments), segments
    assert " ".join(s.text for s in segments if s.text) == text, segments

    srt = transcribe(path, response_format="srt")
    vtt = transcribe(path, response_format="vtt")
    assert vtt.startswith("WEBVTT"), vtt
    spans = [(s.start, s.end) for s in segments]
    for subtitles in (srt, vtt):
        timed = cues(subtitles)
        assert len(timed) == len(spans), (subtitles, spans)
        # Cue times are in whole milliseconds.
        assert all(abs(a - c) <= 5e-4 + 1e-9 and abs(b - d) <= 5e-4 + 1e-9
                   for (a, b), (c, d) in zip(timed, spans)), (subtitles, spans)
        for s in segments:
            assert s.text in subtitles, (s.text, subtitles)

    deltas, done = [], None
    for event in transcribe(path, stream=True):
        if event.type == "transcript.text.delta":
            deltas.append(event.delta)
        elif event.type == "transcript.text.done":
            done = event
    assert done is not None and done.text == text, (done, text)
    # The deltas are the model's words as they came; joined and with their
    # spaces evened out, they are the text.
    assert " ".join("".join(deltas).split()) == text, (deltas, text)

    with open(path, "rb") as f:
        translation = client.audio.translations.create(model="whisper-1", file=f)
    assert isinstance(translation.text, str), translation

    print(json.dumps({
        "clip": path,
        "text": text,
        "translation": translation.text,
        "segments": [[s.start, s.end, s.text] for s in segments],
        "duration": verbose.duration,
    }))

try:
    with open(clips[0], "rb") as f:
        client.audio.transcriptions.create(model="whisper-1", file=f, response_format="xml")
    sys.exit("an unknown response_format was accepted")
except openai.BadRequestError as e:
    assert "response_format" in str(e), e

try:
    client.audio.transcriptions.create(model="whisper-1", file=("empty.wav", b""))
    sys.exit("an empty file was accepted")
except openai.BadRequestError as e:
    assert "file" in str(e), e

try:
    client.audio.transcriptions.create(model="whisper-1", file=("noise.wav", b"RIFF not audio at all"))
    sys.exit("a file that is not audio was accepted")
except openai.BadRequestError as e:
    assert "cannot be read" in str(e), e

print("all openai transcription checks passed")
