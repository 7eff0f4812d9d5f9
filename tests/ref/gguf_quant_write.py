"""GGUF files of quantized tensors that tessera did not write.

Two kinds, both from random valid blocks (quants.random_blocks), so every
bit pattern of the quants and sub-scales occurs:

  fixture OUT.gguf
      For each quantized type T (ggml id N) a tensor "q.N" of ROWS x COLS
      random blocks and a float32 tensor "deq.N" holding quants.dequantize
      of it: what tests/test_quant_ref.c compares tessera's quant_dequant
      with, bit for bit, and the weights of its dot-product check. The
      blocks' f16 scales are random in sign and magnitude (1e-3 .. 1),
      one row has very small ones (f16 subnormals) and zeros, one large
      ones (up to 1e3), to reach the corners of the f16 conversion.

  model OUT.gguf --tokenizer-from MK.gguf [--recipe q4_k_m|legacy|kmix]
      A llama model (dim 256, 2 layers, 8 heads, 2 kv heads, ffn 512, vocab
      from the tokenizer file) whose matrices are random valid blocks scaled
      to the usual standard deviations (quants.random_weight_blocks), mixed
      per tensor as a recipe says:
        q4_k_m  llama.cpp's Q4_K_M: Q4_K for most matrices; Q6_K for
                output.weight and for attn_v / ffn_down of the layers
                llama.cpp's use_more_bits picks (with 2 layers: layer 1);
                token_embd Q5_0; norms F32.
        legacy  the 32-element types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL.
        kmix    the other 256-element types: Q2_K, Q3_K, Q5_K, IQ4_XS, Q4_K, Q6_K.
      The tokenizer.* keys are copied, with their value types, from MK.gguf
      (a file `tessera mkmodel` wrote), so `tessera generate` can encode a
      prompt. Prints which tensors have which type.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read as gr  # noqa: E402
import quants as qz  # noqa: E402
from gguf_write_test import RawTensor, write_gguf  # noqa: E402

FIXTURE_ROWS = 6
FIXTURE_COLS = 1024        # 4 super-blocks or 32 blocks per row
QK_STD = 1.0              # attn_q / attn_k standard deviation times sqrt(dim)


def write_fixture(path, seed=11):
    rng = np.random.default_rng(seed)
    tensors = []
    for t in qz.TYPES:
        nb_row = FIXTURE_COLS // qz.BLOCK[t][0]
        nfields = len(qz.F16_FIELDS[t])
        rows = []
        for r in range(FIXTURE_ROWS):
            f = [qz.random_f16(rng, nb_row) for _ in range(nfields)]
            if r == FIXTURE_ROWS - 2:
                # f16 subnormals (below 6.1e-5), exact zeros and negative zero
                for k in range(nfields):
                    f[k] = qz.random_f16(rng, nb_row, 1e-7, 5e-5)
                    f[k][::5] = 0.0
                    f[k][1::7] = -0.0
            elif r == FIXTURE_ROWS - 1:
                for k in range(nfields):
                    f[k] = qz.random_f16(rng, nb_row, 1.0, 1e3)
            rows.append(qz.random_blocks(t, FIXTURE_COLS, rng, *f))
        raw = b"".join(rows)
        n = FIXTURE_ROWS * FIXTURE_COLS
        deq = qz.dequantize(raw, t, n).reshape(FIXTURE_ROWS, FIXTURE_COLS)
        assert np.all(np.isfinite(deq)), qz.NAMES[t]
        tensors.append(("q.%d" % t, RawTensor(raw, deq.shape, deq), t))
        tensors.append(("deq.%d" % t, deq.astype(np.float32), gr.GGML_F32))
    md = [("general.architecture", gr.T_STRING, "quant-fixture"),
          ("general.alignment", gr.T_UINT32, 32)]
    write_gguf(path, md, tensors)
    return [qz.NAMES[t] for t in qz.TYPES]


# ------------------------------------------------------------------- models

def use_more_bits(i, n):
    """llama.cpp's choice of the layers whose attn_v / ffn_down get more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def recipe_types(recipe, layers):
    """{role or full tensor name: ggml type} for a recipe; 2-D tensors only."""
    K = qz                      # the type ids, short
    if recipe == "q4_k_m":
        types = {"token_embd": K.Q5_0, "output": K.Q6_K}
        for i in range(layers):
            more = use_more_bits(i, layers)
            for role in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
                types["blk.%d.%s" % (i, role)] = K.Q4_K
            for role in ("attn_v", "ffn_down"):
                types["blk.%d.%s" % (i, role)] = K.Q6_K if more else K.Q4_K
        return types
    if recipe == "legacy":
        per_layer = [
            {"attn_q": K.Q4_0, "attn_k": K.Q4_1, "attn_v": K.Q5_0, "attn_output": K.Q5_1,
             "ffn_gate": K.IQ4_NL, "ffn_up": K.Q8_0, "ffn_down": K.Q4_0},
            {"attn_q": K.IQ4_NL, "attn_k": K.Q5_1, "attn_v": K.Q8_0, "attn_output": K.Q4_1,
             "ffn_gate": K.Q5_0, "ffn_up": K.Q4_0, "ffn_down": K.Q5_1},
        ]
        types = {"token_embd": K.Q8_0, "output": K.Q4_1}
    elif recipe == "kmix":
        per_layer = [
            {"attn_q": K.Q2_K, "attn_k": K.Q3_K, "attn_v": K.Q5_K, "attn_output": K.IQ4_XS,
             "ffn_gate": K.Q3_K, "ffn_up": K.Q2_K, "ffn_down": K.Q5_K},
            {"attn_q": K.IQ4_XS, "attn_k": K.Q5_K, "attn_v": K.Q6_K, "attn_output": K.Q2_K,
             "ffn_gate": K.Q4_K, "ffn_up": K.IQ4_XS, "ffn_down": K.Q3_K},
        ]
        types = {"token_embd": K.Q4_K, "output": K.Q6_K}
    else:
        raise ValueError("unknown recipe %r" % recipe)
    for i in range(layers):
        for role, t in per_layer[i % len(per_layer)].items():
            types["blk.%d.%s" % (i, role)] = t
    return types


