"""Independent float64 NumPy reference of a BERT encoder's sentence embedding.

Written from the published equations (Devlin et al. 2018, "BERT"; Vaswani et
al. 2017 for the attention; Hendrycks & Gimpel 2016 for GELU; the
sentence-transformers pooling), not from tessera's C code. The weights are
read by gguf_read.py (dequantized bit-exactly for the quantized types), the
architecture's names are those of llama.cpp's convert_hf_to_gguf.py (see
bert_gguf.py).

For one sequence of T token ids, D = embedding_length, H heads, hd = D / H:
    x   = LN(E_tok[id_t] + E_pos[t] + E_type[0])              (T, D)
    per layer:
      q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv        (T, H, hd)
      (a fused attn_qkv is split into its three row blocks q | k | v)
      A_h     = softmax(q_h k_h^T / sqrt(hd))                 no mask: every
                                                              token sees all T
      a       = concat_h(A_h v_h)
      x       = LN(x + a Wo^T + bo)
      x       = LN(x + GELU(x Wup^T + bup) Wdown^T + bdown)
    e = mean_t x_t (pooling 1), x_0 (2: CLS) or x_{T-1} (3: last)
    embedding = e / ||e||_2
LN(v) = (v - mean(v)) / sqrt(var(v) + eps) * w + b   (biased variance)
GELU(z) = z * Phi(z) = z / 2 * (1 + erf(z / sqrt 2))  (exact, not tanh)
A missing bert.pooling_type means mean pooling (what tessera documents).

  bert_ref.py --self-test
  bert_ref.py compare MODEL.gguf IDS.txt ENGINE.jsonl --atol A --cos C
      IDS.txt: one sequence per line, comma-separated ids. ENGINE.jsonl:
      one JSON array per line (tessera embed's output), same order. Fails
      (exit 1) when an element differs by more than A or a cosine
      similarity is below C; prints the worst of both.
  bert_ref.py close A.jsonl B.jsonl --atol A
      Two runs of tessera embed over the same inputs agree within A per
      element (exit 1 otherwise); prints the largest difference.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile  # noqa: E402

_erf = np.vectorize(math.erf, otypes=[np.float64])


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(z):
    return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v, n_heads):
    """Bidirectional multi-head attention of one sequence; q, k, v: (T, D)."""
    T, D = q.shape
    hd = D // n_heads
    qh = q.reshape(T, n_heads, hd).transpose(1, 0, 2)
    kh = k.reshape(T, n_heads, hd).transpose(1, 0, 2)
    vh = v.reshape(T, n_heads, hd).transpose(1, 0, 2)
    a = softmax(qh @ kh.transpose(0, 2, 1) / math.sqrt(hd)) @ vh   # (H, T, hd)
    return a.transpose(1, 0, 2).reshape(T, D)


class BertRef:
    def __init__(self, path):
        g = GGUFFile(path)
        if g.get("general.architecture") != "bert":
            raise ValueError("%s: not a bert file" % path)
        self.g = g
        self.dim = int(g.get("bert.embedding_length"))
        self.n_layers = int(g.get("bert.block_count"))
        self.n_heads = int(g.get("bert.attention.head_count"))
        self.eps = float(g.get("bert.attention.layer_norm_epsilon", 1e-12))
        self.pooling = int(g.get("bert.pooling_type", 1))
        self.t = {name: g.tensor(name) for name in g.tensors}

    def _lin(self, x, p):
        return x @ self.t[p + ".weight"].T + self.t[p + ".bias"]

    def hidden(self, ids):
        """The last layer's hidden states of one sequence, (T, D)."""
        t, T, D = self.t, len(ids), self.dim
        ids = np.asarray(ids)
        x = t["token_embd.weight"][ids] + t["position_embd.weight"][:T]
        if "token_types.weight" in t:       # optional, as llama.cpp loads it
            x = x + t["token_types.weight"][0]
        x = layernorm(x, t["token_embd_norm.weight"], t["token_embd_norm.bias"], self.eps)
        for i in range(self.n_layers):
            p = "blk.%d." % i
            if p + "attn_qkv.weight" in t:
                qkv = self._lin(x, p + "attn_qkv")
                q, k, v = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
            else:
                q, k, v = (self._lin(x, p + n) for n in ("attn_q", "attn_k", "attn_v"))
            a = attention(q, k, v, self.n_heads)
            x = layernorm(x + self._lin(a, p + "attn_output"),
                          t[p + "attn_output_norm.weight"], t[p + "attn_output_norm.bias"], self.eps)
            h = gelu(self._lin(x, p + "ffn_up"))
            x = layernorm(x + self._lin(h, p + "ffn_down"),
                          t[p + "layer_output_norm.weight"], t[p + "layer_output_norm.bias"], self.eps)
        return x

    def embed(self, ids):
        x = self.hidden(ids)
        if self.pooling == 1:
            e = x.mean(axis=0)
        elif self.pooling == 2:
            e = x[0]
        elif self.pooling == 3:
            e = x[-1]
        else:
            raise ValueError("pooling type %d has no sentence embedding" % self.pooling)
        n = np.linalg.norm(e)
        return e / n if n > 0 else e


