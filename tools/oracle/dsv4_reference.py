"""A float64 numpy reference of the DeepSeek-V4 forward (no QAT roundings), read straight from a release-layout
checkpoint (tools/fixtures/gen_deepseek_v4.py): FP8 blocks and MXFP4 experts decoded exactly, then the whole
sequence in one pass. It follows specs/deepseek_v4.md section 2 with the operation order of transformers'
DeepseekV4 (5.24, which has it since 5.17); it is a development oracle next to the transformers goldens, and the
base of the MTP check.

  python tools/oracle/dsv4_reference.py CHECKPOINT --tokens 1,2,3 --out logits.npy
"""
import argparse
import json
import math
import os

import ml_dtypes
import numpy as np

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


class Checkpoint:
    def __init__(self, folder):
        self.folder = folder
        self.cfg = json.load(open(os.path.join(folder, "config.json")))
        index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
        self.raw = {}
        for shard in sorted(set(index["weight_map"].values())):
            data = open(os.path.join(folder, shard), "rb").read()
            n = int.from_bytes(data[:8], "little")
            header = json.loads(data[8:8 + n])
            header.pop("__metadata__", None)
            for k, v in header.items():
                b, e = v["data_offsets"]
                self.raw[k] = (v["dtype"], v["shape"], data[8 + n + b:8 + n + e])
        self.B = self.cfg["quantization_config"]["weight_block_size"][0]

    def has(self, name):
        return name in self.raw

    def t(self, name):
        dtype, shape, b = self.raw[name]
        kinds = {"BF16": ml_dtypes.bfloat16, "F32": np.float32, "I64": np.int64, "F8_E4M3": ml_dtypes.float8_e4m3fn,
                 "F8_E8M0": ml_dtypes.float8_e8m0fnu, "I8": np.uint8, "U8": np.uint8}
        a = np.frombuffer(b, dtype=kinds[dtype]).reshape(shape)
        return a if dtype in ("I64", "I8", "U8") else a.astype(np.float64)

    def w(self, name):
        """A matrix [out, in] in float64: plain, FP8 with block scales, or MXFP4 with a scale per 32."""
        if self.has(name + ".weight") and self.has(name + ".scale"):
            dtype = self.raw[name + ".weight"][0]
            q, s = self.t(name + ".weight"), self.t(name + ".scale")
            if dtype in ("I8", "U8"):
                vals = np.empty((q.shape[0], q.shape[1] * 2))
                vals[:, 0::2], vals[:, 1::2] = E2M1[q & 15], E2M1[q >> 4]
                return vals * np.repeat(s, 32, axis=1)
            full = np.repeat(np.repeat(s, self.B, axis=0), self.B, axis=1)[:q.shape[0], :q.shape[1]]
            return q * full
        return self.t(name if self.has(name) else name + ".weight")


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 if w is None else w)


