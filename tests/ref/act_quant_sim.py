"""What quantizing the activations costs: the float64 reference run with and
without an emulation of tessera's int8 activation quantization.

tessera (cpu/quant.h) multiplies a quantized weight by activations that it
first quantizes to int8: per 32 elements with the scale rounded through f16
(QUANT_ACT_Q8_32: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) or per 256 with a
float scale (QUANT_ACT_Q8_K: the K-quants and IQ4_XS), d = max|x| / 127,
q = round(x / d). Its integer dot products are exact, so the engine's
logits differ from the exact reference by this rounding alone (plus float32
noise). This script measures that difference on a model, row by row, as
compare.py measures the engine's: max_v |c - r| / max_v |r|. compare.py's
tolerances for the quantized types are set from it, with margin.

Usage: act_quant_sim.py MODEL.gguf [--tokens N] [--seeds S]
Prints the worst and median row error over S random token sequences.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants as qz  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402

Q8_32_TYPES = (qz.Q4_0, qz.Q4_1, qz.Q5_0, qz.Q5_1, qz.Q8_0, qz.IQ4_NL)
Q8_K_TYPES = (qz.Q2_K, qz.Q3_K, qz.Q4_K, qz.Q5_K, qz.Q6_K, qz.IQ4_XS)


def quantize_acts(x, ggml_type):
    """x (..., n) float64 -> the values d' q the engine multiplies by."""
    if ggml_type in Q8_32_TYPES:
        block, f16_scale = 32, True
    elif ggml_type in Q8_K_TYPES:
        block, f16_scale = 256, False
    else:
        return x                                 # float weights: no quantization
    shape = x.shape
    xb = x.astype(np.float32).reshape(-1, block)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0))
    p = xb * inv
    q = np.sign(p) * np.floor(np.abs(p) + np.float32(0.5))        # halves away from zero
    if f16_scale:
        d = d.astype(np.float16).astype(np.float32)
    return (d.astype(np.float64) * q).reshape(shape)


def row_rel_err(c, r):
    return np.max(np.abs(c - r), axis=1) / np.maximum(np.max(np.abs(r), axis=1), 1e-30)


def measure(path, n_tokens=40, seeds=3):
    """(worst, median) row error over `seeds` random sequences."""
    m = LlamaRef(path)
    errs = []
    for s in range(seeds):
        toks = np.random.default_rng(100 + s).integers(3, m.vocab, n_tokens)
        m.act_quant = None
        r = m.forward(toks)
        m.act_quant = quantize_acts
        c = m.forward(toks)
        errs.append(row_rel_err(c, r))
    m.act_quant = None
    e = np.concatenate(errs)
    return float(e.max()), float(np.median(e))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    worst, med = measure(args.model, args.tokens, args.seeds)
    print("%s: activation quantization row error: worst %.3e, median %.3e (%d sequences of %d tokens)"
          % (os.path.basename(args.model), worst, med, args.seeds, args.tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
