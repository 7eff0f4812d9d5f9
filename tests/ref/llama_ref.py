"""Independent float64 NumPy reference of the llama / qwen2 forward pass.

Written from the architecture's equations (not from tessera's C engine). It
processes the whole token sequence at once with an explicit causal mask and
no KV cache, so agreement with an incremental (KV-cached) engine is a real
check of both the math and the cache bookkeeping.

Notation: T tokens, D = embedding_length, H query heads, Hkv kv heads,
hd = head_dim, F = feed_forward_length, V = vocab. Weight matrices are stored
in GGUF as ne = [in, out], i.e. NumPy shape (out, in), so a linear layer is
    y = x @ W.T  (+ b)

Per layer i, on the residual stream x (T, D):
    h    = rmsnorm(x) * attn_norm                  rmsnorm(x) = x / sqrt(mean(x^2) + eps)
    q    = h Wq^T (+bq)   -> (T, H,   hd)
    k    = h Wk^T (+bk)   -> (T, Hkv, hd)
    v    = h Wv^T (+bv)   -> (T, Hkv, hd)
    q, k = RoPE(q, p), RoPE(k, p)                  p = absolute position 0..T-1
    for query head j, kv head g = j // (H / Hkv):
        S[t, s] = q[t, j] . k[s, g] / sqrt(hd)     for s <= t, -inf for s > t
        A       = softmax_s(S)
        o[t, j] = sum_s A[t, s] v[s, g]
    x    = x + concat_j(o) Wo^T
    h    = rmsnorm(x) * ffn_norm
    x    = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T     silu(z) = z / (1 + e^-z)
logits = (rmsnorm(x) * output_norm) Wout^T         Wout = output.weight, else token_embd

RoPE, for pair index i = 0 .. n_rot/2 - 1 at position p:
    theta_i = p * base^(-2i / n_rot)   (divided by rope_freqs[i] when that tensor exists)
    (a, b) -> (a cos theta_i - b sin theta_i,  a sin theta_i + b cos theta_i)
  "normal" (arch llama in GGUF): the pair is (x[2i], x[2i+1])  -- adjacent elements,
      because the HF->GGUF converter permutes Wq/Wk rows into this layout.
  "neox"   (arch qwen2):         the pair is (x[i], x[i + n_rot/2]).
Elements at index >= n_rot (partial rotary) are left unchanged; n_rot = hd
unless {arch}.rope.dimension_count says otherwise.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile  # noqa: E402

SUPPORTED_ARCHS = ("llama", "qwen2")
DEFAULT_ROPE = {"llama": "normal", "qwen2": "neox"}


# ---------------------------------------------------------------- primitives

def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w, over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(z):
    """z * sigmoid(z), written to avoid overflow for very negative z."""
    return z * (0.5 * (1.0 + np.tanh(0.5 * z)))


def softmax(s, axis=-1):
    m = np.max(s, axis=axis, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def rope_angles(positions, n_rot, base, freq_factors=None):
    """theta[t, i] = p_t * base^(-2i/n_rot) [/ freq_factors[i]], shape (T, n_rot/2)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors[: n_rot // 2]
    return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]


def apply_rope(x, positions, n_rot, base, mode, freq_factors=None):
    """Rotate x of shape (T, n_heads, hd) at the given absolute positions.

    mode "normal": pairs (x[2i], x[2i+1]);  mode "neox": pairs (x[i], x[i+n_rot/2]).
    """
    theta = rope_angles(positions, n_rot, base, freq_factors)   # (T, n_rot/2)
    c = np.cos(theta)[:, None, :]                               # (T, 1, n_rot/2)
    s = np.sin(theta)[:, None, :]
    out = x.copy()
    if mode == "normal":
        a = x[..., 0:n_rot:2]
        b = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * c - b * s
        out[..., 1:n_rot:2] = a * s + b * c
    elif mode == "neox":
        half = n_rot // 2
        a = x[..., :half]
        b = x[..., half:n_rot]
        out[..., :half] = a * c - b * s
        out[..., half:n_rot] = a * s + b * c
    else:
        raise ValueError("unknown rope mode %r" % mode)
    return out


