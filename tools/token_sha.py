#!/usr/bin/env python3
"""token_sha of a reply's token ids: the first 12 hex digits of SHA-256 over the ids joined by "," (no spaces).

Usage:
  python tools/token_sha.py 1 2 3            # ids as arguments (also "1,2,3")
  python tools/token_sha.py --json reply.json  # a server reply (JSON, or an SSE body); checks its token_sha
  python tools/token_sha.py --json -         # the same, reading stdin

Prints {"token_sha", "count", ...} as JSON; with --json also {"reply_token_sha", "match"}.
Exit codes: 0 ok, 1 the reply's token_sha differs from the one computed, 2 bad input.
Importable: `from token_sha import token_sha`.
"""
import argparse
import hashlib
import json
import os
import sys

# oai_common.py sits next to this script; make it importable however this file is launched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oai_common import emit, tensorfold_ext  # noqa: E402


def token_sha(ids) -> str:
    """First 12 hex digits of SHA-256 over the ids joined by ','."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:12]


def _sse_objects(text: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                out.append(json.loads(payload))
    return out


def reply_ids_and_sha(text: str):
    """(token_ids, reply token_sha or None) from a reply body: one JSON object, or SSE `data:` lines."""
    stripped = text.lstrip()
    if stripped.startswith("data:"):
        objs = _sse_objects(stripped)
        # The extension object rides on the final streamed chunk; take the last one that has it.
        objs = [o for o in objs if tensorfold_ext(o)] or objs
        if not objs:
            raise ValueError("SSE body has no data chunks")
        obj = objs[-1]
    else:
        obj = json.loads(stripped)
    if not isinstance(obj, dict):
        raise ValueError("reply is not a JSON object")
    ext = tensorfold_ext(obj)
    ids = ext.get("token_ids")
    if ids is None:
        choices = obj.get("choices") or []
        if choices and isinstance(choices[0], dict):
            ids = choices[0].get("token_ids")
    if ids is None:
        raise ValueError("reply has no tensorfold.token_ids nor choices[0].token_ids (send return_token_ids: true)")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError("token_ids is not a list of integers")
    return ids, ext.get("token_sha")


def parse_id_args(args) -> list:
    ids = []
    for a in args:
        for part in a.replace(",", " ").split():
            ids.append(int(part))
    return ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ids", nargs="*", help="token ids (space or comma separated)")
    ap.add_argument("--json", metavar="FILE", help="server reply to read ('-' for stdin); checks its token_sha")
    ap.add_argument("--out", metavar="FILE", help="write the JSON result here instead of stdout")
    args = ap.parse_args(argv)

    if bool(args.ids) == bool(args.json):
        emit({"error": "give token ids as arguments or --json FILE (not both)"}, args.out)
        return 2
    try:
        if args.json:
            text = sys.stdin.read() if args.json == "-" else open(args.json, encoding="utf-8").read()
            ids, reply_sha = reply_ids_and_sha(text)
        else:
            ids, reply_sha = parse_id_args(args.ids), None
    except (OSError, ValueError) as e:
        emit({"error": str(e)}, args.out)
        return 2

    result = {"token_sha": token_sha(ids), "count": len(ids)}
    if args.json:
        result["reply_token_sha"] = reply_sha
        result["match"] = reply_sha == result["token_sha"]
    emit(result, args.out)
    return 0 if result.get("match", True) else 1


if __name__ == "__main__":
    sys.exit(main())
