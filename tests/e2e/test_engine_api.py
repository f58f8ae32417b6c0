"""Engine-era API surface: /v1/responses, /tokenize, logprobs, /metrics, API keys, admission, disconnects."""

import hashlib
import http.client
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from e2e_util import MODEL_ID, chatml, check_error_body, ext, post_json, request
from engine_util import CHAT, body_for, generate, metric_sum, metrics, sse_events

API_ARGS = ("--parallel", "2", "--context", "512")
CONTEXT = 512
QUESTION = "Name three colors and say one thing about each."
SHORT_QUESTION = "What is 2+2? Reply with just the number."
STORY = "Write a long story about a cat named Tom who finds a key."
RESPONSE_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
                   "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                   "response.content_part.done", "response.output_item.done", "response.completed"]
METRIC_NAMES = ["tensorfold_requests_total", "tensorfold_prompt_tokens_total", "tensorfold_generation_tokens_total",
                "tensorfold_time_to_first_token_seconds", "tensorfold_inter_token_seconds",
                "tensorfold_requests_running", "tensorfold_requests_waiting", "tensorfold_kv_pages_used",
                "tensorfold_kv_pages_total", "tensorfold_kv_pages_cached", "tensorfold_prefix_cache_hit_tokens_total",
                "tensorfold_prefix_cache_query_tokens_total", "tensorfold_draft_tokens_total",
                "tensorfold_draft_accepted_tokens_total"]


@pytest.fixture(scope="module")
def api_server(start_server):
    handle = start_server(*API_ARGS)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def api_client(api_server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=api_server.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    yield client
    client.close()


@pytest.fixture
def own_server(start_server):
    """start_server, but the servers this test started are stopped when it ends (frees the 2 CPU cores)."""
    started = []

    def start(*args):
        started.append(start_server(*args))
        return started[-1]

    yield start
    for handle in started:
        handle.stop()


def _json(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def n_chat_tokens(tokenizer, messages):
    return len(tokenizer.encode(chatml(messages), add_special_tokens=False).ids)


# ---- /v1/responses ----

def response_text(resp):
    assert resp.output, f"response has no output items: {resp}"
    item = resp.output[0]
    assert item.type == "message" and item.role == "assistant", f"output[0] is not an assistant message: {item}"
    assert item.content and item.content[0].type == "output_text", f"output[0].content[0] is not text: {item}"
    return item.content[0].text


def check_response(resp, max_output_tokens):
    assert resp.object == "response" and resp.id, f"not a response object: {resp}"
    assert resp.status in ("completed", "incomplete"), f"unexpected status {resp.status!r}"
    if resp.status == "incomplete":
        assert resp.incomplete_details and resp.incomplete_details.reason == "max_output_tokens"
    text = response_text(resp)
    assert text.strip(), "empty output text"
    u = resp.usage
    assert u is not None and u.input_tokens > 0 and 0 < u.output_tokens <= max_output_tokens, f"usage {u}"
    assert u.total_tokens == u.input_tokens + u.output_tokens
    return text


def test_responses_string_input(api_client, tokenizer):
    resp = api_client.responses.create(model=MODEL_ID, input=QUESTION, max_output_tokens=16, temperature=0)
    text = check_response(resp, 16)
    assert resp.output_text == text
    msgs = [{"role": "user", "content": QUESTION}]
    assert resp.usage.input_tokens == n_chat_tokens(tokenizer, msgs), "string input should be one user turn"
    chat = api_client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=16, temperature=0)
    assert text == chat.choices[0].message.content, "responses and chat should decode the same prompt alike"


def test_responses_instructions(api_client, tokenizer):
    instr = "You answer in French."
    resp = api_client.responses.create(model=MODEL_ID, input=QUESTION, instructions=instr, max_output_tokens=16,
                                       temperature=0)
    check_response(resp, 16)
    msgs = [{"role": "system", "content": instr}, {"role": "user", "content": QUESTION}]
    assert resp.usage.input_tokens == n_chat_tokens(tokenizer, msgs), "instructions should become the system turn"


def test_responses_item_list_input(api_client, tokenizer):
    items = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada!"},
             {"role": "user", "content": [{"type": "input_text", "text": "What is my name?"}]}]
    resp = api_client.responses.create(model=MODEL_ID, input=items, max_output_tokens=16, temperature=0)
    check_response(resp, 16)
    msgs = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "Hello Ada!"},
            {"role": "user", "content": "What is my name?"}]
    assert resp.usage.input_tokens == n_chat_tokens(tokenizer, msgs), "items should render as chat turns"


