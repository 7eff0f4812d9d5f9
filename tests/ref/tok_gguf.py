#!/usr/bin/env python3
"""tok_gguf.py - a vocabulary-only GGUF from a Hugging Face tokenizer.json,
written as llama.cpp's convert_hf_to_gguf.py would write its tokenizer keys.

  tok_gguf.py OUT.gguf TOKENIZER.json [--config tokenizer_config.json]
              --kind bpe|spm|wpm [--pre NAME]

No tensors: `tessera tokenize` reads only tokenizer.ggml.*.

  bpe  tokenizer.ggml.model "gpt2": tokens by id (ids no token holds become
       "[PAD<id>]", type UNUSED, as the converter pads), token_type CONTROL
       (3) for special added tokens, USER_DEFINED (4) for the other added
       tokens, NORMAL (1) otherwise; merges "left right"; tokenizer.ggml.pre
       = NAME.
  spm  tokenizer.ggml.model "llama" for a sentencepiece-style BPE with byte
       fallback (llama2, yi, gemma): "<0xXX>" tokens are BYTE (6), the unk
       token UNKNOWN (2). Scores reproduce Hugging Face's merge order: a token
       scores -(rank of the first merge that produces it), so llama.cpp's
       "highest score first" is "lowest merge rank first"; tokens no merge
       produces score -1e9. add_space_prefix is true when the normalizer
       prepends U+2581 (llama2), false otherwise (gemma, yi).
  wpm  tokenizer.ggml.model "bert" from a WordPiece model: the converter's
       phantom-space spelling ("xy" -> "\u2581xy", "##xy" -> "xy", "[...]"
       kept), cls_token_id / seperator_token_id (sic) / unknown_token_id.

bos/eos come from tokenizer_config.json's bos_token/eos_token, add_bos_token
from its add_bos_token (absent: not written, so tessera's default applies).
"""
import argparse
import json
import struct
import sys

# GGUF value types (the ones written here).
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
_FMT = {T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?"}

NORMAL, UNKNOWN, CONTROL, USER, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def token_text(tok):
    """A tokenizer_config token entry: a string or an AddedToken dict."""
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def by_id(tj):
    """id -> (text, type) from the model's vocab and the added tokens."""
    vocab = tj["model"]["vocab"]
    if isinstance(vocab, list):     # Unigram: [[text, score], ...]
        vocab = {v[0]: i for i, v in enumerate(vocab)}
    table = {i: (t, NORMAL) for t, i in vocab.items()}
    for a in tj.get("added_tokens", []):
        table[a["id"]] = (a["content"], CONTROL if a["special"] else USER)
    n = max(table) + 1
    texts, types = [], []
    for i in range(n):
        t, ty = table.get(i, ("[PAD%d]" % i, UNUSED))
        texts.append(t)
        types.append(ty)
    return texts, types


def merges_of(tj):
    out = []
    for m in tj["model"].get("merges", []):
        out.append(m if isinstance(m, str) else " ".join(m))
    return out


def phantom(t, ty):
    """convert_hf_to_gguf.py BertModel.set_vocab's spelling."""
    if ty == CONTROL or (t.startswith("[") and t.endswith("]")):
        return t
    if t.startswith("##"):
        return t[2:]
    return "\u2581" + t


def is_byte_token(t):
    return len(t) == 6 and t.startswith("<0x") and t.endswith(">")


def prepends(normalizer):
    if not normalizer:
        return False
    if normalizer.get("type") == "Prepend":
        return True
    return any(prepends(n) for n in normalizer.get("normalizers", []))


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == T_STRING:
        return _str(v)
    if vtype == T_ARRAY:
        etype, items = v
        head = struct.pack("<IQ", etype, len(items))
        if etype == T_STRING:
            return head + b"".join(_str(e) for e in items)
        return head + struct.pack("<%d%s" % (len(items), _FMT[etype][1]), *items)
    return struct.pack(_FMT[vtype], v)


def write_gguf(path, metadata):
    """A GGUF v3 file with metadata (key, vtype, value) and no tensors."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(metadata))]
    for key, vtype, value in metadata:
        out += [_str(key), struct.pack("<I", vtype), _value(vtype, value)]
    with open(path, "wb") as f:
        f.write(b"".join(out))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("tokenizer")
    ap.add_argument("--config")
    ap.add_argument("--kind", choices=("bpe", "spm", "wpm"), required=True)
    ap.add_argument("--pre")
    a = ap.parse_args(argv)
    with open(a.tokenizer, encoding="utf-8") as f:
        tj = json.load(f)
    cfg = {}
    if a.config:
        with open(a.config, encoding="utf-8") as f:
            cfg = json.load(f)
    texts, types = by_id(tj)
    ids = {}
    for i, t in enumerate(texts):
        ids.setdefault(t, i)

    STR, U32, F32, I32, BOOL, ARR = T_STRING, T_UINT32, T_FLOAT32, T_INT32, T_BOOL, T_ARRAY
    md = [("general.architecture", STR, "llama")]
    if a.kind == "bpe":
        md.append(("tokenizer.ggml.model", STR, "gpt2"))
        if a.pre:
            md.append(("tokenizer.ggml.pre", STR, a.pre))
        md.append(("tokenizer.ggml.merges", ARR, (STR, merges_of(tj))))
    elif a.kind == "spm":
        md.append(("tokenizer.ggml.model", STR, "llama"))
        unk = tj["model"].get("unk_token")
        rank = {}
        for r, m in enumerate(merges_of(tj)):
            rank.setdefault(m.replace(" ", "", 1), r)
        scores = []
        for i, t in enumerate(texts):
            if is_byte_token(t):
                types[i] = BYTE
            elif t == unk:
                types[i] = UNKNOWN
            scores.append(float(-rank[t]) if t in rank else -1e9)
        md.append(("tokenizer.ggml.scores", ARR, (F32, scores)))
        md.append(("tokenizer.ggml.add_space_prefix", BOOL, prepends(tj.get("normalizer"))))
        if unk in ids:
            md.append(("tokenizer.ggml.unknown_token_id", U32, ids[unk]))
    else:
        md.append(("tokenizer.ggml.model", STR, "bert"))
        md.append(("tokenizer.ggml.token_type_count", U32, 2))
        m = tj["model"]
        texts = [phantom(t, ty) for t, ty in zip(texts, types)]
        for key, name in (("unknown_token_id", m.get("unk_token", "[UNK]")),
                          ("cls_token_id", "[CLS]"), ("seperator_token_id", "[SEP]")):
            if name in ids:
                md.append(("tokenizer.ggml." + key, U32, ids[name]))
    md.append(("tokenizer.ggml.tokens", ARR, (STR, texts)))
    md.append(("tokenizer.ggml.token_type", ARR, (I32, types)))
    for key, name in (("bos_token_id", "bos_token"), ("eos_token_id", "eos_token")):
        t = token_text(cfg.get(name))
        if t is not None and t in ids:
            md.append(("tokenizer.ggml." + key, U32, ids[t]))
    if isinstance(cfg.get("add_bos_token"), bool):
        md.append(("tokenizer.ggml.add_bos_token", BOOL, cfg["add_bos_token"]))
    write_gguf(a.out, md)


if __name__ == "__main__":
    main(sys.argv[1:])
