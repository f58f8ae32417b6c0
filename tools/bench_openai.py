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
import os
import sys

# oai_common.py sits next to this script; make it importable however this file is launched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oai_common import (add_client_args, add_server_args, emit, make_client, median_or_none,  # noqa: E402
                        run_and_emit, served_model, timed_stream)

PROMPT = ("Write a long, detailed story about a lighthouse keeper on a remote island who finds a message "
          "in a bottle. Describe the island, the weather, the keeper's daily routine and what happens next.")


def one_run(client, model: str, temperature: float, seed: int, max_tokens: int) -> dict:
    """One streamed request; returns its timing and token counts."""
    r = timed_stream(client, model, "chat", PROMPT, max_tokens=max_tokens, temperature=temperature, seed=seed,
                     extra_body={"ignore_eos": True})
    usage, ext = r["usage"], r["ext"]
    n = usage.completion_tokens
    span = r["t_last"] - r["t_first"]
    run = {"seed": seed, "prompt_tokens": usage.prompt_tokens, "completion_tokens": n,
           "ttft_s": round(r["t_first"] - r["t_send"], 6), "decode_s": round(span, 6),
           "decode_tok_s": round((n - 1) / span, 3) if n > 1 and span > 0 else None,
           "token_sha": ext.get("token_sha")}
    if "draft_tokens" in ext:
        run["draft_tokens"] = ext.get("draft_tokens")
        run["accepted_tokens"] = ext.get("accepted_tokens")
    return run


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--reps", type=int, default=5, help="runs per temperature (median reported)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperatures", type=parse_temps, default=[0.0, 1.0], help="comma list (default 0,1)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of run i is SEED + i")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured requests before the runs")
    add_client_args(ap)
    args = ap.parse_args(argv)
    if args.reps < 1 or args.max_tokens < 2:
        emit({"error": "--reps must be >= 1 and --max-tokens >= 2"}, args.out)
        return 2
    return run_and_emit(bench, args)


if __name__ == "__main__":
    sys.exit(main())
