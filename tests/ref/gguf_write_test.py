"""Self-tests of the NumPy reference (gguf_read.py, llama_ref.py).

Contains a small independent GGUF v3 *writer* used only here, then checks:
  1. metadata of every value type (0..12, arrays, strings) round-trips;
  2. F32 / F16 / BF16 / Q8_0 tensors round-trip (Q8_0: value = f16(d) * q);
     non-default general.alignment is honoured;
  3. RoPE property: q(p).k(s) after rotation depends only on s - p
     (both pairings, head_dim 2 and 16), and rotation preserves norms;
  4. the HF->GGUF Wq/Wk row permutation turns "neox" rope into "normal" rope:
     an arch-llama file with permuted weights == an arch-qwen2 file without;
  5. GQA mapping: H=8/Hkv=2 equals H=8/Hkv=8 with kv weights repeated so that
     query head j reads kv head j // 4;
  6. causality: logits of a prefix equal the first rows of the full sequence;
  7. the vectorised full-sequence forward equals a slow, loop-based
     token-by-token forward with a KV cache written separately below;
  8. tied output (no output.weight) uses token_embd;
  9. compare.py passes on a faithful fake engine (the reference itself, rows
     rounded to float32) and fails on a perturbed row, a missing token, a
     different greedy token and rows shifted by one.

Run: /usr/bin/python3 tests/ref/gguf_write_test.py   (exit 0 = all pass)
"""

import math
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read as gr  # noqa: E402
import quants as qz  # noqa: E402
from llama_ref import LlamaRef, apply_rope, rmsnorm  # noqa: E402


# -------------------------------------------------------------------- writer

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _scalar(vtype, v):
    return struct.pack(gr._SCALAR_FMT[vtype], v)


def _value(vtype, v):
    if vtype == gr.T_STRING:
        return _str(v)
    if vtype == gr.T_ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(_value(etype, e) for e in items)
    return _scalar(vtype, v)


def quantize_q8_0(x):
    """Q8_0 bytes for float array x (last dim multiple of 32): d = amax/127, q = round(x/d)."""
    blocks = np.asarray(x, dtype=np.float64).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.clip(np.rint(blocks * inv), -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes(), (d.astype(np.float16).astype(np.float64) * q).reshape(np.shape(x))


class RawTensor:
    """A tensor given as already-encoded bytes (e.g. quants.random_blocks)
    with its shape and the values a correct reader must return."""

    def __init__(self, data, shape, values):
        self.data = bytes(data)
        self.shape = tuple(shape)
        self.values = np.asarray(values, dtype=np.float64).reshape(self.shape)
        self.ndim = len(self.shape)


def encode_tensor(x, ttype):
    """(bytes, the float64 values a correct reader must return)."""
    if isinstance(x, RawTensor):
        return x.data, x.values
    x = np.asarray(x, dtype=np.float64)
    if ttype == gr.GGML_F32:
        v = x.astype("<f4")
        return v.tobytes(), v.astype(np.float64)
    if ttype == gr.GGML_F16:
        v = x.astype("<f2")
        return v.tobytes(), v.astype(np.float64)
    if ttype == gr.GGML_BF16:
        # Round-to-nearest-even from f32 to the top 16 bits.
        u = x.astype("<f4").view("<u4").astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        back = (u.astype(np.uint32) << 16).view("<f4").astype(np.float64)
        return u.tobytes(), back
    if ttype == gr.GGML_Q8_0:
        return quantize_q8_0(x)
    raise ValueError(ttype)


def write_gguf(path, metadata, tensors, alignment=32):
    """metadata: list of (key, vtype, value); tensors: list of (name, array, ttype).

    Returns {name: expected float64 array after a read}."""
    kv = b""
    for key, vtype, value in metadata:
        kv += _str(key) + struct.pack("<I", vtype) + _value(vtype, value)
    infos, blobs, expected, off = b"", [], {}, 0
    for name, arr, ttype in tensors:
        if not isinstance(arr, RawTensor):
            arr = np.asarray(arr)
        data, exp = encode_tensor(arr, ttype)
        expected[name] = exp.reshape(arr.shape)
        ne = list(reversed(arr.shape))
        infos += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", ttype, off)
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)) + kv + infos
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"".join(blobs))
    return expected


# -------------------------------------------------------------- model writer