def test_responses_stream_events(api_client):
    events = list(api_client.responses.create(model=MODEL_ID, input=SHORT_QUESTION, max_output_tokens=16,
                                              temperature=0, stream=True))
    types = [e.type for e in events]
    assert types and types[0] == "response.created", f"first event must be response.created: {types}"
    final_resp = events[-1].response
    # A reply cut by max_output_tokens ends with response.incomplete (as OpenAI does); this one should end by itself.
    terminal = "response.completed" if final_resp.status == "completed" else "response.incomplete"
    assert types[-1] == terminal == "response.completed", \
        f"last event must be response.completed (status {final_resp.status!r}): {types}"
    assert "response.output_text.delta" in types, f"no text deltas: {types}"
    collapsed = [t for k, t in enumerate(types) if k == 0 or t != types[k - 1]]
    assert collapsed == RESPONSE_EVENTS, f"event order differs from docs/api.md: {collapsed}"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = response_text(final_resp)
    assert deltas == final, f"deltas {deltas!r} != final text {final!r}"
    done = [e.text for e in events if e.type == "response.output_text.done"]
    assert done == [final]
    plain = api_client.responses.create(model=MODEL_ID, input=SHORT_QUESTION, max_output_tokens=16, temperature=0)
    assert response_text(plain) == final, "temperature 0 streamed text must equal the non-streamed text"


