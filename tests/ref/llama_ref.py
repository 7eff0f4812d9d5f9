"""Independent float64 NumPy reference of the decoder forward pass of the
GGUF architectures llama (incl. Llama 3.1 rope_freqs and linear rope
scaling), qwen2, qwen3, gemma3 and phi3.

Written from the architectures' equations (Hugging Face modeling code and
llama.cpp's GGUF conventions; not from tessera's C engine). It processes the
whole token sequence at once with an explicit causal mask and no KV cache,
so agreement with an incremental (KV-cached) engine is a real check of both
the math and the cache bookkeeping.

Notation: T tokens, D = embedding_length, H query heads, Hkv kv heads,
hd = head_dim (attention.key_length, else D / H), F = feed_forward_length,
V = vocab. Weight matrices are stored in GGUF as ne = [in, out], i.e. NumPy
shape (out, in), so a linear layer is
    y = x @ W.T  (+ b)

Per layer i, on the residual stream x (T, D):
    h    = rmsnorm(x) * attn_norm                  rmsnorm(x) = x / sqrt(mean(x^2) + eps)
    q    = h Wq^T (+bq)   -> (T, H,   hd)
    k    = h Wk^T (+bk)   -> (T, Hkv, hd)
    v    = h Wv^T (+bv)   -> (T, Hkv, hd)
    [qwen3, gemma3: q, k = rmsnorm(q[t, j]) * q_norm, rmsnorm(k[t, g]) * k_norm  per head]
    q, k = RoPE(q, p), RoPE(k, p)                  p = absolute position 0..T-1
    for query head j, kv head g = j // (H / Hkv):
        S[t, s] = q[t, j] . k[s, g] * scale        for s allowed, -inf otherwise
                  allowed: s <= t, and on a sliding-window layer also t - s < window
                  scale = 1 / sqrt(hd)   (gemma3: 1 / sqrt(query_pre_attn_scalar))
        A       = softmax_s(S)
        o[t, j] = sum_s A[t, s] v[s, g]
    a    = concat_j(o) Wo^T      [gemma3: a = rmsnorm(a) * post_attention_norm]
    x    = x + a
    h    = rmsnorm(x) * ffn_norm
    f    = (act(h Wgate^T) * (h Wup^T)) Wdown^T   act = silu(z) = z / (1 + e^-z),
                                                  gemma3: gelu_tanh(z) =
                                                  z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
                                                  [gemma3: f = rmsnorm(f) * post_ffw_norm]
    x    = x + f
logits = (rmsnorm(x) * output_norm) Wout^T         Wout = output.weight, else token_embd
                                                   [gemma3 with final_logit_softcapping c:
                                                    logits = c tanh(logits / c)]

Per architecture (what differs from llama):
  qwen2:  q/k/v biases; NeoX rope.
  qwen3:  no biases; per-head q/k RMSNorm before RoPE; NeoX rope.
  gemma3: x0 = embedding * sqrt(D); q/k norms; post-attention and post-FFN
          norms; GELU-tanh gate; NeoX rope. The GGUF norm weights already hold
          Gemma's (1 + w) (llama.cpp's converter adds the 1), so they are used
          as stored. Layer i is global when (i + 1) % 6 == 0, else local
          (sliding window); local layers use rope base 10000 without scaling,
          global ones gemma3.rope.freq_base with the linear scaling factor.
          query_pre_attn_scalar is not in GGUF: it is hd, except for the
          62-layer 27B where it is D / H (llama.cpp's rule).
  phi3:   attn_qkv holds Wq, Wk, Wv stacked by rows (H*hd, Hkv*hd, Hkv*hd);
          ffn_up holds Wgate then Wup stacked (F rows each; the first half is
          the gate, as HF Phi3MLP's gate_up_proj.chunk(2)); NeoX rope, partial
          rotary via rope.dimension_count.

RoPE, for pair index i = 0 .. n_rot/2 - 1 at position p:
    theta_i = (p * scale) * base^(-2i / n_rot)  [/ rope_freqs[i] when that tensor exists (llama)]
    scale = 1 / rope.scaling.factor for linear scaling, else 1
    (a, b) -> (a cos theta_i - b sin theta_i,  a sin theta_i + b cos theta_i)
  "normal" (arch llama in GGUF): the pair is (x[2i], x[2i+1])  -- adjacent elements,
      because the HF->GGUF converter permutes Wq/Wk rows into this layout.
  "neox"   (every other arch):   the pair is (x[i], x[i + n_rot/2]).
Elements at index >= n_rot (partial rotary) are left unchanged; n_rot = hd
unless {arch}.rope.dimension_count says otherwise.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile  # noqa: E402

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "phi3")
DEFAULT_ROPE = {"llama": "normal", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox", "phi3": "neox"}
GEMMA3_SWA_PERIOD = 6          # layer i is global when (i + 1) % 6 == 0
GEMMA3_LOCAL_ROPE_BASE = 10000.0


# ---------------------------------------------------------------- primitives

def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w, over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(z):
    """z * sigmoid(z), written to avoid overflow for very negative z."""
    return z * (0.5 * (1.0 + np.tanh(0.5 * z)))


def gelu_tanh(z):
    """GELU, tanh approximation (PyTorch gelu(approximate="tanh"))."""
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))


def softmax(s, axis=-1):
    m = np.max(s, axis=axis, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def rope_angles(positions, n_rot, base, freq_factors=None, scale=1.0):
    """theta[t, i] = (p_t * scale) * base^(-2i/n_rot) [/ freq_factors[i]], shape (T, n_rot/2)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors[: n_rot // 2]
    return (np.asarray(positions, dtype=np.float64) * scale)[:, None] * inv_freq[None, :]


def apply_rope(x, positions, n_rot, base, mode, freq_factors=None, scale=1.0):
    """Rotate x of shape (T, n_heads, hd) at the given absolute positions.

    mode "normal": pairs (x[2i], x[2i+1]);  mode "neox": pairs (x[i], x[i+n_rot/2]).
    scale: linear rope scaling (positions multiplied by 1 / factor).
    """
    theta = rope_angles(positions, n_rot, base, freq_factors, scale)   # (T, n_rot/2)
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


def causal_attention(q, k, v, n_heads, n_kv_heads, scale=None, window=0):
    """q (T, H, hd), k/v (T, Hkv, hd) -> (T, H*hd), causal, grouped-query.

    scale: score multiplier (default 1/sqrt(hd)); window > 0: query t sees
    only keys s with t - s < window (sliding-window attention)."""
    T, H, hd = q.shape
    group = n_heads // n_kv_heads
    if scale is None:
        scale = 1.0 / np.sqrt(hd)
    # Expand kv heads: query head j reads kv head j // group.
    kv_index = np.arange(n_heads) // group
    k_full = k[:, kv_index, :]                                   # (T, H, hd)
    v_full = v[:, kv_index, :]
    scores = np.einsum("thd,shd->hts", q, k_full) * scale        # (H, T, T)
    t_idx, s_idx = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = s_idx > t_idx                                         # s > t is masked
    if window > 0:
        mask = mask | (t_idx - s_idx >= window)                  # outside the window
    scores = np.where(mask[None, :, :], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hts,shd->thd", probs, v_full)               # (T, H, hd)
    return out.reshape(T, H * hd)


# --------------------------------------------------------------------- model

class LlamaRef:
    """The model of one GGUF file (any SUPPORTED_ARCHS), float64."""

    def __init__(self, path, kv_f16=False):
        # kv_f16: round each key and value to half precision as an f16 KV
        # cache stores it (from the f32 value the engine computes), so the
        # comparison keeps its tolerance with the engine's default cache.
        self.kv_f16 = kv_f16
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
        self.head_dim = int(g.get(a + ".attention.key_length", 0)) or self.dim // self.n_heads
        if int(g.get(a + ".attention.value_length", self.head_dim)) != self.head_dim:
            raise ValueError("value_length differs from key_length")
        self.n_rot = int(g.get(a + ".rope.dimension_count", self.head_dim))
        self.rope_mode = DEFAULT_ROPE[a]
        if self.n_heads % self.n_kv_heads:
            raise ValueError("head_count %d not a multiple of head_count_kv %d"
                             % (self.n_heads, self.n_kv_heads))
        if ("%s.attention.key_length" % a) not in g.metadata and self.head_dim * self.n_heads != self.dim:
            raise ValueError("dim does not split into heads")
        if self.n_rot % 2 or self.n_rot > self.head_dim or self.head_dim % 2:
            raise ValueError("inconsistent head geometry")
        scaling = g.get(a + ".rope.scaling.type")
        if scaling not in (None, "none", "linear"):
            raise NotImplementedError("rope scaling %r not supported" % scaling)
        factor = float(g.get(a + ".rope.scaling.factor", g.get(a + ".rope.scale_linear", 0.0)) or 0.0)
        self.rope_scale = 1.0 / factor if factor else 1.0
        # llama.cpp's llama builder takes rope_freqs; the other archs have none.
        self.freq_factors = (g.tensor("rope_freqs.weight").reshape(-1)
                             if a == "llama" and g.has("rope_freqs.weight") else None)
        # gemma3 specifics (see the module docstring)
        self.window = int(g.get(a + ".attention.sliding_window", 0)) if a == "gemma3" else 0
        self.softcap = float(g.get(a + ".final_logit_softcapping", 0.0) or 0.0) if a == "gemma3" else 0.0
        qpas = self.head_dim
        if a == "gemma3" and self.n_layers == 62:
            qpas = self.dim // self.n_heads
        self.attn_scale = 1.0 / np.sqrt(qpas)
        self.embd_scale = np.sqrt(float(self.dim)) if a == "gemma3" else 1.0
        self.act = gelu_tanh if a == "gemma3" else silu

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

    def features(self):
        """The architecture features this model exercises, each a name that
        forward(ablate=...) can switch off: the self-checks prove that the
        comparison would notice an engine that missed one."""
        f = []
        if self.freq_factors is not None:
            f.append("rope_freqs")
        if self.rope_scale != 1.0:
            f.append("rope_scale")
        if self.n_rot < self.head_dim:
            f.append("partial_rotary")
        if self.arch == "qwen2":
            f.append("biases")
        if self.arch in ("qwen3", "gemma3"):
            f.append("qk_norm")
        if self.arch == "gemma3":
            f += ["embd_scale", "post_norms", "gelu"]
            if self.window > 0:
                f += ["window", "local_rope"]
        if self.arch == "phi3":
            f.append("gate_up_order")
        return f

    def is_local(self, i):
        """gemma3: layer i is a sliding-window (local) layer."""
        return self.window > 0 and (i + 1) % GEMMA3_SWA_PERIOD != 0

    def layer_rope(self, i, ablate=()):
        """(base, scale, freq_factors) of layer i's rotary embedding."""
        if self.is_local(i) and "local_rope" not in ablate:
            return GEMMA3_LOCAL_ROPE_BASE, 1.0, None
        return (self.rope_base, 1.0 if "rope_scale" in ablate else self.rope_scale,
                None if "rope_freqs" in ablate else self.freq_factors)

    def _lin(self, x, w, name):
        """x @ W.T for the weight tensor `name` (already dequantized in w)."""
        if self.act_quant is not None:
            x = self.act_quant(x, self.g.tensors[name].type)
        return x @ w.T

    def _expect(self):
        """{tensor suffix: shape} of one layer for this arch."""
        D, H, Hkv, hd, F, a = self.dim, self.n_heads, self.n_kv_heads, self.head_dim, self.ffn, self.arch
        e = {"attn_norm.weight": (D,), "ffn_norm.weight": (D,),
             "attn_output.weight": (D, H * hd), "ffn_down.weight": (D, F)}
        if a == "phi3":
            e.update({"attn_qkv.weight": (H * hd + 2 * Hkv * hd, D), "ffn_up.weight": (2 * F, D)})
        else:
            e.update({"attn_q.weight": (H * hd, D), "attn_k.weight": (Hkv * hd, D),
                      "attn_v.weight": (Hkv * hd, D), "ffn_gate.weight": (F, D), "ffn_up.weight": (F, D)})
        if a == "qwen2":
            e.update({"attn_q.bias": (H * hd,), "attn_k.bias": (Hkv * hd,), "attn_v.bias": (Hkv * hd,)})
        if a in ("qwen3", "gemma3"):
            e.update({"attn_q_norm.weight": (hd,), "attn_k_norm.weight": (hd,)})
        if a == "gemma3":
            e.update({"post_attention_norm.weight": (D,), "post_ffw_norm.weight": (D,)})
        return e

    def _check_shapes(self):
        for i in range(self.n_layers):
            for suffix, shape in self._expect().items():
                name = "blk.%d.%s" % (i, suffix)
                if not self.g.has(name):
                    raise KeyError("missing tensor " + name)
                got = self.g.tensors[name].shape
                if tuple(got) != shape:
                    raise ValueError("%s: shape %s, expected %s" % (name, got, shape))
        if self.out_w.shape != (self.vocab, self.dim) or self.out_norm.shape != (self.dim,):
            raise ValueError("output tensors have unexpected shapes")
        if self.freq_factors is not None and self.freq_factors.shape != (self.n_rot // 2,):
            raise ValueError("rope_freqs.weight has %s elements, expected %d"
                             % (self.freq_factors.shape, self.n_rot // 2))

    def layer_weights(self, i):
        """Layer i's weights by role; fused phi3 tensors split into their roles.
        w["names"][role] is the GGUF tensor each matrix came from."""
        g, a = self.g, self.arch
        H, Hkv, hd, F = self.n_heads, self.n_kv_heads, self.head_dim, self.ffn
        t = lambda suffix: g.tensor("blk.%d.%s" % (i, suffix))  # noqa: E731
        w = {"names": {}}
        roles = ["attn_norm", "attn_output", "ffn_norm", "ffn_down"]
        if a == "phi3":
            qkv = t("attn_qkv.weight")
            w["attn_q"], w["attn_k"], w["attn_v"] = np.split(qkv, [H * hd, H * hd + Hkv * hd], axis=0)
            up = t("ffn_up.weight")
            w["ffn_gate"], w["ffn_up"] = up[:F], up[F:]
            for r in ("attn_q", "attn_k", "attn_v"):
                w["names"][r] = "blk.%d.attn_qkv.weight" % i
            for r in ("ffn_gate", "ffn_up"):
                w["names"][r] = "blk.%d.ffn_up.weight" % i
        else:
            roles += ["attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"]
        for r in roles:
            w[r] = t(r + ".weight")
            w["names"][r] = "blk.%d.%s.weight" % (i, r)
        for r in ("attn_q", "attn_k", "attn_v"):
            name = "blk.%d.%s.bias" % (i, r)
            w[r + "_b"] = g.tensor(name) if a in ("llama", "qwen2") and g.has(name) else None
        for r in ("attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"):
            name = "blk.%d.%s.weight" % (i, r)
            w[r] = g.tensor(name) if name.split(".", 2)[2] in self._expect() else None
        return w

    def forward(self, tokens, rope_mode=None, ablate=()):
        """Logits (T, V) for every position of `tokens` (positions 0..T-1).

        rope_mode overrides the architecture's rotary pairing ("normal"/"neox")
        and ablate switches off features() by name; both only for the
        self-checks that prove a wrong convention or a missed feature is
        detected.
        """
        mode = rope_mode or self.rope_mode
        win = 0 if "window" in ablate else self.window
        n_rot = self.head_dim if "partial_rotary" in ablate else self.n_rot
        act = silu if "gelu" in ablate else self.act
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= self.vocab:
            raise ValueError("token id out of range [0, %d)" % self.vocab)
        T = tokens.size
        H, Hkv, hd, eps = self.n_heads, self.n_kv_heads, self.head_dim, self.eps
        pos = np.arange(T)

        x = self.tok_embd[tokens] * (1.0 if "embd_scale" in ablate else self.embd_scale)  # (T, D)
        for i in range(self.n_layers):
            w = self.layer_weights(i)
            if "biases" in ablate:
                w["attn_q_b"] = w["attn_k_b"] = w["attn_v_b"] = None
            if "qk_norm" in ablate:
                w["attn_q_norm"] = w["attn_k_norm"] = None
            if "post_norms" in ablate:
                w["post_attention_norm"] = w["post_ffw_norm"] = None
            if "gate_up_order" in ablate:
                w["ffn_gate"], w["ffn_up"] = w["ffn_up"], w["ffn_gate"]
            lin = lambda a, role: self._lin(a, w[role], w["names"][role])  # noqa: E731
            base, scale, factors = self.layer_rope(i, ablate)
            # --- attention block
            h = rmsnorm(x, w["attn_norm"], eps)
            q = lin(h, "attn_q")
            k = lin(h, "attn_k")
            v = lin(h, "attn_v")
            if w["attn_q_b"] is not None:
                q = q + w["attn_q_b"]
            if w["attn_k_b"] is not None:
                k = k + w["attn_k_b"]
            if w["attn_v_b"] is not None:
                v = v + w["attn_v_b"]
            q, k, v = q.reshape(T, H, hd), k.reshape(T, Hkv, hd), v.reshape(T, Hkv, hd)
            if w["attn_q_norm"] is not None:                       # per head, over hd
                q = rmsnorm(q, w["attn_q_norm"], eps)
                k = rmsnorm(k, w["attn_k_norm"], eps)
            q = apply_rope(q, pos, n_rot, base, mode, factors, scale)
            k = apply_rope(k, pos, n_rot, base, mode, factors, scale)
            if self.kv_f16:
                k = k.astype(np.float32).astype(np.float16).astype(np.float64)
                v = v.astype(np.float32).astype(np.float16).astype(np.float64)
            o = causal_attention(q, k, v, H, Hkv, self.attn_scale,
                                 win if self.is_local(i) else 0)   # (T, H*hd)
            a_out = lin(o, "attn_output")
            if w["post_attention_norm"] is not None:
                a_out = rmsnorm(a_out, w["post_attention_norm"], eps)
            x = x + a_out
            # --- gated feed-forward block
            h = rmsnorm(x, w["ffn_norm"], eps)
            f = lin(act(lin(h, "ffn_gate")) * lin(h, "ffn_up"), "ffn_down")
            if w["post_ffw_norm"] is not None:
                f = rmsnorm(f, w["post_ffw_norm"], eps)
            x = x + f

        out_name = "output.weight" if self.g.has("output.weight") else "token_embd.weight"
        logits = self._lin(rmsnorm(x, self.out_norm, eps), self.out_w, out_name)  # (T, V)
        if self.softcap > 0:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits


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
