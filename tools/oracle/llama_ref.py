#!/usr/bin/env python3
"""Float64 numpy reference of the llama-family forward pass (the logits oracle for TensorFold C++).

Reads a GGUF with gguf.GGUFReader, dequantises every tensor once with gguf.quants.dequantize and keeps it as
float64. Computes teacher-forced logits, the final normed hidden states (for error bounds) and greedy
continuations (KV cache, argmax ties to the lower id, no EOS stop).

Conventions: a GGUF 2-D weight is a numpy array of shape (out, in) = (ne1, ne0), so y = W @ x. GGUF llama
stores Q/K already permuted for NORM RoPE (adjacent pairs), so no unpermute is done here; qwen2 uses NEOX.

CLI:  python tools/oracle/llama_ref.py MODEL --tokens 1,2,3 [--out ref.npy] [--greedy N --ids-out f.json]
"""
import argparse
import json
import sys
import time
from dataclasses import dataclass, field

import numpy as np

# Architectures whose GGUF RoPE pairs (i, i + n_rot/2) instead of adjacent pairs.
NEOX_ARCHS = {"qwen2", "qwen2moe", "qwen2vl"}


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    bo: np.ndarray | None
    ffn_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray


@dataclass
class Model:
    path: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    rope_base: float
    rms_eps: float
    neox: bool
    n_vocab: int
    tok_embd: np.ndarray
    out_norm: np.ndarray
    w_out: np.ndarray
    tied: bool
    layers: list = field(default_factory=list)
    tensor_types: dict = field(default_factory=dict)


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _tensor(tensors, name, shape=None):
    # Dequantise to float64; gguf returns (ne1, ne0) i.e. (out, in) for 2-D weights.
    import gguf
    t = tensors[name]
    w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64)
    want = tuple(int(d) for d in reversed(t.shape))
    w = w.reshape(want)
    if shape is not None and w.shape != tuple(shape):
        raise ValueError(f"{name}: shape {w.shape}, expected {tuple(shape)}")
    return np.ascontiguousarray(w)


def _opt(tensors, name, shape=None):
    return _tensor(tensors, name, shape) if name in tensors else None


_CACHE: dict = {}