def test_responses_stream_cut_by_max_output_tokens(api_client):
    events = list(api_client.responses.create(model=MODEL_ID, input=STORY, max_output_tokens=8, temperature=0,
                                              stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] in ("response.incomplete", "response.completed"), types
    final = events[-1].response
    assert final.usage.output_tokens == 8, f"usage {final.usage}"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == response_text(final)


def test_responses_stream_raw_event_lines(api_server):
    body = {"model": MODEL_ID, "input": QUESTION, "max_output_tokens": 8, "temperature": 0, "stream": True}
    status, headers, raw = request(api_server.base_url, "POST", "/v1/responses", json.dumps(body))
    assert status == 200, raw[:300]
    assert headers.get("content-type", "").startswith("text/event-stream")
    events = [(name, data) for name, data in sse_events(raw) if data != "[DONE]"]
    assert events, f"no SSE events: {raw[:300]!r}"
    for name, data in events:
        assert name == data.get("type"), f"`event:` line {name!r} must match the data type {data.get('type')!r}"


# ---- /tokenize, /detokenize ----

TOKENIZE_TEXT = "Héllo, wörld! Tokenizers split 12345 and  spaces,\ttabs and emoji 🙂 too."


def test_tokenize_content(api_server, tokenizer):
    want = tokenizer.encode(TOKENIZE_TEXT, add_special_tokens=False).ids
    for key in ("content", "prompt"):
        status, body, raw = post_json(api_server.base_url, "/tokenize", {key: TOKENIZE_TEXT})
        assert status == 200, f"/tokenize {{{key!r}}} -> {status}: {raw[:300]!r}"
        assert body["tokens"] == want, f"/tokenize {key!r} ids differ from the HF tokenizer"
        assert body["count"] == len(want)
        assert body["max_model_len"] == CONTEXT


def test_tokenize_messages(api_server, tokenizer):
    msgs = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": QUESTION}]
    want = tokenizer.encode(chatml(msgs), add_special_tokens=False).ids
    status, body, raw = post_json(api_server.base_url, "/tokenize", {"messages": msgs})
    assert status == 200, raw[:300]
    assert body["tokens"] == want, "messages should tokenize as the ChatML prompt with the default system turn"
    assert body["count"] == len(want)


def test_detokenize_round_trip(api_server, tokenizer):
    ids = tokenizer.encode(TOKENIZE_TEXT, add_special_tokens=False).ids
    status, body, raw = post_json(api_server.base_url, "/detokenize", {"tokens": ids})
    assert status == 200, raw[:300]
    assert body["content"] == TOKENIZE_TEXT and body["prompt"] == TOKENIZE_TEXT, f"round trip differs: {body}"


# ---- logprobs ----

def test_chat_logprobs_greedy(api_client):
    resp = api_client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": STORY}], max_tokens=12, temperature=0, logprobs=True,
        top_logprobs=3, extra_body={"ignore_eos": True, "return_token_ids": True})
    lp = resp.choices[0].logprobs
    assert lp is not None and lp.content is not None, "choices[0].logprobs.content missing"
    assert len(lp.content) == resp.usage.completion_tokens == 12, "one logprobs entry per completion token"
    for k, e in enumerate(lp.content):
        where = f"token {k} {e.token!r}"
        assert e.logprob <= 0, f"{where}: logprob {e.logprob} > 0"
        assert len(e.top_logprobs) == 3, f"{where}: {len(e.top_logprobs)} top entries, asked 3"
        tops = [t.logprob for t in e.top_logprobs]
        assert all(t <= 0 for t in tops) and tops == sorted(tops, reverse=True), f"{where}: tops {tops}"
        assert e.logprob >= max(tops) - 1e-9, f"{where}: greedy choice {e.logprob} is not the argmax of {tops}"
        assert e.top_logprobs[0].token == e.token and math.isclose(e.top_logprobs[0].logprob, e.logprob,
                                                                     abs_tol=1e-6), f"{where}: top[0] differs"
        assert sum(math.exp(t) for t in tops) <= 1 + 1e-6, f"{where}: top probabilities sum over 1: {tops}"
    if all(e.bytes is not None for e in lp.content):
        joined = b"".join(bytes(e.bytes) for e in lp.content)
        assert joined == resp.choices[0].message.content.encode(), "entry bytes should spell the reply"


def test_completion_logprobs_shape(api_client):
    resp = api_client.completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=8,
                                         temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    lp = resp.choices[0].logprobs
    n = resp.usage.completion_tokens
    assert lp is not None, "choices[0].logprobs missing"
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == resp.choices[0].text
    assert lp.text_offset == sorted(lp.text_offset), f"text_offset must not decrease: {lp.text_offset}"
    for k, (tok, chosen, tops) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        assert chosen <= 0 and len(tops) == 2, f"token {k}: logprob {chosen}, tops {tops}"
        assert chosen >= max(tops.values()) - 1e-9, f"token {k}: greedy {tok!r} {chosen} not the argmax of {tops}"


@pytest.mark.parametrize("route,fields,param", [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
], ids=["chat-top_logprobs-21", "completions-logprobs-21"])
def test_logprobs_over_20_refused(api_server, route, fields, param):
    content = [{"role": "user", "content": "Hi"}] if route == CHAT else "Hi"
    status, body, raw = post_json(api_server.base_url, route, body_for(route, content, max_tokens=2, **fields))
    check_error_body(status, body, raw, 400, param=param)


# ---- /metrics ----

