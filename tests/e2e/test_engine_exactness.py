"""The four exactness equalities of the serving engine (shared/specs/exactness.md), end to end over HTTP."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e_util import chatml, ext
from engine_util import CHAT, COMPLETIONS, body_for, cached_tokens, describe_diff, generate, ids_of

ENGINE_ARGS = ("--parallel", "8", "--context", "1024")

# My own passage; slices of it make prompts of any length without a shared prefix.
PASSAGE = (
    "In the spring of that year the river rose higher than anyone in the valley could remember. "
    "Farmers moved their animals to the hills, the school closed for two weeks, and the baker "
    "kept his ovens burning through the night so that families sheltering in the church would "
    "have bread in the morning. My grandmother, who was nine at the time, later told me that "
    "she remembered the sound more than anything else: a low, steady roar that never stopped, "
    "not even when the rain did. When the water finally went down, the fields were covered in "
    "a thick grey mud that smelled of iron and leaves. People walked out slowly, looking for "
    "fences, tools, and the small things they had left behind. A neighbour found his bicycle "
    "hanging in the branches of an apple tree. The mayor organised teams to clear the roads, "
    "and the children were given the job of collecting stones from the gardens. Within a month "
    "the first green shoots appeared, and by the end of summer the harvest was better than it "
    "had been in a decade, because the flood had brought rich soil down from the mountains. "
    "Years later, the town built a small stone marker near the bridge showing how high the "
    "water had reached. Visitors often stop there to take photographs, surprised that a river "
    "so quiet and narrow could ever have climbed so far. The old people just smile and say that "
    "every river remembers its own road, and sooner or later it goes looking for it again. "
    "Today the valley has new dams, better drains, and a warning siren on the roof of the town "
    "hall, tested at noon on the first Monday of every month. Most residents no longer notice "
    "it, but my grandmother always paused whatever she was doing and listened until it ended.")
WORDS = PASSAGE.split()
# Word counts per request: even indices are chat, odd are completions; ~5 to ~300 prompt tokens.
SLICE_WORDS = [12, 4, 40, 9, 70, 20, 110, 30, 150, 55, 200, 85, 240, 130, 20, 262]

SENTENCE = ("The old lighthouse keeper climbed the winding stairs every evening at dusk, carrying a brass "
            "lantern, a thermos of strong tea, and a worn notebook in which he recorded the color of the sea, "
            "the shape of the clouds, and the names of the passing ships.")


def passage_slice(start, n):
    return " ".join(WORDS[(start + k) % len(WORDS)] for k in range(n))


def sampling(i):
    """Greedy for i % 4 in (0, 1), seeded nucleus sampling otherwise, so both routes get both."""
    if i % 4 < 2:
        return {"temperature": 0}
    return {"temperature": 0.9, "top_p": 0.95, "seed": 1000 + i}


def mixed_requests():
    reqs = []
    for i, n in enumerate(SLICE_WORDS):
        text = passage_slice(i * 41, n)
        route = CHAT if i % 2 == 0 else COMPLETIONS
        content = [{"role": "user", "content": text}] if route == CHAT else text
        body = body_for(route, content, max_tokens=24 + (i * 7) % 17, ignore_eos=True, return_token_ids=True,
                        **sampling(i))
        reqs.append((route, body))
    return reqs


@pytest.fixture(scope="module")
def engine(start_server):
    handle = start_server(*ENGINE_ARGS)
    yield handle
    handle.stop()


def run_concurrently(srv, reqs):
    """Send every request at once (a barrier releases all threads together); replies in request order."""
    barrier = threading.Barrier(len(reqs))

    def one(req):
        barrier.wait(timeout=30)
        return generate(srv, *req)

    with ThreadPoolExecutor(max_workers=len(reqs)) as pool:
        return list(pool.map(one, reqs))


def label(i, route, body, reply):
    mode = "greedy" if body.get("temperature") == 0 else f"seed {body['seed']}"
    kind = "chat" if route == CHAT else "completion"
    return f"#{i} {kind} {mode} prompt {reply['usage']['prompt_tokens']} tok"


@pytest.mark.slow
def test_concurrent_equals_solo(engine):
    reqs = mixed_requests()
    together = run_concurrently(engine, reqs)
    solo = [generate(engine, *req) for req in reqs]
    lengths = [r["usage"]["prompt_tokens"] for r in solo]
    assert min(lengths) <= 8 and max(lengths) >= 280, f"test setup: prompt lengths should span 5..300: {lengths}"
    problems = []
    for i, ((route, body), t, s) in enumerate(zip(reqs, together, solo)):
        if len(ids_of(s)) != body["max_tokens"]:
            problems.append(f"{label(i, route, body, s)}: solo reply has {len(ids_of(s))} ids, "
                            f"want max_tokens={body['max_tokens']} (ignore_eos)")
        diff = describe_diff(label(i, route, body, s), ids_of(t), ids_of(s), "concurrent", "solo")
        if diff:
            problems.append(diff)
    assert not problems, f"{len(problems)} of {len(reqs)} requests differ:\n" + "\n".join(problems)


# (case id, route, content, sampling fields, max_tokens)
DRAFT_CASES = [
    ("chat-repeat-greedy", CHAT, [{"role": "user", "content": "Repeat exactly: " + SENTENCE}], {"temperature": 0}, 48),
    ("chat-repeat-seeded", CHAT, [{"role": "user", "content": "Repeat exactly: " + SENTENCE}],
     {"temperature": 0.8, "top_p": 0.95, "seed": 11}, 48),
    ("completion-count-greedy", COMPLETIONS, "1 2 3 4 5 1 2 3 4 5 1 2 3 4 5 1 2 3", {"temperature": 0}, 40),
    ("completion-count-seeded", COMPLETIONS, "1 2 3 4 5 1 2 3 4 5 1 2 3 4 5 1 2 3",
     {"temperature": 0.9, "top_p": 0.95, "seed": 5}, 40),
    ("completion-copy-greedy", COMPLETIONS, f"{SENTENCE}\n{SENTENCE}\n{' '.join(SENTENCE.split()[:12])}",
     {"temperature": 0}, 40),
]


@pytest.fixture(scope="module")
def draft_runs(engine):
    """Each draft case served with drafts (the default) and with "draft": false."""
    runs = {}
    for case, route, content, samp, max_tokens in DRAFT_CASES:
        body = body_for(route, content, max_tokens=max_tokens, ignore_eos=True, return_token_ids=True, **samp)
        runs[case] = (generate(engine, route, body), generate(engine, route, {**body, "draft": False}))
    return runs


@pytest.mark.parametrize("case", [c[0] for c in DRAFT_CASES])
def test_drafted_equals_serial(draft_runs, case):
    drafted, serial = draft_runs[case]
    d, s = ext(drafted), ext(serial)
    for key in ("draft_tokens", "accepted_tokens"):
        assert isinstance(d.get(key), int) and isinstance(s.get(key), int), f"tensorfold.{key} missing: {d} / {s}"
    assert 0 <= d["accepted_tokens"] <= d["draft_tokens"], f"accepted must not exceed drafted: {d}"
    assert s["draft_tokens"] == 0 and s["accepted_tokens"] == 0, f'"draft": false must not draft: {s}'
    diff = describe_diff(case, ids_of(drafted), ids_of(serial), "drafted", "serial")
    assert diff is None, diff + f" (drafted {d['draft_tokens']}, accepted {d['accepted_tokens']})"
    assert d["token_sha"] == s["token_sha"]


def test_context_drafter_fires(draft_runs):
    counts = {case: (ext(on)["draft_tokens"], ext(on)["accepted_tokens"]) for case, (on, _) in draft_runs.items()}
    assert any(dr > 0 and acc > 0 for dr, acc in counts.values()), \
        f"no case drafted and accepted tokens with drafts on (case: (draft, accepted)): {counts}"


TURN1 = ("I am planning a week-long walking trip through a hilly region with small villages, and I want to pack "
         "light but stay comfortable in changing weather. I will carry one backpack, sleep in guesthouses, and "
         "walk about twenty kilometres a day on mixed trails and quiet roads. What are the most important things "
         "to bring, and what should I leave at home?")
TURN_FOLLOWUPS = ["Now summarise that advice in two sentences.", "Give the trip a short, catchy title."]


def chat_turn_body(messages, turn):
    samp = {"temperature": 0.8, "top_p": 0.95, "seed": 21} if turn == 1 else {"temperature": 0}
    return body_for(CHAT, messages, max_tokens=32, return_token_ids=True, **samp)


def cold_reply(start_server, body):
    """The reply of a freshly started server (empty prefix cache) to one request; the server is stopped after."""
    cold = start_server(*ENGINE_ARGS)
    try:
        reply = generate(cold, CHAT, body)
    finally:
        cold.stop()
    assert cached_tokens(reply) == 0, f"first request on a fresh server reports cached tokens: {reply['usage']}"
    return reply


def test_resumed_chat_equals_fresh(engine, start_server):
    messages, warm = [], []
    for turn, question in enumerate([TURN1] + TURN_FOLLOWUPS):
        messages.append({"role": "user", "content": question})
        body = chat_turn_body(list(messages), turn)
        reply = generate(engine, CHAT, body)
        warm.append((body, reply))
        messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
    for turn, (_, reply) in enumerate(warm[1:], start=1):
        usage = reply["usage"]
        c = cached_tokens(reply)
        assert c is not None and 0 < c <= usage["prompt_tokens"], \
            f"turn {turn + 1} re-sends the history, so its prefix should come from the cache: usage {usage}"
    problems = []
    for turn, (body, reply) in enumerate(warm):
        fresh = cold_reply(start_server, body)
        diff = describe_diff(f"turn {turn + 1} (cached {cached_tokens(reply)})", ids_of(reply), ids_of(fresh),
                             "resumed", "fresh")
        if diff:
            problems.append(diff)
    assert not problems, "\n".join(problems)


LONG_SYSTEM = (
    "You are the help desk assistant of the Riverside public library. The library opens at nine in the morning "
    "and closes at eight in the evening from Monday to Friday, and at five on Saturdays; it is closed on Sundays "
    "and public holidays. Members may borrow up to twelve items at once: books for three weeks, films and music "
    "for one week, and magazines for one week. Items can be renewed twice online or at the desk unless another "
    "member has reserved them. Late returns cost twenty cents per day per item, capped at five dollars per item, "
    "and children's items never have late fees. Membership is free for residents and requires a photo card and a "
    "proof of address; visitors may buy a six-month card. The library offers free wireless internet, twelve public "
    "computers bookable in one-hour slots, printing at ten cents per page, quiet study rooms on the second floor, "
    "and a children's corner with story time on Wednesday and Saturday mornings. Answer politely and briefly, "
    "quote the rules above when they apply, and suggest asking a librarian at the desk for anything else.")
SYS_QUESTIONS = ["How many books can I borrow, and for how long?", "Is the library open on Sunday afternoons?"]


def test_shared_system_prompt_cached_and_exact(engine, start_server, tokenizer):
    convs = [[{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": q}] for q in SYS_QUESTIONS]
    a_ids, b_ids = (tokenizer.encode(chatml(c), add_special_tokens=False).ids for c in convs)
    assert len(a_ids) >= 200, f"test setup: the shared system prompt should be ~200 tokens, got {len(a_ids)}"
    common = next((k for k, (x, y) in enumerate(zip(a_ids, b_ids)) if x != y), min(len(a_ids), len(b_ids)))
    bodies = [body_for(CHAT, c, max_tokens=24, temperature=0, return_token_ids=True) for c in convs]
    generate(engine, CHAT, bodies[0])
    second = generate(engine, CHAT, bodies[1])
    c = cached_tokens(second)
    assert c is not None and 0 < c <= common, \
        f"second prompt shares {common} leading tokens with the first; cached_tokens should be in 1..{common}: " \
        f"{second['usage']}"
    fresh = cold_reply(start_server, bodies[1])
    diff = describe_diff(f"shared system prompt (cached {c})", ids_of(second), ids_of(fresh), "resumed", "fresh")
    assert diff is None, diff


def background_requests(rng, n):
    """n random requests of mixed route, length and sampling, for load."""
    reqs = []
    for _ in range(n):
        text = passage_slice(rng.randrange(len(WORDS)), rng.randrange(5, 200))
        route = rng.choice([CHAT, COMPLETIONS])
        content = [{"role": "user", "content": text}] if route == CHAT else text
        samp = rng.choice([{"temperature": 0}, {"temperature": 1.0, "seed": rng.randrange(1 << 30)},
                           {"temperature": 0.7, "top_k": 40}])
        reqs.append((route, body_for(route, content, max_tokens=rng.randrange(16, 41), ignore_eos=True,
                                     return_token_ids=True, **samp)))
    return reqs


@pytest.mark.slow
def test_seeded_equals_seeded_under_load(engine):
    target = body_for(CHAT, [{"role": "user", "content": "Write a short poem about a lighthouse in a storm."}],
                      temperature=0.9, top_p=0.95, seed=4242, max_tokens=32, ignore_eos=True, return_token_ids=True)
    alone = ids_of(generate(engine, CHAT, target))
    problems = []
    for rep in range(3):
        rng = random.Random(rep)
        load = background_requests(rng, 8)
        with ThreadPoolExecutor(max_workers=9) as pool:
            futures = [pool.submit(generate, engine, *req) for req in load]
            # Start the seeded request at a different point of the others' progress each time.
            time.sleep(0.3 * rep)
            got = pool.submit(generate, engine, CHAT, target).result()
            for f in futures:
                f.result()
        diff = describe_diff(f"repetition {rep + 1} under load of 8", ids_of(got), alone, "loaded", "alone")
        if diff:
            problems.append(diff)
    assert not problems, "\n".join(problems)
