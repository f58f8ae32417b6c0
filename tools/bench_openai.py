#!/usr/bin/env python3
"""Single-stream decode speed and TTFT of an OpenAI-compatible server, through the official openai client.

Per request (streamed chat completion, ignore_eos, fixed prompt and seed):
  ttft_s       = arrival of the first content chunk - time the request was sent
  decode_tok_s = (completion_tokens - 1) / (t_last - t_first), from chunk arrival times,
                 completion_tokens read from the usage chunk (stream_options.include_usage)
Reports the medians over --reps runs at each temperature (default 0 and 1). The prompt is fixed, so with a
prefix cache TTFT here is the warm figure; tools/bench_cache.py measures cold vs warm.

Usage: python tools/bench_openai.py [URL] [--reps 5] [--max-tokens 128] [--out FILE]
URL may end in /v1 or not (default http://127.0.0.1:8080). Exit 0 ok, 2 on any failure.
"""
import argparse
import json
import os
import statistics
import sys
import time

DEFAULT_URL = "http://127.0.0.1:8080"
PROMPT = ("Write a long, detailed story about a lighthouse keeper on a remote island who finds a message "
          "in a bottle. Describe the island, the weather, the keeper's daily routine and what happens next.")


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


def chunk_ext(chunk) -> dict:
    extra = getattr(chunk, "model_extra", None) or {}
    ext = extra.get("tensorfold")
    return ext if isinstance(ext, dict) else {}


def one_run(client, model: str, temperature: float, seed: int, max_tokens: int) -> dict:
    """One streamed request; returns its timing and token counts."""
    t_send = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=max_tokens,
        temperature=temperature, seed=seed, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    t_first = t_last = None
    usage = None
    ext = {}
    for chunk in stream:
        now = time.perf_counter()
        for choice in chunk.choices or []:
            # Tokens that render as no text (special tokens under ignore_eos) only show up with the finish chunk.
            if (choice.delta is not None and choice.delta.content) or choice.finish_reason:
                if t_first is None:
                    t_first = now
                t_last = now
        if chunk.usage is not None:
            usage = chunk.usage
        ext = chunk_ext(chunk) or ext
    if usage is None:
        raise RuntimeError("stream ended without a usage chunk (stream_options.include_usage ignored?)")
    if t_first is None:
        raise RuntimeError("stream carried no content")
    n = usage.completion_tokens
    span = t_last - t_first
    run = {"seed": seed, "prompt_tokens": usage.prompt_tokens, "completion_tokens": n,
           "ttft_s": round(t_first - t_send, 6), "decode_s": round(span, 6),
           "decode_tok_s": round((n - 1) / span, 3) if n > 1 and span > 0 else None,
           "token_sha": ext.get("token_sha")}
    if "draft_tokens" in ext:
        run["draft_tokens"] = ext.get("draft_tokens")
        run["accepted_tokens"] = ext.get("accepted_tokens")
    return run


def median_or_none(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 6) if values else None


def bench(args) -> dict:
    client = make_client(args.url, args.api_key, args.timeout)
    model = served_model(client, args.model)
    # Unmeasured warm-up: connection setup and first-touch costs stay out of the figures.
    for _ in range(args.warmup):
        one_run(client, model, 0.0, args.seed, min(args.max_tokens, 8))
    results = []
    for temperature in args.temperatures:
        runs = [one_run(client, model, temperature, args.seed + i, args.max_tokens) for i in range(args.reps)]
        results.append({"temperature": temperature,
                        "decode_tok_s_median": median_or_none(r["decode_tok_s"] for r in runs),
                        "ttft_s_median": median_or_none(r["ttft_s"] for r in runs),
                        "runs": runs})
    return {"url": args.url, "model": model, "max_tokens": args.max_tokens, "reps": args.reps,
            "results": results}


def parse_temps(text: str):
    return [float(t) for t in text.split(",") if t.strip()]


def emit(result: dict, out_path) -> None:
    text = json.dumps(result, indent=2)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", nargs="?", default=DEFAULT_URL, help=f"server URL, with or without /v1 ({DEFAULT_URL})")
    ap.add_argument("--model", help="model id (default: the first one /v1/models lists)")
    ap.add_argument("--reps", type=int, default=5, help="runs per temperature (median reported)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperatures", type=parse_temps, default=[0.0, 1.0], help="comma list (default 0,1)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of run i is SEED + i")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured requests before the runs")
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    ap.add_argument("--api-key", default=os.environ.get("TENSORFOLD_API_KEY", "none"))
    ap.add_argument("--out", metavar="FILE", help="write the JSON result here instead of stdout")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.max_tokens < 2:
        emit({"error": "--reps must be >= 1 and --max-tokens >= 2"}, args.out)
        return 2
    try:
        result = bench(args)
    except Exception as e:  # noqa: BLE001 - any failure becomes a JSON error and exit 2
        emit({"url": args.url, "error": f"{type(e).__name__}: {e}"}, args.out)
        return 2
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
