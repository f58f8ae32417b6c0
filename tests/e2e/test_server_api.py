"""End-to-end tests of the OpenAI-compatible API against a running tensorfold server."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e_util import MODEL_ID, chatml, ext, request, sse_data, token_sha

MSGS = [{"role": "user", "content": "Name three colors and say one thing about each."}]
STORY = [{"role": "user", "content": "Write a short story about a cat named Tom who finds a key."}]
PROMPT = "The capital of France is"
SHA_RE = re.compile(r"^[0-9a-f]{12}$")


def chat(client, messages=MSGS, **kw):
    return client.chat.completions.create(model=MODEL_ID, messages=messages, **kw)


def stream_chat(client, messages=MSGS, **kw):
    chunks = list(client.chat.completions.create(model=MODEL_ID, messages=messages, stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return chunks, text


def stream_completion(client, prompt=PROMPT, **kw):
    chunks = list(client.completions.create(model=MODEL_ID, prompt=prompt, stream=True, **kw))
    text = "".join(c.choices[0].text or "" for c in chunks if c.choices)
    return chunks, text


def finish_reasons(chunks):
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def check_usage(usage, max_tokens):
    assert usage is not None, "reply has no usage"
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= max_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    details = usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None, "usage.prompt_tokens_details.cached_tokens missing"
    # No prefix cache yet means 0; a later cache may reuse at most the prompt.
    assert 0 <= details.cached_tokens <= usage.prompt_tokens


# Reference replies, computed once and shared by the tests that compare against them.
@pytest.fixture(scope="module")
def base_reply(client):
    return chat(client, temperature=0, max_tokens=24, extra_body={"return_token_ids": True})


@pytest.fixture(scope="module")
def story_reply(client):
    return chat(client, STORY, temperature=0, max_tokens=40, extra_body={"return_token_ids": True})


def test_models_lists_served_name(server, client):
    status, _, raw = request(server.base_url, "GET", "/v1/models")
    assert status == 200, raw[:300]
    body = json.loads(raw)
    assert body["object"] == "list"
    assert body["data"] and body["data"][0]["id"] == MODEL_ID
    assert MODEL_ID in [m.id for m in client.models.list()]


def test_health_is_json(server):
    status, _, raw = request(server.base_url, "GET", "/health")
    assert status == 200
    json.loads(raw)


def test_chat_nonstream_shape(client):
    resp = chat(client, temperature=0, max_tokens=24)
    assert resp.object == "chat.completion"
    assert resp.model == MODEL_ID
    assert resp.id and isinstance(resp.created, int)
    assert len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    check_usage(resp.usage, 24)
    if choice.finish_reason == "length":
        assert resp.usage.completion_tokens == 24
    tf = ext(resp)
    assert SHA_RE.match(tf.get("token_sha", "")), f"tensorfold.token_sha missing or malformed: {tf!r}"
    assert "token_ids" not in tf, "token_ids are only returned when asked for"


def test_chat_token_ids_and_sha(client, base_reply):
    tf = ext(base_reply)
    ids = tf.get("token_ids")
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids), f"token_ids missing: {tf!r}"
    assert len(ids) == base_reply.usage.completion_tokens
    assert tf["token_sha"] == token_sha(ids)
    again = chat(client, temperature=0, max_tokens=24)
    assert ext(again)["token_sha"] == tf["token_sha"], "temperature 0 must repeat exactly"
    assert again.choices[0].message.content == base_reply.choices[0].message.content


def test_prompt_tokens_follow_chat_template(client, tokenizer):
    msgs = [{"role": "user", "content": "Hi"}]
    expected = len(tokenizer.encode(chatml(msgs), add_special_tokens=False).ids)
    resp = chat(client, msgs, temperature=0, max_tokens=1)
    assert resp.usage.prompt_tokens == expected, "default system turn or ChatML formatting differs"


def test_system_message_replaces_default(client, tokenizer):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    expected = len(tokenizer.encode(chatml(msgs), add_special_tokens=False).ids)
    resp = chat(client, msgs, temperature=0, max_tokens=1)
    assert resp.usage.prompt_tokens == expected


def test_chat_stream_matches_nonstream(client, base_reply):
    chunks, text = stream_chat(client, temperature=0, max_tokens=24, stream_options={"include_usage": True})
    assert chunks, "no chunks streamed"
    first = chunks[0]
    assert first.choices and first.choices[0].delta.role == "assistant", "first chunk must carry the role"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1, "all chunks of one stream share an id"
    assert finish_reasons(chunks) == [base_reply.choices[0].finish_reason], "exactly one chunk finishes"
    assert text == base_reply.choices[0].message.content
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, "final chunk must carry usage and no choices"
    assert [c for c in chunks if c.usage is not None] == [last], "only the final chunk carries usage"
    u, b = last.usage, base_reply.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (b.prompt_tokens, b.completion_tokens,
                                                                      b.total_tokens)
    assert ext(last).get("token_sha") == ext(base_reply)["token_sha"], "final chunk must carry tensorfold.token_sha"


def test_chat_stream_without_usage(client, base_reply):
    chunks, text = stream_chat(client, temperature=0, max_tokens=24)
    assert text == base_reply.choices[0].message.content
    assert all(c.usage is None for c in chunks), "usage only streams when include_usage is set"
    last = chunks[-1]
    assert last.choices and last.choices[0].finish_reason, "without usage the finishing chunk is last"
    assert ext(last).get("token_sha") == ext(base_reply)["token_sha"]


def test_chat_stream_raw_sse(server):
    body = {"model": MODEL_ID, "messages": MSGS, "temperature": 0, "max_tokens": 8, "stream": True}
    status, headers, raw = request(server.base_url, "POST", "/v1/chat/completions", json.dumps(body))
    assert status == 200, raw[:300]
    assert headers.get("content-type", "").startswith("text/event-stream")
    assert raw.rstrip().endswith(b"data: [DONE]"), raw[-200:]
    data = sse_data(raw)
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1
    for item in data[:-1]:
        assert json.loads(item)["object"] == "chat.completion.chunk"


def test_completions_string_and_token_ids(client, tokenizer):
    ids = tokenizer.encode(PROMPT, add_special_tokens=False).ids
    a = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0)
    b = client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=16, temperature=0)
    assert a.object == "text_completion"
    assert a.choices[0].text.strip(), "empty completion"
    assert a.choices[0].finish_reason in ("stop", "length")
    assert a.usage.prompt_tokens == len(ids), "no BOS is added for SmolLM2 (add_bos_token false)"
    assert b.usage.prompt_tokens == len(ids)
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens
    assert b.choices[0].text == a.choices[0].text
    assert SHA_RE.match(ext(a).get("token_sha", ""))
    assert ext(b)["token_sha"] == ext(a)["token_sha"]


def test_completions_stream_matches_nonstream(client):
    ref = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0)
    chunks, text = stream_completion(client, max_tokens=16, temperature=0, stream_options={"include_usage": True})
    assert text == ref.choices[0].text
    assert finish_reasons(chunks) == [ref.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == ref.usage.completion_tokens
    assert ext(chunks[-1]).get("token_sha") == ext(ref)["token_sha"]


def test_max_tokens_length(client):
    resp = chat(client, temperature=0, max_tokens=5, extra_body={"ignore_eos": True, "return_token_ids": True})
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 5
    assert len(ext(resp)["token_ids"]) == 5


def test_max_completion_tokens_length(client):
    resp = chat(client, temperature=0, max_completion_tokens=5, extra_body={"ignore_eos": True})
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 5


def test_completions_max_tokens_length(client):
    resp = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=5, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 5


def pick_stop_word(text):
    """A word from the middle of the reply whose first occurrence is not at the very start; where a random model's
    reply has none (one long run of letters), a few of its characters whose first occurrence is not at the start."""
    words = [w.strip(".,;:!?\"'()") for w in text.split()]
    mid = len(words) // 2
    for w in words[mid:] + words[:mid]:
        if len(w) >= 3 and w.isalpha() and text.find(w) > 0:
            return w
    half = len(text) // 2
    for k in (4, 3, 2):
        for i in list(range(half, len(text) - k + 1)) + list(range(1, half)):
            piece = text[i:i + k]
            if piece.strip() == piece and text.find(piece) > 0:
                return piece
    pytest.fail(f"no usable stop string in reply {text!r}")


def test_stop_strings(client, story_reply):
    text = story_reply.choices[0].message.content
    word = pick_stop_word(text)
    expected = text[:text.find(word)]
    for stop in ([word], word):
        resp = chat(client, STORY, temperature=0, max_tokens=40, stop=stop, extra_body={"return_token_ids": True})
        assert resp.choices[0].message.content == expected, f"stop={stop!r}"
        assert resp.choices[0].finish_reason == "stop"
        ids = ext(resp)["token_ids"]
        assert len(ids) == resp.usage.completion_tokens
        assert ids == ext(story_reply)["token_ids"][:len(ids)], "stopped reply must be a prefix of the full one"
        assert ext(resp)["token_sha"] == token_sha(ids)
    chunks, streamed = stream_chat(client, STORY, temperature=0, max_tokens=40, stop=[word])
    assert streamed == expected
    assert finish_reasons(chunks) == ["stop"]


def test_stop_string_completions(client):
    ref = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0,
                                    extra_body={"ignore_eos": True})
    text = ref.choices[0].text
    word = pick_stop_word(text)
    resp = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0, stop=word,
                                     extra_body={"ignore_eos": True})
    assert resp.choices[0].text == text[:text.find(word)]
    assert resp.choices[0].finish_reason == "stop"


def test_seeded_sampling(client):
    kw = dict(temperature=1.0, max_tokens=48, extra_body={"ignore_eos": True, "return_token_ids": True})
    a = chat(client, STORY, seed=1234, **kw)
    b = chat(client, STORY, seed=1234, **kw)
    c = chat(client, STORY, seed=1235, **kw)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert ext(a)["token_sha"] == ext(b)["token_sha"] == token_sha(ext(a)["token_ids"])
    assert ext(c)["token_ids"] != ext(a)["token_ids"], "a different seed should change a 48-token sample"


def test_seeded_stream_matches_nonstream(client):
    kw = dict(temperature=1.0, max_tokens=24, seed=77, extra_body={"ignore_eos": True})
    ref = chat(client, STORY, **kw)
    chunks, text = stream_chat(client, STORY, **kw)
    assert text == ref.choices[0].message.content
    assert ext(chunks[-1]).get("token_sha") == ext(ref)["token_sha"]


def test_concurrent_requests_equal_solo(client):
    prompts = [[{"role": "user", "content": c}] for c in
               ("What is the sun?", "Give me a word that rhymes with cat.", "Count from one to five.")]
    kw = dict(temperature=0, max_tokens=16)
    solo = [chat(client, p, **kw) for p in prompts]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(lambda p: chat(client, p, **kw), prompts))
    for s, t in zip(solo, together):
        assert t.choices[0].message.content == s.choices[0].message.content
        assert ext(t)["token_sha"] == ext(s)["token_sha"]
        assert t.usage.completion_tokens == s.usage.completion_tokens
