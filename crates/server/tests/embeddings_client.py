"""The official `openai` and `ollama` Python clients' embedding calls, and
Cohere's official client's reranking, against `hearth serve` running the
tiny EmbeddingGemma.

Run by crates/cli/tests/it/serve_embeddings.rs. The vectors are compared with
sentence-transformers' own (`embeddings.npy` and friends, saved beside the
fixture by make_tiny_embedding.py), so each check shows the model, not only a
well-formed body.

Environment: HEARTH_HOST (http://127.0.0.1:PORT), HEARTH_MODEL_ID,
HEARTH_FIXTURE (the fixture directory), HEARTH_CTX (the server's --ctx).
"""

import array
import ast
import concurrent.futures
import json
import math
import os
import urllib.error
import urllib.request

import cohere
import ollama
import openai

HOST = os.environ["HEARTH_HOST"]
MODEL = os.environ["HEARTH_MODEL_ID"]
FIXTURE = os.environ["HEARTH_FIXTURE"]
CTX = int(os.environ["HEARTH_CTX"])


def load_npy(name):
    """A float32 .npy matrix as a list of rows (no numpy needed)."""
    data = open(os.path.join(FIXTURE, name), "rb").read()
    assert data[:6] == b"\x93NUMPY", name
    hlen = int.from_bytes(data[8:10], "little")
    header = ast.literal_eval(data[10 : 10 + hlen].decode())
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    rows, cols = header["shape"]
    values = array.array("f")
    values.frombytes(data[10 + hlen :])
    return [list(values[r * cols : (r + 1) * cols]) for r in range(rows)]


