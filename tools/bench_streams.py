#!/usr/bin/env python3
"""Aggregate decode throughput at several stream counts, with drafts on and off, measured in one run.

For each N in --streams, N distinct prompts are sent at once (completions, temperature 0, ignore_eos, fixed
max_tokens); the figure is completion tokens over the wall time of the wave. The server must run with --parallel at
least max(N) for the waves to share lane rounds. Writes JSON to stdout (or --out).
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import sys
import time

import urllib.request

# oai_common.py sits next to this script; make it importable however this file is launched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oai_common import DEFAULT_URL, emit  # noqa: E402

WORDS = ("river stone light morning garden quiet paper window winter story music forest city bridge letter "
         "candle harbor mountain orchard lantern meadow valley").split()


def one(url, prompt, max_tokens, draft):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "draft": draft}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.loads(r.read())
    return j["usage"]["completion_tokens"], j["tensorfold"].get("draft_tokens", 0), j["tensorfold"].get("accepted_tokens", 0)


def wave(url, n, max_tokens, draft, rng):
    prompts = [f"[{rng.randrange(1 << 30)}] " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 24)))
               for _ in range(n)]
    with cf.ThreadPoolExecutor(max_workers=n) as pool:
        t0 = time.perf_counter()
        results = list(pool.map(lambda p: one(url, p, max_tokens, draft), prompts))
        wall = time.perf_counter() - t0
    tokens = sum(r[0] for r in results)
    return {"streams": n, "draft": draft, "completion_tokens": tokens, "wall_s": round(wall, 3),
            "aggregate_tok_s": round(tokens / wall, 2), "draft_tokens": sum(r[1] for r in results),
            "accepted_tokens": sum(r[2] for r in results)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("url", nargs="?", default=DEFAULT_URL)
    ap.add_argument("--streams", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    url = a.url.rstrip("/").removesuffix("/v1")
    rng = random.Random(a.seed)
    rows = []
    for n in [int(x) for x in a.streams.split(",")]:
        for draft in (True, False):
            rows.append(wave(url, n, a.max_tokens, draft, rng))
            print(json.dumps(rows[-1]), file=sys.stderr)
    base = next((r["aggregate_tok_s"] for r in rows if r["streams"] == rows[0]["streams"] and r["draft"]), None)
    for r in rows:
        r["vs_first"] = round(r["aggregate_tok_s"] / base, 2) if base else None
    emit({"url": url, "max_tokens": a.max_tokens, "results": rows}, a.out, indent=1)


if __name__ == "__main__":
    main()
