"""Independent NumPy dequantizer for GGUF's quantized tensor types.

Written from ggml's public definition of the formats (the block structs of
ggml-common.h and the dequantize_row_* functions of ggml-quants.c), not from
tessera's C code, so that tests can hold the C code to it.

Bit-exactness. ggml dequantizes in float32, and so does this module: every
scale is widened from f16 to float32 exactly, every intermediate product is
a float32 product rounded once, in ggml's order. For example Q4_K computes
    d1 = d * sc        (f32)      m1 = dmin * m   (f32)
    y  = d1 * q - m1   (f32 product, then f32 difference; no fused multiply-add)
and Q6_K computes y = (d * sc) * q. NumPy rounds every float32 operation to
float32 (IEEE round-to-nearest-even), so the results are the floats ggml's
reference C code gives when compiled without FMA contraction. Integer-valued
operands are converted to float32 first (exact: all are < 2^24), because
NumPy would promote an int32 by float32 product to float64.

Layouts (little-endian; f16 = IEEE half; "nibble j" of qs[16] is the low
nibble of qs[j] for j < 16 and the high nibble of qs[j - 16] for j >= 16):

  type    id  block  bytes  fields (in order)
  Q4_0     2    32    18    f16 d; qs[16]                 y = (q - 8) d
  Q4_1     3    32    20    f16 d, f16 m; qs[16]          y = q d + m
  Q5_0     6    32    22    f16 d; u32 qh; qs[16]         y = (q - 16) d
  Q5_1     7    32    24    f16 d, f16 m; u32 qh; qs[16]  y = q d + m
                            (q = nibble j | bit j of qh << 4)
  Q8_0     8    32    34    f16 d; i8 qs[32]              y = q d
  Q2_K    10   256    84    u8 scales[16]; u8 qs[64]; f16 d; f16 dmin
  Q3_K    11   256   110    u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
  Q4_K    12   256   144    f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
  Q5_K    13   256   176    f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
  Q6_K    14   256   210    u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
  IQ4_NL  20    32    18    f16 d; qs[16]                 y = d KVALUES[nibble]
  IQ4_XS  23   256   136    f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]

The element order inside the 256-element super-blocks is each function's
docstring. dequantize() is the entry point; random_blocks() makes valid
blocks from random bytes (for bit-exactness tests and for model files that
tessera did not write).
"""

import numpy as np

# ggml type ids.
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 10, 11, 12, 13, 14
IQ4_NL, IQ4_XS = 20, 23

# type -> (elements per block, bytes per block)
BLOCK = {
    Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34),
    Q2_K: (256, 84), Q3_K: (256, 110), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
    IQ4_NL: (32, 18), IQ4_XS: (256, 136),
}
NAMES = {Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0",
         Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K",
         IQ4_NL: "IQ4_NL", IQ4_XS: "IQ4_XS"}
TYPES = tuple(BLOCK)

# ggml's kvalues_iq4nl: the 16 levels an IQ4_NL / IQ4_XS index selects.
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                          1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)

# Byte offsets of each type's f16 fields, in the order (scale, min-or-None).
F16_FIELDS = {
    Q4_0: (0,), Q4_1: (0, 2), Q5_0: (0,), Q5_1: (0, 2), Q8_0: (0,),
    Q2_K: (80, 82), Q3_K: (108,), Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,),
    IQ4_NL: (0,), IQ4_XS: (0,),
}

F32 = np.float32


def n_bytes(ggml_type, n_elements):
    """Bytes of n_elements of a quantized type (a whole number of blocks)."""
    qk, size = BLOCK[ggml_type]
    if n_elements % qk:
        raise ValueError("%s: %d elements is not a whole number of %d-element blocks"
                         % (NAMES[ggml_type], n_elements, qk))
    return n_elements // qk * size


# ------------------------------------------------------------------ helpers

def _f16(b, off):
    """The f16 at byte off of every block, as float32 (nb, 1); exact."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2").astype(F32)


def _nibbles(qs):
    """(nb, 16) bytes -> (nb, 32): low nibbles (elements 0..15), then high (16..31)."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1)


def _bits32(b, off):
    """The u32 at byte off of every block, as its 32 bits (nb, 32), bit j at j."""
    qh = np.ascontiguousarray(b[:, off:off + 4]).view("<u4")            # (nb, 1)
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _f(a):
    """Integer array -> float32 (exact for the small integers used here)."""
    return a.astype(F32)


