"""Pieces shared by the tools/ scripts: the openai client, streamed request timing, the tensorfold object, JSON output.

Stdlib at import time; openai is imported only when a client is made, so token_sha.py runs without it.
"""
import json
import os
import statistics
import time

DEFAULT_URL = "http://127.0.0.1:8080"


def base_v1(url: str) -> str:
    url = url.rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def make_client(url: str, api_key: str, timeout: float):
    import openai
    return openai.OpenAI(base_url=base_v1(url), api_key=api_key, max_retries=0, timeout=timeout)


def served_model(client, model):
    if model:
        return model
    data = client.models.list().data
    if not data:
        raise RuntimeError("/v1/models lists no model")
    return data[0].id


def tensorfold_ext(obj) -> dict:
    """The reply's "tensorfold" extension object, from a parsed JSON dict or an openai reply/chunk; {} if none."""
    extra = obj if isinstance(obj, dict) else (getattr(obj, "model_extra", None) or {})
    ext = extra.get("tensorfold")
    return ext if isinstance(ext, dict) else {}


def choice_text(choice, chat: bool) -> str:
    if chat:
        return (choice.delta.content or "") if choice.delta is not None else ""
    return choice.text or ""


def timed_stream(client, model: str, endpoint: str, prompt: str, **params) -> dict:
    """One streamed chat or completions request: send/first/last content-chunk times, usage, tensorfold object."""
    chat = endpoint == "chat"
    params.update(model=model, stream=True, stream_options={"include_usage": True})
    t_send = time.perf_counter()
    if chat:
        stream = client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **params)
    else:
        stream = client.completions.create(prompt=prompt, **params)
    t_first = t_last = None
    usage = None
    ext = {}
    for chunk in stream:
        now = time.perf_counter()
        # Tokens that render as no text (special tokens under ignore_eos) only show up with the finish chunk.
        if any(choice_text(c, chat) or c.finish_reason for c in chunk.choices or []):
            if t_first is None:
                t_first = now
            t_last = now
        if chunk.usage is not None:
            usage = chunk.usage
        ext = tensorfold_ext(chunk) or ext
    if usage is None:
        raise RuntimeError("stream ended without a usage chunk (stream_options.include_usage ignored?)")
    if t_first is None:
        raise RuntimeError("stream carried no content")
    return {"t_send": t_send, "t_first": t_first, "t_last": t_last, "usage": usage, "ext": ext}


def median_or_none(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 6) if values else None


def add_server_args(ap) -> None:
    """The leading arguments every client tool takes: URL and --model."""
    ap.add_argument("url", nargs="?", default=DEFAULT_URL, help=f"server URL, with or without /v1 ({DEFAULT_URL})")
    ap.add_argument("--model", help="model id (default: the first one /v1/models lists)")


def add_client_args(ap) -> None:
    """The trailing arguments every client tool takes: --timeout, --api-key, --out."""
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    ap.add_argument("--api-key", default=os.environ.get("TENSORFOLD_API_KEY", "none"))
    ap.add_argument("--out", metavar="FILE", help="write the JSON result here instead of stdout")


def emit(result: dict, out_path, indent: int = 2) -> None:
    text = json.dumps(result, indent=indent)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


def run_and_emit(bench, args, exit_code=lambda result: 0, plain_errors=()) -> int:
    """Runs bench(args) and writes its JSON; any failure becomes {"url", "error"} and exit 2."""
    try:
        result = bench(args)
    except plain_errors as e:
        emit({"url": args.url, "error": str(e)}, args.out)
        return 2
    except Exception as e:  # noqa: BLE001 - any failure becomes a JSON error and exit 2
        emit({"url": args.url, "error": f"{type(e).__name__}: {e}"}, args.out)
        return 2
    emit(result, args.out)
    return exit_code(result)
