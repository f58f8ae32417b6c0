"""Helpers shared by the end-to-end tests: raw HTTP, SSE parsing, the tensorfold extension, token_sha."""

import hashlib
import http.client
import json
import shutil
from urllib.parse import urlsplit

MODEL_ID = "smollm2"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def token_sha(ids) -> str:
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:12]


def chatml(messages) -> str:
    """The SmolLM2 ChatML prompt, with the default system turn when none is given."""
    out = []
    if not messages or messages[0]["role"] != "system":
        out.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
    for m in messages:
        out.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


def ext(obj) -> dict:
    """The `tensorfold` extension object of an openai response or chunk (or of a plain dict)."""
    if isinstance(obj, dict):
        return obj.get("tensorfold") or {}
    extra = getattr(obj, "model_extra", None) or {}
    val = extra.get("tensorfold")
    if val is None:
        val = obj.to_dict().get("tensorfold")
    if val is not None and not isinstance(val, dict):
        val = val.to_dict() if hasattr(val, "to_dict") else dict(val)
    return val or {}


def request(base_url: str, method: str, path: str, body=None, headers=None, timeout=120):
    """Send one raw HTTP request; returns (status, headers dict lower-cased, body bytes)."""
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def post_json(base_url: str, path: str, obj, timeout=120):
    """POST a JSON value; returns (status, parsed JSON or None, raw bytes)."""
    status, _, data = request(base_url, "POST", path, json.dumps(obj), timeout=timeout)
    return status, _parse(data), data


def _parse(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


def sse_data(raw: bytes):
    """The payloads of the `data:` lines of an SSE body, in order (strings, [DONE] included)."""
    out = []
    for line in raw.decode("utf-8").splitlines():
        if line.startswith("data:"):
            out.append(line[5:].strip())
    return out


def check_error_body(status, body, raw, want_status, param=None, words=()):
    """Assert the OpenAI error shape; `param` is the field at fault, `words` must appear in the message."""
    shown = raw[:500]
    assert status == want_status, f"want HTTP {want_status}, got {status}: {shown!r}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"no error object: {shown!r}"
    err = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in err, f"error object lacks {key!r}: {shown!r}"
    assert isinstance(err["message"], str) and err["message"].strip(), f"empty message: {shown!r}"
    assert isinstance(err["type"], str) and err["type"], f"type must be a string: {shown!r}"
    if param is not None:
        got = err["param"] or ""
        assert got == param or got.startswith(param + ".") or got.startswith(param + "["), \
            f"param should name {param!r}, got {got!r}: {shown!r}"
    msg = err["message"].lower()
    for w in words:
        assert str(w).lower() in msg, f"message should mention {w!r}: {err['message']!r}"
    return err


def nan_norm_copy(model_path, path):
    """Writes a copy of the GGUF whose final norm weights are NaN, so every logits row is NaN; needs gguf-py."""
    import gguf
    t = next(t for t in gguf.GGUFReader(str(model_path)).tensors if t.name == "output_norm.weight")
    assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.tensor_type
    shutil.copyfile(model_path, path)
    with open(path, "r+b") as f:
        f.seek(t.data_offset)
        f.write(b"\x00\x00\xc0\x7f" * int(t.n_elements))
    return path