def scale_min_k4(sc12):
    """The 8 6-bit scales and 8 6-bit mins of Q4_K / Q5_K: (nb, 12) -> 2 x (nb, 8).

    ggml's get_scale_min_k4(j): j < 4: sc = q[j] & 63, m = q[j + 4] & 63;
    j >= 4: sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            m  = (q[j + 4] >> 4)  | ((q[j] >> 6) << 4)."""
    q = sc12.astype(np.uint8)
    lo_sc = q[:, 0:4] & 63
    lo_m = q[:, 4:8] & 63
    hi_sc = (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)
    hi_m = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return np.concatenate([lo_sc, hi_sc], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def scales_q3_k(sc12):
    """The 16 6-bit scales of Q3_K, still biased by 32: (nb, 12) -> (nb, 16).

    Scale j: low 4 bits from byte j (j < 8, low nibble) or byte j - 8 (high
    nibble); high 2 bits are bits 2 (j / 4) .. 2 (j / 4) + 1 of byte 8 + j % 4."""
    q = sc12.astype(np.uint8)
    j = np.arange(16)
    low = np.where(j < 8, q[:, j % 8] & 0xF, q[:, j % 8] >> 4)
    high = (q[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return (low | (high << 4)).astype(np.int16)


def _two_bit_fields(qs64):
    """Q2_K / Q3_K low bits: (nb, 64) -> (nb, 256).

    Element e = 128 h + 32 j + l (h < 2, j < 4, l < 32) is bits 2j..2j+1 of
    qs[32 h + l]."""
    nb = qs64.shape[0]
    q = qs64.reshape(nb, 2, 1, 32)
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    return ((q >> shifts) & 3).reshape(nb, 256)


# ---------------------------------------------------------- per-type decoders

def _q4_0(b):
    d = _f16(b, 0)
    return _f(_nibbles(b[:, 2:18]).astype(np.int16) - 8) * d


def _q4_1(b):
    d, m = _f16(b, 0), _f16(b, 2)
    return _f(_nibbles(b[:, 4:20])) * d + m


def _q5_0(b):
    d = _f16(b, 0)
    q = _nibbles(b[:, 6:22]) | (_bits32(b, 2) << 4)
    return _f(q.astype(np.int16) - 16) * d


def _q5_1(b):
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles(b[:, 8:24]) | (_bits32(b, 4) << 4)
    return _f(q) * d + m


def _q8_0(b):
    d = _f16(b, 0)
    return _f(np.ascontiguousarray(b[:, 2:34]).view(np.int8)) * d


def _q2_k(b):
    """y[e] = (d * (sc & 0xF)) * q - dmin * (sc >> 4), sc = scales[e / 16],
    q = _two_bit_fields(qs)[e]."""
    sc = b[:, 0:16]
    d, dmin = _f16(b, 80), _f16(b, 82)
    dl = d * _f(sc & 0xF)                                   # (nb, 16) f32
    ml = dmin * _f(sc >> 4)
    q = _f(_two_bit_fields(b[:, 16:80]))
    i = np.arange(256) // 16
    return dl[:, i] * q - ml[:, i]


def _q3_k(b):
    """y[e] = (d * (scale[e / 16] - 32)) * (q - (hmask bit ? 0 : 4)); for
    e = 128 h + 32 j + l the mask bit is bit 4 h + j of hmask[l]."""
    hm = b[:, 0:32]
    d = _f16(b, 108)
    dl = d * _f(scales_q3_k(b[:, 96:108]) - 32)             # (nb, 16)
    low = _two_bit_fields(b[:, 32:96]).astype(np.int16)
    nb = b.shape[0]
    bit = (4 * np.arange(2).reshape(2, 1) + np.arange(4).reshape(1, 4)).astype(np.uint8)
    hbit = (hm.reshape(nb, 1, 1, 32) >> bit.reshape(1, 2, 4, 1)) & 1
    q = low - 4 * (1 - hbit.reshape(nb, 256).astype(np.int16))
    return dl[:, np.arange(256) // 16] * _f(q)


def _k4_values(b, qs_off):
    """Q4_K / Q5_K low nibbles: element 64 g + l is the low nibble of
    qs[32 g + l], element 64 g + 32 + l its high nibble (g < 4, l < 32)."""
    nb = b.shape[0]
    qs = b[:, qs_off:qs_off + 128].reshape(nb, 4, 1, 32)
    return np.concatenate([qs & 0xF, qs >> 4], axis=2).reshape(nb, 256)


def _q4_k(b):
    """y[e] = (d * sc[e / 32]) * q - dmin * m[e / 32] (scale_min_k4)."""
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = scale_min_k4(b[:, 4:16])
    d1, m1 = d * _f(sc), dmin * _f(m)                       # (nb, 8)
    i = np.arange(256) // 32
    return d1[:, i] * _f(_k4_values(b, 16)) - m1[:, i]


def _q5_k(b):
    """As Q4_K with q += 16 * (bit e / 32 of qh[e % 32])."""
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = scale_min_k4(b[:, 4:16])
    d1, m1 = d * _f(sc), dmin * _f(m)
    e = np.arange(256)
    qh = b[:, 16:48]
    high = (qh[:, e % 32] >> (e // 32).astype(np.uint8)) & 1
    q = _k4_values(b, 48) + (high << 4)
    return d1[:, e // 32] * _f(q) - m1[:, e // 32]


def _q6_k(b):
    """y[e] = (d * scales[e / 16]) * (q - 32). For e = 128 h + 32 k + l
    (k < 4, l < 32): the low 4 bits are the low (k < 2) or high (k >= 2)
    nibble of ql[64 h + 32 (k % 2) + l]; the high 2 bits are bits 2k..2k+1
    of qh[32 h + l]."""
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 2, 32)                  # (h, k % 2, l)
    qh = b[:, 128:192].reshape(nb, 2, 1, 32)                # (h, -, l)
    d = _f16(b, 208)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8)
    low = np.concatenate([ql & 0xF, ql >> 4], axis=2)       # (nb, h, k, l): k = 0,1 low; 2,3 high
    high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
    q = (low | (high << 4)).reshape(nb, 256).astype(np.int16) - 32
    dl = d * _f(sc)                                         # (nb, 16)
    return dl[:, np.arange(256) // 16] * _f(q)


def _iq4_nl(b):
    d = _f16(b, 0)
    return d * _f(KVALUES_IQ4NL[_nibbles(b[:, 2:18])])


def _iq4_xs(b):
    """Sub-block ib < 8 (32 elements): ls = nibble ib % 2 of scales_l[ib / 2]
    | (bits 2 ib..2 ib + 1 of scales_h) << 4; y = (d * (ls - 32)) *
    KVALUES[nibble j of qs[16 ib .. 16 ib + 15]]."""
    nb = b.shape[0]
    d = _f16(b, 0)
    sh = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)      # (nb, 1)
    sl = b[:, 4:8].astype(np.int32)
    ib = np.arange(8)
    ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)
    dl = d * _f(ls - 32)                                    # (nb, 8)
    qs = b[:, 8:136].reshape(nb * 8, 16)
    idx = _nibbles(qs).reshape(nb, 256)
    return dl[:, np.arange(256) // 32] * _f(KVALUES_IQ4NL[idx])


_DECODERS = {
    Q4_0: _q4_0, Q4_1: _q4_1, Q5_0: _q5_0, Q5_1: _q5_1, Q8_0: _q8_0,
    Q2_K: _q2_k, Q3_K: _q3_k, Q4_K: _q4_k, Q5_K: _q5_k, Q6_K: _q6_k,
    IQ4_NL: _iq4_nl, IQ4_XS: _iq4_xs,
}


def dequantize(raw, ggml_type, n_elements):
    """float32 array (n_elements,) of raw bytes (bytes, bytearray or a uint8
    array) holding n_elements of ggml_type, exactly as ggml computes it."""
    if ggml_type not in _DECODERS:
        raise ValueError("unsupported quantized ggml type %r" % (ggml_type,))
    size = BLOCK[ggml_type][1]
    nbytes = n_bytes(ggml_type, n_elements)
    buf = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, (bytes, bytearray, memoryview)) \
        else np.asarray(raw, dtype=np.uint8).reshape(-1)
    if buf.size != nbytes:
        raise ValueError("%s: %d bytes given, %d elements need %d"
                         % (NAMES[ggml_type], buf.size, n_elements, nbytes))
    with np.errstate(over="ignore", invalid="ignore"):
        y = _DECODERS[ggml_type](buf.reshape(-1, size))
    assert y.dtype == F32, (NAMES[ggml_type], y.dtype)
    return y.reshape(-1)


# ------------------------------------------------------- random valid blocks

def random_f16(rng, n, lo=1e-3, hi=1.0, signed=True):
    """n f16 values, log-uniform in magnitude over [lo, hi], random sign."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    if signed:
        mag = mag * rng.choice([-1.0, 1.0], n)
    return mag.astype("<f2")


def random_blocks(ggml_type, n_elements, rng, scale_f16=None, min_f16=None):
    """Random valid blocks: every byte random, then the f16 fields set.

    scale_f16 / min_f16: f16 arrays (one per block) for the scale field and,
    for the types with one, the min field; default: random_f16 values (both
    signs, magnitudes 1e-3 .. 1). Every other bit pattern of a block is a
    valid encoding, so random bytes exercise every quant and sub-scale value.
    Returns bytes."""
    size = BLOCK[ggml_type][1]
    nb = n_bytes(ggml_type, n_elements) // size
    b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    fields = F16_FIELDS[ggml_type]
    vals = [scale_f16, min_f16]
    for k, off in enumerate(fields):
        v = vals[k] if vals[k] is not None else random_f16(rng, nb)
        b[:, off:off + 2] = np.asarray(v, dtype="<f2").reshape(nb, 1).view(np.uint8)
    return b.tobytes()


def random_weight_blocks(ggml_type, shape, rng, std):
    """Random valid blocks for a weight matrix whose dequantized values have
    roughly zero mean and standard deviation std (a sane model).

    The sub-block fields stay random; the f16 super-block scale (and min,
    where the type has one) are chosen per block so that the values are
    centred and scaled: y is linear in (d, dmin), so one pass with unit
    fields measures each block's spread and the written fields rescale it.
    For the types with a min, the min field is set to cancel the block's mean
    (Q4_1 / Q5_1: m = -mean; K-quants: dmin = d * <sc q> / <m>), so values
    stay centred. Returns (bytes, float32 values)."""
    n = int(np.prod(shape))
    qk, size = BLOCK[ggml_type]
    nb = n // qk
    ones = np.ones(nb, dtype="<f2")
    zeros = np.zeros(nb, dtype="<f2")
    fields = F16_FIELDS[ggml_type]
    has_min = len(fields) == 2
    raw = random_blocks(ggml_type, n, rng, ones, zeros if has_min else None)
    y = dequantize(raw, ggml_type, n).reshape(nb, qk).astype(np.float64)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(nb, size).copy()
    if has_min:
        # Values with min 0 and scale 1: y = A q (per sub-block factors). A
        # unit min field gives y = A q - B (or + B for Q4_1 / Q5_1), so
        # measure B too and pick dmin = mean(A q) / mean(B) per block.
        b1 = b.copy()
        b1[:, fields[0]:fields[0] + 2] = zeros.reshape(nb, 1).view(np.uint8)
        b1[:, fields[1]:fields[1] + 2] = ones.reshape(nb, 1).view(np.uint8)
        mvals = dequantize(b1.tobytes(), ggml_type, n).reshape(nb, qk).astype(np.float64)
        mean_a = y.mean(axis=1)
        mean_b = mvals.mean(axis=1)
        ratio = np.where(np.abs(mean_b) > 0, -mean_a / np.where(mean_b != 0, mean_b, 1), 0.0)
        centred = y + ratio[:, None] * mvals
        spread = centred.std(axis=1)
    else:
        ratio = None
        spread = y.std(axis=1)
    spread = np.where(spread > 0, spread, 1.0)
    d = (std / spread).astype("<f2")
    b[:, fields[0]:fields[0] + 2] = d.reshape(nb, 1).view(np.uint8)
    if has_min:
        dm = (d.astype(np.float64) * ratio).astype("<f2")
        b[:, fields[1]:fields[1] + 2] = dm.reshape(nb, 1).view(np.uint8)
    raw = b.tobytes()
    return raw, dequantize(raw, ggml_type, n).reshape(shape)