def test_metrics_exposition(api_server, api_client):
    ctype, text, before = metrics(api_server)
    assert ctype.startswith("text/plain"), f"content-type {ctype!r}"
    names = {s[0] for s in before}
    missing = [n for n in METRIC_NAMES if not names & {n, n + "_bucket", n + "_sum", n + "_count"}]
    assert not missing, f"/metrics lacks {missing}"
    for hist in ("tensorfold_time_to_first_token_seconds", "tensorfold_inter_token_seconds"):
        assert f"# TYPE {hist} histogram" in text, f"{hist} should be a histogram"
    resp = api_client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}],
                                              max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    _, _, after = metrics(api_server)
    gen = [metric_sum(s, "tensorfold_generation_tokens_total") for s in (before, after)]
    assert gen[1] - gen[0] == resp.usage.completion_tokens, f"generation tokens {gen}, reply had 8"
    prompt = [metric_sum(s, "tensorfold_prompt_tokens_total") for s in (before, after)]
    assert prompt[1] - prompt[0] == resp.usage.prompt_tokens, f"prompt tokens {prompt}"
    ok = [metric_sum(s, "tensorfold_requests_total", code="200") or 0 for s in (before, after)]
    assert ok[1] > ok[0], f"requests_total{{code=\"200\"}} did not grow: {ok}"
    # Unknown paths share one label value instead of each making a new series.
    for i in range(3):
        post_json(api_server.base_url, f"/no/such/route/{i}", {})
    _, text, _ = metrics(api_server)
    assert "/no/such/route" not in text, "a client-chosen path became a metric label"
    assert 'route="other"' in text, "unknown paths should count under route=\"other\""


# ---- API keys ----

RAW_KEY = "tf-test-raw-key-7Q2m"
HASHED_KEY = "tf-test-hashed-key-9Zx4"


def test_api_keys(own_server, tmp_path):
    digest = hashlib.sha256(HASHED_KEY.encode()).hexdigest()
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{RAW_KEY}\nsha256:{digest}\n")
    srv = own_server("--api-key-file", key_file, "--context", "512")
    small = json.dumps(body_for(CHAT, [{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0))
    for what, headers in [("no key", {}), ("wrong key", {"Authorization": "Bearer not-a-key"}),
                          ("the stored hash as key", {"Authorization": f"Bearer {digest}"}),
                          ("raw key without Bearer", {"Authorization": RAW_KEY})]:
        status, _, raw = request(srv.base_url, "POST", "/v1/chat/completions", small, headers=headers)
        assert status == 401, f"{what}: want 401, got {status}: {raw[:200]!r}"
        check_error_body(status, _json(raw), raw, 401)
    for key in (RAW_KEY, HASHED_KEY):
        status, _, raw = request(srv.base_url, "POST", "/v1/chat/completions", small,
                                 headers={"Authorization": f"Bearer {key}"})
        assert status == 200, f"key {key!r} refused: {status} {raw[:200]!r}"
    status, _, raw = request(srv.base_url, "GET", "/health")
    assert status == 200, f"/health must stay open without a key: {status} {raw[:200]!r}"
    openai = pytest.importorskip("openai")
    with_key = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=HASHED_KEY, max_retries=0, timeout=60)
    assert MODEL_ID in [m.id for m in with_key.models.list()]
    without = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        without.models.list()
    # Idle keep-alive connections would delay the server's shutdown.
    with_key.close()
    without.close()


# ---- admission ----

def test_prompt_plus_max_tokens_over_context(api_server, tokenizer):
    msgs = [{"role": "user", "content": " ".join(["apple"] * 440)}]
    n = n_chat_tokens(tokenizer, msgs)
    assert CONTEXT - 80 < n < CONTEXT - 4, f"test setup: prompt of {n} tokens should nearly fill {CONTEXT}"
    fits = body_for(CHAT, msgs, max_tokens=CONTEXT - n, temperature=0, ignore_eos=True)
    status, body, raw = post_json(api_server.base_url, CHAT, fits)
    assert status == 200, f"prompt {n} + max_tokens {CONTEXT - n} == context should fit: {status} {raw[:300]!r}"
    over = CONTEXT - n + 1
    status, body, raw = post_json(api_server.base_url, CHAT, {**fits, "max_tokens": over})
    check_error_body(status, body, raw, 400, param="max_tokens", words=[str(n), str(over), str(CONTEXT)])


def open_stream(base_url, body, timeout=60):
    """Start a streaming POST; returns (connection, response) with the status and headers read."""
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", CHAT, body=json.dumps({**body, "stream": True}), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def test_queue_full_503(own_server):
    srv = own_server("--parallel", "1", "--max-queue", "1", "--context", "512")
    body = body_for(CHAT, [{"role": "user", "content": STORY}], max_tokens=64, temperature=0, ignore_eos=True,
                    stream_options={"include_usage": True})

    def one(_):
        conn, resp = open_stream(srv.base_url, body)
        try:
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, range(6)))
    codes = [r[0] for r in results]
    assert set(codes) <= {200, 503}, f"only 200 or 503 expected: {codes}"
    refused = [r for r in results if r[0] == 503]
    assert refused, f"6 concurrent requests on --parallel 1 --max-queue 1 were all admitted: {codes}"
    for status, headers, raw in refused:
        assert "retry-after" in headers, f"503 without Retry-After: {headers}"
        assert headers["retry-after"].strip().isdigit(), f"Retry-After should be seconds: {headers['retry-after']!r}"
        check_error_body(status, _json(raw), raw, 503)
    for status, _, raw in results:
        if status == 200:
            events = sse_events(raw)
            assert events and events[-1][1] == "[DONE]", f"admitted stream did not finish: {raw[-200:]!r}"
            usage = [d.get("usage") for _, d in events[:-1] if d.get("usage")]
            assert usage and usage[-1]["completion_tokens"] == 64, f"admitted stream cut short: {usage}"
    small = {k: v for k, v in body.items() if k != "stream_options"}
    status, _, raw = request(srv.base_url, "POST", CHAT, json.dumps({**small, "max_tokens": 2}))
    assert status == 200, f"server no longer serves after the 503s: {status} {raw[:200]!r}"