def max_diff(got, want):
    assert len(got) == len(want), (len(got), len(want))
    d = 0.0
    for g, w in zip(got, want):
        assert len(g) == len(w), (len(g), len(w))
        d = max(d, max(abs(a - b) for a, b in zip(g, w)))
    return d


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def post(path, body):
    req = urllib.request.Request(
        HOST + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


reference = json.load(open(os.path.join(FIXTURE, "reference.json")))
texts = reference["texts"]
golden = load_npy("embeddings.npy")
client = openai.OpenAI(base_url=HOST + "/v1", api_key="unused", max_retries=0)

# A string, then the ten texts as a list: the client asks for base64 by
# default and decodes it; float is asked for explicitly too.
one = client.embeddings.create(model=MODEL, input=texts[2])
assert len(one.data) == 1 and one.model == MODEL, one
assert max_diff([one.data[0].embedding], [golden[2]]) < 1e-5
assert one.usage.prompt_tokens == len(reference["ids"][2]), one.usage
listed = client.embeddings.create(model=MODEL, input=texts)
assert [d.index for d in listed.data] == list(range(len(texts)))
assert max_diff([d.embedding for d in listed.data], golden) < 1e-5
assert listed.usage.prompt_tokens == sum(len(i) for i in reference["ids"]), listed.usage
floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
assert max_diff([d.embedding for d in floats.data], golden) < 1e-5
raw = client.with_raw_response.embeddings.create(model=MODEL, input="a", encoding_format="base64")
assert isinstance(json.loads(raw.text)["data"][0]["embedding"], str), raw.text

# Matryoshka widths: sentence-transformers' truncate_dim.
for dim, name in reference["dims"].items():
    got = client.embeddings.create(model=MODEL, input=texts, dimensions=int(dim))
    assert max_diff([d.embedding for d in got.data], load_npy(name)) < 1e-5, dim

# Token ids as input, and the task prompts (our `task`, or sentence-
# transformers' `prompt_name`).
by_ids = client.embeddings.create(model=MODEL, input=reference["ids"][:3])
assert max_diff([d.embedding for d in by_ids.data], golden[:3]) < 1e-5
single_ids = client.embeddings.create(model=MODEL, input=reference["ids"][1])
assert max_diff([single_ids.data[0].embedding], [golden[1]]) < 1e-5
query = client.embeddings.create(model=MODEL, input=texts[:3], extra_body={"task": "query"})
assert max_diff([d.embedding for d in query.data], load_npy("embeddings_query.npy")) < 1e-5
doc = client.embeddings.create(
    model=MODEL, input=texts[:3], extra_body={"prompt_name": "Retrieval-document"}
)
assert max_diff([d.embedding for d in doc.data], load_npy("embeddings_document.npy")) < 1e-5

# Concurrent requests are batched together and each gets its own vectors.
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    futures = [
        pool.submit(client.embeddings.create, model=MODEL, input=[texts[i % 10], texts[(i + 3) % 10]])
        for i in range(16)
    ]
    for i, f in enumerate(futures):
        got = [d.embedding for d in f.result().data]
        assert max_diff(got, [golden[i % 10], golden[(i + 3) % 10]]) < 1e-5, i


def bad(call, says):
    try:
        call()
    except openai.BadRequestError as e:
        msg = e.body["message"] if isinstance(e.body, dict) else str(e)
        assert says in msg, msg
        return msg
    raise AssertionError("expected a 400 saying " + says)


long_text = " ".join(["retrieval notes"] * CTX)
bad(lambda: client.embeddings.create(model=MODEL, input=""), "empty")
bad(lambda: client.embeddings.create(model=MODEL, input=[]), "empty list")
bad(lambda: client.embeddings.create(model=MODEL, input=["a"] * 10_000), "at most 2048")
bad(lambda: client.embeddings.create(model=MODEL, input=[[2, 99999, 1]]), "outside the vocabulary")
bad(lambda: client.embeddings.create(model=MODEL, input=long_text), f"past the limit of {CTX}")
bad(lambda: client.embeddings.create(model=MODEL, input="a", dimensions=4096), "dimensions")
bad(lambda: client.embeddings.create(model=MODEL, input="a", extra_body={"task": "poetry"}), "unknown task")
cut = client.with_raw_response.embeddings.create(
    model=MODEL, input=["a", long_text], extra_body={"truncate": True}
)
body = json.loads(cut.text)
assert body["truncated"] == [1] and body["usage"]["prompt_tokens"] == 3 + CTX, body["usage"]
status, chat = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
assert status == 400 and "embedding model" in chat["error"]["message"], chat

# Ollama: /api/embed (several inputs, dimensions; truncating by default)
# and the older /api/embeddings.
oc = ollama.Client(host=HOST)
e = oc.embed(model=MODEL, input=texts)
assert e.model == MODEL + ":latest" and max_diff(e.embeddings, golden) < 1e-5
assert e.prompt_eval_count == sum(len(i) for i in reference["ids"]), e.prompt_eval_count
e16 = oc.embed(model=MODEL, input=texts, dimensions=16)
assert max_diff(e16.embeddings, load_npy("embeddings_dim16.npy")) < 1e-5
assert len(oc.embed(model=MODEL, input=long_text).embeddings[0]) == 64
try:
    oc.embed(model=MODEL, input=long_text, truncate=False)
    raise AssertionError("expected a 400")
except ollama.ResponseError as err:
    assert err.status_code == 400 and "past the limit" in err.error, err.error
legacy = oc.embeddings(model=MODEL, prompt=texts[4])
assert max_diff([legacy.embedding], [golden[4]]) < 1e-5

# Reranking: each document's score is the cosine of sentence-transformers'
# query and document embeddings (`model.similarity` of `encode_query` and
# `encode_document`: EmbeddingGemma's similarity is the cosine), ranked as
# those scores rank.
def cosine(a, b):
    return sum(x * y for x, y in zip(unit(a), unit(b)))


queries, documents = load_npy("embeddings_query.npy"), load_npy("embeddings_document.npy")
docs = texts[: len(documents)]
co2 = cohere.ClientV2(api_key="unused", base_url=HOST)
co1 = cohere.Client(api_key="unused", base_url=HOST)
for i, q in enumerate(queries):
    want = [cosine(q, d) for d in documents]
    order = sorted(range(len(docs)), key=lambda j: -want[j])
    v2 = co2.rerank(model=MODEL, query=texts[i], documents=docs)
    assert [r.index for r in v2.results] == order, (i, v2.results, want)
    assert max(abs(r.relevance_score - want[r.index]) for r in v2.results) < 1e-5, (v2, want)
    v1 = co1.rerank(model=MODEL, query=texts[i], documents=docs, top_n=2, return_documents=True)
    assert [r.index for r in v1.results] == order[:2], v1
    assert [r.document.text for r in v1.results] == [docs[j] for j in order[:2]], v1
    # Jina's shape (documents as objects) and llama.cpp's names for the route.
    for path in ("/v1/rerank", "/rerank", "/reranking", "/v1/reranking"):
        status, got = post(path, {"model": MODEL, "query": texts[i],
                                  "documents": [{"text": d} for d in docs]})
        assert status == 200, (path, got)
        assert [r["index"] for r in got["results"]] == order, (path, got)
        assert got["usage"]["total_tokens"] > 0, got
for body, says in (
    ({"query": "a", "documents": []}, "documents"),
    ({"query": "", "documents": ["a"]}, "query"),
    ({"documents": ["a"]}, "query"),
    ({"query": "a", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "a", "documents": [1]}, "documents"),
    ({"query": "a", "documents": ["a"] * 2049}, "2049 inputs"),
    ({"query": "a", "documents": ["a"], "truncate": False, "dimensions": 4096}, "dimensions"),
):
    status, got = post("/v1/rerank", {"model": MODEL, **body})
    assert status == 400 and says in got["error"]["message"], (body, got)
status, got = post("/v1/rerank", {"model": MODEL, "query": "a", "documents": ["a", long_text]})
assert status == 200 and got["truncated"] == [1], got

# After all that, the server still answers.
assert client.embeddings.create(model=MODEL, input="still here").data
print("all embeddings client checks passed")