# ------------------------------------------------------------------ self-test

def _slow_attention(q, k, v, n_heads):
    """Loop-by-loop attention, sharing nothing with attention() above."""
    T, D = q.shape
    hd = D // n_heads
    out = np.zeros((T, D))
    for h in range(n_heads):
        sl = slice(h * hd, (h + 1) * hd)
        for i in range(T):
            s = [float(np.dot(q[i, sl], k[j, sl])) / math.sqrt(hd) for j in range(T)]
            m = max(s)
            e = [math.exp(z - m) for z in s]
            tot = sum(e)
            for j in range(T):
                out[i, sl] += e[j] / tot * v[j, sl]
    return out


def self_test():
    ok = True

    def check(cond, what):
        nonlocal ok
        print("  %-66s %s" % (what, "ok" if cond else "FAIL"))
        ok = ok and bool(cond)

    # GELU at known points: Phi(1) = 0.841344746..., Phi(-1) = 0.158655254...
    check(abs(gelu(np.array([1.0]))[0] - 0.8413447460685429) < 1e-15, "gelu(1) = Phi(1)")
    check(abs(gelu(np.array([-1.0]))[0] + 0.15865525393145707) < 1e-15, "gelu(-1) = -Phi(-1)")
    check(abs(gelu(np.array([3.0]))[0] - 3.0 * 0.9986501019683699) < 1e-14, "gelu(3), not the tanh form")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, 24)) * 3 + 2
    y = layernorm(x, np.ones(24), np.zeros(24), 1e-12)
    check(np.abs(y.mean(axis=1)).max() < 1e-12 and np.abs(y.var(axis=1) - 1).max() < 1e-9,
          "layernorm: mean 0, variance 1 per row")
    q, k, v = (rng.standard_normal((9, 24)) for _ in range(3))
    check(np.abs(attention(q, k, v, 4) - _slow_attention(q, k, v, 4)).max() < 1e-12,
          "vectorised attention == loop attention (no mask)")
    # Bidirectional: the first token's output depends on the last token.
    k2, v2 = k.copy(), v.copy()
    k2[-1] += 1.0
    v2[-1] += 1.0
    check(np.abs(attention(q, k2, v2, 4)[0] - attention(q, k, v, 4)[0]).max() > 1e-3,
          "first token sees the last (no causal mask)")
    return ok


# ------------------------------------------------------------------- compare

def compare(model, ids_path, engine_path, atol, cos_min):
    ref = BertRef(model)
    seqs = [[int(t) for t in line.split(",")] for line in open(ids_path) if line.strip()]
    rows = [json.loads(line) for line in open(engine_path) if line.strip()]
    if len(rows) != len(seqs):
        print("compare: %d embeddings for %d sequences" % (len(rows), len(seqs)))
        return 1
    worst_err, worst_cos, status = 0.0, 1.0, 0
    for i, (ids, row) in enumerate(zip(seqs, rows)):
        r = ref.embed(ids)
        c = np.asarray(row, dtype=np.float64)
        if c.shape != r.shape:
            print("compare: sequence %d: %d floats, want %d" % (i, c.size, r.size))
            return 1
        err = float(np.abs(c - r).max())
        cos = float(np.dot(c, r) / (np.linalg.norm(c) * np.linalg.norm(r)))
        bad = not (err <= atol and cos >= cos_min)
        if bad:
            print("compare: sequence %d (%d tokens): max |diff| %.3g (tol %.3g), cosine %.8f (min %.8f)"
                  % (i, len(ids), err, atol, cos, cos_min))
            status = 1
        worst_err, worst_cos = max(worst_err, err), min(worst_cos, cos)
    print("compare: %s, %d sequences (pooling %d): worst max |diff| %.3g (tol %.3g), worst cosine %.9f (min %.6f)"
          % (os.path.basename(model), len(seqs), ref.pooling, worst_err, atol, worst_cos, cos_min))
    return status


def close(path_a, path_b, atol):
    a = [np.asarray(json.loads(line)) for line in open(path_a) if line.strip()]
    b = [np.asarray(json.loads(line)) for line in open(path_b) if line.strip()]
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        print("close: %s and %s hold different numbers or sizes of vectors" % (path_a, path_b))
        return 1
    worst = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
    print("close: %d vectors, largest difference %.3g (tol %.3g)" % (len(a), worst, atol))
    return 0 if worst <= atol else 1


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        print("bert_ref self-test:")
        return 0 if self_test() else 1
    if len(argv) == 9 and argv[1] == "compare" and argv[5] == "--atol" and argv[7] == "--cos":
        return compare(argv[2], argv[3], argv[4], float(argv[6]), float(argv[8]))
    if len(argv) == 6 and argv[1] == "close" and argv[4] == "--atol":
        return close(argv[2], argv[3], float(argv[5]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
