"""Helpers for the serving-engine e2e tests: checked generation calls, id comparison, Prometheus parsing."""

import json
import re

from e2e_util import MODEL_ID, ext, post_json, request

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def body_for(route, content, **fields):
    """A request body for `route`: `content` is a messages list for chat, a prompt for completions."""
    key = "messages" if route == CHAT else "prompt"
    return {"model": MODEL_ID, key: content, **fields}


def generate(srv, route, body, timeout=180):
    """POST and demand HTTP 200 with tensorfold.token_ids; returns the parsed reply."""
    status, got, raw = post_json(srv.base_url, route, body, timeout=timeout)
    assert status == 200, (f"{route} -> HTTP {status}: {raw[:500]!r}\n"
                           f"--- server log ({' '.join(srv.cmd[3:])}) ---\n{srv.log_tail(15)}")
    ids = ext(got).get("token_ids")
    assert isinstance(ids, list), f"reply lacks tensorfold.token_ids (return_token_ids was set): {raw[:500]!r}"
    return got


def ids_of(reply):
    return ext(reply)["token_ids"]


def cached_tokens(reply):
    details = (reply.get("usage") or {}).get("prompt_tokens_details") or {}
    return details.get("cached_tokens")


def first_diff(a, b):
    """Index of the first position where the id lists differ, or None when equal."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def describe_diff(label, a, b, name_a="a", name_b="b"):
    """One line naming where two id lists part, with a few ids of each around that point."""
    k = first_diff(a, b)
    if k is None:
        return None
    return (f"{label}: first difference at token {k} of {len(a)}/{len(b)}: "
            f"{name_a} {a[k:k + 5]} vs {name_b} {b[k:k + 5]}")


_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(srv, headers=None):
    """GET /metrics; returns (content-type, text, [(name, labels dict, value)])."""
    status, hdrs, raw = request(srv.base_url, "GET", "/metrics", headers=headers)
    assert status == 200, f"/metrics -> HTTP {status}: {raw[:300]!r}"
    text = raw.decode("utf-8")
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        assert m, f"line is not Prometheus exposition format: {line!r}"
        labels = dict(_LABEL_RE.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return hdrs.get("content-type", ""), text, samples


def metric_sum(samples, name, **labels):
    """Sum of the samples named `name` whose labels include `labels`; None when there is none."""
    vals = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    return sum(vals) if vals else None


def sse_events(raw: bytes):
    """(event name or None, parsed data) for each SSE message of a body, [DONE] kept as the string."""
    out = []
    for block in raw.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            joined = "\n".join(data)
            out.append((name, joined if joined == "[DONE]" else json.loads(joined)))
    return out