def test_disconnect_frees_lane(own_server):
    srv = own_server("--parallel", "1", "--context", "2048")
    long_body = body_for(CHAT, [{"role": "user", "content": STORY}], max_tokens=1500, temperature=0, ignore_eos=True)
    conn, resp = open_stream(srv.base_url, long_body)
    assert resp.status == 200, resp.read()[:300]
    chunks = 0
    while chunks < 2:
        line = resp.fp.readline()
        assert line, "stream ended before two chunks"
        chunks += line.startswith(b"data:")
    # Closing the socket is the disconnect; 1500 tokens would keep the only lane busy for >10 s otherwise.
    conn.sock.close()
    conn.close()
    t0 = time.monotonic()
    try:
        reply = generate(srv, CHAT, body_for(CHAT, [{"role": "user", "content": "Hi"}], max_tokens=4,
                                             temperature=0, return_token_ids=True), timeout=30)
    except TimeoutError:
        pytest.fail("next request got no reply within 30 s: the disconnected stream still holds the only lane")
    waited = time.monotonic() - t0
    assert waited < 8, f"next request took {waited:.1f} s: the disconnected stream still held the lane"
    assert len(ext(reply)["token_ids"]) >= 1
    deadline = time.monotonic() + 5
    while True:
        running = metric_sum(metrics(srv)[2], "tensorfold_requests_running")
        if running == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert running == 0, f"tensorfold_requests_running is {running} after all requests ended"


@pytest.mark.parametrize("route,body,param", [
    ("/tokenize", {"content": "hi", "add_special": "yes"}, "add_special"),
    ("/tokenize", {"content": 5}, "content"),
    ("/detokenize", {"tokens": [1, -3]}, "tokens"),
    ("/detokenize", {"tokens": "1,2"}, "tokens"),
])
def test_tokenize_routes_refuse_bad_fields(api_server, route, body, param):
    status, reply, raw = post_json(api_server.base_url, route, body)
    assert status == 400, f"{route} {body} -> {status}: {raw[:300]!r}"
    assert reply["error"]["param"] == param, raw[:300]
    ok, _, _ = post_json(api_server.base_url, "/tokenize", {"content": "still serving"})
    assert ok == 200