def causal_attention(q, k, v, n_heads, n_kv_heads):
    """q (T, H, hd), k/v (T, Hkv, hd) -> (T, H*hd), causal, grouped-query."""
    T, H, hd = q.shape
    group = n_heads // n_kv_heads
    # Expand kv heads: query head j reads kv head j // group.
    kv_index = np.arange(n_heads) // group
    k_full = k[:, kv_index, :]                                   # (T, H, hd)
    v_full = v[:, kv_index, :]
    scores = np.einsum("thd,shd->hts", q, k_full) / np.sqrt(hd)  # (H, T, T)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)             # s > t is masked
    scores = np.where(mask[None, :, :], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hts,shd->thd", probs, v_full)               # (T, H, hd)
    return out.reshape(T, H * hd)


# --------------------------------------------------------------------- model

class LlamaRef:
    def __init__(self, path):
        self.g = GGUFFile(path)
        g = self.g
        self.arch = g.get("general.architecture")
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError("unsupported architecture %r" % self.arch)
        a = self.arch

        def req(key):
            full = "%s.%s" % (a, key)
            if full not in g.metadata:
                raise KeyError("missing metadata %s" % full)
            return g.metadata[full]

        self.n_ctx = int(req("context_length"))
        self.dim = int(req("embedding_length"))
        self.n_layers = int(req("block_count"))
        self.ffn = int(req("feed_forward_length"))
        self.n_heads = int(req("attention.head_count"))
        self.n_kv_heads = int(g.get(a + ".attention.head_count_kv", self.n_heads))
        self.rope_base = float(g.get(a + ".rope.freq_base", 10000.0))
        self.eps = float(g.get(a + ".attention.layer_norm_rms_epsilon", 1e-5))
        self.head_dim = self.dim // self.n_heads
        self.n_rot = int(g.get(a + ".rope.dimension_count", self.head_dim))
        self.rope_mode = DEFAULT_ROPE[a]
        if self.n_heads % self.n_kv_heads:
            raise ValueError("head_count %d not a multiple of head_count_kv %d"
                             % (self.n_heads, self.n_kv_heads))
        if self.head_dim * self.n_heads != self.dim or self.n_rot % 2 or self.n_rot > self.head_dim:
            raise ValueError("inconsistent head geometry")
        scaling = g.get(a + ".rope.scaling.type")
        if scaling not in (None, "none"):
            raise NotImplementedError("rope scaling %r not supported" % scaling)
        self.freq_factors = g.tensor("rope_freqs.weight").reshape(-1) if g.has("rope_freqs.weight") else None

        self.tok_embd = g.tensor("token_embd.weight")              # (V, D)
        self.vocab = self.tok_embd.shape[0]
        self.out_w = g.tensor("output.weight") if g.has("output.weight") else self.tok_embd
        self.out_norm = g.tensor("output_norm.weight")
        self._check_shapes()
        # Optional f(x, ggml_type) -> x applied to the input of every matmul
        # with a weight of that type (None: exact). Only for measuring what
        # an engine's activation quantization costs (act_quant_sim.py); the
        # reference itself never sets it.
        self.act_quant = None

    def _lin(self, x, w, name):
        """x @ W.T for the weight tensor `name` (already dequantized in w)."""
        if self.act_quant is not None:
            x = self.act_quant(x, self.g.tensors[name].type)
        return x @ w.T

    def _check_shapes(self):
        D, H, Hkv, hd, F = self.dim, self.n_heads, self.n_kv_heads, self.head_dim, self.ffn
        expect = {
            "attn_norm.weight": (D,), "ffn_norm.weight": (D,),
            "attn_q.weight": (H * hd, D), "attn_k.weight": (Hkv * hd, D),
            "attn_v.weight": (Hkv * hd, D), "attn_output.weight": (D, H * hd),
            "ffn_gate.weight": (F, D), "ffn_up.weight": (F, D), "ffn_down.weight": (D, F),
        }
        for i in range(self.n_layers):
            for suffix, shape in expect.items():
                name = "blk.%d.%s" % (i, suffix)
                if not self.g.has(name):
                    raise KeyError("missing tensor " + name)
                got = self.g.tensors[name].shape
                if tuple(got) != shape:
                    raise ValueError("%s: shape %s, expected %s" % (name, got, shape))
        if self.out_w.shape != (self.vocab, D) or self.out_norm.shape != (D,):
            raise ValueError("output tensors have unexpected shapes")

    def layer_weights(self, i):
        g = self.g
        w = {}
        for suffix in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
            w[suffix] = g.tensor("blk.%d.%s.weight" % (i, suffix))
        for suffix in ("attn_q", "attn_k", "attn_v"):
            name = "blk.%d.%s.bias" % (i, suffix)
            w[suffix + "_b"] = g.tensor(name) if g.has(name) else None
        return w

    def forward(self, tokens, rope_mode=None):
        """Logits (T, V) for every position of `tokens` (positions 0..T-1).

        rope_mode overrides the architecture's rotary pairing ("normal"/"neox");
        only used by the self-check that proves a wrong convention is detected.
        """
        mode = rope_mode or self.rope_mode
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= self.vocab:
            raise ValueError("token id out of range [0, %d)" % self.vocab)
        T = tokens.size
        H, Hkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        pos = np.arange(T)

        x = self.tok_embd[tokens].copy()                           # (T, D)
        for i in range(self.n_layers):
            w = self.layer_weights(i)
            lin = lambda a, role: self._lin(a, w[role], "blk.%d.%s.weight" % (i, role))  # noqa: E731
            # --- attention block
            h = rmsnorm(x, w["attn_norm"], self.eps)
            q = lin(h, "attn_q")
            k = lin(h, "attn_k")
            v = lin(h, "attn_v")
            if w["attn_q_b"] is not None:
                q = q + w["attn_q_b"]
            if w["attn_k_b"] is not None:
                k = k + w["attn_k_b"]
            if w["attn_v_b"] is not None:
                v = v + w["attn_v_b"]
            q = apply_rope(q.reshape(T, H, hd), pos, self.n_rot, self.rope_base, mode, self.freq_factors)
            k = apply_rope(k.reshape(T, Hkv, hd), pos, self.n_rot, self.rope_base, mode, self.freq_factors)
            v = v.reshape(T, Hkv, hd)
            o = causal_attention(q, k, v, H, Hkv)                  # (T, H*hd)
            x = x + lin(o, "attn_output")
            # --- SwiGLU feed-forward block
            h = rmsnorm(x, w["ffn_norm"], self.eps)
            x = x + lin(silu(lin(h, "ffn_gate")) * lin(h, "ffn_up"), "ffn_down")

        out_name = "output.weight" if self.g.has("output.weight") else "token_embd.weight"
        return self._lin(rmsnorm(x, self.out_norm, self.eps), self.out_w, out_name)  # (T, V)


def main(argv):
    """python3 llama_ref.py MODEL.gguf ID [ID ...]  -> greedy next token per position."""
    m = LlamaRef(argv[1])
    ids = [int(t) for t in argv[2:]]
    logits = m.forward(ids)
    print("arch=%s dim=%d layers=%d heads=%d/%d vocab=%d rope=%s"
          % (m.arch, m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab, m.rope_mode))
    print(" ".join(str(int(t)) for t in logits.argmax(axis=-1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
