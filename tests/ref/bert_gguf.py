"""Tiny random BERT encoders as llama.cpp's convert_hf_to_gguf.py writes them.

  bert_gguf.py OUT.gguf [--type f32|f16|q8_0] [--vec-type f32|f16]
               [--pooling mean|cls|last|none|absent] [--fused] [--no-types] [--seed N]
               [--dim 64 --layers 2 --heads 4 --ffn 128 --ctx 64]

Layout (BertModel in convert_hf_to_gguf.py; gguf-py's tensor names):
  general.architecture = "bert"
  bert.context_length, bert.embedding_length, bert.feed_forward_length,
  bert.attention.head_count, bert.block_count (u32),
  bert.attention.layer_norm_epsilon (f32), bert.attention.causal = false,
  bert.pooling_type (u32: 0 none, 1 mean, 2 cls, 3 last; "absent" leaves
  the key out, as a plain BertModel export without modules.json does)
  tokenizer.ggml.model = "bert", tokenizer.ggml.token_type_count = 2,
  tokenizer.ggml.tokens in the converter's "phantom space" form (a word
  piece "xy" becomes "\u2581xy", a continuation "##xy" becomes "xy",
  "[...]" tokens stay as they are), tokenizer.ggml.token_type (3 for the
  special tokens, 1 otherwise), and the special ids gguf.SpecialVocab writes
  for BERT: unknown_token_id, seperator_token_id (sic), padding_token_id,
  cls_token_id, mask_token_id. The vocabulary keeps BERT-base's ids for
  the specials: [PAD] 0, [unused0..98] 1..99, [UNK] 100, [CLS] 101,
  [SEP] 102, [MASK] 103, then word pieces.

  token_embd.weight (vocab, dim)      token_types.weight (2, dim)
  position_embd.weight (ctx, dim)     token_embd_norm.{weight,bias} (dim)
  per layer blk.N.:
    attn_q / attn_k / attn_v .{weight (dim, dim), bias (dim)}
      or, with --fused, attn_qkv.{weight (3 dim, dim), bias (3 dim)}
    attn_output.{weight (dim, dim), bias}   attn_output_norm.{weight,bias}
    ffn_up.{weight (ffn, dim), bias (ffn)}  ffn_down.{weight (dim, ffn), bias}
    layer_output_norm.{weight,bias}
(NumPy shapes; GGUF's ne is reversed.) --type sets the matrices' type;
token_types stays f32 as the converter keeps it, and in a q8_0 file so does
position_embd, as llama.cpp's quantizer leaves it.
--vec-type sets the norms' and biases' type (the converter writes f32).
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read as gr  # noqa: E402
from gguf_write_test import write_gguf  # noqa: E402

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}
TYPES = {"f32": gr.GGML_F32, "f16": gr.GGML_F16, "q8_0": gr.GGML_Q8_0}
SPECIALS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
WORDS = ("the a of and to in is it that was for on are with as his they be at one have this from "
         "or had by hot word but what some we can out other were all there when up use your how said "
         "an each she which do their time if will way about many then them write would like so these "
         "her long make thing see him two has look more day could go come did number sound no most "
         "people my over know water than call first who may down side been now find").split()
PIECES = ("##s ##ed ##ing ##ly ##er ##est ##ion ##a ##e ##i ##o ##u ##n ##t ##r").split()


def wordpiece_vocab():
    """BERT-style ids and texts, before the converter's phantom mapping."""
    toks = ["[PAD]"] + ["[unused%d]" % i for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += WORDS + PIECES
    return toks


def phantom(tok):
    """convert_hf_to_gguf.py BertModel.set_vocab's mapping."""
    if tok.startswith("[") and tok.endswith("]"):
        return tok
    if tok.startswith("##"):
        return tok[2:]
    return "\u2581" + tok


def random_bert(rng, dim, layers, ffn, vocab, ctx, fused):
    """Weights at the scales of a trained BERT's: unit-ish LayerNorm gains,
    small biases, matrices ~ N(0, 1/n_in) (q and k doubled so attention is
    far from uniform)."""
    w = {"token_embd.weight": rng.standard_normal((vocab, dim)) * 0.5,
         "token_types.weight": rng.standard_normal((2, dim)) * 0.5,
         "position_embd.weight": rng.standard_normal((ctx, dim)) * 0.5,
         "token_embd_norm.weight": 1.0 + 0.1 * rng.standard_normal(dim),
         "token_embd_norm.bias": 0.1 * rng.standard_normal(dim)}
    s = 1.0 / math.sqrt(dim)
    for i in range(layers):
        p = "blk.%d." % i
        q, k, v = (rng.standard_normal((dim, dim)) * s * f for f in (2.0, 2.0, 1.0))
        bq, bk, bv = (0.2 * rng.standard_normal(dim) for _ in range(3))
        if fused:
            w[p + "attn_qkv.weight"] = np.concatenate([q, k, v], axis=0)
            w[p + "attn_qkv.bias"] = np.concatenate([bq, bk, bv])
        else:
            w.update({p + "attn_q.weight": q, p + "attn_k.weight": k, p + "attn_v.weight": v,
                      p + "attn_q.bias": bq, p + "attn_k.bias": bk, p + "attn_v.bias": bv})
        w[p + "attn_output.weight"] = rng.standard_normal((dim, dim)) * s
        w[p + "attn_output.bias"] = 0.1 * rng.standard_normal(dim)
        w[p + "attn_output_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(dim)
        w[p + "attn_output_norm.bias"] = 0.1 * rng.standard_normal(dim)
        w[p + "ffn_up.weight"] = rng.standard_normal((ffn, dim)) * s
        w[p + "ffn_up.bias"] = 0.1 * rng.standard_normal(ffn)
        w[p + "ffn_down.weight"] = rng.standard_normal((dim, ffn)) / math.sqrt(ffn)
        w[p + "ffn_down.bias"] = 0.1 * rng.standard_normal(dim)
        w[p + "layer_output_norm.weight"] = 1.0 + 0.1 * rng.standard_normal(dim)
        w[p + "layer_output_norm.bias"] = 0.1 * rng.standard_normal(dim)
    return w


def metadata(dim, layers, heads, ffn, ctx, pooling, eps, tokens):
    md = [("general.architecture", gr.T_STRING, "bert"),
          ("general.alignment", gr.T_UINT32, 32),
          ("bert.block_count", gr.T_UINT32, layers),
          ("bert.context_length", gr.T_UINT32, ctx),
          ("bert.embedding_length", gr.T_UINT32, dim),
          ("bert.feed_forward_length", gr.T_UINT32, ffn),
          ("bert.attention.head_count", gr.T_UINT32, heads),
          ("bert.attention.layer_norm_epsilon", gr.T_FLOAT32, eps),
          ("bert.attention.causal", gr.T_BOOL, False)]
    if pooling != "absent":
        md.append(("bert.pooling_type", gr.T_UINT32, POOLING[pooling]))
    types = [3 if t.startswith("[") and not t.startswith("[unused") else 1 for t in tokens]
    md += [("tokenizer.ggml.token_type_count", gr.T_UINT32, 2),
           ("tokenizer.ggml.model", gr.T_STRING, "bert"),
           ("tokenizer.ggml.tokens", gr.T_ARRAY, (gr.T_STRING, [phantom(t) for t in tokens])),
           ("tokenizer.ggml.token_type", gr.T_ARRAY, (gr.T_INT32, types)),
           ("tokenizer.ggml.unknown_token_id", gr.T_UINT32, SPECIALS["[UNK]"]),
           ("tokenizer.ggml.seperator_token_id", gr.T_UINT32, SPECIALS["[SEP]"]),
           ("tokenizer.ggml.padding_token_id", gr.T_UINT32, SPECIALS["[PAD]"]),
           ("tokenizer.ggml.cls_token_id", gr.T_UINT32, SPECIALS["[CLS]"]),
           ("tokenizer.ggml.mask_token_id", gr.T_UINT32, SPECIALS["[MASK]"])]
    return md


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(TYPES), default="f32")
    ap.add_argument("--vec-type", choices=("f32", "f16"), default="f32")
    ap.add_argument("--pooling", choices=sorted(POOLING) + ["absent"], default="mean")
    ap.add_argument("--fused", action="store_true", help="one attn_qkv matrix per layer")
    ap.add_argument("--no-types", action="store_true", help="leave token_types out (llama.cpp takes it as optional)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--eps", type=float, default=1e-12)
    a = ap.parse_args(argv[1:])
    tokens = wordpiece_vocab()
    rng = np.random.default_rng(a.seed)
    w = random_bert(rng, a.dim, a.layers, a.ffn, len(tokens), a.ctx, a.fused)
    if a.no_types:
        del w["token_types.weight"]
    mtype, vtype = TYPES[a.type], TYPES[a.vec_type]
    tensors = []
    for name, arr in w.items():
        if arr.ndim == 1:
            tensors.append((name, arr, vtype))
        else:
            keep = name == "token_types.weight" or (name == "position_embd.weight" and a.type == "q8_0")
            tensors.append((name, arr, gr.GGML_F32 if keep else mtype))
    md = metadata(a.dim, a.layers, a.heads, a.ffn, a.ctx, a.pooling, a.eps, tokens)
    write_gguf(a.out, md, tensors)
    print("%s: bert dim %d, %d layers, %d heads, ffn %d, ctx %d, vocab %d, %s matrices, pooling %s%s"
          % (a.out, a.dim, a.layers, a.heads, a.ffn, a.ctx, len(tokens), a.type, a.pooling,
             ", fused qkv" if a.fused else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
