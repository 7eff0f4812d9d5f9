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


def encode_tensor(x, ttype):
    """(bytes, the float64 values a correct reader must return)."""
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
            rc = compare.main(["--model", path, "--ids", ids, "--logits", lg, "--type", typ, "--n", str(n)])
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


def test_rmsnorm():
    x = np.array([[3.0, 4.0]])
    assert np.allclose(rmsnorm(x, np.array([1.0, 2.0]), 0.0), [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]])


def main():
    tests = [test_metadata_roundtrip, test_tensor_roundtrip, test_rope_relative,
             test_permute_equivalence, test_gqa_equivalence, test_causal_and_slow,
             test_compare_fake_engine]
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