def rope_freqs(c, compress):
    rd = c["qk_rope_head_dim"]
    base = c["compress_rope_theta"] if compress else c["rope_theta"]
    f = 1.0 / base ** (np.arange(0, rd, 2) / rd)
    rs = c.get("rope_scaling")
    if compress and rs:
        fac, orig = rs["factor"], rs["original_max_position_embeddings"]
        corr = lambda b: rd * math.log(orig / (b * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(math.floor(corr(rs["beta_fast"])), 0), min(math.ceil(corr(rs["beta_slow"])), rd - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(rd // 2) - lo) / (hi - lo), 0, 1)
        f = f / fac * ramp + f * (1 - ramp)
    return f


def rope(x, pos, f, sign=1.0):
    """Interleaved pairs of the trailing 2*len(f) channels of x[..., T?, d] rotated by pos*f (pos broadcast)."""
    rd = 2 * len(f)
    ang = np.asarray(pos, dtype=np.float64)[..., None] * f
    c, s = np.cos(ang), sign * np.sin(ang)
    out = x.copy()
    r = x[..., -rd:]
    a, b = r[..., 0::2], r[..., 1::2]
    out[..., -rd:][..., 0::2] = a * c - b * s
    out[..., -rd:][..., 1::2] = b * c + a * s
    return out


def round_grid(v, mant_bits, min_exp):
    """Nearest value on a float grid with `mant_bits` mantissa bits and smallest exponent min_exp, ties to even."""
    a = np.abs(v)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    step = np.exp2(np.maximum(e, min_exp) - mant_bits)
    return np.sign(v) * np.round(a / step) * step  # numpy rounds halves to even


def qat_blocks(v, block, top, mant_bits, min_exp):
    """Blocks along the last axis: s = 2^ceil(log2(amax / top)), v = s * grid(v / s) (spec 2, QAT rounding)."""
    shape = v.shape
    n = shape[-1]
    out = v.reshape(-1, n).copy()
    for b in range(0, n, block):
        blk = out[:, b:b + block]
        amax = np.abs(blk).max(1, keepdims=True)
        s = np.exp2(np.ceil(np.log2(np.where(amax > 0, amax / top, 1.0))))
        out[:, b:b + block] = np.where(amax > 0, round_grid(blk / s, mant_bits, min_exp) * s, blk)
    return out.reshape(shape)


def fp8(v, block):
    return qat_blocks(v, block, 448.0, 3, -6)


def fp4(v, block):
    return qat_blocks(v, block, 6.0, 1, 0)


def hadamard(v):
    n = v.shape[-1]
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return v @ h.T / math.sqrt(n)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


class Model:
    def __init__(self, ck, qat=False):
        self.ck, self.c, self.qat = ck, ck.cfg, qat
        self.clamped = 0
        self.eps = self.c["rms_norm_eps"]
        self.fmain, self.fcomp = rope_freqs(self.c, False), rope_freqs(self.c, True)

    def mm(self, x, name):
        """x @ W.T for an FP8 / MXFP4 weight; with QAT the input is first rounded to FP8 in blocks of 128."""
        return (fp8(x, 128) if self.qat else x) @ self.ck.w(name).T

    def qkv_round(self, kv):
        if not self.qat:
            return kv
        rd = self.c["qk_rope_head_dim"]
        out = kv.copy()
        out[..., :-rd] = fp8(kv[..., :-rd], 64)
        return out

    def hc_mix(self, p, site, X):
        c, hc = self.c, self.c["hc_mult"]
        fn, base, scale = (self.ck.t(f"{p}hc_{site}_{k}") for k in ("fn", "base", "scale"))
        flat = X.reshape(X.shape[0], -1)
        m = rms(flat, None, self.eps) @ fn.T
        pre = 1 / (1 + np.exp(-(m[:, :hc] * scale[0] + base[:hc]))) + c["hc_eps"]
        post = 2 / (1 + np.exp(-(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])))
        comb = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(-1, hc, hc)
        comb = np.exp(comb - comb.max(-1, keepdims=True))
        comb = comb / comb.sum(-1, keepdims=True) + c["hc_eps"]
        comb = comb / (comb.sum(-2, keepdims=True) + c["hc_eps"])
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(-1, keepdims=True) + c["hc_eps"])
            comb = comb / (comb.sum(-2, keepdims=True) + c["hc_eps"])
        collapsed = (pre[:, :, None] * X).sum(1)
        return post, comb, collapsed

    def compress(self, a, g, ape, R, overlap, d, norm_w, pos_f, indexer=False):
        """Entries of every complete window: softmax over slots (CSA: the previous window's first half too)."""
        T = a.shape[0]
        n = T // R
        if n == 0:
            return np.zeros((0, d))
        a, g = a[:n * R].reshape(n, R, -1), g[:n * R].reshape(n, R, -1) + ape
        if overlap:
            kv = np.zeros((n, 2 * R, d))
            gate = np.full((n, 2 * R, d), -np.inf)
            kv[:, R:], gate[:, R:] = a[..., d:], g[..., d:]
            kv[1:, :R], gate[1:, :R] = a[:-1, :, :d], g[:-1, :, :d]
        else:
            kv, gate = a, g
        wts = np.exp(gate - gate.max(1, keepdims=True))
        wts /= wts.sum(1, keepdims=True)
        ent = rms((kv * wts).sum(1), norm_w, self.eps)
        ent = rope(ent, np.arange(n) * R, pos_f)
        if self.qat and not indexer:
            ent = self.qkv_round(ent)
        elif self.qat:
            ent = fp4(hadamard(ent), 32)
        return ent

    def qkv(self, p, x, pos, f):
        c, ck = self.c, self.ck
        T, H, d = x.shape[0], c["num_attention_heads"], c["head_dim"]
        qr = rms(self.mm(x, p + "attn.wq_a"), ck.t(p + "attn.q_norm.weight"), self.eps)
        q = self.mm(qr, p + "attn.wq_b").reshape(T, H, d)
        q = rope(rms(q, None, self.eps), pos[:, None], f)
        kv = rope(rms(self.mm(x, p + "attn.wkv"), ck.t(p + "attn.kv_norm.weight"), self.eps), pos, f)
        return qr, q, self.qkv_round(kv)

    def attend(self, p, q, keys, bias, pos, f):
        """Softmax with the sink over keys (bias -inf masks), inverse RoPE, grouped output projection."""
        c, ck = self.c, self.ck
        T, H, d = q.shape[0], c["num_attention_heads"], c["head_dim"]
        sinks = ck.t(p + "attn.attn_sink")
        logits = np.einsum("thd,sd->ths", q, keys) / math.sqrt(d) + bias[:, None, :]
        mx = np.maximum(logits.max(-1), sinks[None, :])
        e = np.exp(logits - mx[..., None])
        den = e.sum(-1) + np.exp(sinks[None, :] - mx)
        o = rope(np.einsum("ths,sd->thd", e / den[..., None], keys), -pos[:, None], f)
        G = c["o_groups"]
        wo_a = ck.w(p + "attn.wo_a").reshape(G, -1, H * d // G)
        og = o.reshape(T, G, -1)
        if self.qat:
            og = fp8(og, 128)
        u = np.einsum("tgi,goi->tgo", og, wo_a).reshape(T, -1)
        return self.mm(u, p + "attn.wo_b")

    def attention(self, p, x, ratio, pos):
        c, ck = self.c, self.ck
        T, d = x.shape[0], c["head_dim"]
        f = self.fcomp if ratio else self.fmain
        qr, q, kv = self.qkv(p, x, pos, f)
        W = c["sliding_window"]
        s_idx = np.arange(T)
        mask = (s_idx[None, :] <= pos[:, None]) & (pos[:, None] - s_idx[None, :] < W)
        keys, bias = kv, np.where(mask, 0.0, -np.inf)
        if ratio:
            cw = 2 * d if ratio == 4 else d
            ent = self.compress(x @ ck.w(p + "attn.compressor.wkv").T, x @ ck.w(p + "attn.compressor.wgate").T,
                                ck.t(p + "attn.compressor.ape"), ratio, ratio == 4, d,
                                ck.t(p + "attn.compressor.norm.weight"), self.fcomp)
            n = ent.shape[0]
            vis = np.arange(n)[None, :] < ((pos + 1) // ratio)[:, None]
            if ratio == 4 and n:
                vis &= self.indexer(p, x, qr, pos, n)
            keys = np.concatenate([kv, ent], 0)
            bias = np.concatenate([bias, np.where(vis, 0.0, -np.inf)], 1)
        return self.attend(p, q, keys, bias, pos, f)

    def indexer(self, p, x, qr, pos, n):
        c, ck = self.c, self.ck
        T, IH, Id = x.shape[0], c["index_n_heads"], c["index_head_dim"]
        ent = self.compress(x @ ck.w(p + "attn.indexer.compressor.wkv").T,
                            x @ ck.w(p + "attn.indexer.compressor.wgate").T, ck.t(p + "attn.indexer.compressor.ape"),
                            4, True, Id, ck.t(p + "attn.indexer.compressor.norm.weight"), self.fcomp, indexer=True)
        q = rope(self.mm(qr, p + "attn.indexer.wq_b").reshape(T, IH, Id), pos[:, None], self.fcomp)
        if self.qat:
            q = fp4(hadamard(q), 32)
        sc = np.maximum(np.einsum("thd,sd->ths", q, ent), 0) * Id ** -0.5
        wts = (x @ ck.w(p + "attn.indexer.weights_proj").T) * IH ** -0.5
        score = (sc * wts[:, :, None]).sum(1)
        vis = np.arange(n)[None, :] < ((pos + 1) // 4)[:, None]
        score = np.where(vis, score, -np.inf)
        k = min(c["index_topk"], n)
        keep = np.zeros((T, n), dtype=bool)
        for t in range(T):
            order = sorted(range(n), key=lambda j: (-score[t, j], j))[:k]  # ties to the lower entry
            keep[t, order] = True
        return keep & vis

    def moe(self, p, x, ids):
        c, ck = self.c, self.ck
        lim, k = c["swiglu_limit"], c["num_experts_per_tok"]
        s = np.sqrt(softplus(x @ ck.w(p + "ffn.gate").T))
        if ck.has(p + "ffn.gate.tid2eid"):
            idx = ck.t(p + "ffn.gate.tid2eid")[ids]
        else:
            sel = s + ck.t(p + "ffn.gate.bias")
            idx = np.array([sorted(range(s.shape[1]), key=lambda e: (-sel[t, e], e))[:k] for t in range(len(ids))])
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            w = s[t, idx[t]]
            w = w / (w.sum() + 1e-20) * c["routed_scaling_factor"]
            for j, e in enumerate(idx[t]):  # with QAT the weight goes inside, before w2's input rounding
                out[t] += (1.0 if self.qat else w[j]) * self.mlp(f"{p}ffn.experts.{e}.", x[t:t + 1], lim,
                                                                  w[j] if self.qat else 1.0)[0]
        return out + self.mlp(p + "ffn.shared_experts.", x, lim)

    def mlp(self, p, x, lim, weight=1.0):
        g, u = self.mm(x, p + "w1"), self.mm(x, p + "w3")
        self.clamped += int((g > lim).sum() + (np.abs(u) > lim).sum())  # tests prove the fixture reaches the clamp
        g, u = np.minimum(g, lim), np.clip(u, -lim, lim)
        return self.mm(g / (1 + np.exp(-g)) * u * weight, p + "w2")

    def forward(self, ids):
        c, ck = self.c, self.ck
        ids = np.asarray(ids)
        pos = np.arange(len(ids))
        X = np.repeat(ck.t("embed.weight")[ids][:, None, :], c["hc_mult"], 1)
        for L in range(c["num_hidden_layers"]):
            p = f"layers.{L}."
            post, comb, col = self.hc_mix(p, "attn", X)
            F = self.attention(p, rms(col, ck.t(p + "attn_norm.weight"), self.eps), c["compress_ratios"][L], pos)
            X = post[:, :, None] * F[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X)
            post, comb, col = self.hc_mix(p, "ffn", X)
            F = self.moe(p, rms(col, ck.t(p + "ffn_norm.weight"), self.eps), ids)
            X = post[:, :, None] * F[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X)
        self.last_X = X
        return self.head(X, "", "norm.weight")

    def head(self, X, pre_name, norm_name):
        c, ck = self.c, self.ck
        flat = rms(X.reshape(X.shape[0], -1), None, self.eps)
        fn, base, scale = (ck.t(f"{pre_name}hc_head_{k}") for k in ("fn", "base", "scale"))
        pre = 1 / (1 + np.exp(-(flat @ fn.T * scale[0] + base)))
        h = ((pre + c["hc_eps"])[:, :, None] * X).sum(1)
        return rms(h, ck.t(norm_name), self.eps) @ ck.w("head").T

    def mtp_drafts(self, ids, k):
        """Greedy MTP drafts after ids (spec 2.6): kv teacher-forced at positions 1..n-1 from the main streams at
        p - 1 and the token at p, then the block chained on its own output streams; returns drafts and logits."""
        c, ck, p = self.c, self.ck, "mtp.0."
        n, W = len(ids) - 1, c["sliding_window"]
        self.forward(ids[:n])
        Xm = self.last_X

        def inputs(tok, h):
            e = self.mm(rms(ck.t("embed.weight")[tok], ck.t(p + "enorm.weight"), self.eps)[None], p + "e_proj")
            return e + self.mm(rms(h, ck.t(p + "hnorm.weight"), self.eps), p + "h_proj")

        def block_kv(X, pos):
            _, _, col = self.hc_mix(p, "attn", X[None])
            xn = rms(col, ck.t(p + "attn_norm.weight"), self.eps)
            return self.qkv(p, xn, np.array([pos]), self.fmain)

        kvs = {pos: block_kv(inputs(ids[pos], Xm[pos - 1]), pos)[2][0] for pos in range(1, n)}
        drafts, out, h = [], [], Xm[n - 1]
        for i in range(k):
            q = n + i
            X = inputs(ids[n] if i == 0 else drafts[-1], h)
            post, comb, col = self.hc_mix(p, "attn", X[None])
            xn = rms(col, ck.t(p + "attn_norm.weight"), self.eps)
            _, qv, kv = self.qkv(p, xn, np.array([q]), self.fmain)
            kvs[q] = kv[0]
            keys = np.stack([kvs[s] for s in range(max(1, q - W + 1), q + 1)])
            F = self.attend(p, qv, keys, np.zeros((1, len(keys))), np.array([q]), self.fmain)
            X = post[:, :, None] * F[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X[None])
            post, comb, col = self.hc_mix(p, "ffn", X)
            F = self.moe(p, rms(col, ck.t(p + "ffn_norm.weight"), self.eps), [0])
            X = post[:, :, None] * F[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X)
            lg = self.head(X, p, p + "norm.weight")[0]
            out.append(lg)
            drafts.append(int(np.argmax(lg)))
            h = X[0]
        return drafts, np.array(out)


def checkpoint_sha256(folder):
    """One hash over config.json and the shards, so goldens can name the checkpoint they belong to."""
    import hashlib
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors") or name == "config.json":
            h.update(name.encode())
            with open(os.path.join(folder, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    logits = Model(Checkpoint(a.checkpoint)).forward([int(t) for t in a.tokens.split(",")])
    np.save(a.out, logits)


if __name__ == "__main__":
    main()