def tokenizer_metadata(path):
    """The tokenizer.* keys of a GGUF file as (key, vtype, value) triples."""
    g = gr.GGUFFile(path)
    out = []
    for key, value in g.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        vtype, etype = g.metadata_types[key]
        if vtype == gr.T_ARRAY:
            value = (etype, list(value))
        out.append((key, vtype, value))
    tokens = g.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ValueError("%s has no tokenizer.ggml.tokens" % path)
    return out, len(tokens)


def write_model(path, tokenizer_from, recipe="q4_k_m", seed=3, dim=256, layers=2, heads=8,
                kv_heads=2, ffn=512, ctx=256):
    rng = np.random.default_rng(seed)
    tok_md, vocab = tokenizer_metadata(tokenizer_from)
    hd = dim // heads
    types = recipe_types(recipe, layers)
    # (name, shape, std); matrices as random_model in gguf_write_test.py
    mats = [("token_embd", (vocab, dim), 0.5), ("output", (vocab, dim), 1 / math.sqrt(dim))]
    norms = [("output_norm.weight", dim)]
    for i in range(layers):
        p = "blk.%d." % i
        mats += [(p + "attn_q", (heads * hd, dim), QK_STD / math.sqrt(dim)),
                 (p + "attn_k", (kv_heads * hd, dim), QK_STD / math.sqrt(dim)),
                 (p + "attn_v", (kv_heads * hd, dim), 1 / math.sqrt(dim)),
                 (p + "attn_output", (dim, heads * hd), 1 / math.sqrt(dim)),
                 (p + "ffn_gate", (ffn, dim), 1 / math.sqrt(dim)),
                 (p + "ffn_up", (ffn, dim), 1 / math.sqrt(dim)),
                 (p + "ffn_down", (dim, ffn), 1 / math.sqrt(ffn))]
        norms += [(p + "attn_norm.weight", dim), (p + "ffn_norm.weight", dim)]
    tensors, listing = [], []
    for name, shape, std in mats:
        t = types[name]
        raw, vals = qz.random_weight_blocks(t, shape, rng, std)
        tensors.append((name + ".weight", RawTensor(raw, shape, vals), t))
        listing.append("%s.weight %s" % (name, qz.NAMES[t]))
    for name, n in norms:
        tensors.append((name, 1.0 + 0.1 * rng.standard_normal(n), gr.GGML_F32))
        listing.append("%s F32" % name)
    a = "llama"
    md = [("general.architecture", gr.T_STRING, a),
          ("general.name", gr.T_STRING, "tessera test model, random %s blocks" % recipe),
          ("general.alignment", gr.T_UINT32, 32),
          (a + ".context_length", gr.T_UINT32, ctx),
          (a + ".embedding_length", gr.T_UINT32, dim),
          (a + ".block_count", gr.T_UINT32, layers),
          (a + ".feed_forward_length", gr.T_UINT32, ffn),
          (a + ".attention.head_count", gr.T_UINT32, heads),
          (a + ".attention.head_count_kv", gr.T_UINT32, kv_heads),
          (a + ".rope.freq_base", gr.T_FLOAT32, 10000.0),
          (a + ".attention.layer_norm_rms_epsilon", gr.T_FLOAT32, 1e-5),
          (a + ".rope.dimension_count", gr.T_UINT32, hd)] + tok_md
    write_gguf(path, md, tensors)
    return listing, sorted({qz.NAMES[t] for t in types.values()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fixture")
    f.add_argument("out")
    f.add_argument("--seed", type=int, default=11)
    m = sub.add_parser("model")
    m.add_argument("out")
    m.add_argument("--tokenizer-from", required=True)
    m.add_argument("--recipe", default="q4_k_m", choices=("q4_k_m", "legacy", "kmix"))
    m.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    if args.cmd == "fixture":
        names = write_fixture(args.out, args.seed)
        print("fixture %s: %d x %d of each of %s" % (args.out, FIXTURE_ROWS, FIXTURE_COLS, " ".join(names)))
    else:
        listing, used = write_model(args.out, args.tokenizer_from, args.recipe, args.seed)
        print("model %s (%s): quantized types %s" % (args.out, args.recipe, " ".join(used)))
        by_type = {}
        for line in listing:
            name, t = line.rsplit(" ", 1)
            by_type.setdefault(t, []).append(name.replace(".weight", ""))
        for t, names in sorted(by_type.items()):
            print("  %-6s %s" % (t, " ".join(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