def random_model(rng, arch="llama", dim=32, layers=2, heads=4, kv_heads=2, ffn=96, vocab=64,
                 ttype=gr.GGML_F32, tied=False, bias=None, base=10000.0):
    hd = dim // heads
    w = {"token_embd.weight": rng.standard_normal((vocab, dim)) * 0.5,
         "output_norm.weight": 1.0 + 0.1 * rng.standard_normal(dim)}
    if not tied:
        w["output.weight"] = rng.standard_normal((vocab, dim)) / math.sqrt(dim)
    for i in range(layers):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(dim)
        w[p + "ffn_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(dim)
        w[p + "attn_q.weight"] = rng.standard_normal((heads * hd, dim)) / math.sqrt(dim) * 2
        w[p + "attn_k.weight"] = rng.standard_normal((kv_heads * hd, dim)) / math.sqrt(dim) * 2
        w[p + "attn_v.weight"] = rng.standard_normal((kv_heads * hd, dim)) / math.sqrt(dim)
        w[p + "attn_output.weight"] = rng.standard_normal((dim, heads * hd)) / math.sqrt(dim)
        w[p + "ffn_gate.weight"] = rng.standard_normal((ffn, dim)) / math.sqrt(dim)
        w[p + "ffn_up.weight"] = rng.standard_normal((ffn, dim)) / math.sqrt(dim)
        w[p + "ffn_down.weight"] = rng.standard_normal((dim, ffn)) / math.sqrt(ffn)
        if bias if bias is not None else arch == "qwen2":
            w[p + "attn_q.bias"] = 0.3 * rng.standard_normal(heads * hd)
            w[p + "attn_k.bias"] = 0.3 * rng.standard_normal(kv_heads * hd)
            w[p + "attn_v.bias"] = 0.3 * rng.standard_normal(kv_heads * hd)
    meta = dict(arch=arch, dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, ffn=ffn,
                vocab=vocab, base=base)
    return meta, w


def save_model(path, meta, w, ttype=gr.GGML_F32):
    a = meta["arch"]
    md = [("general.architecture", gr.T_STRING, a),
          ("general.alignment", gr.T_UINT32, 32),
          (a + ".context_length", gr.T_UINT32, 256),
          (a + ".embedding_length", gr.T_UINT32, meta["dim"]),
          (a + ".block_count", gr.T_UINT32, meta["layers"]),
          (a + ".feed_forward_length", gr.T_UINT32, meta["ffn"]),
          (a + ".attention.head_count", gr.T_UINT32, meta["heads"]),
          (a + ".attention.head_count_kv", gr.T_UINT32, meta["kv_heads"]),
          (a + ".rope.freq_base", gr.T_FLOAT32, meta["base"]),
          (a + ".attention.layer_norm_rms_epsilon", gr.T_FLOAT32, 1e-5),
          ("tokenizer.ggml.tokens", gr.T_ARRAY, (gr.T_STRING, ["t%d" % i for i in range(meta["vocab"])]))]
    tensors = []
    for name, arr in w.items():
        # 1-D norms and biases stay F32 (as converters do); matrices take ttype.
        tensors.append((name, arr, ttype if arr.ndim == 2 else gr.GGML_F32))
    return write_gguf(path, md, tensors)


# ----------------------------------------------- slow loop-based decode path

def slow_decode_forward(path, tokens):
    """Token-by-token forward with a KV cache, scalar RoPE and explicit loops.

    Deliberately shares no attention / RoPE code with llama_ref.forward."""
    m = LlamaRef(path)
    H, Hkv, hd, eps = m.n_heads, m.n_kv_heads, m.head_dim, m.eps
    W = [m.layer_weights(i) for i in range(m.n_layers)]
    cache_k = [[] for _ in range(m.n_layers)]
    cache_v = [[] for _ in range(m.n_layers)]
    out = []

    def rot(vec, p):
        vec = vec.copy()
        for i in range(m.n_rot // 2):
            th = p * m.rope_base ** (-2.0 * i / m.n_rot)
            c, s = math.cos(th), math.sin(th)
            if m.rope_mode == "normal":
                ia, ib = 2 * i, 2 * i + 1
            else:
                ia, ib = i, i + m.n_rot // 2
            a, b = vec[ia], vec[ib]
            vec[ia], vec[ib] = a * c - b * s, a * s + b * c
        return vec

    for p, tok in enumerate(tokens):
        x = m.tok_embd[tok].copy()
        for li, w in enumerate(W):
            h = x / math.sqrt(float(np.dot(x, x)) / x.size + eps) * w["attn_norm"]
            q = w["attn_q"] @ h + (w["attn_q_b"] if w["attn_q_b"] is not None else 0)
            k = w["attn_k"] @ h + (w["attn_k_b"] if w["attn_k_b"] is not None else 0)
            v = w["attn_v"] @ h + (w["attn_v_b"] if w["attn_v_b"] is not None else 0)
            cache_k[li].append([rot(k[g * hd:(g + 1) * hd], p) for g in range(Hkv)])
            cache_v[li].append([v[g * hd:(g + 1) * hd] for g in range(Hkv)])
            o = np.zeros(H * hd)
            for j in range(H):
                g = j // (H // Hkv)
                qj = rot(q[j * hd:(j + 1) * hd], p)
                sc = [float(np.dot(qj, cache_k[li][s][g])) / math.sqrt(hd) for s in range(p + 1)]
                mx = max(sc)
                e = [math.exp(z - mx) for z in sc]
                tot = sum(e)
                for s in range(p + 1):
                    o[j * hd:(j + 1) * hd] += e[s] / tot * cache_v[li][s][g]
            x = x + w["attn_output"] @ o
            h = x / math.sqrt(float(np.dot(x, x)) / x.size + eps) * w["ffn_norm"]
            gte = w["ffn_gate"] @ h
            x = x + w["ffn_down"] @ (gte / (1 + np.exp(-gte)) * (w["ffn_up"] @ h))
        out.append(m.out_w @ (x / math.sqrt(float(np.dot(x, x)) / x.size + eps) * m.out_norm))
    return np.array(out)


# --------------------------------------------------------------------- tests

def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def test_metadata_roundtrip(tmp):
    md = [("u8", gr.T_UINT8, 200), ("i8", gr.T_INT8, -100), ("u16", gr.T_UINT16, 60000),
          ("i16", gr.T_INT16, -30000), ("u32", gr.T_UINT32, 4000000000), ("i32", gr.T_INT32, -2000000000),
          ("f32", gr.T_FLOAT32, 1.5), ("bool", gr.T_BOOL, True), ("str", gr.T_STRING, "héllo ✓"),
          ("u64", gr.T_UINT64, 2 ** 63 + 5), ("i64", gr.T_INT64, -(2 ** 62)), ("f64", gr.T_FLOAT64, math.pi),
          ("arr_i32", gr.T_ARRAY, (gr.T_INT32, [1, -2, 3])),
          ("arr_str", gr.T_ARRAY, (gr.T_STRING, ["a", "", "ccc"])),
          ("arr_f32", gr.T_ARRAY, (gr.T_FLOAT32, [0.25, -1.0])),
          ("arr_bool", gr.T_ARRAY, (gr.T_BOOL, [True, False])),
          ("arr_arr", gr.T_ARRAY, (gr.T_ARRAY, [(gr.T_UINT8, [1, 2]), (gr.T_STRING, ["x"])])),
          ("empty", gr.T_ARRAY, (gr.T_UINT64, []))]
    path = os.path.join(tmp, "meta.gguf")
    write_gguf(path, md, [])
    g = gr.GGUFFile(path)
    want = {"u8": 200, "i8": -100, "u16": 60000, "i16": -30000, "u32": 4000000000,
            "i32": -2000000000, "f32": 1.5, "bool": True, "str": "héllo ✓", "u64": 2 ** 63 + 5,
            "i64": -(2 ** 62), "f64": math.pi, "arr_i32": [1, -2, 3], "arr_str": ["a", "", "ccc"],
            "arr_f32": [0.25, -1.0], "arr_bool": [True, False], "arr_arr": [[1, 2], ["x"]], "empty": []}
    assert g.metadata == want, g.metadata
    assert g.version == 3 and g.tensors == {}


def test_tensor_roundtrip(tmp):
    rng = np.random.default_rng(1)
    for align in (32, 64):
        tensors = [("a", rng.standard_normal((3, 64)), gr.GGML_F32),
                   ("b", rng.standard_normal((5, 32)), gr.GGML_F16),
                   ("c", rng.standard_normal((2, 96)) * 3, gr.GGML_Q8_0),
                   ("d", rng.standard_normal((7, 6)), gr.GGML_BF16),
                   ("e", rng.standard_normal(13), gr.GGML_F32),
                   ("f", rng.standard_normal((2, 3, 32)), gr.GGML_Q8_0),
                   ("z", np.zeros((1, 32)), gr.GGML_Q8_0)]
        md = [("general.alignment", gr.T_UINT32, align)] if align != 32 else []
        path = os.path.join(tmp, "t%d.gguf" % align)
        exp = write_gguf(path, md, tensors, alignment=align)
        g = gr.GGUFFile(path)
        assert g.data_offset % align == 0
        for name, arr, ttype in tensors:
            got = g.tensor(name)
            assert got.shape == arr.shape and got.dtype == np.float64, (name, got.shape)
            assert np.array_equal(got, exp[name]), name
            assert g.tensors[name].ne == list(reversed(arr.shape))
        # sanity of the encodings themselves
        assert rel(g.tensor("c"), tensors[2][1]) < 1e-2
        assert rel(g.tensor("d"), tensors[3][1]) < 1e-2
    # Hand-made Q8_0 block: d = 0.5, q = -3..28 -> values -1.5 .. 14
    blk = np.float16(0.5).tobytes() + np.arange(-3, 29, dtype=np.int8).tobytes()
    path = os.path.join(tmp, "hand.gguf")
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _str("q") + struct.pack("<IQIQ", 1, 32, 8, 0)
    head += b"\0" * ((-len(head)) % 32)
    with open(path, "wb") as f:
        f.write(head + blk)
    assert np.array_equal(gr.GGUFFile(path).tensor("q"), 0.5 * np.arange(-3, 29))


def test_rope_relative(tmp):
    rng = np.random.default_rng(2)
    for hd in (2, 16):
        for mode in ("normal", "neox"):
            q = rng.standard_normal((1, 1, hd))
            k = rng.standard_normal((1, 1, hd))
            for base in (10000.0, 1e6):
                def score(p, s):
                    qr = apply_rope(q, [p], hd, base, mode)
                    kr = apply_rope(k, [s], hd, base, mode)
                    return float(np.sum(qr * kr))
                for (p, s) in ((3, 1), (40, 7), (0, 0), (5, 9)):
                    for shift in (1, 17, 1000):
                        a, b = score(p, s), score(p + shift, s + shift)
                        assert abs(a - b) < 1e-9 * (1 + abs(a)), (hd, mode, p, s, shift, a, b)
                # rotation preserves the norm, is identity at p = 0, and moves things otherwise
                r = apply_rope(q, [123], hd, base, mode)
                assert abs(np.linalg.norm(r) - np.linalg.norm(q)) < 1e-12
                assert np.allclose(apply_rope(q, [0], hd, base, mode), q)
                assert not np.allclose(r, q)
    # head_dim 2, p = 1, base irrelevant for i = 0: rotation by exactly 1 radian
    v = np.array([[[1.0, 0.0]]])
    assert np.allclose(apply_rope(v, [1], 2, 10000.0, "normal"), [[[math.cos(1), math.sin(1)]]])
    # explicit frequencies: normal pair i=1 in hd=4 rotates by p * base^(-1/2)
    v = np.array([[[0.0, 0.0, 1.0, 0.0]]])
    th = 2 * 100.0 ** -0.5
    assert np.allclose(apply_rope(v, [2], 4, 100.0, "normal"), [[[0, 0, math.cos(th), math.sin(th)]]])
    # neox pairs element 1 with element 3
    v = np.array([[[0.0, 1.0, 0.0, 0.0]]])
    assert np.allclose(apply_rope(v, [2], 4, 100.0, "neox"), [[[0, math.cos(th), 0, math.sin(th)]]])


def hf_to_gguf_permute(w, n_head):
    """llama.cpp's convert permute: within each head, row i (first half) -> 2i, row i+hd/2 -> 2i+1."""
    out_dim = w.shape[0]
    hd = out_dim // n_head
    return (w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def test_permute_equivalence(tmp):
    rng = np.random.default_rng(3)
    meta, w = random_model(rng, arch="qwen2", dim=32, heads=4, kv_heads=2, bias=True)
    p_neox = os.path.join(tmp, "neox.gguf")
    save_model(p_neox, meta, w)
    w2 = dict(w)
    for i in range(meta["layers"]):
        for t, nh in (("attn_q", meta["heads"]), ("attn_k", meta["kv_heads"])):
            for s in (".weight", ".bias"):
                w2["blk.%d.%s%s" % (i, t, s)] = hf_to_gguf_permute(w["blk.%d.%s%s" % (i, t, s)], nh)
    meta2 = dict(meta, arch="llama")
    p_norm = os.path.join(tmp, "normal.gguf")
    save_model(p_norm, meta2, w2)
    toks = rng.integers(0, meta["vocab"], 20)
    a = LlamaRef(p_neox).forward(toks)
    b = LlamaRef(p_norm).forward(toks)
    assert rel(b, a) < 1e-12, rel(b, a)
    # ... and the wrong convention really differs (the self-check in compare.py relies on this)
    c = LlamaRef(p_norm).forward(toks, rope_mode="neox")
    assert rel(c, a) > 1e-2, rel(c, a)


def test_gqa_equivalence(tmp):
    rng = np.random.default_rng(4)
    meta, w = random_model(rng, dim=64, heads=8, kv_heads=2)
    pa = os.path.join(tmp, "gqa.gguf")
    save_model(pa, meta, w)
    hd, grp = 8, 4
    w2 = dict(w)
    for i in range(meta["layers"]):
        for t in ("attn_k", "attn_v"):
            kv = w["blk.%d.%s.weight" % (i, t)].reshape(2, hd, -1)
            w2["blk.%d.%s.weight" % (i, t)] = np.repeat(kv, grp, axis=0).reshape(8 * hd, -1)
    pb = os.path.join(tmp, "mha.gguf")
    save_model(pb, dict(meta, kv_heads=8), w2)
    toks = rng.integers(0, meta["vocab"], 12)
    a, b = LlamaRef(pa).forward(toks), LlamaRef(pb).forward(toks)
    assert rel(a, b) < 1e-12, rel(a, b)
    # the other plausible mapping (j % Hkv) gives a different answer
    w3 = dict(w)
    for i in range(meta["layers"]):
        for t in ("attn_k", "attn_v"):
            kv = w["blk.%d.%s.weight" % (i, t)].reshape(2, hd, -1)
            w3["blk.%d.%s.weight" % (i, t)] = np.tile(kv, (grp, 1, 1)).reshape(8 * hd, -1)
    pc = os.path.join(tmp, "mha_tile.gguf")
    save_model(pc, dict(meta, kv_heads=8), w3)
    assert rel(LlamaRef(pc).forward(toks), a) > 1e-3


def test_causal_and_slow(tmp):
    rng = np.random.default_rng(5)
    for arch, ttype, tied in (("llama", gr.GGML_F32, False), ("qwen2", gr.GGML_Q8_0, True),
                              ("llama", gr.GGML_F16, True), ("llama", gr.GGML_BF16, False)):
        meta, w = random_model(rng, arch=arch, dim=64, heads=8, kv_heads=2, tied=tied)
        path = os.path.join(tmp, "m_%s_%d.gguf" % (arch, ttype))
        exp = save_model(path, meta, w, ttype)
        m = LlamaRef(path)
        if tied:
            assert "output.weight" not in m.g.tensors and np.array_equal(m.out_w, exp["token_embd.weight"])
        toks = rng.integers(0, meta["vocab"], 16)
        full = m.forward(toks)
        assert full.shape == (16, meta["vocab"])
        for n in (1, 5, 11):
            assert rel(m.forward(toks[:n]), full[:n]) < 1e-12
        slow = slow_decode_forward(path, toks)
        assert rel(full, slow) < 1e-11, (arch, ttype, rel(full, slow))


def test_compare_fake_engine(tmp):
    """compare.py passes on a faithful fake engine and fails on perturbed ones."""
    import contextlib
    import io
    import compare
    rng = np.random.default_rng(6)
    meta, w = random_model(rng, dim=64, heads=8, kv_heads=2, vocab=128)
    path = os.path.join(tmp, "cmp.gguf")
    save_model(path, meta, w)
    m = LlamaRef(path)
    prompt, n = [1, 17, 99, 5, 42, 7], 10
    toks = list(prompt)
    for _ in range(n):                       # greedy generation with the reference itself
        toks.append(int(np.argmax(m.forward(toks)[-1])))
    gen = toks[len(prompt):]
    rows = m.forward(toks[:-1])              # P + G - 1 rows

    def run(rows, gen, typ="f32"):
        ids = os.path.join(tmp, "ids.txt")
        lg = os.path.join(tmp, "lg.bin")
        with open(ids, "w") as f:
            f.write(" ".join(map(str, prompt)) + "\n" + " ".join(map(str, gen)) + "\n")
        rows.astype("<f4").tofile(lg)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            # the fake engine is the unrounded reference: an f32 cache
            rc = compare.main(["--model", path, "--ids", ids, "--logits", lg, "--type", typ, "--n", str(n),
                               "--kv-cache-dtype", "f32"])
        return rc, out.getvalue()

    rc, out = run(rows, gen)
    assert rc == 0, out
    bad = rows.copy()
    bad[len(prompt) + 3] += 1e-3 * np.abs(rows).max() * rng.standard_normal(rows.shape[1])
    rc, out = run(bad, gen)
    assert rc == 1 and "exceed rel err" in out, out
    rc, out = run(rows, gen[:-1])            # wrong row count / token count
    assert rc == 1, out
    swapped = list(gen)
    swapped[4] = int(np.argsort(rows[len(prompt) - 1 + 4])[-2])
    rc, out = run(rows, swapped)             # a different greedy token
    assert rc == 1 and "greedy step 4" in out, out
    rc, out = run(np.roll(rows, 1, axis=0), gen)
    assert rc == 1, out


# ------------------------------------------------- quants.py self-tests

F32 = np.float32


def _kv(i):
    return F32(int(qz.KVALUES_IQ4NL[i]))


def _h(b, off):
    return F32(np.frombuffer(bytes(b[off:off + 2]), dtype="<f2")[0])


def literal_dequant(blk, t):
    """One block, transcribed loop by loop from ggml's dequantize_row_* with
    float32 scalars (every operation rounds to float32, as in C)."""
    b = bytes(blk)
    y = []
    if t in (qz.Q4_0, qz.Q4_1, qz.Q5_0, qz.Q5_1, qz.IQ4_NL):
        d = _h(b, 0)
        m = _h(b, 2) if t in (qz.Q4_1, qz.Q5_1) else None
        qh = struct.unpack("<I", b[4:8] if t == qz.Q5_1 else b[2:6])[0] if t in (qz.Q5_0, qz.Q5_1) else 0
        qs = b[{qz.Q4_0: 2, qz.Q4_1: 4, qz.Q5_0: 6, qz.Q5_1: 8, qz.IQ4_NL: 2}[t]:][:16]
        y = [None] * 32
        for j in range(16):
            x0, x1 = qs[j] & 0x0F, qs[j] >> 4
            if t in (qz.Q5_0, qz.Q5_1):
                x0 |= ((qh >> j) << 4) & 0x10
                x1 |= (qh >> (j + 12)) & 0x10
            if t == qz.Q4_0:
                y[j], y[j + 16] = F32(x0 - 8) * d, F32(x1 - 8) * d
            elif t == qz.Q5_0:
                y[j], y[j + 16] = F32(x0 - 16) * d, F32(x1 - 16) * d
            elif t == qz.IQ4_NL:
                y[j], y[j + 16] = d * _kv(x0), d * _kv(x1)
            else:
                y[j], y[j + 16] = F32(x0) * d + m, F32(x1) * d + m
        return y
    if t == qz.Q8_0:
        d = _h(b, 0)
        return [F32(v) * d for v in np.frombuffer(b[2:34], dtype=np.int8)]
    if t == qz.Q2_K:
        sc, q = b[0:16], b[16:80]
        d, mn = _h(b, 80), _h(b, 82)
        isc, qo = 0, 0
        for n in range(0, 256, 128):
            shift = 0
            for j in range(4):
                for half in (0, 16):
                    s = sc[isc]
                    isc += 1
                    dl, ml = d * F32(s & 0xF), mn * F32(s >> 4)
                    for l in range(16):
                        y.append(dl * F32((q[qo + l + half] >> shift) & 3) - ml)
                shift += 2
            qo += 32
        return y
    if t == qz.Q3_K:
        hm, q, scb = b[0:32], b[32:96], b[96:108]
        d_all = _h(b, 108)
        aux = list(struct.unpack("<3I", scb)) + [0]
        k1, k2 = 0x03030303, 0x0F0F0F0F
        tmp = aux[2]
        aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4)
        aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)
        aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4)
        aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4)
        scales = np.frombuffer(struct.pack("<4I", *aux), dtype=np.int8)
        isc, qo, m = 0, 0, 1
        for n in range(0, 256, 128):
            shift = 0
            for j in range(4):
                for half in (0, 16):
                    dl = d_all * F32(int(scales[isc]) - 32)
                    isc += 1
                    for l in range(16):
                        v = ((q[qo + l + half] >> shift) & 3) - (0 if hm[l + half] & m else 4)
                        y.append(dl * F32(v))
                shift += 2
                m <<= 1
            qo += 32
        return y
    if t in (qz.Q4_K, qz.Q5_K):
        d, mn = _h(b, 0), _h(b, 2)
        scb = b[4:16]
        qh = b[16:48] if t == qz.Q5_K else None
        ql = b[48:176] if t == qz.Q5_K else b[16:144]

        def gsm(j):
            if j < 4:
                return scb[j] & 63, scb[j + 4] & 63
            return (scb[j + 4] & 0xF) | ((scb[j - 4] >> 6) << 4), (scb[j + 4] >> 4) | ((scb[j] >> 6) << 4)
        isc, qo, u1, u2 = 0, 0, 1, 2
        for j in range(0, 256, 64):
            sc, m = gsm(isc)
            d1, m1 = d * F32(sc), mn * F32(m)
            sc, m = gsm(isc + 1)
            d2, m2 = d * F32(sc), mn * F32(m)
            for l in range(32):
                v = (ql[qo + l] & 0xF) + ((16 if qh[l] & u1 else 0) if qh else 0)
                y.append(d1 * F32(v) - m1)
            for l in range(32):
                v = (ql[qo + l] >> 4) + ((16 if qh[l] & u2 else 0) if qh else 0)
                y.append(d2 * F32(v) - m2)
            qo += 32
            isc += 2
            u1 <<= 2
            u2 <<= 2
        return y
    if t == qz.Q6_K:
        ql, qh = b[0:128], b[128:192]
        sc = np.frombuffer(b[192:208], dtype=np.int8)
        d = _h(b, 208)
        y = [None] * 256
        for n in range(0, 256, 128):
            lo, ho, so = n // 2, n // 4, n // 16
            for l in range(32):
                is_ = l // 16
                q1 = ((ql[lo + l] & 0xF) | (((qh[ho + l] >> 0) & 3) << 4)) - 32
                q2 = ((ql[lo + l + 32] & 0xF) | (((qh[ho + l] >> 2) & 3) << 4)) - 32
                q3 = ((ql[lo + l] >> 4) | (((qh[ho + l] >> 4) & 3) << 4)) - 32
                q4 = ((ql[lo + l + 32] >> 4) | (((qh[ho + l] >> 6) & 3) << 4)) - 32
                y[n + l] = d * F32(int(sc[so + is_ + 0])) * F32(q1)
                y[n + l + 32] = d * F32(int(sc[so + is_ + 2])) * F32(q2)
                y[n + l + 64] = d * F32(int(sc[so + is_ + 4])) * F32(q3)
                y[n + l + 96] = d * F32(int(sc[so + is_ + 6])) * F32(q4)
        return y
    if t == qz.IQ4_XS:
        d = _h(b, 0)
        sh = struct.unpack("<H", b[2:4])[0]
        sl, qs = b[4:8], b[8:136]
        y = [None] * 256
        for ib in range(8):
            ls = ((sl[ib // 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4)
            dl = d * F32(ls - 32)
            for j in range(16):
                y[32 * ib + j] = dl * _kv(qs[16 * ib + j] & 0xF)
                y[32 * ib + j + 16] = dl * _kv(qs[16 * ib + j] >> 4)
        return y
    raise ValueError(t)


def _put_f16(b, off, v):
    b[off:off + 2] = np.float16(v).tobytes()


def hand_blocks():
    """(type, block bytes, {element: value}) worked out by hand from the
    layouts in quants.py's docstring; every other byte is zero."""
    out = []
    # Q4_0: d 0.5, qs[j] = j | (15 - j) << 4: y[j] = (j - 8) / 2, y[16 + j] = (7 - j) / 2
    b = bytearray(18)
    _put_f16(b, 0, 0.5)
    for j in range(16):
        b[2 + j] = j | ((15 - j) << 4)
    exp = {j: (j - 8) / 2 for j in range(16)}
    exp.update({16 + j: (7 - j) / 2 for j in range(16)})
    out.append((qz.Q4_0, b, exp))
    # Q4_1: d 0.25, m -1; qs[0] = 0x3A: y[0] = 10/4 - 1, y[16] = 3/4 - 1; others m
    b = bytearray(20)
    _put_f16(b, 0, 0.25)
    _put_f16(b, 2, -1.0)
    b[4] = 0x3A
    out.append((qz.Q4_1, b, {0: 1.5, 16: -0.25, 1: -1.0, 31: -1.0}))
    # Q5_0: d 1, qh bits 1 and 16 set, qs 0: y[1] = y[16] = 0, others -16
    b = bytearray(22)
    _put_f16(b, 0, 1.0)
    b[2:6] = struct.pack("<I", (1 << 1) | (1 << 16))
    out.append((qz.Q5_0, b, {0: -16.0, 1: 0.0, 16: 0.0, 17: -16.0}))
    # Q5_1: d 2, m 0.5, qh bit 31, qs[15] = 0xF0: y[31] = 31 * 2 + .5, y[15] = .5
    b = bytearray(24)
    _put_f16(b, 0, 2.0)
    _put_f16(b, 2, 0.5)
    b[4:8] = struct.pack("<I", 1 << 31)
    b[8 + 15] = 0xF0
    out.append((qz.Q5_1, b, {31: 62.5, 15: 0.5, 30: 0.5}))
    # Q8_0: d 0.125, q = -128 .. -97
    b = bytearray(34)
    _put_f16(b, 0, 0.125)
    b[2:34] = np.arange(-128, -96, dtype=np.int8).tobytes()
    out.append((qz.Q8_0, b, {j: (j - 128) / 8 for j in range(32)}))
    # Q2_K: d 1, dmin .5; scales[5] = 3 | 2 << 4 (sub-block 5 = elements 80..95);
    # qs[20] = 0b11100100: element 32 j + 20 has q = j; element 84 (j = 2) is
    # in sub-block 5: 3 * 2 - .5 * 2 = 5; element 20 is in sub-block 1 (0, 0): 0
    b = bytearray(84)
    b[5] = 3 | (2 << 4)
    b[16 + 20] = 0b11100100
    _put_f16(b, 80, 1.0)
    _put_f16(b, 82, 0.5)
    out.append((qz.Q2_K, b, {84: 5.0, 80: -1.0, 20: 0.0, 116: 0.0}))
    # Q3_K: d 1; scale 9 = 37 (low nibble 5 in the high nibble of scales[1],
    # high bits 2 at bits 4..5 of scales[9]): sub-block 9 = elements 144..159
    # = h 1, j 0, l 16..31. Element 150: qs[32 + 22] = 1, hmask[22] bit 4
    # set: (37 - 32) * 1 = 5. Element 151: qs[55] = 2, bit clear: 5 * -2.
    # Element 0: scale 0 -> -32, q 0 - 4: 128.
    b = bytearray(110)
    b[96 + 1] = 5 << 4
    b[96 + 9] = 2 << 4
    b[32 + 54] = 1
    b[32 + 55] = 2
    b[22] = 1 << 4
    _put_f16(b, 108, 1.0)
    out.append((qz.Q3_K, b, {150: 5.0, 151: -10.0, 0: 128.0}))
    # Q4_K: d 1, dmin .25; sub-block 5: sc 19 = 3 | 1 << 4 (scales[9] low
    # nibble, scales[1] bits 6..7), m 50 = 2 | 3 << 4 (scales[9] high nibble,
    # scales[5] bits 6..7). Element 165 = high nibble of qs[64 + 5] = 7:
    # 19 * 7 - .25 * 50 = 120.5; element 133 (sub-block 4: sc 0, m 0): 0.
    b = bytearray(144)
    _put_f16(b, 0, 1.0)
    _put_f16(b, 2, 0.25)
    b[4 + 9] = 0x23
    b[4 + 1] = 0x40
    b[4 + 5] = 0xC0
    b[16 + 69] = 0x70
    out.append((qz.Q4_K, b, {165: 120.5, 133: 0.0, 160: -12.5}))
    # Q5_K: the same plus qh[5] bit 5 (element 165 = 32 * 5 + 5): q = 23:
    # 19 * 23 - 12.5 = 424.5
    b = bytearray(176)
    _put_f16(b, 0, 1.0)
    _put_f16(b, 2, 0.25)
    b[4 + 9] = 0x23
    b[4 + 1] = 0x40
    b[4 + 5] = 0xC0
    b[16 + 5] = 1 << 5
    b[48 + 69] = 0x70
    out.append((qz.Q5_K, b, {165: 424.5, 133: 0.0, 160: -12.5}))
    # Q6_K: d .5, scales[13] = -3 (elements 208..223 = h 1, k 2, l 16..31).
    # Element 210: high nibble of ql[64 + 18] = 5, bits 4..5 of qh[32 + 18]
    # = 2: q = 37 - 32 = 5: .5 * -3 * 5 = -7.5. Element 146 (k 0): low
    # nibble of ql[82] = 0, bits 0..1 of qh[50] = 0: q = -32, scale 9 = 0: -0.
    b = bytearray(210)
    b[192 + 13] = 0xFD
    b[64 + 18] = 0x50
    b[128 + 50] = 2 << 4
    _put_f16(b, 208, 0.5)
    out.append((qz.Q6_K, b, {210: -7.5, 211: 0.5 * -3 * -32}))
    # IQ4_NL: d 2, qs[3] = 9: y[3] = 2 * 13, y[19] = 2 * -127
    b = bytearray(18)
    _put_f16(b, 0, 2.0)
    b[2 + 3] = 0x09
    out.append((qz.IQ4_NL, b, {3: 26.0, 19: -254.0, 0: -254.0}))
    # IQ4_XS: d .5; sub-block 5: ls = 39 (scales_l[2] high nibble 7,
    # scales_h bits 10..11 = 2): 7. qs[16 * 5 + 4] = 0xF0: element 164 (low
    # nibble 0) = .5 * 7 * -127, element 180 (high nibble 15) = .5 * 7 * 113.
    # Element 0: ls 0 -> -32: .5 * -32 * -127.
    b = bytearray(136)
    _put_f16(b, 0, 0.5)
    b[2:4] = struct.pack("<H", 2 << 10)
    b[4 + 2] = 0x70
    b[8 + 84] = 0xF0
    out.append((qz.IQ4_XS, b, {164: -444.5, 180: 395.5, 0: 2032.0}))
    return out


def test_quants(tmp):
    # block sizes as ggml defines them
    sizes = {2: 18, 3: 20, 6: 22, 7: 24, 8: 34, 10: 84, 11: 110, 12: 144, 13: 176, 14: 210, 20: 18, 23: 136}
    assert {t: qz.BLOCK[t][1] for t in qz.TYPES} == sizes
    assert sorted(qz.TYPES) == sorted(sizes)
    # hand-built blocks
    seen = set()
    for t, blk, exp in hand_blocks():
        assert len(blk) == qz.BLOCK[t][1], qz.NAMES[t]
        y = qz.dequantize(bytes(blk), t, qz.BLOCK[t][0])
        lit = literal_dequant(blk, t)
        for e, v in exp.items():
            assert y[e] == v and lit[e] == v, (qz.NAMES[t], e, v, y[e], lit[e])
        seen.add(t)
    assert seen == set(qz.TYPES)
    # random blocks: vectorized == literal, bit for bit (NaN-free: finite scales)
    rng = np.random.default_rng(9)
    for t in qz.TYPES:
        qk, size = qz.BLOCK[t]
        raw = qz.random_blocks(t, 3 * qk, rng)
        y = qz.dequantize(raw, t, 3 * qk)
        lit = np.array([v for i in range(3) for v in literal_dequant(raw[i * size:(i + 1) * size], t)],
                       dtype=np.float32)
        assert y.dtype == np.float32 and np.array_equal(y.view(np.uint32), lit.view(np.uint32)), qz.NAMES[t]
        # every nibble / sub-scale pattern reaches distinct values: not all equal
        assert len(np.unique(y)) > qk // 2, qz.NAMES[t]
    # Q8_0: quants.py equals the reader's own path
    x = rng.standard_normal((4, 96)) * 3
    data, exp = encode_tensor(x, gr.GGML_Q8_0)
    assert np.array_equal(qz.dequantize(data, qz.Q8_0, x.size).astype(np.float64).reshape(x.shape), exp)
    # every type round-trips through a GGUF file, shapes and all
    tensors, want = [], {}
    for t in qz.TYPES:
        qk = qz.BLOCK[t][0]
        shape = (3, 2 * max(qk, 32))
        raw = qz.random_blocks(t, shape[0] * shape[1], rng)
        vals = qz.dequantize(raw, t, shape[0] * shape[1]).reshape(shape)
        tensors.append(("t%d" % t, RawTensor(raw, shape, vals), t))
        want["t%d" % t] = vals
    path = os.path.join(tmp, "quants.gguf")
    write_gguf(path, [], tensors)
    g = gr.GGUFFile(path)
    for name, v in want.items():
        got = g.tensor(name)
        assert got.dtype == np.float64 and got.shape == v.shape and np.array_equal(got, v), name
    # random_weight_blocks gives centred values of the asked spread
    for t in qz.TYPES:
        raw, vals = qz.random_weight_blocks(t, (8, 512), rng, 0.05)
        assert abs(vals.std() / 0.05 - 1) < 0.05, (qz.NAMES[t], vals.std())
        assert abs(vals.mean()) < 0.01, (qz.NAMES[t], vals.mean())


def test_compare_quant(tmp):
    """On a Q4_K_M-like file: compare.py passes a fake engine that rounds its
    activations as cpu/quant.h says (act_quant_sim.py) at the q4_k tolerance
    and with --act-sim-tol 1e-3, and the act-sim check fails the exact
    reference's rows (which the loose tolerance alone would pass)."""
    import contextlib
    import io
    import compare
    import gguf_quant_write as gw
    from act_quant_sim import quantize_acts
    rng = np.random.default_rng(12)
    meta, w = random_model(rng, dim=32, heads=4, kv_heads=2, vocab=256)
    tok = os.path.join(tmp, "tok.gguf")
    save_model(tok, meta, w)
    path = os.path.join(tmp, "q4km.gguf")
    gw.write_model(path, tok, "q4_k_m", seed=5)
    m = LlamaRef(path)
    prompt, n = [1, 17, 99, 5, 42, 7], 8
    m.act_quant = quantize_acts
    toks = list(prompt)
    for _ in range(n):
        toks.append(int(np.argmax(m.forward(toks)[-1])))
    gen = toks[len(prompt):]
    sim_rows = m.forward(toks[:-1])
    m.act_quant = None
    exact_rows = m.forward(toks[:-1])

    def run(rows, extra):
        ids = os.path.join(tmp, "qids.txt")
        lg = os.path.join(tmp, "qlg.bin")
        with open(ids, "w") as f:
            f.write(" ".join(map(str, prompt)) + "\n" + " ".join(map(str, gen)) + "\n")
        rows.astype("<f4").tofile(lg)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            rc = compare.main(["--model", path, "--ids", ids, "--logits", lg, "--type", "q4_K",
                               "--n", str(n), "--kv-cache-dtype", "f32"] + extra)
        return rc, out.getvalue()

    rc, out = run(sim_rows, ["--act-sim-tol", "1e-3"])
    assert rc == 0, out
    rc, out = run(exact_rows, [])
    assert rc == 0, out
    rc, out = run(exact_rows, ["--act-sim-tol", "1e-3"])
    assert rc == 1 and "emulated-activation reference" in out, out


def test_rmsnorm():
    x = np.array([[3.0, 4.0]])
    assert np.allclose(rmsnorm(x, np.array([1.0, 2.0]), 0.0), [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]])


def main():
    tests = [test_metadata_roundtrip, test_tensor_roundtrip, test_rope_relative,
             test_permute_equivalence, test_gqa_equivalence, test_causal_and_slow,
             test_compare_fake_engine, test_quants, test_compare_quant]
    with tempfile.TemporaryDirectory() as tmp:
        for t in tests:
            t(tmp)
            print("ok  %s" % t.__name__)
    test_rmsnorm()
    print("ok  test_rmsnorm")
    print("reference self-tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
