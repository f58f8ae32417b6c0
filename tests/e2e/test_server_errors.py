"""Bad requests get OpenAI-shaped errors naming the problem, and never stop the server."""

import json

import pytest

from e2e_util import MODEL_ID, chatml, check_error_body, nan_norm_copy, post_json, request, sse_data

HI = [{"role": "user", "content": "Hi"}]
GOOD_CHAT = {"model": MODEL_ID, "messages": HI, "max_tokens": 2, "temperature": 0}
GOOD_COMPLETION = {"model": MODEL_ID, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
CONTEXT = 512


@pytest.fixture
def alive(client):
    """Checks after the test that the server still answers a small chat."""
    yield
    resp = client.chat.completions.create(model=MODEL_ID, messages=HI, max_tokens=2, temperature=0)
    assert resp.choices and resp.choices[0].message.role == "assistant", "server stopped answering after a bad request"


# (case id, fields merged over a good chat request, param at fault, words the message must contain)
CHAT_FIELD_CASES = [
    ("messages-string", {"messages": "hello"}, "messages", ["messages"]),
    ("messages-empty", {"messages": []}, "messages", ["messages"]),
    ("message-no-content", {"messages": [{"role": "user"}]}, "messages", ["content"]),
    ("message-unknown-role", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages", ["role"]),
    ("temperature-string", {"temperature": "hot"}, "temperature", ["temperature"]),
    ("max_tokens-string", {"max_tokens": "ten"}, "max_tokens", ["max_tokens"]),
    ("max_tokens-negative", {"max_tokens": -1}, "max_tokens", ["max_tokens"]),
    ("stop-number", {"stop": 5}, "stop", ["stop"]),
    ("stream-string", {"stream": "yes"}, "stream", ["stream"]),
    ("n-2", {"n": 2}, "n", []),
]


@pytest.mark.parametrize("fields,param,words", [c[1:] for c in CHAT_FIELD_CASES],
                         ids=[c[0] for c in CHAT_FIELD_CASES])
def test_chat_bad_field(server, alive, fields, param, words):
    status, body, raw = post_json(server.base_url, "/v1/chat/completions", {**GOOD_CHAT, **fields})
    check_error_body(status, body, raw, 400, param=param, words=words)


COMPLETION_FIELD_CASES = [
    ("prompt-missing", {"prompt": None}, "prompt", ["prompt"]),
    ("prompt-number", {"prompt": 5}, "prompt", ["prompt"]),
    ("prompt-token-out-of-vocab", {"prompt": [1, 10**9]}, "prompt", []),
    ("top_p-string", {"top_p": "all"}, "top_p", ["top_p"]),
]


@pytest.mark.parametrize("fields,param,words", [c[1:] for c in COMPLETION_FIELD_CASES],
                         ids=[c[0] for c in COMPLETION_FIELD_CASES])
def test_completion_bad_field(server, alive, fields, param, words):
    body = {**GOOD_COMPLETION, **fields}
    body = {k: v for k, v in body.items() if v is not None}
    status, got, raw = post_json(server.base_url, "/v1/completions", body)
    check_error_body(status, got, raw, 400, param=param, words=words)


def test_malformed_json(server, alive):
    status, _, raw = request(server.base_url, "POST", "/v1/chat/completions", b'{"model": "smollm2", "messages": [')
    check_error_body(status, _json(raw), raw, 400, words=["json"])


def test_body_is_json_array(server, alive):
    status, _, raw = request(server.base_url, "POST", "/v1/chat/completions", json.dumps([GOOD_CHAT]))
    check_error_body(status, _json(raw), raw, 400)


def test_empty_body(server, alive):
    status, _, raw = request(server.base_url, "POST", "/v1/chat/completions", b"")
    check_error_body(status, _json(raw), raw, 400)


def test_prompt_longer_than_context(server, alive, tokenizer):
    msgs = [{"role": "user", "content": " ".join(["word"] * 3000)}]
    n_prompt = len(tokenizer.encode(chatml(msgs), add_special_tokens=False).ids)
    status, body, raw = post_json(server.base_url, "/v1/chat/completions", {**GOOD_CHAT, "messages": msgs})
    check_error_body(status, body, raw, 400, words=[str(n_prompt), str(CONTEXT)])


def test_completion_prompt_longer_than_context(server, alive, tokenizer):
    prompt = " ".join(["word"] * 3000)
    n_prompt = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
    status, body, raw = post_json(server.base_url, "/v1/completions", {**GOOD_COMPLETION, "prompt": prompt})
    check_error_body(status, body, raw, 400, words=[str(n_prompt), str(CONTEXT)])


def test_unknown_route(server, alive):
    status, _, raw = request(server.base_url, "GET", "/v1/no-such-route")
    check_error_body(status, _json(raw), raw, 404)
    status, _, raw = request(server.base_url, "POST", "/v1/no-such-route", json.dumps(GOOD_CHAT))
    check_error_body(status, _json(raw), raw, 404)


def test_unknown_model(server, alive):
    status, body, raw = post_json(server.base_url, "/v1/chat/completions", {**GOOD_CHAT, "model": "no-such-model"})
    check_error_body(status, body, raw, 404, param="model", words=["no-such-model"])


def test_openai_client_raises_bad_request(client, alive):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_ID, messages=HI, n=2)
    assert info.value.status_code == 400
    assert info.value.body and "message" in info.value.body


def _json(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def test_one_huge_word_is_refused_quickly(server, alive):
    # A 300,000-character word once took the BPE quadratic time; it must now tokenize and be refused at once.
    import time
    t0 = time.monotonic()
    status, body, raw = post_json(server.base_url, "/v1/completions", {**GOOD_COMPLETION, "prompt": "x" * 300_000})
    assert time.monotonic() - t0 < 10, "tokenizing one long word took too long"
    check_error_body(status, body, raw, 400, words=["prompt"])


GOOD_RESPONSE = {"model": MODEL_ID, "input": "Hi", "max_output_tokens": 2, "temperature": 0}
# The Responses API's own field is named in its errors, not the chat field it maps to.
RESPONSE_FIELD_CASES = [
    ("max_output_tokens-string", {"max_output_tokens": "ten"}, ["max_output_tokens"]),
    ("max_output_tokens-zero", {"max_output_tokens": 0}, ["max_output_tokens"]),
    ("max_output_tokens-negative", {"max_output_tokens": -3}, ["max_output_tokens"]),
    ("max_output_tokens-float", {"max_output_tokens": 1.5}, ["max_output_tokens"]),
    ("max_output_tokens-past-context", {"max_output_tokens": CONTEXT}, ["max_output_tokens", str(CONTEXT)]),
]


@pytest.mark.parametrize("fields,words", [c[1:] for c in RESPONSE_FIELD_CASES], ids=[c[0] for c in RESPONSE_FIELD_CASES])
def test_responses_bad_max_output_tokens(server, alive, fields, words):
    status, body, raw = post_json(server.base_url, "/v1/responses", {**GOOD_RESPONSE, **fields})
    check_error_body(status, body, raw, 400, param="max_output_tokens", words=words)
    assert "'max_tokens'" not in body["error"]["message"], raw


def test_chat_max_completion_tokens_past_context_is_named(server, alive):
    fields = {"max_completion_tokens": CONTEXT}
    body = {k: v for k, v in {**GOOD_CHAT, **fields}.items() if k != "max_tokens"}
    status, got, raw = post_json(server.base_url, "/v1/chat/completions", body)
    check_error_body(status, got, raw, 400, param="max_completion_tokens", words=["max_completion_tokens"])


@pytest.fixture(scope="module")
def nan_server(tf_bin, model_path, tmp_path_factory):
    """A server over a copy of the model whose final norm weights are NaN, so every logits row is NaN."""
    pytest.importorskip("gguf")
    from conftest import launch_server
    d = tmp_path_factory.mktemp("nan")
    path = nan_norm_copy(model_path, d / "nan-norm.gguf")
    handle = launch_server(tf_bin, str(path), d / "server.log", ["--context", str(CONTEXT)])
    yield handle
    handle.stop()


# (case id, fields over a good completion request; completions serve a model without a chat template too): on CUDA
# the argmax-only row and the candidate rows (filters, logprobs); on the CPU each sampling path after the check.
NAN_CASES = [("greedy", {}), ("sampled", {"temperature": 0.8, "seed": 3}), ("logprobs", {"logprobs": 2}),
             ("top-k", {"temperature": 0.8, "top_k": 5}), ("top-p", {"temperature": 0.8, "top_p": 0.5})]


@pytest.mark.parametrize("fields", [c[1] for c in NAN_CASES], ids=[c[0] for c in NAN_CASES])
def test_nan_logits_fail_the_request_and_the_server_serves_on(nan_server, fields):
    status, body, raw = post_json(nan_server.base_url, "/v1/completions", {**GOOD_COMPLETION, **fields})
    check_error_body(status, body, raw, 500, words=["logits row 0 holds NaN"])
    status, _, raw = request(nan_server.base_url, "POST", "/v1/completions",
                             json.dumps({**GOOD_COMPLETION, **fields, "stream": True}))
    assert status in (200, 500) and b"holds NaN" in raw and b'"finish_reason":"stop"' not in raw, raw[:800]
    events = [json.loads(d) for d in sse_data(raw) if d.startswith("{")]
    assert not any(c.get("text") for e in events for c in e.get("choices", [])), raw[:800]  # no token went out
    status, _, raw = request(nan_server.base_url, "GET", "/health")
    assert status == 200, raw
