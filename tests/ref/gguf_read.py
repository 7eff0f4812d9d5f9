"""Minimal, independent GGUF v3 reader (NumPy only).

Written from the GGUF format description, not from tessera's C reader.

File layout (all little-endian):
    magic      4 bytes  b"GGUF"
    version    u32      (3)
    n_tensors  u64
    n_kv       u64
    n_kv x metadata:    key (gguf string), u32 value type, value
    n_tensors x info:   name (gguf string), u32 n_dims, u64 ne[n_dims],
                        u32 ggml type, u64 offset (relative to data section)
    padding to a multiple of general.alignment (default 32)
    data section

A gguf string is a u64 byte length followed by that many bytes (UTF-8, no NUL).
ne[0] is the fastest-varying dimension, so a tensor with ne = [a, b] is a
row-major NumPy array of shape (b, a).

Tensors are loaded lazily (np.memmap) and dequantized to float64 on request;
the quantized types are decoded by quants.py (float32, bit-exact with ggml)
and then widened.
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants  # noqa: E402

GGUF_MAGIC = b"GGUF"

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

# Fixed-size scalar metadata types -> struct format.
_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
    T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
    T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}

# ggml tensor types this reader understands: the float types here, the
# quantized ones (Q8_0 included) through quants.py.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
TYPE_NAMES = {GGML_F32: "F32", GGML_F16: "F16", GGML_Q8_0: "Q8_0", GGML_BF16: "BF16"}
TYPE_NAMES.update(quants.NAMES)

QK8_0 = 32                 # elements per Q8_0 block
Q8_0_BLOCK_BYTES = 2 + 32  # f16 scale d, then 32 x int8 q; value = d * q


class GGUFError(Exception):
    pass


class _Cursor:
    """Sequential little-endian reader over a bytes-like buffer."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated file at offset %d (need %d bytes)" % (self.pos, n))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def u32(self):
        return self.unpack("<I")

    def u64(self):
        return self.unpack("<Q")

    def string(self):
        n = self.u64()
        return bytes(self.take(n)).decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype in _SCALAR_FMT:
            return self.unpack(_SCALAR_FMT[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            # Array: u32 element type, u64 count, then count values.
            etype = self.u32()
            count = self.u64()
            if etype in _SCALAR_FMT:
                # Read numeric arrays in one go (vocab scores can be large).
                dt = np.dtype(_SCALAR_FMT[etype].replace("?", "b1"))
                raw = self.take(count * dt.itemsize)
                return np.frombuffer(raw, dtype=dt, count=count).tolist()
            return [self.value(etype) for _ in range(count)]
        raise GGUFError("unknown metadata value type %d at offset %d" % (vtype, self.pos))


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne                    # ne[0] fastest-varying
        self.type = ggml_type
        self.offset = offset            # relative to the data section

    @property
    def shape(self):
        """NumPy shape: reversed ne."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    def n_bytes(self):
        n = self.n_elements
        if self.type == GGML_F32:
            return 4 * n
        if self.type in (GGML_F16, GGML_BF16):
            return 2 * n
        if self.type == GGML_Q8_0:
            if self.ne[0] % QK8_0:
                raise GGUFError("%s: Q8_0 row length %d not a multiple of 32" % (self.name, self.ne[0]))
            return (n // QK8_0) * Q8_0_BLOCK_BYTES
        if self.type in quants.BLOCK:
            qk = quants.BLOCK[self.type][0]
            if self.ne[0] % qk:
                raise GGUFError("%s: %s row length %d not a multiple of %d"
                                % (self.name, quants.NAMES[self.type], self.ne[0], qk))
            return quants.n_bytes(self.type, n)
        raise GGUFError("%s: unsupported ggml type %d" % (self.name, self.type))

    def __repr__(self):
        return "TensorInfo(%s, ne=%s, %s, off=%d)" % (
            self.name, self.ne, TYPE_NAMES.get(self.type, self.type), self.offset)


class GGUFFile:
    """Parsed GGUF file: .version, .metadata (dict), .tensors (dict name->TensorInfo)."""

    def __init__(self, path):
        self.path = path
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(self._mm)
        magic = bytes(cur.take(4))
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: bad magic %r" % (path, magic))
        self.version = cur.u32()
        if self.version != 3:
            raise GGUFError("%s: unsupported GGUF version %d" % (path, self.version))
        n_tensors = cur.u64()
        n_kv = cur.u64()

        self.metadata = {}
        self.metadata_types = {}        # key -> (vtype, array element type or None)
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            etype = None
            if vtype == T_ARRAY:
                etype = struct.unpack("<I", bytes(cur.buf[cur.pos:cur.pos + 4]))[0] \
                    if cur.pos + 4 <= len(cur.buf) else None
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = (vtype, etype)

        self.tensors = {}
        self.tensor_order = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            ne = [cur.u64() for _ in range(n_dims)]
            ttype = cur.u32()
            offset = cur.u64()
            if name in self.tensors:
                raise GGUFError("duplicate tensor name %s" % name)
            self.tensors[name] = TensorInfo(name, ne, ttype, offset)
            self.tensor_order.append(name)

        # Data section starts at the next multiple of the alignment.
        self.alignment = int(self.metadata.get("general.alignment", 32))
        a = self.alignment
        self.data_offset = (cur.pos + a - 1) // a * a

        for t in self.tensors.values():
            if t.offset % a:
                raise GGUFError("%s: offset %d not aligned to %d" % (t.name, t.offset, a))
            end = self.data_offset + t.offset + t.n_bytes()
            if end > len(self._mm):
                raise GGUFError("%s: data extends past end of file (%d > %d)"
                                % (t.name, end, len(self._mm)))

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def has(self, name):
        return name in self.tensors

    def raw(self, name):
        """The tensor's bytes, as a uint8 memmap slice."""
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self._mm[start:start + t.n_bytes()]

    def tensor(self, name):
        """Dequantized float64 array of shape reversed(ne)."""
        if name not in self.tensors:
            raise KeyError(name)
        t = self.tensors[name]
        raw = np.asarray(self.raw(name))
        n = t.n_elements
        if t.type == GGML_F32:
            x = raw.view("<f4").astype(np.float64)
        elif t.type == GGML_F16:
            x = raw.view("<f2").astype(np.float64)
        elif t.type == GGML_BF16:
            # bf16 is the top 16 bits of an IEEE float32.
            x = (raw.view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
        elif t.type == GGML_Q8_0:
            # Blocks of 32: f16 scale d then 32 int8 q; element = d * q.
            blocks = raw.reshape(-1, Q8_0_BLOCK_BYTES)
            d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float64)  # (nb, 1)
            q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).astype(np.float64)  # (nb, 32)
            x = (d * q).reshape(-1)
        elif t.type in quants.BLOCK:
            # float32 values exactly as ggml dequantizes them, then widened.
            x = quants.dequantize(raw, t.type, n).astype(np.float64)
        else:
            raise GGUFError("%s: unsupported ggml type %d" % (name, t.type))
        assert x.size == n
        return x.reshape(t.shape)


def main(argv):
    """Debug helper: python3 gguf_read.py FILE  -> dump metadata and tensor infos."""
    g = GGUFFile(argv[1])
    print("GGUF v%d, %d kv, %d tensors, alignment %d, data at %d"
          % (g.version, len(g.metadata), len(g.tensors), g.alignment, g.data_offset))
    for k, v in g.metadata.items():
        if isinstance(v, list) and len(v) > 8:
            v = "[%s, ... (%d items)]" % (", ".join(repr(e) for e in v[:8]), len(v))
        print("  %s = %r" % (k, v))
    for name in g.tensor_order:
        print("  ", g.tensors[name])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