def load(path, neox=None):
    """Load and dequantise a GGUF llama-family model to float64; cached per process by (path, neox)."""
    key = (str(path), neox)
    if key in _CACHE:
        return _CACHE[key]
    import gguf
    r = gguf.GGUFReader(str(path))
    arch = _field(r, "general.architecture", "llama")
    p = arch + "."
    n_embd = int(_field(r, p + "embedding_length"))
    n_head = int(_field(r, p + "attention.head_count"))
    n_head_kv = int(_field(r, p + "attention.head_count_kv", n_head))
    head_dim = int(_field(r, p + "attention.key_length", n_embd // n_head))
    n_rot = int(_field(r, p + "rope.dimension_count", head_dim))
    rope_base = float(_field(r, p + "rope.freq_base", 10000.0))
    rms_eps = float(_field(r, p + "attention.layer_norm_rms_epsilon", 1e-5))
    n_layer = int(_field(r, p + "block_count"))
    n_ff = int(_field(r, p + "feed_forward_length"))
    tensors = {t.name: t for t in r.tensors}
    types = {t.name: t.tensor_type.name for t in r.tensors}
    tok = _tensor(tensors, "token_embd.weight")
    n_vocab = tok.shape[0]
    tied = "output.weight" not in tensors
    w_out = tok if tied else _tensor(tensors, "output.weight", (n_vocab, n_embd))
    qd, kvd = n_head * head_dim, n_head_kv * head_dim
    layers = []
    for i in range(n_layer):
        b = f"blk.{i}."
        layers.append(Layer(
            attn_norm=_tensor(tensors, b + "attn_norm.weight", (n_embd,)),
            wq=_tensor(tensors, b + "attn_q.weight", (qd, n_embd)),
            wk=_tensor(tensors, b + "attn_k.weight", (kvd, n_embd)),
            wv=_tensor(tensors, b + "attn_v.weight", (kvd, n_embd)),
            wo=_tensor(tensors, b + "attn_output.weight", (n_embd, qd)),
            bq=_opt(tensors, b + "attn_q.bias", (qd,)),
            bk=_opt(tensors, b + "attn_k.bias", (kvd,)),
            bv=_opt(tensors, b + "attn_v.bias", (kvd,)),
            bo=_opt(tensors, b + "attn_output.bias", (n_embd,)),
            ffn_norm=_tensor(tensors, b + "ffn_norm.weight", (n_embd,)),
            w_gate=_tensor(tensors, b + "ffn_gate.weight", (n_ff, n_embd)),
            w_up=_tensor(tensors, b + "ffn_up.weight", (n_ff, n_embd)),
            w_down=_tensor(tensors, b + "ffn_down.weight", (n_embd, n_ff)),
        ))
    m = Model(path=str(path), arch=arch, n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
              n_head_kv=n_head_kv, head_dim=head_dim, n_rot=n_rot, rope_base=rope_base, rms_eps=rms_eps,
              neox=(arch in NEOX_ARCHS) if neox is None else bool(neox), n_vocab=n_vocab, tok_embd=tok,
              out_norm=_tensor(tensors, "output_norm.weight", (n_embd,)), w_out=w_out, tied=tied,
              layers=layers, tensor_types=types)
    if n_head % n_head_kv:
        raise ValueError(f"n_head {n_head} not a multiple of n_head_kv {n_head_kv}")
    _CACHE[key] = m
    return m


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, neox):
    """Rotate x [T, H, D] at positions pos [T]; NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2)."""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


class KVCache:
    """Per-layer keys/values [n_past, n_head_kv, head_dim], grown by concatenation in capacity chunks."""

    def __init__(self, m, capacity=256):
        self.n = 0
        shape = (capacity, m.n_head_kv, m.head_dim)
        self.k = [np.empty(shape) for _ in range(m.n_layer)]
        self.v = [np.empty(shape) for _ in range(m.n_layer)]

    def append(self, il, k, v):
        t = k.shape[0]
        if self.n + t > self.k[il].shape[0]:
            cap = max(2 * self.k[il].shape[0], self.n + t)
            for arr in (self.k, self.v):
                grown = np.empty((cap,) + arr[il].shape[1:])
                grown[:self.n] = arr[il][:self.n]
                arr[il] = grown
        self.k[il][self.n:self.n + t] = k
        self.v[il][self.n:self.n + t] = v
        return self.k[il][:self.n + t], self.v[il][:self.n + t]


def _attention(m, q, k, v, pos0, att=None):
    # q [T, H, D], k/v [P, Hkv, D]; query t sits at absolute position pos0 + t and sees keys 0..pos0+t.
    # att, if given, rounds Q, K and V (att.qkv) and the unnormalised weights P (att.p, here under the row's final
    # maximum; a kernel's running maximum gives the same relative rounding).
    t_new, p = q.shape[0], k.shape[0]
    group = m.n_head // m.n_head_kv
    if att:
        q, k, v, vscale = att.qkv(q, k, v)
    kh = np.repeat(k, group, axis=1)  # q head h reads kv head h // group
    vh = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,phd->htp", q, kh) / np.sqrt(m.head_dim)
    mask = np.arange(p)[None, :] > (pos0 + np.arange(t_new))[:, None]
    scores = np.where(mask[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    w = np.exp(scores)
    total = w.sum(axis=-1, keepdims=True)
    if att:  # P times each key's value scale, rounded; the sum stays unrounded
        vs = np.repeat(vscale, group, axis=1).transpose(1, 0)[:, None, :]  # [H, 1, P]
        w = att.p(w / vs) * vs
    return np.einsum("htp,phd->thd", w / total, vh).reshape(t_new, m.n_head * m.head_dim)


def hidden(m, ids, cache=None, rnd=None, att=None):
    """Final-normed hidden states h [T, n_embd] for ids appended after `cache` (fresh sequence if None).

    rnd, if given, rounds every weight product's input rows, att attention's operands (the arithmetic studies of
    arith_options.py)."""
    rnd = rnd or (lambda v: v)
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= m.n_vocab:
        raise ValueError(f"token ids must be a non-empty 1-D list in [0, {m.n_vocab})")
    cache = cache if cache is not None else KVCache(m, max(256, ids.size))
    pos0 = cache.n
    pos = pos0 + np.arange(ids.size)
    x = m.tok_embd[ids].copy()
    hd, t = m.head_dim, ids.size
    for il, L in enumerate(m.layers):
        a = rms_norm(x, L.attn_norm, m.rms_eps)
        a = rnd(a)
        q, k, v = a @ L.wq.T, a @ L.wk.T, a @ L.wv.T
        if L.bq is not None:
            q = q + L.bq
        if L.bk is not None:
            k = k + L.bk
        if L.bv is not None:
            v = v + L.bv
        q = rope(q.reshape(t, m.n_head, hd), pos, m.n_rot, m.rope_base, m.neox)
        k = rope(k.reshape(t, m.n_head_kv, hd), pos, m.n_rot, m.rope_base, m.neox)
        kc, vc = cache.append(il, k, v.reshape(t, m.n_head_kv, hd))
        o = rnd(_attention(m, q, kc, vc, pos0, att)) @ L.wo.T
        if L.bo is not None:
            o = o + L.bo
        x = x + o
        f = rnd(rms_norm(x, L.ffn_norm, m.rms_eps))
        x = x + rnd(silu(f @ L.w_gate.T) * (f @ L.w_up.T)) @ L.w_down.T
    cache.n = pos0 + t
    return rms_norm(x, m.out_norm, m.rms_eps)


def forward(m, ids, rnd=None, att=None):
    """Teacher-forced (logits [T, vocab], h [T, n_embd]) in float64 over all positions of a fresh sequence; rnd and
    att as in hidden, the output product's input included."""
    h = hidden(m, ids, rnd=rnd, att=att)
    return (rnd(h) if rnd else h) @ m.w_out.T, h


def logits(m, ids):
    """Teacher-forced float64 logits [T, vocab] of every position."""
    return forward(m, ids)[0]


def cond_term(m, h):
    """S[t, v] = sum_i |W_out[v, i] * h[t, i]|: the conditioning of the last product, for error bounds."""
    return np.abs(h) @ np.abs(m.w_out).T


def argmax_low(row):
    # np.argmax returns the first maximal index, i.e. ties go to the lower id.
    return int(np.argmax(row))


def greedy(m, prompt_ids, n, rnd=None, att=None):
    """n greedy ids after prompt_ids (KV cache, ties to the lower id, no EOS stop); rnd and att as in hidden."""
    if n <= 0:
        return []
    last = (lambda h: rnd(h[-1:])[0]) if rnd else (lambda h: h[-1])
    cache = KVCache(m, len(prompt_ids) + n + 1)
    h = hidden(m, prompt_ids, cache, rnd, att)
    out = [argmax_low(last(h) @ m.w_out.T)]
    while len(out) < n:
        h = hidden(m, [out[-1]], cache, rnd, att)
        out.append(argmax_low(last(h) @ m.w_out.T))
    return out


def top2_margin(row):
    """(top id, second id, top logit - second logit) of one logit row."""
    order = np.argsort(-row, kind="stable")
    return int(order[0]), int(order[1]), float(row[order[0]] - row[order[1]])


def _parse_ids(s):
    return [int(x) for x in s.replace(" ", "").split(",") if x != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GGUF model path")
    ap.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--out", help="write teacher-forced float64 logits [T, vocab] to this .npy")
    ap.add_argument("--hidden-out", help="write final normed hidden states [T, n_embd] float64 to this .npy")
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="generate N greedy ids after the prompt")
    ap.add_argument("--ids-out", help="write {prompt_ids, ids} JSON of the greedy run here")
    ap.add_argument("--neox", choices=["auto", "on", "off"], default="auto", help="RoPE pairing override")
    ap.add_argument("--tokenizer", help="tokenizer.json to decode the greedy continuation for display")
    a = ap.parse_args(argv)
    ids = _parse_ids(a.tokens)
    t0 = time.time()
    m = load(a.model, neox={"auto": None, "on": True, "off": False}[a.neox])
    print(f"loaded {m.arch}: {m.n_layer} layers, n_embd {m.n_embd}, heads {m.n_head}/{m.n_head_kv}, "
          f"head_dim {m.head_dim}, n_rot {m.n_rot}, base {m.rope_base}, eps {m.rms_eps:.3g}, "
          f"{'NEOX' if m.neox else 'NORM'} rope, {'tied' if m.tied else 'separate'} output "
          f"in {time.time() - t0:.1f}s", file=sys.stderr)
    if a.out or a.hidden_out or not a.greedy:
        lg, h = forward(m, ids)
        if a.out:
            np.save(a.out, lg)
        if a.hidden_out:
            np.save(a.hidden_out, h)
        print("argmax per position:", ",".join(str(argmax_low(r)) for r in lg))
    if a.greedy:
        t1 = time.time()
        gen = greedy(m, ids, a.greedy)
        print(f"greedy {a.greedy} in {time.time() - t1:.1f}s:", ",".join(map(str, gen)))
        if a.ids_out:
            with open(a.ids_out, "w") as f:
                json.dump({"prompt_ids": ids, "ids": gen}, f)
        if a.tokenizer:
            from tokenizers import Tokenizer
            print(Tokenizer.from_file(a.tokenizer).decode(gen, skip_special_tokens=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
