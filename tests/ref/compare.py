"""Compare tessera's logits against the independent NumPy reference.

Usage:
  compare.py --model M.gguf --ids IDS.txt --logits L.bin --type TYPE --n 33 [--act-sim]

TYPE is f32, f16, bf16 or a quantized type (q8_0, q4_0, q4_1, q5_0, q5_1,
iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs); a file mixing types is held
to its loosest type's tolerance.

IDS.txt is the stdout of `tessera generate ... --ids`: line 1 the prompt token
ids (incl. BOS if any), line 2 the generated ids (n of them, or fewer ending
with EOS). L.bin holds float32 rows of n_vocab: P prefill rows (one per prompt
position), then one row per decode step after feeding generated token j,
j = 0..G-2; P + G - 1 rows in all.

The reference runs once over prompt + generated[:-1] (float64, full sequence,
no KV cache) and yields the same P + G - 1 rows. Checks:

  * per row: err = max_v |c - r| / max_v |r|  <= tol(type)
      f32, f16, bf16: 1e-4  -- same (dequantized) weights on both sides, so
                               only float32 accumulation error remains.
      q8_0:           5e-2  -- weights are identical after dequantization,
                               but the engine may also quantize activations
                               to 8 bits per 32-block (llama.cpp style
                               vec_dot_q8_0_q8_0) before each matmul; that
                               costs ~1/254 relative per product and
                               compounds over layers, so 5e-2 is a loose
                               bound that still catches structural bugs
                               (a wrong rope / mask / GQA mapping is >> 5e-2,
                               as the self-check below demonstrates).
      q4_0, q4_1, q5_0, q5_1, iq4_nl:  8e-2
      q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs:  1.3e-1
                            -- the reference dequantizes the weights bit-exactly
                               as ggml does (quants.py), so again only the
                               engine's int8 activations differ: per 32 with
                               an f16 scale for the first group, per 256 for
                               the second (cpu/quant.h), each product off by
                               up to d/2 per element, compounding over every
                               matmul of every layer. act_quant_sim.py
                               emulates exactly that rounding on the float64
                               reference; on the models tests/quant_ref.sh
                               writes (gguf_quant_write.py: dim 256, 2
                               layers, random valid blocks, 12 weight seeds
                               x 4 sequences of 40 tokens) the worst row
                               error was 2.4e-2 for the per-32 group and
                               4.3e-2 with per-256 activations (the per-256
                               scale spans 8x more elements, so outliers
                               coarsen more of them). The tolerances are ~3x
                               those. A wrong rope pairing on the same files
                               gives >= 0.77 and a one-row shift >= 1.4, so
                               they still separate a structural bug by > 5x.
                               tessera itself measured 2.0e-2 .. 2.3e-2 on
                               those three files (tests/quant_ref.sh).
  * --act-sim (diagnostic) prints the same rows against the reference with
    the engine's activation rounding emulated (act_quant_sim.py, cpu/quant.h's
    rule: d = max|x| / 127 per 32 with an f16 scale or per 256, q =
    round(x / d), halves away from zero). On quant_ref.sh's files tessera
    agrees with it to <= 4.2e-7, i.e. the emulation is exact, so a large
    value here with a small one above points at something other than the
    activation rounding. It is not a check by default (--act-sim-tol makes
    it one): the engine's float32 inputs differ from the float64 ones in
    the last bits, which flips the rounding of an occasional activation,
    and one flip can move a row by up to ~1e-2 on these random models
    (mkmodel's q2_K file: perturbing the emulation's own activations by
    1e-7 relative moves its rows by 7e-3 median).
  * greedy: generated[j] must be the argmax of reference row P-1+j.
      f32: exact, as the spec demands.
      every other type: a different token is tolerated only at a near-tie,
      i.e. r[argmax] - r[generated[j]] <= 2 * tol * max|r| (each of the two
      logits may legitimately be off by tol * max|r|). Such rows are listed.
  * the engine is self-consistent: generated[j] is an argmax of its own
    logits row P-1+j (confirms the dumped rows are the ones it sampled from).
  * SELF-CHECK (teeth): the same C rows compared against (a) the reference
    run with the other rope pairing and (b) the reference shifted by one row
    must show an error > max(1e-2, tol), i.e. the row check above would have
    flagged it; otherwise this comparison could not detect such bugs and the
    test fails. (c) The same for the reference with each architecture
    feature the model exercises switched off (llama_ref.features(): the
    sliding window, q/k norms, rope_freqs, rope scaling, ...), enforced for
    the float types (tolerance 1e-4), reported for the quantized ones.

Exit status 0 when everything passes, 1 otherwise.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import LlamaRef  # noqa: E402

TOL = {"f32": 1e-4, "f16": 1e-4, "bf16": 1e-4, "q8_0": 5e-2}
TOL.update({t: 8e-2 for t in ("q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")})
TOL.update({t: 1.3e-1 for t in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs")})
# The float types over an f16 KV cache. The reference rounds each key and
# value to half precision as the cache does, but from its own value, which
# differs from the engine's f32 one in the last bits: where the two straddle
# a rounding boundary they round to neighbouring halves (2^-11 apart), and
# each such element moves a row by ~1e-5. Measured worst 2.3e-4 (gemma3,
# 6 layers); an engine bug moves rows by 1e-2 and more (the self-checks).
TOL_FLOAT_KV_F16 = 4e-4


def row_rel_err(c, r):
    """Per-row max|c - r| / max|r| for 2-D arrays of equal shape."""
    return np.max(np.abs(c - r), axis=1) / np.maximum(np.max(np.abs(r), axis=1), 1e-30)


def parse_ids(path):
    with open(path) as f:
        lines = [ln.strip() for ln in f.read().splitlines()]
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 2:
        raise ValueError("expected exactly 2 lines of token ids on stdout, got %d: %r"
                         % (len(lines), lines[:4]))
    prompt = [int(t) for t in lines[0].split()]
    gen = [int(t) for t in lines[1].split()]
    return prompt, gen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--type", required=True, type=str.lower, choices=sorted(TOL))
    ap.add_argument("--n", type=int, required=True, help="-n passed to generate")
    ap.add_argument("--name", default=None, help="label for the output lines (default: the type)")
    ap.add_argument("--tol", type=float, default=None, help="override the per-type tolerance")
    ap.add_argument("--kv-cache-dtype", default="f16", choices=("f16", "f32"),
                    help="the engine's KV cache (generate's --kv-cache-dtype; the CPU's default is f16): "
                         "the reference rounds keys and values as an f16 cache stores them")
    ap.add_argument("--act-sim", action="store_true",
                    help="also print the error against the reference with the engine's int8 "
                         "activation rounding emulated (act_quant_sim.py)")
    ap.add_argument("--act-sim-tol", type=float, default=None,
                    help="fail when the --act-sim error exceeds this (see the docstring: fragile)")
    args = ap.parse_args(argv)
    tol = args.tol if args.tol is not None else TOL[args.type]
    if args.tol is None and args.kv_cache_dtype == "f16" and args.type in ("f32", "f16", "bf16"):
        tol = TOL_FLOAT_KV_F16
    tag = "[%s]" % (args.name or args.type)
    failures = []

    def fail(msg):
        failures.append(msg)
        print("%s FAIL: %s" % (tag, msg))

    ref = LlamaRef(args.model, kv_f16=args.kv_cache_dtype == "f16")
    V = ref.vocab
    prompt, gen = parse_ids(args.ids)
    P, G = len(prompt), len(gen)
    print("%s model %s: arch=%s dim=%d layers=%d heads=%d kv_heads=%d vocab=%d rope=%s"
          % (tag, os.path.basename(args.model), ref.arch, ref.dim, ref.n_layers,
             ref.n_heads, ref.n_kv_heads, V, ref.rope_mode))
    print("%s prompt ids (%d): %s" % (tag, P, " ".join(map(str, prompt))))
    print("%s generated ids (%d): %s" % (tag, G, " ".join(map(str, gen))))

    # ---- contract of the ids lines
    if P < 1 or G < 1:
        print("%s FAIL: need at least one prompt and one generated token" % tag)
        return 1
    eos = ref.g.get("tokenizer.ggml.eos_token_id")
    if G > args.n:
        fail("generated %d tokens, more than -n %d" % (G, args.n))
    elif G < args.n:
        if eos is None or gen[-1] != int(eos):
            fail("generated only %d of %d tokens and the last (%d) is not EOS (%s)"
                 % (G, args.n, gen[-1], eos))
    if eos is not None and int(eos) in gen[:-1]:
        fail("EOS %d appears before the last generated token" % int(eos))

    # ---- logits file
    n_rows = P + G - 1
    size = os.path.getsize(args.logits)
    if size != n_rows * V * 4:
        print("%s FAIL: logits file has %d bytes, expected (P + G - 1) * n_vocab * 4 = "
              "(%d + %d - 1) * %d * 4 = %d" % (tag, size, P, G, V, n_rows * V * 4))
        return 1
    c = np.fromfile(args.logits, dtype="<f4").astype(np.float64).reshape(n_rows, V)
    if not np.all(np.isfinite(c)):
        bad = np.where(~np.all(np.isfinite(c), axis=1))[0]
        print("%s FAIL: non-finite logits in rows %s" % (tag, bad[:10].tolist()))
        return 1

    # ---- reference over prompt + generated[:-1]
    tokens = prompt + gen[:-1]
    if len(tokens) > ref.n_ctx:
        fail("sequence of %d tokens exceeds context_length %d" % (len(tokens), ref.n_ctx))
    r = ref.forward(tokens)                                   # (n_rows, V)

    # ---- per-row relative error, per phase
    err = row_rel_err(c, r)
    for phase, rows in (("prefill", range(0, P)), ("decode", range(P, n_rows))):
        rows = list(rows)
        if not rows:
            print("%s %-7s rows: none" % (tag, phase))
            continue
        e = err[rows]
        worst = rows[int(np.argmax(e))]
        print("%s %-7s rows %3d..%3d: worst rel err %.3e (row %d), median %.3e, tol %.2g"
              % (tag, phase, rows[0], rows[-1], float(e.max()), worst, float(np.median(e)), tol))
    if args.act_sim or args.act_sim_tol is not None:
        # How much of the error the activation rounding explains. Small here
        # but large above means the engine differs elsewhere. Checked only
        # with --act-sim-tol (rounding flips make a tight bound fragile).
        from act_quant_sim import quantize_acts
        ref.act_quant = quantize_acts
        r_sim = ref.forward(tokens)
        ref.act_quant = None
        e_sim = row_rel_err(c, r_sim)
        e_ref_sim = row_rel_err(r_sim, r)
        print("%s act-sim: engine vs emulated-int8-activation reference: worst %.3e, median %.3e; "
              "emulation vs exact reference: worst %.3e" % (tag, float(e_sim.max()), float(np.median(e_sim)),
                                                            float(e_ref_sim.max())))
        if args.act_sim_tol is not None and not float(e_sim.max()) <= args.act_sim_tol:
            bad = np.where(e_sim > args.act_sim_tol)[0]
            fail("%d rows differ from the emulated-activation reference by more than %.2g; first: %s"
                 % (bad.size, args.act_sim_tol, ", ".join("%d(%.2e)" % (i, e_sim[i]) for i in bad[:8])))
    bad_rows = np.where(err > tol)[0]
    if bad_rows.size:
        fail("%d of %d rows exceed rel err %.2g; first bad rows: %s"
             % (bad_rows.size, n_rows, tol,
                ", ".join("%d(%s, %.2e)" % (i, "prefill" if i < P else "decode", err[i])
                          for i in bad_rows[:8])))

    # ---- greedy tokens
    near_ties = []
    for j in range(G):
        row = P - 1 + j
        ref_top = int(np.argmax(r[row]))
        # engine self-consistency: its sampled token is a maximum of its own row
        if c[row, gen[j]] < np.max(c[row]):
            fail("step %d: engine chose %d but its own logits row %d peaks at %d (%.6g > %.6g)"
                 % (j, gen[j], row, int(np.argmax(c[row])), np.max(c[row]), c[row, gen[j]]))
        if ref_top == gen[j]:
            continue
        gap = float(r[row, ref_top] - r[row, gen[j]])
        allowed = 2.0 * tol * float(np.max(np.abs(r[row])))
        if args.type != "f32" and gap <= allowed:
            near_ties.append("step %d: ref %d vs engine %d, gap %.2e <= %.2e" % (j, ref_top, gen[j], gap, allowed))
        else:
            fail("greedy step %d (row %d): reference argmax %d, engine generated %d "
                 "(reference gap %.3e, max|r| %.3e)"
                 % (j, row, ref_top, gen[j], gap, float(np.max(np.abs(r[row])))))
    for s in near_ties:
        print("%s note: near-tie greedy difference tolerated: %s" % (tag, s))
    n_match = sum(int(np.argmax(r[P - 1 + j])) == gen[j] for j in range(G))
    print("%s greedy tokens: %d/%d equal to the reference argmax" % (tag, n_match, G))

    # ---- self-check: the comparison must be able to fail
    teeth = max(1e-2, tol)
    wrong_mode = "neox" if ref.rope_mode == "normal" else "normal"
    r_wrong = ref.forward(tokens, rope_mode=wrong_mode)
    e_wrong = float(row_rel_err(c, r_wrong).max())
    print("%s self-check: vs reference with %s rope (wrong pairing): worst rel err %.3e (must be > %.2g)"
          % (tag, wrong_mode, e_wrong, teeth))
    if not e_wrong > teeth:
        fail("self-check: a wrong rope pairing is not detected (err %.3e)" % e_wrong)
    if n_rows >= 2:
        e_shift = float(row_rel_err(c[1:], r[:-1]).max())
        print("%s self-check: vs reference shifted by one row: worst rel err %.3e (must be > %.2g)"
              % (tag, e_shift, teeth))
        if not e_shift > teeth:
            fail("self-check: an off-by-one row is not detected (err %.3e)" % e_shift)

    # Each architecture feature the model exercises (llama_ref.features():
    # sliding window, q/k norms, rope_freqs, ...) switched off in the
    # reference must be detected too. Enforced at the float types' teeth;
    # at a quantized type's looser tolerance a small feature may hide in
    # it, so there it is only reported (the float cases enforce it).
    for feat in ref.features():
        e_feat = float(row_rel_err(c, ref.forward(tokens, ablate=(feat,))).max())
        enforced = tol <= 1e-4
        print("%s self-check: vs reference without %s: worst rel err %.3e (must be > %.2g%s)"
              % (tag, feat, e_feat, teeth, "" if enforced else ", reported only"))
        if enforced and not e_feat > teeth:
            fail("self-check: an engine without %s would not be detected (err %.3e)" % (feat, e_feat))

    if failures:
        print("%s %d failure(s)" % (tag, len(failures)))
        return 1
    print("%s PASS" % tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
